"""What a step read as it ran, recorded with it: its inputs (decisions, unknowns, files
declared, named in its code or opened by it, the steps that made them), the kernel names
its cell reads and binds, and the files its code wrote (`dependencies`, `filetrace`)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Protocol

from ..model.models import PlannedStep, StepRecord
from ..rules import dependencies
from .active import Trace
from .filetrace import unwatched
from .state import RunState


class Begun(Protocol):
    """A step under way (`stepping.StepStart`): what it is, and what it did as it ran."""

    planned: PlannedStep
    source: str | None  # its cell's code
    trace: Trace  # what it read and wrote as it ran
    plain: frozenset[str]  # the names it reads that plain cells make anew
    check_writes: bool  # the files its code wrote are its evidence


def recorded_inputs(
    state: RunState, start: Begun, workdir: Path
) -> tuple[dict[str, str | None] | None, tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """What a step read as it ran (its inputs, with the values seen), the names its cell
    reads, less those plain cells make anew, and binds, and the files its code wrote."""
    planned, source, trace, plain, store = (
        start.planned,
        start.source,
        start.trace,
        start.plain,
        state.store.path,
    )
    read: list[str] = []
    wrote: list[str] = []
    listed: list[str] = []
    if trace.files.read or trace.files.wrote or trace.files.listed:  # (a stat a part)
        root = os.path.realpath(workdir)
        read, wrote = trace.files.relative(root, skip=unwatched(store))
        listed = trace.files.folders(root, skip=unwatched(store))
    table = state.records.table
    inputs, reads, binds = dependencies.recorded_inputs(
        source=source,
        declared=(*planned.inputs, *(dependencies.UNKNOWN + u for u in trace.unknowns)),
        decisions=trace.decisions,
        answers={u.id: u.answer for u in state.unknowns.values()},
        earlier=_records_before(state, planned.number)
        if _names_a_checked_file(state, source or "", read)
        else (),
        workdir=workdir,
        read=read,
        plain=plain,
    )
    if read and (inputs is not None or source is None):
        traced = dependencies.traced_inputs(
            read,
            step=planned.name,
            checked=table.checked_files(),
            writers=table.writers(),
            number_of=state.numbers.get,
            record_of=state.records.get,
            workdir=workdir,
        )
        inputs = {**traced, **(inputs or {})}
    if listed and (inputs is not None or source is None):
        by_steps = {*(p for p, w in table.writers().items() if w), *wrote}
        inputs = {
            **(inputs or {}),
            **{
                f"{dependencies.LISTED}{f}": dependencies.listing_digest(workdir / f, by_steps, f)
                for f in listed
            },
        }
    if start.check_writes:
        wrote += _removed_unseen(state, wrote, workdir)
    if start.check_writes and wrote:
        made = {f"{dependencies.WROTE}{p}": dependencies.written_digest(workdir / p) for p in wrote}
        inputs = {**(inputs or {}), **{k: v for k, v in made.items() if v is not None}}
    return inputs, reads, binds, tuple(wrote)


def _removed_unseen(state: RunState, wrote: list[str], workdir: Path) -> list[str]:
    """The files earlier steps wrote that are gone now though this step's trace did not
    see them removed (`!rm`, a subprocess): this step removed them, and the steps that
    wrote them no longer answer for them. A file whose last writer already found it
    gone is not named again."""
    found = []
    for path, writers in state.records.table.writers().items():
        if not writers or path in wrote or (workdir / path).exists():
            continue  # (no step writes it any more: a record now says other files)
        last = max(writers, key=lambda name: state.numbers.get(name) or 0)
        record = state.records.get(last)
        if record is not None and f"{dependencies.WROTE}{path}" in (record.inputs or {}):
            found.append(path)
    return sorted(found)


def _names_a_checked_file(state: RunState, source: str, read: Iterable[str]) -> bool:
    """Whether `source` holds a path some record's `file:` check names, or the step
    opened one (a step's cost stays flat as the run grows: the table keeps those paths)."""
    checked = state.records.table.checked_files()
    return any(path in source for path in checked) or any(path in checked for path in read)


def _records_before(state: RunState, number: int) -> Iterator[StepRecord]:
    """The records of the steps before step `number`, in plan order."""
    records = state.records
    for name in state.steps.names[: number - 1]:
        record = records.get(name)
        if record is not None:
            yield record
