"""Notebooks as plans: collect the `%%step` cells, and run a notebook headlessly.

`stepstone run` executes the notebook in a real kernel with nbclient. The
kernel runs in the notebook's folder with `STEPSTONE_RUN`, `STEPSTONE_REPO` and
`STEPSTONE_NOTEBOOK` set, so `%resume` opens the right run and commits the
plan read from the notebook before any step runs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import names
from .cellargs import parse_step_line, split_cell
from .errors import InvalidInput, PlanError, StepstoneError
from .models import PlannedStep
from .run import source_hash

NOTEBOOK_ENV = "STEPSTONE_NOTEBOOK"


def read_notebook(path: Path) -> Any:
    """Read and validate a notebook, or raise `InvalidInput` saying what is wrong."""
    import nbformat

    try:
        nb = nbformat.read(str(path), as_version=4)  # type: ignore[no-untyped-call]
        nbformat.validate(nb)
    except FileNotFoundError as exc:
        raise InvalidInput(f"no notebook at {path}") from exc
    except Exception as exc:
        raise InvalidInput(f"{path} is not a valid notebook: {str(exc).splitlines()[0]}") from exc
    return nb


def plan_from_notebook(path: Path) -> list[PlannedStep]:
    """The `%%step` cells of a notebook, in order, as plan steps."""
    nb = read_notebook(path)
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
            )
        )
    return steps


def goal_of(path: Path) -> str:
    """The notebook's goal: the first heading of its first Markdown cell, if any."""
    for cell in read_notebook(path).cells:
        if cell.cell_type == "markdown":
            first = cell.source.strip().splitlines()[0] if cell.source.strip() else ""
            return first.lstrip("#").strip() if first.startswith("#") else ""
    return ""


@dataclass(frozen=True)
class NotebookOutcome:
    """How a headless run ended."""

    ok: bool
    message: str
    output: Path


def execute(
    path: Path,
    *,
    run_id: str,
    repo: Path,
    output: Path,
    timeout: int | None = None,
    progress: Callable[[str], None] | None = None,
    steal: str | None = None,
) -> NotebookOutcome:
    """Execute a notebook in a fresh kernel in its folder; write the executed copy to `output`."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, DeadKernelError

    nb = read_notebook(path)
    total = sum(1 for c in nb.cells if c.cell_type == "code" and split_cell(c.source))
    seen = 0
    failed_step: list[str] = []

    def on_cell_executed(cell: Any, cell_index: int, execute_reply: Any, **_: Any) -> None:
        nonlocal seen
        parts = split_cell(cell.source) if cell.cell_type == "code" else None
        if parts is None:
            return
        seen += 1
        name = parts[0].split()[0] if parts[0] else "?"
        status = execute_reply.get("content", {}).get("status", "ok")
        skipped = any(
            "skipped" in out.get("text", "") for out in cell.get("outputs", []) if "text" in out
        )
        if status != "ok":
            failed_step.append(name)
        if progress is not None:
            state = "failed" if status != "ok" else ("skipped" if skipped else "done")
            progress(f"[{seen}/{total}] {name}: {state}")

    names = ("STEPSTONE_RUN", "STEPSTONE_REPO", NOTEBOOK_ENV, "STEPSTONE_STEAL")
    env_before = {k: os.environ.get(k) for k in names}
    os.environ.update(
        {"STEPSTONE_RUN": run_id, "STEPSTONE_REPO": str(repo), NOTEBOOK_ENV: str(path)}
    )
    if steal:
        os.environ["STEPSTONE_STEAL"] = steal
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        on_cell_executed=on_cell_executed,
    )
    try:
        client.execute()
        outcome = NotebookOutcome(True, "ok", output)
    except CellExecutionError as exc:
        where = f"step {failed_step[-1]}" if failed_step else "a cell"
        summary = f"{exc.ename}: {exc.evalue}".strip()
        outcome = NotebookOutcome(False, f"{where} failed: {summary}", output)
    except DeadKernelError:
        outcome = NotebookOutcome(
            False, "the kernel died; run the same command again to resume", output
        )
    finally:
        for key, value in env_before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    try:
        nbformat.write(nb, str(output))  # type: ignore[no-untyped-call]
    except OSError as exc:
        raise StepstoneError(f"cannot write the executed notebook to {output}: {exc}") from exc
    return outcome


def default_progress(line: str) -> None:
    """Print a progress line on stderr."""
    print(line, file=sys.stderr, flush=True)
