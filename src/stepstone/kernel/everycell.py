"""`%resume --cells` in a live kernel: every code cell the notebook's saved file has as a
step runs as that step, though the cell does not say `%%step` (JupyterLab runs what
you see; the cell's step is found by its cell id, which Jupyter clients send with the
code; a client that sends none has it found by its source, when one cell of the saved
notebook has it; a cell id the notebook does not have is a scratch cell's: plain code).

`stepstone run --cells` writes the `%%step` line itself before a cell runs; here the
code a client sends is given its `%%step` line where the kernel receives it (the
kernel's `do_execute`, or `run_cell` in a shell without a kernel).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


class EveryCell:
    """The steps of a notebook's cells, by cell id and by source."""

    def __init__(self) -> None:
        self.by_id: dict[str, str] = {}
        self.by_source: dict[str, str | None] = {}  # None: two cells have this source

    def know(self, steps: list[tuple[str | None, str, str]]) -> None:
        """The notebook's step cells: (cell id, step name, source), in order."""
        self.by_id, self.by_source = {}, {}
        for cell_id, name, source in steps:
            if cell_id:
                self.by_id[cell_id] = name
            key = source.strip()
            self.by_source[key] = None if key in self.by_source else name

    def wrap(self, code: str, cell_id: str | None) -> str:
        """The code a client sent, as the `%%step` cell it is, if it is one."""
        if not isinstance(code, str) or code.lstrip().startswith("%%"):
            return code
        if cell_id and self.by_id:  # a cell id the notebook does not have: a scratch cell
            name = self.by_id.get(cell_id)
        else:
            name = self.by_source.get(code.strip())
        return f"%%step {name}\n{code}" if name else code


_installed: dict[int, tuple[Any, str, Any]] = {}  # id(shell) -> (object, name, original)


def install(shell: Any, every: EveryCell) -> None:
    """Run each of the notebook's cells as its step in `shell` (once)."""
    if id(shell) in _installed:
        return
    kernel = getattr(shell, "kernel", None)
    if kernel is not None and hasattr(kernel, "do_execute"):
        original = kernel.do_execute

        @functools.wraps(original)
        async def do_execute(
            code: str, *args: Any, cell_meta: Any = None, cell_id: str | None = None, **kw: Any
        ) -> Any:
            found = {"cell_meta": cell_meta, "cell_id": cell_id}
            given = {k: v for k, v in found.items() if v is not None}
            result = original(every.wrap(code, cell_id), *args, **given, **kw)
            return await result if hasattr(result, "__await__") else result

        _installed[id(shell)] = (kernel, "do_execute", original)
        kernel.do_execute = do_execute
        return
    run_cell: Callable[..., Any] = shell.run_cell

    @functools.wraps(run_cell)
    def wrapped(raw_cell: str, *args: Any, cell_id: str | None = None, **kw: Any) -> Any:
        return run_cell(every.wrap(raw_cell, cell_id), *args, cell_id=cell_id, **kw)

    _installed[id(shell)] = (shell, "run_cell", run_cell)
    shell.run_cell = wrapped


def uninstall(shell: Any, every: EveryCell) -> None:
    """Stop what `install` started."""
    found = _installed.pop(id(shell), None)
    if found is not None:
        obj, name, _ = found
        obj.__dict__.pop(name, None)
