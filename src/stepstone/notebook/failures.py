"""A failed cell marked in the executed notebook as papermill marks it: an error cell at
the top that links to an anchor cell before the failed one (both tagged
`papermill-error-cell-tag`, so that papermill's tools, and the next run, find them)."""

from __future__ import annotations

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


def remove_error_markers(nb: Any) -> None:
    """Take out the error cells an earlier papermill (or stepstone) run added."""
    nb.cells = [
        c for c in nb.cells if ERROR_MARKER_TAG not in c.get("metadata", {}).get("tags", [])
    ]


def mark_failure(nb: Any) -> CellFailed | None:
    """Mark the first cell whose outputs hold an error as papermill does (an error cell at
    the top, an anchor before it); the failure, or None when no cell failed."""
    import nbformat

    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        error = next((o for o in cell.get("outputs", []) if o.output_type == "error"), None)
        if error is None:
            continue
        failed = CellFailed(
            index, cell.get("execution_count"), cell.source, error.ename, error.evalue
        )
        failed.traceback = list(error.get("traceback", []))
        message = nbformat.v4.new_markdown_cell(ERROR_MESSAGE % failed.exec_count)  # type: ignore[no-untyped-call]
        anchor = nbformat.v4.new_markdown_cell(ERROR_ANCHOR)  # type: ignore[no-untyped-call]
        for marker in (message, anchor):
            marker.metadata["tags"] = [ERROR_MARKER_TAG]
        nb.cells.insert(index, anchor)
        nb.cells.insert(0, message)
        return failed
    return None
