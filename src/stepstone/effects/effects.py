"""External effects: a stable key, an intent before the write, a confirmation after.

Each effect is in exactly one state, and each state leads to one next action:

    planned     nothing sent                  perform it
    submitted   intent durable, no receipt    keyed: retry with the same key while
                                              the receiver keeps it, else unresolved;
                                              lookup: ask by key, confirm or perform;
                                              neither: unresolved
    confirmed   receipt recorded              never again; return the receipt
    unresolved  outcome unknown               stop until a person settles it

Records hold keys, states, payload fingerprints and receipts; fields that look
like credentials are replaced by "[redacted]" before anything is written.
"""

from __future__ import annotations

import datetime
import json
import math
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from .. import faults
from ..errors import (
    EffectChanged,
    EffectRenamed,
    EffectTimedOut,
    InvalidInput,
    StepstoneError,
    UnresolvedEffect,
)
from ..model import message
from ..model.models import EffectRecord, Resolution, RunInfo, dump, now
from ..rules.deadline import call_within
from ..settings import Settings
from .effectbook import EffectBook, rank
from .effectkeys import check_name, effect_path, fingerprint
from .redaction import error_text, redact


class Run(Protocol):
    """What effects need of the run they belong to (`stepstone.Run` is one)."""

    id: str
    holder: str
    settings: Settings

    @property
    def info(self) -> RunInfo: ...
    @property
    def current_step(self) -> str | None: ...
    @property
    def guard(self) -> threading.RLock: ...
    @property
    def effect_book(self) -> EffectBook: ...
    @property
    def effects(self) -> dict[str, EffectRecord]: ...
    def identity_of(self, name: str) -> str: ...
    def effect_key(self, identity: str, name: str) -> str: ...
    def identities(self) -> set[str]: ...
    def recorded_elsewhere(self, key: str) -> tuple[str, EffectRecord] | None: ...
    def step_label(self, name: str) -> str: ...
    def fence(self) -> None: ...
    def commit_effect(
        self,
        record: EffectRecord,
        path: str,
        data: bytes,
        subject: str,
        trailers: list[tuple[str, str]],
    ) -> None: ...


def perform(
    run: Run,
    name: str,
    do: Callable[[str], Any],
    *,
    keyed: bool = False,
    lookup: Callable[[str], Any] | None = None,
    payload: Any = None,
    was: str | None = None,
    new: bool = False,
    timeout: float | None = None,
    retention: datetime.timedelta | float | None = None,
) -> Any:
    """Perform effect `name` of the current step at most once; return its receipt."""
    step = run.current_step
    if step is None:
        raise StepstoneError(
            f"effect {name!r} was called outside a step: call stepstone.effect inside a "
            f"%%step cell or a function run by run.step"
        )
    check_name(name)
    if was is not None:
        check_name(was)
    identity = run.identity_of(step)
    key = run.effect_key(identity, was or name)
    print_ = fingerprint(payload)
    seconds = run.settings.now().effect_timeout if timeout is None else timeout
    book = run.effect_book
    if not new and "/" in (was or name):
        _refuse_a_lone_member(run, step, identity, key, was or name)
    with run.guard:
        if book.ask(key):
            raise InvalidInput(
                f"effect {name!r} was already performed by this run of step {step!r}: an "
                f"effect name stands for one write, so a second call would return the "
                f"first one's receipt and send nothing. Name each effect for what it writes, "
                f"for example f'{name}/{{recipient}}'"
            )
        record = _furthest(run, key, run.effects.get(key))
        if record is None and not new:
            _refuse_a_second_name(run, step, identity, name, was or name)
        if record is not None and record.payload_sha256 != print_ and record.state != "planned":
            raise EffectChanged(step, name, key, record.state, record.receipt)
        if record is not None and record.state == "confirmed":
            book.returned(key)
            return record.receipt
        fresh = record is None or record.state == "planned"
        if fresh:
            record = EffectRecord(
                key=key,
                step=identity,
                name=was or name,
                state="submitted",
                payload_sha256=print_,
                intent=now(),
                attempts=record.attempts + 1 if record is not None else 1,
                receiver="keyed" if keyed else ("lookup" if lookup is not None else "blind"),
                retention=_retention(run, retention) if keyed else None,
            )
            _save(run, record, f"effect {record.name}: submitted")
            faults.reached("effect.submitted")
    assert record is not None
    # the write itself runs outside the guard: other threads' effects go on meanwhile
    if fresh:
        _fence(run, record, fresh=True)
        receipt = _do(run, record, do, seconds)
    else:  # submitted or unresolved: the write may or may not have landed
        found = _looked_up(record, lookup(key)) if lookup is not None else None
        if found is not None:
            receipt = _confirm(run, record, found, "found by lookup")
        elif lookup is not None or keyed:
            if lookup is None:
                record = _refuse_an_expired_key(run, step, record, retention)
            _fence(run, record, fresh=False)
            again = record.model_copy(update={"attempts": record.attempts + 1})
            receipt = _do(run, again, do, seconds)
        else:
            if record.state != "unresolved":
                record = record.model_copy(update={"state": "unresolved"})
                _save(run, record, f"effect {record.name}: unresolved")
            raise UnresolvedEffect(run.id, step, key, record.intent)
    book.returned(key)
    return receipt


def _furthest(run: Run, key: str, record: EffectRecord | None) -> EffectRecord | None:
    """This run's record of effect `key` (or None), or one that another history of the
    store holds (the run a fork came from, a fork, the remote's history fetched here) and
    that got further: confirmed there, or in doubt there while this run holds it as not
    sent. That one is taken into this run first, so the effect is not sent again."""
    if record is not None and record.state == "confirmed":
        return record
    found = run.recorded_elsewhere(key)
    if found is None:
        return record
    where, other = found
    if other.state == "planned" or rank(other.state) <= (rank(record.state) if record else 0):
        return record
    _save(run, other, f"effect {other.name}: {other.state}, as {where} records it")
    return other


def _retention(run: Run, given: datetime.timedelta | float | None) -> float:
    """Seconds the receiver keeps keys: `given`, else the store's setting."""
    if given is None:
        return run.settings.effect_retention
    seconds = given.total_seconds() if isinstance(given, datetime.timedelta) else float(given)
    if not seconds > 0:
        raise InvalidInput(
            f"retention={given!r}: give how long the receiver keeps idempotency keys, for "
            f"example timedelta(hours=24), or float('inf') when it keeps them for ever"
        )
    return seconds


def expires(record: EffectRecord, default: float) -> str | None:
    """When the receiver forgets a keyed effect's key (`default`: the retention of a
    record that has none), or None: not keyed, or kept for ever."""
    if record.receiver != "keyed":
        return None
    seconds = record.retention if record.retention is not None else default
    if math.isinf(seconds):
        return None
    at = _parse_time(record.intent) + datetime.timedelta(seconds=seconds)
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _parse_time(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _span(seconds: float) -> str:
    """A duration for people: `45 s`, `30 min`, `24 h`, `3 days`."""
    if seconds >= 2 * 86_400:
        return f"{seconds / 86_400:.0f} days"
    if seconds >= 3_600:
        return f"{seconds / 3_600:.0f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def _refuse_an_expired_key(
    run: Run, step: str, record: EffectRecord, given: datetime.timedelta | float | None
) -> EffectRecord:
    """`record` when the receiver still keeps its key; else the effect is unresolved (a
    retry with a forgotten key is a new request: the effect would happen twice)."""
    limit = (
        _retention(run, given)
        if given is not None or record.retention is None
        else record.retention
    )
    age = (run.settings.clock() - _parse_time(record.intent)).total_seconds()
    if age <= limit:
        return record
    why = (
        f"the receiver forgets keys after {_span(limit)}; this intent is {_span(age)} old, "
        f"so a retry with its key would be a new request"
    )
    if record.state != "unresolved" or record.error != why:
        record = record.model_copy(update={"state": "unresolved", "error": why})
        _save(run, record, f"effect {record.name}: unresolved, its key expired")
    raise UnresolvedEffect(run.id, step, record.key, record.intent, why)


def _refuse_a_second_name(run: Run, step: str, identity: str, name: str, first: str) -> None:
    """Refuse a new effect that looks like one which happened (or may have) under
    another key: the same name (`first`: the one its key is made of, `was=` if given) in
    a step that left the plan, or (in a plan that only grows) in a step this process has
    not met, both as a renamed step leaves behind; or a step asking for a new effect while
    one it performed before is not asked for."""
    book = run.effect_book
    other = book.orphan_named(first, run.identities())
    where = "which is no longer in the plan"
    if other is None and run.info.plan_mode == "incremental":
        other = book.unmet_named(first, identity)
        where = "which this process has not run"
    if other is not None:
        said = (  # a --was that names no step the store knows: a misspelling, most likely
            f"; the step says it was {identity!r} (--was), which names no step with effects"
            if identity != step and not book.of_step(identity)
            else ""
        )
        raise EffectRenamed(
            step,
            name,
            other.key,
            f"an effect of that name{f' ({first!r})' if first != name else ''} was "
            f"{other.state} at {other.intent} by step {other.step!r}, {where}{said}",
            f"If {step!r} is {other.step!r} renamed, say so (`%%step {step} --was "
            f"{other.step}`, or run.step(..., was={other.step!r})) and it is not sent "
            f"again; if this is another effect, give it a name of its own, or pass new=True",
        )
    earlier = book.not_replayed(identity, first)
    if earlier is not None:
        raise EffectRenamed(
            step,
            name,
            earlier.key,
            f"an earlier run of this step performed effect {earlier.name!r} ({earlier.state} "
            f"at {earlier.intent}), which this run has not asked for before {name!r}",
            f"If {name!r} is {earlier.name!r} renamed, pass was={earlier.name!r} and it is "
            f"not sent again; if it is another effect, perform {earlier.name!r} first as "
            f"before, or pass new=True",
        )


FAMILY_WAIT = 2.0  # seconds a lone new member of a family waits for its step's other threads


def _refuse_a_lone_member(run: Run, step: str, identity: str, key: str, name: str) -> None:
    """Refuse a new member of a family (`alert/...`) asked for while none of the members
    an earlier run of this step performed was asked again: a name made from a clock or a
    random id is new at every try, so its effect would be sent once more at each. A thread
    pool asks in any order: while other threads run, wait a little for one of them to ask
    an earlier member again (then the names repeat, and this one may be sent)."""
    deadline = time.monotonic() + (FAMILY_WAIT if threading.active_count() > 1 else 0.0)
    while True:
        with run.guard:
            if key in run.effects:
                return
            lone = run.effect_book.lone_member(identity, name)
            if lone is None or run.recorded_elsewhere(key) is not None:
                return
        if time.monotonic() >= deadline:
            break
        time.sleep(0.01)
    family = name.rpartition("/")[0]
    raise EffectRenamed(
        step,
        name,
        lone.key,
        f"an earlier run of this step performed {lone.name!r} ({lone.state} at {lone.intent}), "
        f"and this run asks for {name!r}, a new member of the family '{family}/', without "
        f"asking again for any member the earlier run performed. A name made from the time, "
        f"a uuid or a random number is new at every try, so the effect would be sent again",
        f"Name each effect for what it writes, the same at every try (f'{family}/{{report_id}}'"
        f", not the time); members asked in another order are fine once one of them is asked "
        f"again (or ask in a stable order: sorted(...)). For an effect that really is new, "
        f"pass new=True",
    )


def _fence(run: Run, record: EffectRecord, *, fresh: bool) -> None:
    """Make sure this driver still holds the run before the write (see `Run.fence`); a
    new intent that is not performed goes back to planned, saying why."""
    try:
        run.fence()
    except StepstoneError as exc:
        if fresh:
            back = record.model_copy(
                update={"state": "planned", "error": f"not performed: {error_text(exc, limit=300)}"}
            )
            _save(run, back, f"effect {record.name}: not performed")
        raise


def _looked_up(record: EffectRecord, found: Any) -> Any:
    """A lookup's answer as a receipt, or None for "not found" (None or False). Any other
    empty answer is refused: it must never confirm an effect that did not happen."""
    if found is None or found is False:
        return None
    if not found:
        raise InvalidInput(
            f"effect {record.name!r}: lookup({record.key!r}) returned {found!r}. Return None "
            f"when the effect does not exist, or a receipt that identifies it (an id, a "
            f"dict); the effect stays submitted"
        )
    return found


def _do(run: Run, record: EffectRecord, do: Callable[[str], Any], seconds: float) -> Any:
    try:
        finished, receipt = call_within(seconds, do, record.key)
    except Exception as exc:
        failed = record.model_copy(update={"error": error_text(exc, limit=500)})
        _save(run, failed, f"effect {record.name}: request failed")
        raise
    if not finished:
        late = record.model_copy(update={"error": f"no answer within {seconds:g} s"})
        _save(run, late, f"effect {record.name}: timed out")
        raise EffectTimedOut(run.current_step or record.step, record.name, record.key, seconds)
    faults.reached("effect.sent")
    return _confirm(run, record, receipt, "")


def _confirm(run: Run, record: EffectRecord, receipt: Any, how: str) -> Any:
    try:
        json.dumps(receipt)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(
            f"effect {record.name!r}: do(key) must return a JSON-serialisable receipt "
            f"(an id, a dict), not {type(receipt).__name__}. The effect stays submitted"
        ) from exc
    # the caller gets what a replay would return: the receipt as stored, credentials redacted
    stored = redact(receipt)
    done = record.model_copy(
        update={"state": "confirmed", "receipt": stored, "confirmed": now(), "error": None}
    )
    _save(run, done, f"effect {record.name}: confirmed" + (f" ({how})" if how else ""))
    return stored


def _save(run: Run, record: EffectRecord, subject: str) -> None:
    run.commit_effect(
        record,
        effect_path(record.key),
        dump(record),
        subject,
        [
            (message.STEP, run.step_label(run.current_step or record.step)),
            (message.STATUS, record.state),
            (message.KEY, record.key),
            (message.EFFECT, record.name),
        ],
    )


def resolve(
    run: Run, key: str, *, happened: bool, receipt: Any = None, why: str = ""
) -> EffectRecord:
    """Settle an effect whose outcome was unknown: it happened (with receipt) or it did not."""
    record = run.effects.get(key)
    if record is None:
        known = ", ".join(k for k, r in run.effects.items() if r.state != "confirmed") or "none"
        raise InvalidInput(f"no effect {key!r} in run {run.id!r} (unsettled effects: {known})")
    if record.state == "confirmed":
        raise InvalidInput(f"effect {key} is already confirmed; nothing to resolve")
    resolution = Resolution(happened=happened, by=run.holder, time=now(), why=why)
    if happened:
        settled = record.model_copy(
            update={
                "state": "confirmed",
                "receipt": redact(receipt),
                "confirmed": now(),
                "resolution": resolution,
            }
        )
        subject = f"resolve effect {record.name}: happened"
    else:
        settled = record.model_copy(update={"state": "planned", "resolution": resolution})
        subject = f"resolve effect {record.name}: did not happen"
    _save(run, settled, subject)
    return settled


def as_status(record: EffectRecord, retention: float, at: datetime.datetime) -> dict[str, Any]:
    """The `status --json` shape of one effect at time `at` (`retention`: the store's,
    for a keyed record made before intents recorded their own)."""
    out: dict[str, Any] = {
        "key": record.key,
        "step": record.step,
        "name": record.name,
        "state": record.state,
        "intent": record.intent,
        "attempts": record.attempts,
    }
    if record.state == "confirmed":
        out["receipt"] = record.receipt
    if record.receiver == "keyed":
        out["expires"] = expires(record, retention)
    if record.error:
        out["error"] = record.error
    if record.state == "submitted":
        out["next_action"] = (
            "the next try is unresolved (blind receiver)"
            if record.receiver == "blind"
            else f"the next try asks the receiver ({record.receiver}) with the same key"
        )
        if out.get("expires") and _parse_time(out["expires"]) < at:
            out["next_action"] = "the next try is unresolved: the receiver has forgotten its key"
    else:
        out["next_action"] = NEXT_ACTION[record.state]
    return out


NEXT_ACTION = {
    "planned": "performed by the next run",
    "confirmed": "none: never performed again",
    "unresolved": "a person settles it with `stepstone resolve KEY --happened|--not-happened`",
}
