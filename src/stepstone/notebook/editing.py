"""A notebook's cells read, and its step cells edited, from outside a kernel, as a
person edits them in Jupyter: one step cell's source replaced, a step cell inserted
after another, or the `%decide` lines of a decision revised outside the notebook.
The edited notebook is written in one rename, and only once it is still
a valid notebook (nbformat's schema) whose `%%step` cells still make a plan (the
refusals the next run of the notebook would meet: a line the grammar refuses, two
cells with one step name); else nothing is written.
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path
from typing import Any

from ..errors import InvalidInput
from ..model import names
from ..store.durable import write_atomic
from .cellargs import parse_step_line, rewrite_decide_lines, split_cell
from .notebook_plan import file_version, plan_from_notebook, read_notebook, step_cells


def cells(path: Path, *, every: bool = False) -> list[dict[str, Any]]:
    """Every cell of the notebook at `path`, in order: its number (from 1), id, type,
    the step it is (None: a plain code cell or markdown) and its source. With `every`
    (`--cells` mode) each code cell but the plain ones is a step."""
    nb = read_notebook(path, validate=False)  # read, not written: as `status` reads it
    steps = {index: _name(parts) for index, parts, _ in step_cells(nb, cells=every)}
    return [
        {
            "index": index,
            "id": getattr(cell, "id", None),
            "type": cell.cell_type,
            "step": steps.get(index),
            "source": cell.source,
        }
        for index, cell in enumerate(nb.cells, start=1)
    ]


def edit(
    path: Path,
    source: str,
    *,
    step: str | None = None,
    after: str | None = None,
    every: bool = False,
) -> dict[str, Any]:
    """Replace the source of step `step`'s cell with `source` (without a `%%step` line,
    the cell keeps its own), or insert a cell of `source` after step `after`'s cell
    (it starts with its `%%step NAME` line, unless `every`). Returns what was done:
    `action` (`replaced`, `inserted`, `unchanged`), the step, the cell's number.
    Raises `InvalidInput` (`PlanError`) and writes nothing when the edited notebook
    would not be valid or its plan would not read."""

    if (step is None) == (after is None):
        raise InvalidInput(
            "say which cell: step=NAME replaces that step's cell, after=NAME inserts a "
            "step cell after it (one of the two)"
        )
    if not source.strip():
        raise InvalidInput("the cell's source is empty: give its code")
    with _lock_for(path):  # two edits at once: the second reads what the first wrote
        return _edit(path, source, step=step, after=after, every=every)


def edit_cell(
    path: Path, source: str, *, cell: int, insert: bool = False, every: bool = False
) -> dict[str, Any]:
    """Replace the source of cell number `cell` (from 1, among all cells) with `source`,
    or with `insert` add a code cell of `source` after it (0: before the first). Returns
    `action`, the cell's number and the step it is (None: not a step). Raises
    `InvalidInput` and writes nothing when there is no such cell, or the edited notebook
    would not be valid or its plan would not read."""
    with _lock_for(path):
        read_as = file_version(path.stat())
        nb = read_notebook(path)
        top = len(nb.cells)
        if not (0 if insert else 1) <= cell <= top:
            first = 0 if insert else 1
            raise InvalidInput(
                f"{path.name} has no cell {cell} (its cells are numbered {first} to {top}, "
                f"as show_cells lists them)"
            )
        if insert:
            _upgrade_to_ids(nb)
            import nbformat

            nb.cells.insert(cell, nbformat.v4.new_code_cell(source))  # type: ignore[no-untyped-call]
            action, index = "inserted", cell + 1
        else:
            if nb.cells[cell - 1].source == source:
                return {"action": "unchanged", "step": None, "index": cell}
            nb.cells[cell - 1].source = source
            action, index = "replaced", cell
        made = _write_checked(path, nb, every=every, read_as=read_as)
        return {"action": action, "step": made[index - 1], "index": index}


def _upgrade_to_ids(nb: Any) -> None:
    """Give every cell an id, as Jupyter upgrades a notebook it saves (from nbformat 4.5
    on, cells have ids)."""
    if (nb.nbformat, nb.nbformat_minor) < (4, 5):
        from nbformat.corpus.words import generate_corpus_id

        nb.nbformat_minor = 5
        for each in nb.cells:
            each.setdefault("id", generate_corpus_id())  # type: ignore[no-untyped-call]


def revise_decision(
    path: Path, key: str, value: str, why: str, *, every: bool = False
) -> list[int]:
    """Rewrite each `%decide` line of `key` in the notebook at `path` to revise it to
    `value` for `why` (`%decide KEY=VALUE --revise --why REASON`), so that the notebook
    says what was decided outside it; written in one rename as `edit` writes. The
    numbers of the cells rewritten (none: no line decides `key`, or each says it
    already)."""
    with _lock_for(path):
        read_as = file_version(path.stat())
        nb = read_notebook(path)
        rewritten = []
        for index, cell in enumerate(nb.cells, start=1):
            if cell.cell_type != "code" or "%decide" not in cell.source:
                continue
            source = rewrite_decide_lines(cell.source, key, value, why)
            if source != cell.source:
                cell.source = source
                rewritten.append(index)
        if rewritten:
            _write_checked(path, nb, every=every, read_as=read_as)
        return rewritten


_locks: dict[str, threading.Lock] = {}
_locks_lock = threading.Lock()


def _lock_for(path: Path) -> threading.Lock:
    with _locks_lock:
        return _locks.setdefault(os.path.realpath(path), threading.Lock())


def _valid(nb: Any) -> bool:
    import nbformat

    try:
        nbformat.validate(nb)
    except nbformat.ValidationError:
        return False
    return True


def _edit(
    path: Path, source: str, *, step: str | None, after: str | None, every: bool
) -> dict[str, Any]:
    import nbformat

    read_as = file_version(path.stat())
    nb = read_notebook(path)
    was_valid = _valid(nb)
    found = {
        name: index - 1
        for index, parts, _ in step_cells(nb, cells=every)
        if (name := _name(parts)) is not None
    }
    wanted = step if step is not None else after
    assert wanted is not None
    if wanted not in found:
        raise InvalidInput(
            f"{path.name} has no step cell {wanted!r} (steps: {names.listing(list(found))})"
        )
    at = found[wanted]
    if step is not None:
        cell = nb.cells[at]
        line = split_cell(cell.source)
        if line is not None and split_cell(source) is None:
            source = f"%%step {line[0]}\n{source}"  # the body only: the cell keeps its line
        if source == cell.source:
            return {"action": "unchanged", "step": step, "index": at + 1}
        cell.source = source
        action, index = "replaced", at + 1
    else:
        if split_cell(source) is None and not every:
            raise InvalidInput(
                "a step cell starts with its `%%step NAME` line (and its checks): "
                "`%%step NAME --check file:PATH` then its code"
            )
        _upgrade_to_ids(nb)
        new = nbformat.v4.new_code_cell(source)  # type: ignore[no-untyped-call]
        nb.cells.insert(at + 1, new)
        action, index = "inserted", at + 2
    try:
        nbformat.validate(nb)
    except nbformat.ValidationError as exc:
        if was_valid:  # a problem the notebook had already is Jupyter's to live with
            first = str(exc).splitlines()[0]
            raise InvalidInput(
                f"the edited {path.name} would not be a valid notebook: {first}"
            ) from exc
    made = _write_checked(path, nb, every=every, read_as=read_as)
    name = made[index - 1] if index - 1 < len(made) else None
    return {"action": action, "step": name or wanted, "index": index}


def _write_checked(
    path: Path, nb: Any, *, every: bool, read_as: tuple[int, ...]
) -> list[str | None]:
    """Write `nb` over `path` in one rename once its plan reads (raising `PlanError`
    as the next run would, naming the notebook as `path` names it); each cell's step."""
    import nbformat

    with tempfile.TemporaryDirectory(prefix="stepstone-edit-") as folder:
        trial = Path(folder) / path.name
        nbformat.write(nb, str(trial))  # type: ignore[no-untyped-call]
        plan_from_notebook(trial, cells=every)  # PlanError: nothing is written
        mode = path.stat().st_mode & 0o7777 if path.exists() else None
        if file_version(path.stat()) != read_as:
            raise InvalidInput(
                f"{path.name} changed while it was edited (saved from Jupyter, or another "
                f"edit): nothing was written; read its cells again and edit again"
            )
        write_atomic(path, trial.read_bytes())
        if mode is not None:
            os.chmod(path, mode)
    steps = {index: _name(parts) for index, parts, _ in step_cells(nb, cells=every)}
    return [steps.get(index) for index in range(1, len(nb.cells) + 1)]


def _name(parts: tuple[str, str] | None) -> str | None:
    """The step a cell's (option line, body) names, or None (a plain cell, a bad line)."""
    if parts is None:
        return None
    try:
        return parse_step_line(parts[0]).name
    except InvalidInput:
        return None
