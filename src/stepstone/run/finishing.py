"""Finishing a run (its summary, committed and tagged) and reopening a finished one."""

from __future__ import annotations

from .. import message, render
from ..errors import InvalidInput, StepstoneError
from ..message import one_line
from ..models import now
from ..status import RunStatus
from .layout import SUMMARY
from .ledger import Ledger


def finish(ledger: Ledger, status: RunStatus | None, *, force: bool) -> str:
    """Commit `summary.md` written from `status` and tag the run `stepstone/<id>`; the
    summary. Refuses while a step is not verified, an unknown is open or an effect is
    unresolved, unless `force`. A finished run (`status` None is enough) gives its summary
    again, and its tag if a kill lost it."""
    state = ledger.state
    store = state.store
    if state.info.finished:
        if state.snap.commit and not store.tagged(state.id):
            store.tag(state.id, state.snap.commit)
        done = state.blob(SUMMARY)
        return done.decode() if done is not None else ""
    assert status is not None
    blockers = [
        f"step {s.number} {s.name} is {s.state}" for s in status.steps if s.state != "verified"
    ]
    blockers += [f"unknown {u.id} is open: {u.question}" for u in status.open_unknowns]
    blockers += [f"step {step} rests on open unknown {u}" for step, u in status.resting]
    blockers += [f"effect {e['key']} is unresolved" for e in status.unresolved_effects]
    if blockers and not force:
        raise StepstoneError(
            f"run {state.id!r} cannot finish yet: "
            + "; ".join(blockers)
            + ". Settle these, or finish anyway with force=True (--force)"
        )
    text = render.summary(status)
    state.info = state.info.model_copy(update={"finished": now()})
    ledger.commit(
        {SUMMARY: text.encode()},
        f"finish: {len(status.steps)} steps",
        [(message.STATUS, "finished")],
        info_changed=True,
        finishing=True,
    )
    if state.snap.commit:
        store.tag(state.id, state.snap.commit)
    return text


def reopen(ledger: Ledger, why: str) -> None:
    """Reopen a finished run so that it can change again, recording why (its archive
    tag stays on the finished commit)."""
    state = ledger.state
    if not why.strip():
        raise InvalidInput(f"reopening run {state.id!r} needs a reason (--why REASON)")
    if not state.info.finished:
        return
    state.info = state.info.model_copy(update={"finished": None})
    ledger.commit(
        {SUMMARY: None},
        f"reopen: {one_line(why)[:60]}",
        [(message.STATUS, "reopened"), (message.WHY, why)],
        info_changed=True,
        finishing=True,
    )
