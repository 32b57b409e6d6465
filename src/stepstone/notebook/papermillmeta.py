"""papermill's metadata in an executed notebook, as papermill 2.x writes it: the
notebook's `metadata.papermill` (parameters, input and output paths, times, whether it
raised) and each cell's (`status` completed, failed or pending, times, `exception`), and
`tags` on every cell. Tools written for papermill's output notebooks read these."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from .failures import ERROR_MARKER_TAG

KEY = "papermill"


def now() -> str:
    """The time now, as papermill writes it."""
    return datetime.now(timezone.utc).isoformat()


def _seconds(start: str, end: str) -> float:
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def forget(nb: Any) -> None:
    """Take out what an earlier run wrote of papermill's metadata (this notebook is the
    output of one): each cell is pending until it runs again."""
    nb.metadata.pop(KEY, None)
    for cell in nb.cells:
        cell.metadata.pop(KEY, None)


def started(cell: Any) -> None:
    """Note that `cell` starts executing."""
    cell.metadata[KEY] = {
        "duration": None,
        "end_time": None,
        "exception": None,
        "start_time": now(),
        "status": "running",
    }


def ended(cell: Any, *, failed: bool) -> None:
    """Note that `cell` ended, raising or not."""
    said = cell.metadata.setdefault(KEY, {"start_time": now()})
    end = now()
    said.update(
        {
            "duration": _seconds(said["start_time"], end),
            "end_time": end,
            "exception": failed,
            "status": "failed" if failed else "completed",
        }
    )


def finish(
    nb: Any,
    *,
    input_path: str | Path,
    output_path: str | Path,
    parameters: Mapping[str, Any],
    start: str,
    failed: bool,
) -> None:
    """Write the notebook's papermill metadata, and each cell's that has none yet: a cell
    before the last one that ran was passed over (markdown: completed), one after it
    did not run (pending); a cell still running when the run stopped failed."""
    marked = [c for c in nb.cells if ERROR_MARKER_TAG not in c.metadata.get("tags", [])]
    ran = [i for i, c in enumerate(marked) if KEY in c.metadata]
    last = ran[-1] if ran else -1
    for index, cell in enumerate(marked):
        said = cell.metadata.get(KEY)
        if said is not None and said.get("status") == "running":
            ended(cell, failed=True)
        elif said is None and index < last:
            cell.metadata[KEY] = {
                "duration": 0.0,
                "end_time": said_time(marked, index),
                "exception": False,
                "start_time": said_time(marked, index),
                "status": "completed",
            }
        elif said is None:
            cell.metadata[KEY] = {
                "duration": None,
                "end_time": None,
                "exception": None,
                "start_time": None,
                "status": "pending",
            }
        cell.metadata.setdefault("tags", [])
    end = now()
    nb.metadata[KEY] = {
        "default_parameters": {},
        "duration": _seconds(start, end),
        "end_time": end,
        "environment_variables": {},
        "exception": True if failed else None,
        "input_path": str(input_path),
        "output_path": str(output_path),
        "parameters": dict(parameters),
        "start_time": start,
        "version": _version(),
    }


def hide_code(nb: Any) -> None:
    """Hide each code cell's source, as papermill's report mode does (markdown shows)."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.metadata.setdefault("jupyter", {})["source_hidden"] = True


def prepared(nb: Any, *, input_path: str, output_path: str, parameters: Mapping[str, Any]) -> None:
    """The metadata of a notebook prepared and not run (`--prepare-only`), as papermill
    writes it: its parameters and paths, and no cell run."""
    for cell in nb.cells:
        cell.metadata.setdefault("tags", [])
    nb.metadata[KEY] = {
        "default_parameters": {},
        "environment_variables": {},
        "input_path": input_path,
        "output_path": output_path,
        "parameters": dict(parameters),
        "version": _version(),
    }


def said_time(cells: list[Any], index: int) -> str:
    """When the cell at `index` was passed over: when the cell that ran before it ended."""
    for cell in reversed(cells[:index]):
        end = (cell.metadata.get(KEY) or {}).get("end_time")
        if end:
            return str(end)
    return now()


def _version() -> str:
    """The version of what executed the notebook: stepstone's."""
    try:
        return metadata.version("stepstone")
    except metadata.PackageNotFoundError:
        return ""
