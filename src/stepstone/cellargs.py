"""The option grammar of `%%step`, shared by the magic and by plan extraction from a notebook."""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from .errors import InvalidInput


class _Parser(argparse.ArgumentParser):
    """argparse for a magic line: errors are `InvalidInput`, an unknown option is named first."""

    _number = re.compile(r"-\d+$|-\d*\.\d+$")  # argparse reads these as values, not options

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.options: list[str] = []  # first: the constructor may add -h
        super().__init__(*args, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
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


def _step_parser() -> _Parser:
    parser = _Parser(prog="%%step", add_help=False, allow_abbrev=False)
    parser.add_argument("name")
    parser.add_argument("--check", action="append", default=[])
    parser.add_argument("--out", action="append", default=[])
    parser.add_argument("--in", dest="inputs", action="append", default=[])
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--was", metavar="OLD_NAME")
    return parser


@dataclass(frozen=True)
class StepLine:
    """The parsed options of one `%%step` line."""

    name: str
    checks: tuple[str, ...]
    outputs: tuple[str, ...]
    inputs: tuple[str, ...]
    force: bool
    was: str | None = None  # the step's earlier name: its effects keep their keys


def split(line: str) -> list[str]:
    """Split a magic line like a shell does, with a clear error on bad quoting."""
    try:
        return shlex.split(line)
    except ValueError as exc:
        raise InvalidInput(f"cannot read {line!r}: {exc}") from exc


def parse_step_line(line: str) -> StepLine:
    """Parse `NAME [--check CHECK]... [--out VAR]... [--in VAR]... [--force] [--was OLD]`."""
    args = _step_parser().parse_args(split(line))
    return StepLine(
        name=args.name,
        checks=tuple(args.check),
        outputs=tuple(args.out),
        inputs=tuple(args.inputs),
        force=args.force,
        was=args.was,
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


def _parser(prog: str) -> _Parser:
    return _Parser(prog=prog, add_help=False, allow_abbrev=False)


def parse_resume_line(line: str) -> argparse.Namespace:
    """`%resume [--run ID] [--repo DIR] [--steal REASON]`."""
    parser = _parser("%resume")
    parser.add_argument("--run")
    parser.add_argument("--repo")
    parser.add_argument("--steal", metavar="REASON")
    return parser.parse_args(split(line))


def parse_decide_line(line: str) -> tuple[str, str, str, bool]:
    """`%decide KEY=VALUE --why REASON [--revise]` as (key, value, why, revise)."""
    parser = _parser("%decide")
    parser.add_argument("assignment")
    parser.add_argument("--why", required=True)
    parser.add_argument("--revise", action="store_true")
    args = parser.parse_args(split(line))
    key, eq, value = args.assignment.partition("=")
    if not eq or not key:
        raise InvalidInput(f"%decide: write KEY=VALUE, not {args.assignment!r}")
    return key, value, args.why, args.revise


def parse_unknown_line(line: str) -> tuple[str | None, str]:
    """`%unknown QUESTION` as (None, question); `%unknown --resolve ID ANSWER` as (id, answer)."""
    parser = _parser("%unknown")
    parser.add_argument("--resolve", metavar="ID")
    parser.add_argument("text", nargs="+")
    args = parser.parse_args(split(line))
    return args.resolve, " ".join(args.text)


def parse_finish_line(line: str) -> bool:
    """`%finish [--force]`: whether to force."""
    parser = _parser("%finish")
    parser.add_argument("--force", action="store_true")
    return bool(parser.parse_args(split(line)).force)
