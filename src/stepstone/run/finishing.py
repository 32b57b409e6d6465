"""Finishing a run (its summary, committed and tagged) and reopening a finished one.

The summary's text is presentation, made above the run layer: the `stepstone` package
hands its writer down (`write_summary_with`), so this layer imports no rendering.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import InvalidInput, StepstoneError
from ..model import message
from ..model.message import one_line
from ..model.models import now
from ..rules.status import RunStatus
from .layout import SUMMARY
from .ledger import Ledger

_summary: Callable[[RunStatus], str] | None = None  # set by the package above


def write_summary_with(writer: Callable[[RunStatus], str]) -> None:
    """Make `writer` the one that writes a finished run's `summary.md` from its status."""
    global _summary
    _summary = writer


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
            + ". Settle these, or finish anyway with --force"
        )
    assert _summary is not None, "stepstone's package hands the summary's writer down"
    text = _summary(status)
    state.info = state.info.model_copy(update={"finished": now()})
    ledger.commit(
        {SUMMARY: text.encode()},
        f"finish: {len(status.steps)} steps",
        [(message.STATUS, "finished")],
        info_changed=True,
        finished_too=True,
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
        finished_too=True,
    )
