"""A failed cell marked in the executed notebook as papermill marks it: an error cell at
the top that links to an anchor cell before the failed one (both tagged
`papermill-error-cell-tag`, so that papermill's tools, and the next run, find them)."""

from __future__ import annotations

import functools
from typing import Any

from ..errors import StepstoneError

ERROR_MARKER_TAG = "papermill-error-cell-tag"  # papermill's, so its tools find them
_ERROR_STYLE = (
    'style="color:red; font-family:Helvetica Neue, Helvetica, Arial, sans-serif; font-size:2em;"'
)
ERROR_MESSAGE = (
    f"<span {_ERROR_STYLE}>An Exception was encountered at "
    "'<a href=\"#papermill-error-cell\">In [%s]</a>'.</span>"
)
ERROR_ANCHOR = (
    f'<span id="papermill-error-cell" {_ERROR_STYLE}>'
    "Execution using papermill encountered an exception here and stopped:</span>"
)


class CellFailed(StepstoneError):
    """A cell raised: the executed notebook marks it, as papermill's does, and the next
    run resumes there. Its attributes are papermill's `PapermillExecutionError`'s."""

    def __init__(
        self, cell_index: int, exec_count: int | None, source: str, ename: str, evalue: str
    ) -> None:
        self.cell_index, self.exec_count, self.source = cell_index, exec_count, source
        self.ename, self.evalue = ename, evalue
        self.traceback: list[str] = []
        super().__init__(
            f"cell {cell_index} (In [{exec_count}]) raised {ename}: {evalue}; the executed "
            f"notebook marks it. Fix it and run the same command again: it resumes there"
        )


def as_papermills(failed: CellFailed) -> CellFailed:
    """`failed`, also an instance of papermill's `PapermillExecutionError` when papermill
    is installed, so that a script written for papermill (`except
    PapermillExecutionError`) catches it; its message stays stepstone's. Made when a
    failure is raised, not at import: importing papermill costs half a second."""
    try:
        from papermill.exceptions import PapermillExecutionError  # type: ignore[import-untyped]
    except ImportError:
        return failed
    both = _with_papermills(PapermillExecutionError)
    made: CellFailed = both.__new__(both)
    made.__dict__.update(failed.__dict__)
    made.args = failed.args
    return made


@functools.cache
def _with_papermills(papermills: type[Exception]) -> type[CellFailed]:
    return type(
        "CellFailed",
        (CellFailed, papermills),
        {"__str__": Exception.__str__, "__module__": CellFailed.__module__},
    )


def remove_error_markers(nb: Any) -> None:
    """Take out the error cells an earlier papermill (or stepstone) run added."""
    nb.cells = [
        c for c in nb.cells if ERROR_MARKER_TAG not in c.get("metadata", {}).get("tags", [])
    ]


def exited(output: Any) -> bool:
    """Whether an error output is `sys.exit(0)` (or `sys.exit()`): no failure, for
    papermill, and for `stepstone run`."""
    return output.get("ename") == "SystemExit" and output.get("evalue") in ("", "0")


def mark_failure(
    nb: Any, raised: Any = None, why: tuple[str, str] = ("CellExecutionError", "")
) -> CellFailed | None:
    """Mark the failed cell as papermill does (an error cell at the top, an anchor before
    it): the last cell whose outputs hold an error other than `sys.exit(0)`, else the cell
    `raised` (whose execution failed without an error output: a `UsageError`, or a cell
    stopped past its timeout), failed with `why` (the error's name and value); the
    failure, or None when no cell failed."""
    import nbformat

    failed: CellFailed | None = None
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        real = [o for o in errors if not exited(o)]
        if real:
            error = real[0]
            failed = CellFailed(
                index, cell.get("execution_count"), cell.source, error.ename, error.evalue
            )
            failed.traceback = list(error.get("traceback", []))
        elif failed is None and not errors and raised is not None and cell is raised:
            failed = CellFailed(index, cell.get("execution_count"), cell.source, *why)
            break
    if failed is None:
        return None
    message = nbformat.v4.new_markdown_cell(ERROR_MESSAGE % failed.exec_count)  # type: ignore[no-untyped-call]
    anchor = nbformat.v4.new_markdown_cell(ERROR_ANCHOR)  # type: ignore[no-untyped-call]
    for marker in (message, anchor):
        marker.metadata["tags"] = [ERROR_MARKER_TAG]
    nb.cells.insert(failed.cell_index, anchor)
    nb.cells.insert(0, message)
    return failed
