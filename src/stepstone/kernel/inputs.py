"""Stepstone's line magics as written, even when they end in `?`.

IPython reads any line ending in `name?` as a help request, a line magic's
too: `%unknown Are the prices in EUR or USD?` runs `%pinfo USD`. An input
cleanup transformer, which runs before that help syntax is read, writes each
stepstone line magic as an explicit `run_line_magic` call. The cell that is
running when the extension loads (a whole `.ipy` file is one cell) was
transformed before; for it the help magics run the stepstone line that IPython
turned into their call, and show help for anything else.
"""

from __future__ import annotations

import ast
import functools
import linecache
import sys
import tokenize
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from IPython.core.inputtransformer2 import (
    TransformerManager,
    assemble_continued_line,
    find_end_of_continued_line,
    make_tokens_by_line,
)

from ..notebook.cellargs import LINE_MAGICS

MAGICS = LINE_MAGICS
HELP_MAGICS = ("pinfo", "pinfo2", "psearch")

_originals: dict[int, dict[str, Callable[..., Any]]] = {}
_ipython = TransformerManager()  # type: ignore[no-untyped-call]  # IPython's own, without ours


def _magic_lines(lines: list[str]) -> Iterator[tuple[int, int, int, str]]:
    """(first line, last line, column, `%name args` text) of each stepstone line magic."""
    for line in make_tokens_by_line(lines):
        tokens = [t for t in line if t.type not in (tokenize.INDENT, tokenize.DEDENT)]
        if len(tokens) < 2 or tokens[0].string != "%" or tokens[1].string not in MAGICS:
            continue
        (row, col), name = tokens[0].start, tokens[1]
        if name.start != (row, col + 1):
            continue
        first = row - 1
        last = find_end_of_continued_line(lines, first)
        text = assemble_continued_line(lines, (first, col), last)
        if text[1:].partition(" ")[0] == name.string:  # not `%unknown?`, help on the magic
            yield first, last, col, text


def _call(name: str, args: str) -> str:
    return f"get_ipython().run_line_magic({name!r}, {args!r})"


def rewrite(lines: list[str]) -> list[str]:
    """Input transformer: each stepstone line magic as an explicit call, safe from `?`;
    a `%%step` cell whose code awaits at its top level, as a cell that awaits its step
    (IPython then runs it in the kernel's event loop, as it runs a plain cell that does)."""
    if lines and lines[0].startswith("%%step") and lines[0][6:7].isspace():
        return _awaiting_step(lines)
    if not lines or lines[0].startswith("%%") or not any("%" in line for line in lines):
        return lines  # a cell magic's body is its own (%%step transforms its body itself)
    for first, last, col, text in reversed(list(_magic_lines(lines))):
        name, _, args = text[1:].partition(" ")
        lines = [*lines[:first], lines[first][:col] + _call(name, args) + "\n", *lines[last + 1 :]]
    return lines


def _awaiting_step(lines: list[str]) -> list[str]:
    """A `%%step` cell as is, or, when its code awaits, as a call that awaits its step."""
    from .kernelsession import awaits

    line, body = lines[0][6:].strip(), "".join(lines[1:])
    if "await" not in body and "async" not in body:
        return lines
    if not awaits(_ipython.transform_cell(body)):
        return lines
    call = f"__import__({__package__ + '.magics'!r}, fromlist=['_']).step_awaiting"
    return [f"await {call}(get_ipython(), {line!r}, {body!r})\n"]


def _magic_call(line: str) -> tuple[str, str] | None:
    """(name, args) of a line that is exactly `get_ipython().run_line_magic(name, args)`."""
    try:
        tree = ast.parse(line.strip())
    except SyntaxError:
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Expr):
        return None
    call = tree.body[0].value
    if not (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "run_line_magic"
        and isinstance(call.func.value, ast.Call)
        and isinstance(call.func.value.func, ast.Name)
        and call.func.value.func.id == "get_ipython"
        and len(call.args) == 2
        and not call.keywords
        and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in call.args)
    ):
        return None
    name, args = (str(a.value) for a in call.args if isinstance(a, ast.Constant))
    return name, args


def _caller_of_run_line_magic(shell: Any) -> FrameType | None:
    frame = sys._getframe(1)
    while frame.f_back is not None:
        if frame.f_code.co_name == "run_line_magic" and frame.f_locals.get("self") is shell:
            return frame.f_back
        frame = frame.f_back
    return None


def _mistaken(theirs: str, ours: str) -> tuple[str, str] | None:
    """(magic, args) if `ours` calls a stepstone magic that IPython reads as `theirs`."""
    magic, help_call = _magic_call(ours), _magic_call(theirs)
    if magic is None or magic[0] not in MAGICS or help_call is None:
        return None
    as_help = _ipython.transform_cell(f"%{magic[0]} {magic[1]}")
    return magic if _magic_call(as_help) == help_call else None


def _mistaken_help(shell: Any, help_name: str, line: str) -> tuple[str, str, FrameType] | None:
    """The stepstone magic line IPython ran as this help call, in the cell being executed.

    Returns (magic, args, the frame that made the call), or None for a real help
    request. The cell is transformed again with `rewrite` in place: the code
    that ran must differ from that only where IPython read a stepstone line as
    help, and the calling line must be one of those.
    """
    result = getattr(shell.displayhook, "exec_result", None)
    raw = getattr(getattr(result, "info", None), "raw_cell", None)
    if not isinstance(raw, str) or not any(f"%{name}" in raw for name in MAGICS):
        return None
    caller = _caller_of_run_line_magic(shell)
    if caller is None or rewrite not in shell.input_transformers_cleanup:
        return None
    ran = "".join(linecache.getlines(caller.f_code.co_filename)).splitlines()
    ours = shell.transform_cell(raw).splitlines()
    at = caller.f_lineno - 1
    if len(ran) != len(ours) or not 0 <= at < len(ran) or _magic_call(ran[at]) != (help_name, line):
        return None
    differ = [(theirs, mine) for theirs, mine in zip(ran, ours, strict=True) if theirs != mine]
    if not all(_mistaken(theirs, mine) for theirs, mine in differ):
        return None
    found = _mistaken(ran[at], ours[at])
    return None if found is None else (*found, caller)


def _help_magic(shell: Any, help_name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def help_magic(line: str = "", *args: Any, **kwargs: Any) -> Any:
        mistaken = _mistaken_help(shell, help_name, line)
        if mistaken is None:
            return original(line, *args, **kwargs)
        magic, magic_args, caller = mistaken
        depth, frame = 1, sys._getframe()
        while frame is not caller and frame.f_back is not None:
            depth, frame = depth + 1, frame.f_back
        # the stack depth makes IPython expand $name and {expr} in the caller's scope
        return shell.run_line_magic(magic, magic_args, _stack_depth=depth)

    return help_magic


def install(shell: Any) -> None:
    """Add the transformer and the help-magic fallback to a shell (once)."""
    if rewrite not in shell.input_transformers_cleanup:
        shell.input_transformers_cleanup.append(rewrite)
    if id(shell) in _originals:
        return
    found = {name: shell.find_line_magic(name) for name in HELP_MAGICS}  # loads lazy ones
    originals = {name: magic for name, magic in found.items() if magic is not None}
    line_magics = shell.magics_manager.magics["line"]
    for name, original in originals.items():
        line_magics[name] = _help_magic(shell, name, original)
    _originals[id(shell)] = originals


def uninstall(shell: Any) -> None:
    """Remove what `install` added."""
    while rewrite in shell.input_transformers_cleanup:
        shell.input_transformers_cleanup.remove(rewrite)
    line_magics = shell.magics_manager.magics["line"]
    for name, original in _originals.pop(id(shell), {}).items():
        if getattr(line_magics.get(name), "__wrapped__", None) is original:
            line_magics[name] = original
