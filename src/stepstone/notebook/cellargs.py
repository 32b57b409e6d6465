"""The options of every stepstone magic, declared once: each parser reads its magic's
line and makes its `%magic?` help (as IPython's `magic_arguments` does). No IPython
here: `%%step`'s grammar also reads the plan of a notebook without a kernel."""

from __future__ import annotations

import argparse
import functools
import re
import shlex
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, NoReturn

from ..errors import InvalidInput
from ..model.models import StepSpec

_HELP_WIDTH = 88


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """`%magic?` help: a fixed width, the description as written, positionals by the
    name their declaration shows (`NAME`, `KEY=VALUE`)."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=_HELP_WIDTH, max_help_position=24)

    def _get_default_metavar_for_positional(self, action: argparse.Action) -> str:
        return str(getattr(action, "shown", action.dest.upper()))


class _Parser(argparse.ArgumentParser):
    """argparse for a magic line: errors are `InvalidInput`, an unknown option is named first."""

    _number = re.compile(r"-\d+$|-\d*\.\d+$")  # argparse reads these as values, not options

    def __init__(self, prog: str, description: str) -> None:
        self.options: list[str] = []  # first: the constructor may add -h
        super().__init__(
            prog=prog,
            description=description,
            add_help=False,
            allow_abbrev=False,
            formatter_class=_Formatter,
        )

    def add_argument(self, *args: Any, shown: str | None = None, **kwargs: Any) -> argparse.Action:
        """argparse's, and `shown`: how the help names a positional (errors name it by
        its `dest`, as before)."""
        action = super().add_argument(*args, **kwargs)
        if shown is not None:
            setattr(action, "shown", shown)  # noqa: B010  # an attribute argparse has not
        self.options.extend(action.option_strings)
        return action

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: None = None
    ) -> argparse.Namespace:
        unknown = []
        for arg in args or ():
            if arg == "--":
                break
            option = arg.partition("=")[0]
            if arg[:1] != "-" or arg == "-" or " " in arg or self._number.match(arg):
                continue
            if option not in self.options:
                unknown.append(option)
        if unknown:
            known = ", ".join(self.options)
            what = "is not an option" if len(unknown) == 1 else "are not options"
            self.error(f"unrecognized arguments: {', '.join(unknown)} {what} (options: {known})")
        return super().parse_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        raise InvalidInput(f"{self.prog}: {message}")


# -- the declarations -------------------------------------------------------------
# A description is the magic's help as `%magic?` shows it; help strings are
# %-formatted by argparse, so they spell a percent sign `%%`.


def _step() -> _Parser:
    parser = _Parser(
        "%%step",
        "Run the cell as one step. While its recorded evidence verifies and its\n"
        "source is unchanged the cell is skipped and its --out variables are\n"
        "restored; otherwise it runs, its checks run, and the record is committed.",
    )
    parser.add_argument("name", shown="NAME", help="the step's name, unique in the plan")
    parser.add_argument(
        "--check",
        action="append",
        default=[],
        help="evidence that the step is done: file:PATH, sha256:PATH=HEX, cmd:COMMAND, "
        "expr:EXPRESSION or call:NAME (repeatable)",
    )
    parser.add_argument(
        "--keep",
        action="append",
        nargs="?",
        const="",
        default=[],
        metavar="PATH",
        help="a file or folder the cell writes: checked like file:PATH and kept in the "
        "store, restored when the cell is skipped and it is missing (repeatable); "
        "alone, keeps what each --check file:PATH names",
    )
    parser.add_argument(
        "--out",
        action="append",
        default=[],
        metavar="VAR",
        help="a variable the cell makes: saved, and restored when the cell is skipped (repeatable)",
    )
    parser.add_argument(
        "--in",
        dest="inputs",
        action="append",
        default=[],
        metavar="VAR",
        help="a variable the cell reads (repeatable)",
    )
    parser.add_argument(
        "--uses",
        action="append",
        default=[],
        metavar="UNKNOWN",
        help="an open question (U1) the cell's result rests on: %%finish waits for its "
        "answer, and the answer makes the cell run again (repeatable)",
    )
    parser.add_argument(
        "--note",
        action="store_true",
        help="the cell's evidence is a note it writes with stepstone.note(TEXT): weak "
        "evidence, for a step whose product is understanding (same as --check note)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="run the step although the step before it is not verified",
    )
    parser.add_argument(
        "--rerun",
        metavar="REASON",
        help="run the cell again although its evidence verifies, once for this reason "
        "(recorded in Git); later steps follow it as after any step that ran again",
    )
    parser.add_argument(
        "--was",
        metavar="OLD_NAME",
        help="the step's earlier name, when it was renamed: its effects keep their keys",
    )
    return parser


def _resume() -> _Parser:
    parser = _Parser(
        "%resume",
        "Open the run (create it if new), read its latest commit, verify the\n"
        "recorded evidence and show every step's state and the next action.\n"
        "The run id defaults to STEPSTONE_RUN, then to the notebook's name;\n"
        "the store to STEPSTONE_REPO, then `.stepstone` in the current folder.\n"
        "With a remote, the run's lease is taken there; --steal takes a live one.",
    )
    parser.add_argument("--run", metavar="ID", help="the run to open")
    parser.add_argument("--repo", metavar="DIR", help="the store")
    parser.add_argument(
        "--steal", metavar="REASON", help="take the run's lease from a live holder, saying why"
    )
    parser.add_argument(
        "--diverge",
        action="store_true",
        help="drive a store copied while its run was driven as a new lineage (may send again)",
    )
    parser.add_argument(
        "--cells",
        action="store_true",
        help="every code cell is a step (named `# step: NAME` or cell-N), not only %%%%step cells",
    )
    return parser


def _decide() -> _Parser:
    parser = _Parser(
        "%decide",
        "Record a decision with its reason; read it with stepstone.decided(KEY).\n"
        "A resumed run does not reopen it: the same line again is a no-op, a\n"
        "different value needs --revise.",
    )
    parser.add_argument("assignment", shown="KEY=VALUE", help="what was decided")
    parser.add_argument("--why", required=True, metavar="REASON", help="why (required)")
    parser.add_argument("--revise", action="store_true", help="change an earlier decision")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="only say which steps revising it would run again; record nothing",
    )
    return parser


def _unknown() -> _Parser:
    parser = _Parser(
        "%unknown",
        "Record an open question, or close one with its answer:\n"
        "`%unknown QUESTION` or `%unknown --resolve ID ANSWER`.",
    )
    parser.add_argument("--resolve", metavar="ID", help="answer the open question ID (U1...)")
    parser.add_argument("text", nargs="+", shown="WORDS", help="the question, or the answer")
    return parser


def _finish() -> _Parser:
    parser = _Parser(
        "%finish",
        "Write the summary from the records and archive the run (tag\n"
        "stepstone/<run>). Refuses while a step is not verified, an unknown is\n"
        "open or an effect is unresolved, unless --force.",
    )
    parser.add_argument("--force", action="store_true", help="finish anyway")
    return parser


_DECLARED: dict[str, Callable[[], _Parser]] = {
    "step": _step,
    "resume": _resume,
    "decide": _decide,
    "unknown": _unknown,
    "finish": _finish,
}
LINE_MAGICS = frozenset(_DECLARED) - {"step"}
"""The stepstone line magics (`%%step` is a cell magic; `%%plan` takes no options)."""


@functools.cache
def _parser(magic: str) -> _Parser:
    return _DECLARED[magic]()


def help_text(magic: str) -> str:
    """The `%magic?` help of a stepstone magic, made by the parser that reads its line."""
    return _parser(magic).format_help()


def split(line: str) -> list[str]:
    """Split a magic line like a shell does, with a clear error on bad quoting."""
    try:
        return shlex.split(line)
    except ValueError as exc:
        raise InvalidInput(f"cannot read {line!r}: {exc}") from exc


def parse_step_line(line: str) -> StepSpec:
    """Parse `NAME [--check CHECK]... [--keep [PATH]]... [--out VAR]... [--in VAR]...
    [--uses U]... [--note] [--force] [--was OLD] [--rerun REASON]`."""
    word = line.strip(" \t\r\n")  # shlex's white space
    if word[:1] not in ("", "-") and _SHELL_QUOTING.isdisjoint(word) and [word] == word.split():
        return StepSpec(name=word)
    return _parse_step_args(_parser("step").parse_args(split(line)))


_SHELL_QUOTING = frozenset("\"'\\")  # a word without them is what shlex.split makes of it


def _parse_step_args(args: argparse.Namespace) -> StepSpec:
    given = list(args.check)
    if "" in args.keep:  # a bare --keep: keep what the file: checks name
        given = [f"keep:{c[5:]}" if c.startswith("file:") else c for c in given]
    given += [f"keep:{path}" for path in args.keep if path and f"keep:{path}" not in given]
    return StepSpec(
        name=args.name,
        checks=tuple(given) + (("note",) if args.note and "note" not in given else ()),
        outputs=tuple(args.out),
        inputs=tuple(args.inputs) + tuple(f"unknown:{u}" for u in args.uses),
        force=args.force,
        was=args.was,
        rerun=args.rerun,
    )


def split_cell(source: str) -> tuple[str, str] | None:
    """For a `%%step` cell: (its option line, its body); None for any other cell."""
    stripped = source.lstrip()
    if not stripped.startswith("%%step"):
        return None
    first, _, body = stripped.partition("\n")
    rest = first[len("%%step") :]
    if rest and not rest[0].isspace():
        return None
    return rest.strip(), body


# `# step: NAME` (or `# step: NAME --was OLD`, renamed), a cell's first line
STEP_COMMENT = re.compile(r"#\s*step:\s*(\S+)(?:\s+--was\s+(\S+))?\s*$")
PARAMETER_TAGS = frozenset({"parameters", "injected-parameters"})  # papermill's
PLAIN_TAGS = PARAMETER_TAGS | {"raises-exception", "skip-execution"}  # nbclient's too
INJECTED = "injected-parameters"  # papermill's tag of the cell it adds: not counted


def cell_step(
    source: str, position: int, tags: Sequence[str] = (), *, cells: bool = False
) -> tuple[str, str] | None:
    """A code cell as a step: (its `%%step` option line, its body); None for a plain cell.
    A `%%step` cell is one; with `cells` (`stepstone run --cells`), so is every other code
    cell, named by a first line `# step: NAME` or else `cell-N` by its `position` among
    the code cells (from 1), its whole source the body (`# step: NAME --was OLD` says
    it was step OLD, renamed, as `%%step NAME --was OLD` does), except a cell of only line
    magics and comments (`%matplotlib inline`: it runs every time; a shell command,
    `!sort -o names.txt names.txt`, acts on files: a cell with one is a step),
    papermill's parameters cells (they run every time, and the steps that read what they
    bind are stale when they change), and the cells nbclient is told to let raise or to
    skip (tagged `raises-exception`, `skip-execution`)."""
    parts = split_cell(source)
    if parts is not None or not cells or PLAIN_TAGS & set(tags):
        return parts
    lines = [line.strip() for line in source.splitlines() if line.strip()]
    if all(line.startswith(("%", "#")) and not line.startswith("%%") for line in lines):
        return None
    named = STEP_COMMENT.match(lines[0]) if lines else None
    if named is None:
        return f"cell-{position}", source
    was = f" --was {named.group(2)}" if named.group(2) else ""
    return named.group(1) + was, source


def parse_resume_line(line: str) -> argparse.Namespace:
    """`%resume [--run ID] [--repo DIR] [--steal REASON] [--diverge]`."""
    return _parser("resume").parse_args(split(line))


class DecideLine(NamedTuple):
    """What a `%decide` line says."""

    key: str
    value: str
    why: str
    revise: bool
    dry_run: bool = False


def parse_decide_line(line: str) -> DecideLine:
    """`%decide KEY=VALUE --why REASON [--revise] [--dry-run]`."""
    args = _parser("decide").parse_args(split(line))
    key, eq, value = args.assignment.partition("=")
    if not eq or not key:
        raise InvalidInput(f"%decide: write KEY=VALUE, not {args.assignment!r}")
    return DecideLine(key, value, args.why, args.revise, args.dry_run)


_DECIDE = re.compile(r"^(\s*)%decide\s+(.*)$")


def decide_lines(source: str) -> list[tuple[int, DecideLine]]:
    """The `%decide` lines of a cell's source that read (a `--dry-run` records nothing,
    so it is left out), with their line numbers from 0."""
    found = []
    for number, line in enumerate(source.split("\n")):
        match = _DECIDE.match(line)
        if match is None:
            continue
        try:
            said = parse_decide_line(match.group(2))
        except (InvalidInput, SystemExit):
            continue
        if not said.dry_run:
            found.append((number, said))
    return found


def decide_line(key: str, value: str, why: str, indent: str = "") -> str:
    """The `%decide` line that revises `key` to `value` for `why` (on one line: a
    reason's line breaks become spaces)."""
    why = " ".join(why.split())
    said = f"--why={_quoted(why)}" if why.startswith("-") else f"--why {_quoted(why)}"
    return f"{indent}%decide {_quoted(f'{key}={value}')} --revise {said}"


def _quoted(text: str) -> str:
    """`text` as one shell word, as a person would write it: in double quotes when it
    has an apostrophe and nothing a shell reads inside double quotes."""
    if "'" in text and not any(c in text for c in '"\\$`!'):
        return f'"{text}"'
    return shlex.quote(text)


def rewrite_decide_lines(source: str, key: str, value: str, why: str) -> str:
    """`source` with each `%decide` line of `key` revising it to `value` for `why`."""
    lines = source.split("\n")
    for number, said in decide_lines(source):
        if said.key == key and (said.value, said.why) != (value, why):
            indent = _DECIDE.match(lines[number]).group(1)  # type: ignore[union-attr]
            lines[number] = decide_line(key, value, why, indent)
    return "\n".join(lines)


def parse_unknown_line(line: str) -> tuple[str | None, str]:
    """`%unknown QUESTION` as (None, question); `%unknown --resolve ID ANSWER` as (id, answer)."""
    args = _parser("unknown").parse_args(split(line))
    return args.resolve, " ".join(args.text)


def parse_finish_line(line: str) -> bool:
    """`%finish [--force]`: whether to force."""
    return bool(_parser("finish").parse_args(split(line)).force)
