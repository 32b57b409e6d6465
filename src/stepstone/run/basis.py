"""What a step was given: the digest that tells a retry on the same inputs from a run
on changed ones, for the effects it asks for.

A step's `given` is a digest of its code (its record's source hash), the inputs its
record says it read (decisions, answers, files, the steps that made them; not the files
it wrote) and the `given` of the step before it in the plan, so that a change anywhere
upstream changes every `given` after it, as the conservative rule re-runs every step
after it. It is made from the records, step by step, and kept for the records it was
made from.

An effect's record keeps its `basis`: the same digest taken when it was asked for, of
what the step had read so far. Two attempts of a step with the same basis asked on the
same inputs: they ask for the same effects in the same order, so a new name or payload
then is made from a clock or a random number, and is refused (docs/effects.md). A
basis that differs (a revised decision, a changed file, an edited cell, a step before
it that ran on other inputs) may ask for new effects.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

from ..model.models import PlannedStep, StepRecord
from ..rules import dependencies
from .active import Trace
from .state import RunState


def given_before(state: RunState, number: int) -> str:
    """The `given` of the step before step `number` in the plan ("" for the first)."""
    names, records = state.steps.names, state.records
    chain: list[StepRecord | None] = []
    at = min(number - 1, len(names))
    while at > 0:  # back to the first step whose `given` is known
        record = records.get(names[at - 1])
        if record is None or _known.get(_memo(record)) is not None:
            break
        chain.append(record)
        at -= 1
    before = ""
    if at > 0:
        found = records.get(names[at - 1])
        before = _known.get(_memo(found), "") if found is not None else ""
    for record in reversed(chain):
        assert record is not None
        before = _given(before, record)
    return before


_known: dict[tuple[str, int, str, str | None], str] = {}  # a record (`_memo`) -> its given


def _memo(record: StepRecord) -> tuple[str, int, str, str | None]:
    return (record.name, record.seq, record.finished, record.source_hash)


def _given(before: str, record: StepRecord) -> str:
    read = {k: v for k, v in (record.inputs or {}).items() if not k.startswith(dependencies.WROTE)}
    found = _digest(before, record.source_hash, read)
    if len(_known) > 100_000:
        _known.clear()
    _known[_memo(record)] = found
    return found


def basis(state: RunState, planned: PlannedStep, trace: Trace, workdir: Path) -> str:
    """What step `planned` has read so far in this attempt (`trace`), as a digest: the
    files it read are those of the work folder (`workdir`), as its record keeps them."""
    read: dict[str, str | None] = {
        f"{dependencies.DECISION}{key}": value for key, value in trace.decisions.items()
    }
    for unknown in trace.unknowns:
        question = state.unknowns.get(unknown)
        read[f"{dependencies.UNKNOWN}{unknown}"] = question.answer if question else None
    if trace.files.read:
        root = os.path.realpath(workdir)
        files, _ = trace.files.relative(root, skip=(os.path.realpath(state.store.path),))
        for path in files:
            read[f"{dependencies.READ}{path}"] = _file_digest(os.path.join(root, path))
    return _digest(given_before(state, planned.number), planned.source_hash, read)


def _digest(before: str, source: str | None, read: Mapping[str, str | None]) -> str:
    text = json.dumps([before, source or "", sorted(read.items())], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


_digests: dict[tuple[str, int, int], str | None] = {}  # (path, size, mtime) -> sha256


def _file_digest(path: str) -> str | None:
    """A file's sha256 (None when it is gone), read once while it stays unchanged."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    key = (path, stat.st_size, stat.st_mtime_ns)
    if key not in _digests:
        if len(_digests) > 4096:
            _digests.clear()
        _digests[key] = dependencies.file_digest(Path(path))
    return _digests[key]
