"""What a confirmed step saves of the values it made: the ones asked for (`--out`, a
return value) or nothing, and the ones its cell bound as far as they can be saved."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..errors import InvalidInput
from ..model import models
from ..store import StoredBlob
from ..values import artifacts, bigvalues, trust
from .checking import RETURN
from .state import RunState


def saved_outputs(
    asked: Mapping[str, Any],
    offered: Mapping[str, Any],
    touched: Mapping[str, Any],
    state: RunState,
    number: int,
) -> tuple[Writes, dict[str, models.Artifact], dict[str, str]]:
    """(the artifact files to write, the record's outputs, the offered names that
    cannot be saved with their types). A value `asked` for that cannot be saved is an
    error; an `offered` one is reported (it will not survive a resume); a `touched` one
    is saved only when it differs from the one a step before step `number` saved. Big
    arrays and frames are written to the store as they are saved, before the commit."""
    last = last_saved(state, number)
    big = state.store.big_blobs
    writes: Writes = {}
    saved: dict[str, models.Artifact] = {}
    unsaved: dict[str, str] = {}
    for var, value in asked.items():
        try:
            saved[var] = _save(var, value, writes, big)
        except artifacts.Unsaveable as exc:
            raise _refused(exc) from exc
    for var, value in offered.items():
        if var in saved:
            continue
        try:
            saved[var] = _save(var, value, writes, big)
        except artifacts.Unsaveable as exc:
            unsaved[var] = exc.kind
    for var, value in touched.items():
        before = last(var)
        if var in saved or before is None:  # no step saved it: a plain cell makes it
            continue
        if _unchanged(value, before):
            continue  # as saved: no round-trip check needed
        try:
            artifact = _save(var, value, writes, big)
        except artifacts.Unsaveable as exc:
            unsaved[var] = exc.kind  # a resume must not give back its value from before
            continue
        if artifact.sha256 != before.sha256:
            saved[var] = artifact
    return writes, saved, unsaved


Writes = dict[str, bytes | StoredBlob | None]


def saved_for_kernel(
    kernel: Mapping[str, Any], writes: Writes, state: RunState
) -> dict[str, models.Artifact]:
    """The kernel's part of a step (`models.KERNEL_KEYS`), saved beside its values: what
    cannot be saved of it is left out (its values are plain data and displayed outputs)."""
    saved: dict[str, models.Artifact] = {}
    for key, value in kernel.items():
        try:
            saved[key] = _save(key, value, writes, state.store.big_blobs)
        except artifacts.Unsaveable:
            continue
    return saved


def _unchanged(value: Any, before: models.Artifact) -> bool:
    if before.format in ("npy", "arrow") and bigvalues.is_big(value):
        try:
            return bigvalues.sha256_as(before.format, value) == before.sha256
        except Exception:
            return False
    quick = artifacts.encoded_as(before.format, value)
    return quick is not None and artifacts.sha256(quick) == before.sha256


def last_saved(state: RunState, number: int) -> Callable[[str], models.Artifact | None]:
    """The value the latest step before step `number` saved under a name."""

    def last(var: str) -> models.Artifact | None:
        records = state.records
        for name in reversed(state.steps.names[: number - 1]):
            record = records.get(name)
            if record is not None and var in record.outputs:
                return record.outputs[var]
        return None

    return last


def _save(var: str, value: Any, writes: Writes, big: bigvalues.BigStore) -> models.Artifact:
    streamed = bigvalues.save(value, big) if bigvalues.is_big(value) else None
    if streamed is not None:
        fmt, blob = streamed
        stored = StoredBlob(blob.oid, blob.sha256, blob.size)
        writes[artifacts.path_for(blob.sha256, fmt)] = stored
        return models.Artifact(sha256=blob.sha256, format=fmt, size=blob.size)
    fmt, data = artifacts.encode(var, value)
    digest = artifacts.sha256(data)
    writes[artifacts.path_for(digest, fmt)] = data
    mark = trust.sign(digest) if fmt in artifacts.RUNS_CODE else None
    return models.Artifact(sha256=digest, format=fmt, size=len(data), mark=mark)


def _refused(exc: artifacts.Unsaveable) -> InvalidInput:
    if exc.name == RETURN:
        return InvalidInput(
            f"the step's return value ({exc.kind}) cannot be saved: {exc.why}. Return a "
            f"plain value, an array or a DataFrame (or None, writing the value to a file "
            f"the step's check names)"
        )
    return InvalidInput(
        f"output {exc.name!r} ({exc.kind}) cannot be saved: {exc.why}. Drop it from --out, "
        f"or convert it to a plain value, an array or a DataFrame"
    )
