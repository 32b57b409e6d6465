"""What a `%%step` cell leaves in the kernel, and how a skipped cell gives it back.

A confirmed cell offers every name it binds to be saved (`offered`); what cannot be
saved is named in its record. When the cell is skipped, its saved values come back
and its top-level imports, `def`s and `class`es run again (`remake`): they are cheap,
and a function defined there sees the restored values as globals, as it did.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .dependencies import may_bind
from .errors import StepstoneError

_DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_THROWAWAY = frozenset({"_", "__", "___"})


@dataclass(frozen=True)
class Cell:
    """A cell's code as Python: what it may bind, and its top-level definitions."""

    binds: tuple[str, ...]  # every name it may bind, in the order first met
    definitions: ast.Module  # its top-level imports, defs and classes
    defined: frozenset[str]  # the names those bind
    others: frozenset[str]  # the names its other statements bind


def read_cell(code: str) -> Cell | None:
    """Read a cell's code (IPython syntax already turned into Python), or None when it
    does not parse."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None
    definitions = ast.Module(
        body=[s for s in tree.body if isinstance(s, _DEFINITIONS)], type_ignores=[]
    )
    rest = ast.Module(
        body=[s for s in tree.body if not isinstance(s, _DEFINITIONS)], type_ignores=[]
    )
    bound = may_bind(tree)
    return Cell(
        binds=tuple(dict.fromkeys(n for n in _in_order(tree) if n in bound)),
        definitions=definitions,
        defined=frozenset(may_bind(definitions)),
        others=frozenset(may_bind(rest)),
    )


def _in_order(tree: ast.Module) -> Iterable[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            yield node.id
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            yield from ((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or (
            isinstance(node, ast.ExceptHandler) and node.name
        ):
            yield node.name  # type: ignore[misc]


def offered(cell: Cell, namespace: Mapping[str, Any], asked: Iterable[str] = ()) -> dict[str, Any]:
    """The values to save of the names `cell` bound: not the ones its definitions
    make again on skip, nor the ones `asked` for by name (`--out`)."""
    skip = set(asked) | _THROWAWAY | (cell.defined - cell.others)
    return {n: namespace[n] for n in cell.binds if n not in skip and n in namespace}


def remake(cell: Cell, namespace: dict[str, Any], step: str) -> list[str]:
    """Run `cell`'s top-level imports, defs and classes again in `namespace`; the names
    they bound. Raises `StepstoneError` saying how to go on when one fails."""
    if not cell.definitions.body:
        return []
    try:
        exec(compile(cell.definitions, f"<step {step}: definitions>", "exec"), namespace)
    except Exception as exc:
        raise StepstoneError(
            f"step {step!r} is verified and was skipped, but its imports, functions and "
            f"classes could not be made again ({type(exc).__name__}: {exc}). Fix what they "
            f"need (a module to install, a name an earlier cell defines), or run the step "
            f"again: %%step {step} --rerun 'REASON'"
        ) from exc
    return sorted(cell.defined)


class Unrestored:
    """The names skipped steps could not give back (`unsaved` in their records), until
    a cell that runs binds them again."""

    def __init__(self) -> None:
        self.names: dict[str, tuple[str, str]] = {}  # name -> (step, type)

    def skipped(self, step: str, unsaved: Mapping[str, str]) -> None:
        """Step `step` was skipped; `unsaved` (name -> type) did not come back."""
        self.names.update({name: (step, kind) for name, kind in unsaved.items()})

    def bound(self, names: Iterable[str]) -> None:
        """A cell that ran bound `names` again."""
        for name in names:
            self.names.pop(name, None)

    def hint(self, name: str) -> str | None:
        """Why `name` is not defined, when a skipped step made it; else None."""
        if name not in self.names:
            return None
        step, kind = self.names[name]
        return (
            f"{name!r} was made by step {step!r}, which was skipped on resume, and its value "
            f"({kind}) cannot be saved. Re-create it in the step that uses it, or run "
            f"{step!r} again: %%step {step} --rerun 'REASON'"
        )
