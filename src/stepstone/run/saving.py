"""What a confirmed step saves of the values it made: the ones asked for (`--out`, a
return value) or nothing, and the ones its cell bound as far as they can be saved."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .. import artifacts, models, trust
from ..errors import InvalidInput
from .checking import RETURN
from .state import RunState


def saved_outputs(
    asked: Mapping[str, Any],
    offered: Mapping[str, Any],
    touched: Mapping[str, Any],
    last: Callable[[str], models.Artifact | None],
) -> tuple[dict[str, bytes | None], dict[str, models.Artifact], dict[str, str]]:
    """(the artifact files to write, the record's outputs, the offered names that
    cannot be saved with their types). A value `asked` for that cannot be saved is an
    error; an `offered` one is reported (it will not survive a resume); a `touched` one
    is saved only when it differs from `last(name)`, the one saved before."""
    writes: dict[str, bytes | None] = {}
    saved: dict[str, models.Artifact] = {}
    unsaved: dict[str, str] = {}
    for var, value in asked.items():
        try:
            saved[var] = _save(var, value, writes)
        except artifacts.Unsaveable as exc:
            raise _refused(exc) from exc
    for var, value in offered.items():
        if var in saved:
            continue
        try:
            saved[var] = _save(var, value, writes)
        except artifacts.Unsaveable as exc:
            unsaved[var] = exc.kind
    for var, value in touched.items():
        before = last(var)
        if var in saved or before is None:  # no step saved it: a plain cell makes it
            continue
        quick = artifacts.encoded_as(before.format, value)
        if quick is not None and artifacts.sha256(quick) == before.sha256:
            continue  # as saved: no round-trip check needed
        try:
            fmt, data = artifacts.encode(var, value)
        except artifacts.Unsaveable as exc:
            unsaved[var] = exc.kind  # a resume must not give back its value from before
            continue
        digest = artifacts.sha256(data)
        if digest != before.sha256:
            saved[var] = _artifact(digest, fmt, data, writes)
    return writes, saved, unsaved


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


def _save(var: str, value: Any, writes: dict[str, bytes | None]) -> models.Artifact:
    fmt, data = artifacts.encode(var, value)
    return _artifact(artifacts.sha256(data), fmt, data, writes)


def _artifact(
    digest: str, fmt: str, data: bytes, writes: dict[str, bytes | None]
) -> models.Artifact:
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
