"""A notebook's `%%step` cells as a plan, and how the notebook on disk differs from the
plan its run last committed."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from . import names
from .cellargs import parse_step_line, split_cell
from .errors import InvalidInput, PlanError
from .models import PlannedStep
from .run import Run, source_hash
from .status import RunStatus


def read_notebook(path: Path, *, validate: bool = True) -> Any:
    """Read and validate a notebook, or raise `InvalidInput` saying what is wrong.
    Without `validate` (a reader that only looks at the cells: `status`), a version 4
    notebook is read as plain JSON: its schema's validator costs a new process more
    than the rest of `status`."""
    if not validate:
        try:
            raw = json.loads(path.read_bytes())
            if raw.get("nbformat") == 4 and isinstance(raw.get("cells"), list):
                cells = [
                    SimpleNamespace(
                        cell_type=cell.get("cell_type"),
                        source="".join(source) if isinstance(source, list) else source,
                    )
                    for cell in raw["cells"]
                    for source in [cell.get("source", "")]
                ]
                return SimpleNamespace(cells=cells)
        except (ValueError, AttributeError, TypeError):
            pass  # the full read below says what is wrong
    import nbformat

    try:
        nb = nbformat.read(str(path), as_version=4)  # type: ignore[no-untyped-call]
        nbformat.validate(nb)
    except FileNotFoundError as exc:
        raise InvalidInput(f"no notebook at {path}") from exc
    except Exception as exc:
        raise InvalidInput(f"{path} is not a valid notebook: {str(exc).splitlines()[0]}") from exc
    return nb


def plan_from_notebook(path: Path, *, validate: bool = True) -> list[PlannedStep]:
    """The `%%step` cells of a notebook, in order, as plan steps."""
    nb = read_notebook(path, validate=validate)
    steps: list[PlannedStep] = []
    seen: dict[str, int] = {}
    for index, cell in enumerate(nb.cells, start=1):
        if cell.cell_type != "code":
            continue
        parts = split_cell(cell.source)
        if parts is None:
            continue
        line, body = parts
        try:
            parsed = parse_step_line(line)
            names.step_name(parsed.name)
        except InvalidInput as exc:
            raise PlanError(f"{path.name}, cell {index}: {exc}") from exc
        if parsed.name in seen:
            raise PlanError(
                f"{path.name}: step {parsed.name!r} appears in cells {seen[parsed.name]} and "
                f"{index}; give each %%step cell its own name"
            )
        seen[parsed.name] = index
        steps.append(
            PlannedStep(
                number=len(steps) + 1,
                name=parsed.name,
                checks=parsed.checks,
                inputs=parsed.inputs,
                outputs=parsed.outputs,
                source_hash=source_hash(body),
                renamed_from=(parsed.was,) if parsed.was else (),
            )
        )
    return steps


def notebook_changes(run: Run) -> list[str]:
    """How the run's notebook, as it is on disk now, differs from the plan the run last
    committed (`changed s1`, `added t4`, `moved s3 3->2`...): what the next run of the
    notebook will see. Empty when the run has no notebook or it cannot be read."""
    if not run.info.notebook:
        return []
    path = Path(run.info.notebook)
    path = path if path.is_absolute() else run.workdir / path
    try:
        plan = plan_from_notebook(path, validate=False)
    except (InvalidInput, OSError):
        return []
    from .index import plan_row
    from .run.planning import plan_changes

    old = [run.steps.row(i) for i in range(len(run.steps))]
    return plan_changes(old, [plan_row(step) for step in plan])


def seeing_the_notebook(run: Run, status: RunStatus) -> RunStatus:
    """`status` with a note of how the run's notebook changed since its plan was
    committed: the cells the next run of the notebook sees as edited, added, moved."""
    changes = notebook_changes(run)
    if not changes:
        return status
    note = f"the notebook changed since its plan was committed: {'; '.join(changes)}"
    return dataclasses.replace(status, notes=(*status.notes, note))
