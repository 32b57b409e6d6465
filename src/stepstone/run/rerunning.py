"""Running steps again on purpose: a step (and, asked, what depends on it) is marked,
with the reason, in one commit; the next run of the notebook or script runs it again.
Effects it confirmed are not performed again: their keys and receipts stand."""

from __future__ import annotations

from ..errors import InvalidInput
from ..model import names
from ..model.models import StepRecord
from ..rules.verdicts import Verdicts
from .ledger import Ledger


def rerun(
    ledger: Ledger, verdicts: Verdicts, name: str, why: str, *, downstream: bool, once: bool
) -> list[str]:
    """Mark step `name` to run again for `why` (and, with `downstream`, every step that
    depends on it: reads what it made, or follows the conservative rule after it); the
    steps marked, in plan order. With `once`, a step not yet run, or already marked or
    run again for the same reason, is left as it is."""
    state = ledger.state
    if not why.strip():
        raise InvalidInput(f"running step {name!r} again needs a reason (--why REASON)")
    planned = state.planned(name)
    if once and (planned is None or _asked_before(state.records.get(name), why.strip())):
        return []
    if planned is None:
        raise InvalidInput(
            f"run {state.id!r} has no step {name!r}; its steps: {names.listing(state.steps.names)}"
            f". Name one of those: a step renamed in the notebook keeps the name the run "
            f"recorded until the notebook runs with the new one (`stepstone rerun OLD_NAME "
            f"--why REASON`)"
        )
    marked = [name] + (_dependents(ledger, planned.number) if downstream else [])
    changed: list[StepRecord] = []
    for step in marked:
        record = state.records.get(step)
        if record is None or record.status != "confirmed":
            continue  # not done: it runs anyway
        again = record.model_copy(update={"rerun": why.strip()})
        changed.append(again)
    if not changed:
        return []
    ledger.append(*changed)
    verdicts.forget()
    return [r.name for r in changed]


def _asked_before(record: StepRecord | None, why: str) -> bool:
    return record is None or why in (record.rerun, record.reran_for)


def _dependents(ledger: Ledger, number: int) -> list[str]:
    """The steps after step `number` that depend on it, directly or through another."""
    state = ledger.state
    upstream = {state.steps.names[number - 1]}
    found = []
    for later in state.steps.names[number:]:
        record = state.records.get(later)
        if record is None:
            continue
        reads = state.steps_read(record.inputs)
        if record.inputs is None or record.source_hash is None or reads & upstream:
            upstream.add(later)
            found.append(later)
    return found
