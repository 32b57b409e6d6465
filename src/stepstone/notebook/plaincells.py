"""The plain cells of a notebook each step reads from: part of what a step's source
hash covers, so that editing a plain cell (a parameters cell, a helper function) makes
exactly the steps that read what it binds stale.

A plain cell runs again on resume, so what it binds is made anew; a step skipped on
evidence recorded with the cell as it was would leave results made from the old one.
The plan (from the saved notebook) and the kernel (from the same file) read the cells
with this one function, so both agree on each step's context.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from .namespace import Cell, read_cell


def _python(source: str) -> str:
    """A cell's code without its IPython lines (`%magic`, `!cmd`), which bind nothing a
    step reads (stepstone's own lines included)."""
    return "\n".join(
        "" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()
    )


def contexts(cells: Sequence[tuple[str | None, str]]) -> dict[str, str]:
    """For each step of a notebook, the sources of the plain cells before it that bind
    a name it reads, and those that bind a name they read (a helper's globals), joined;
    every plain cell before it when it may read any name. `cells`: each code cell as
    (its step name or None for a plain cell, its source; a step's without its line)."""
    found: dict[str, str] = {}
    plain: list[tuple[str, Cell | None]] = []
    for name, source in cells:
        shape = read_cell(_python(source))
        if name is None:
            if source.strip() and _python(source).strip():
                plain.append((source, shape))
            continue
        wanted = None if shape is None or shape.reads is None else set(shape.reads)
        chosen = [False] * len(plain)
        grew = True
        while grew:
            grew = False
            for i, (_, cell) in enumerate(plain):
                if chosen[i] or not (wanted is None or cell is None or wanted & set(cell.binds)):
                    continue
                chosen[i] = grew = True
                if cell is None or cell.reads is None:
                    wanted = None  # it may read anything: every plain cell before may matter
                elif wanted is not None:
                    wanted |= cell.deferred | cell.reads
        used = [src for (src, _), picked in zip(plain, chosen, strict=True) if picked]
        found[name] = "\n\0\n".join(_wanted_part(src, wanted) for src in used)
    return found


def _wanted_part(source: str, wanted: set[str] | None) -> str:
    """A plain cell's source less the assignments of a constant to names the step does
    not read (`b = 2` beside `a = 1` in a parameters cell: editing b leaves the readers
    of a as they are); every other statement stays (a call may do anything)."""
    if wanted is None:
        return source
    try:
        tree = ast.parse(_python(source))
    except SyntaxError:
        return source
    kept = []
    for statement in tree.body:
        if isinstance(statement, (ast.Assign, ast.AnnAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            if (
                len(names) == len(targets)
                and not set(names) & wanted
                and _constant(statement.value)
            ):
                continue
        kept.append(ast.get_source_segment(_python(source), statement) or "")
    return "\n".join(kept)


def _constant(value: ast.expr | None) -> bool:
    if value is None:
        return True
    try:
        ast.literal_eval(value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def made_anew(cells: Sequence[tuple[str | None, str | None]]) -> dict[str, frozenset[str]]:
    """For each step of a notebook, the names the plain cells before it bind from
    nothing a step makes: a plain cell whose code, and the code of the functions it
    defines, reads no name any step binds, and that is plain Python. Such names are made
    again as they were whenever the notebook runs, and the cells that make them are in
    the step's source hash (`contexts`): a step that reads them does not read what an
    earlier step left in the kernel. `cells`: each code cell as (its step name or None,
    its code as Python or None when it does not parse)."""
    shapes = [(name, read_cell(code) if code is not None else None) for name, code in cells]
    if any(shape is None for name, shape in shapes if name is not None):
        return {name: frozenset() for name, _ in shapes if name is not None}
    made_by_steps = {n for name, shape in shapes if name is not None for n in shape.binds}  # type: ignore[union-attr]
    clean: set[str] = set()
    dirty = set(made_by_steps)
    poisoned = False
    found: dict[str, frozenset[str]] = {}
    for name, shape in shapes:
        if name is not None:
            found[name] = frozenset(clean)
        elif shape is None:  # binds what it likes: nothing after it is known to be clean
            poisoned, clean = True, set()
        elif poisoned or shape.reads is None or (shape.reads | shape.deferred) & dirty:
            dirty |= set(shape.binds)
            clean -= set(shape.binds)
        else:
            clean |= set(shape.binds) - dirty
    return found
