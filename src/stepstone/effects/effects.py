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
from contextlib import AbstractContextManager
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
from ..model.events import EffectEnded
from ..model.models import Asking, EffectRecord, Resolution, RunInfo, now, stamp
from ..rules.deadline import call_within
from ..settings import Settings
from .effectbook import EffectBook, family, tells_more
from .effectkeys import check_name, fingerprint, fingerprint_before
from .redaction import error_text, redact


class Run(Protocol):
    """What effects need of the run they belong to (run/effectsession.py answers it)."""

    id: str
    holder: str
    settings: Settings

    @property
    def info(self) -> RunInfo: ...
    @property
    def guard(self) -> threading.RLock: ...
    @property
    def effect_book(self) -> EffectBook: ...
    @property
    def effects(self) -> dict[str, EffectRecord]: ...
    def asking(self) -> Asking | None: ...
    def effect_key(self, name: str, payload: str | None) -> str: ...
    def keys_before(self, identity: str, name: str) -> list[str]: ...
    def identities(self) -> set[str]: ...
    def left_the_plan(self) -> set[str]: ...
    def recorded_elsewhere(self, keys: list[str]) -> tuple[str, EffectRecord] | None: ...
    def driven_elsewhere(self, ref: str) -> str | None: ...
    def named_elsewhere(self, name: str, payload: str | None) -> str | None: ...
    def turn(self) -> AbstractContextManager[object]: ...
    def fence(self) -> None: ...
    def append_effect(self, record: EffectRecord, detail: str | None) -> None: ...


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
    """Perform effect `name` (with `payload`) at most once in the run's lineage, whichever
    step asks for it; return its receipt. How it ended is told to the step's readers
    (`EffectEnded` in `Asking.told`)."""
    asking = _asking(run, name)
    ended: list[tuple[str, str | None, str]] = []  # (outcome, key, detail), as it goes
    try:
        receipt = _perform(
            run, asking, name, do, ended, keyed, lookup, payload, was, new, timeout, retention
        )
    except UnresolvedEffect as exc:
        asking.told.append(_told(asking, name, exc.key, "unresolved", str(exc)))
        raise
    except StepstoneError as exc:
        outcome = "failed" if ended and ended[-1][0] == "failed" else "refused"
        key = ended[-1][1] if ended else None
        asking.told.append(_told(asking, name, key, outcome, str(exc)))
        raise
    except Exception as exc:  # `do` raised: the request failed or timed out
        key = ended[-1][1] if ended else None
        asking.told.append(_told(asking, name, key, "failed", error_text(exc, limit=300)))
        raise
    outcome, key, detail = ended[-1]
    asking.told.append(_told(asking, name, key, outcome, detail))
    return receipt


def _told(asking: Asking, name: str, key: str | None, outcome: str, detail: str) -> EffectEnded:
    return EffectEnded(
        step=asking.step,
        name=name,
        key=key,
        outcome=outcome,
        detail=detail.splitlines()[0][:300] if detail else "",
    )


def _perform(
    run: Run,
    asking: Asking,
    name: str,
    do: Callable[[str], Any],
    ended: list[tuple[str, str | None, str]],
    keyed: bool,
    lookup: Callable[[str], Any] | None,
    payload: Any,
    was: str | None,
    new: bool,
    timeout: float | None,
    retention: datetime.timedelta | float | None,
) -> Any:
    step = asking.step
    check_name(name)
    if was is not None:
        check_name(was)
    first = was or name
    print_ = fingerprint(payload)
    seconds = run.settings.now().effect_timeout if timeout is None else timeout
    book = run.effect_book

    def find() -> EffectRecord | None:
        return book.find(first, print_, lambda: fingerprint_before(payload))

    with run.guard:
        if book.named_twice(first):
            raise InvalidInput(
                f"effect {name!r} was already performed by this run of step {step!r}: an "
                f"effect name stands for one write, so a second call would return the "
                f"first one's receipt and send nothing. Name each effect for what it writes, "
                f"for example f'{name}/{{recipient}}'"
            )
        mine = find()
        if mine is not None:
            book.asked(mine)
    if mine is None and not new and family(first) is not None:
        _wait_for_the_earlier_members(run, asking, first, print_)
    waited = time.monotonic() + max(seconds, 1.0)
    while True:
        try:
            with run.guard, run.turn():
                record, fresh = _intent(run, asking, name, first, print_, new, find)
                if record.state == "confirmed":
                    book.returned(first)
                    here = mine is not None and mine.key == record.key
                    how = "replayed" if here else "taken"
                    ended.append((how, record.key, "" if here else "recorded by another run"))
                    return record.receipt
                if fresh:
                    record = record.model_copy(
                        update={
                            "receiver": "keyed"
                            if keyed
                            else ("lookup" if lookup is not None else "blind"),
                            "retention": _retention(run, retention) if keyed else None,
                        }
                    )
                    _save(run, record)
                    faults.reached("effect.submitted")
            break
        except _InFlight as flight:  # another run of the lineage is performing it now
            if time.monotonic() > waited:
                raise StepstoneError(
                    f"effect {name!r} of step {step!r} is being performed by "
                    f"{_history(flight.where)}, which {flight.holder} drives now, and it has "
                    f"not ended within {max(seconds, 1.0):g} s: it is not performed here. "
                    f"Run this step again once that run is done (its receipt is then "
                    f"taken), or stop that process"
                ) from None
            time.sleep(0.05)
    assert record is not None
    # the write itself runs outside the guard: other threads' effects go on meanwhile
    if fresh:
        _fence(run, record, fresh=True)
        ended.append(("failed", record.key, ""))  # until `do` returns
        receipt = _do(run, record, do, seconds)
        ended.append(("sent", record.key, ""))
    else:  # submitted or unresolved: the write may or may not have landed
        found = _looked_up(record, lookup(record.key)) if lookup is not None else None
        if found is not None:
            receipt = _confirm(run, record, found, "found by lookup")
            ended.append(("replayed", record.key, "found by lookup"))
        elif lookup is not None or keyed:
            if lookup is None:
                record = _refuse_an_expired_key(run, step, record, retention)
            _fence(run, record, fresh=False)
            again = record.model_copy(update={"attempts": record.attempts + 1})
            ended.append(("failed", record.key, ""))  # until `do` returns
            receipt = _do(run, again, do, seconds)
            ended.append(("sent", record.key, "again, with its key"))
        else:
            if record.state != "unresolved":
                record = record.model_copy(update={"state": "unresolved"})
                _save(run, record)
            raise UnresolvedEffect(run.id, step, record.key, record.intent)
    book.returned(first)
    return receipt


class _InFlight(Exception):
    """An effect that another run of the lineage, driven now, is performing."""

    def __init__(self, where: str, holder: str) -> None:
        super().__init__(where)
        self.where, self.holder = where, holder


def _intent(
    run: Run,
    asking: Asking,
    name: str,
    first: str,
    print_: str | None,
    new: bool,
    find: Callable[[], EffectRecord | None],
) -> tuple[EffectRecord, bool]:
    """In the store's turn: the effect's furthest record in the lineage, and whether it is
    to be performed now (then a new intent, not yet saved); refused where a new effect
    may be one that happened under another identity."""
    book, identity = run.effect_book, asking.identity
    key = run.effect_key(first, print_)
    mine = find()
    keys = [mine.key] if mine is not None else [key, *run.keys_before(identity, first)]
    record = _furthest(run, keys, mine, asking)
    basis: str | None
    if record is None:
        basis = asking.basis()
        if not new:
            _refuse_what_may_have_happened(run, asking, name, first, print_, basis)
            _say_what_siblings_sent(run, asking, first, print_)
        book.asked(key)
    else:
        basis = record.basis
        book.asked(record)
    if record is not None and record.state != "planned":
        return record, False
    return (
        EffectRecord(
            key=record.key if record is not None else key,
            step=identity,
            name=first,
            state="submitted",
            payload_sha256=print_,
            intent=stamp(run.settings.clock()),
            attempts=record.attempts + 1 if record is not None else 1,
            basis=basis,
        ),
        True,
    )


def _asking(run: Run, name: str) -> Asking:
    """The step asking for effect `name` here; refused outside a step, and from a thread
    or task that outlived the step that started it."""
    asking = run.asking()
    if asking is None:
        raise StepstoneError(
            f"effect {name!r} was called outside a step: call stepstone.effect inside a "
            f"%%step cell or a function run by run.step"
        )
    if asking.ended:
        raise StepstoneError(
            f"effect {name!r} was asked for by a thread or task that step {asking.step!r} "
            f"started, after that step ended: it is not performed, and no step records it. "
            f"Wait for the thread (thread.join(), pool.shutdown(), await the task) before "
            f"the step's cell ends, so that its effects are the step's"
        )
    return asking


def _furthest(
    run: Run, keys: list[str], record: EffectRecord | None, asking: Asking
) -> EffectRecord | None:
    """This run's record of the effect (or None), or one that another history of the
    store holds under one of `keys` (a sibling run of the same notebook, the run a fork
    came from, a fork, the remote's history fetched here) and that got further: confirmed
    there, or in doubt there while this run holds it as not sent. That one is taken into
    this run first, so the effect is not sent again."""
    if record is not None and record.state == "confirmed":
        return record
    found = run.recorded_elsewhere(keys)
    if found is None:
        return record
    where, other = found
    if not tells_more(other, record):
        return record
    if other.state == "submitted":
        holder = run.driven_elsewhere(where)
        if holder is not None:  # its outcome comes soon: wait for it, never ask twice
            raise _InFlight(where, holder)
    _save(run, other, f"as {where} records it")
    if record is None:
        asking.said.append(
            f"effect {other.name}: {other.state} by {_history(where)} (intent {other.intent}), "
            f"not performed again"
        )
    return other


def _history(ref: str) -> str:
    """A history of the store named for people: `run job`, `the remote's run job`."""
    for prefix, said in (
        ("refs/heads/", "run "),
        ("refs/stepstone/runs/", "run "),
        ("refs/stepstone/remote/", "the remote's run "),
        ("refs/remotes/", "the remote's "),
        ("refs/tags/stepstone/", "the archive of run "),
        ("refs/stepstone/diverged/", "the copy set aside of run "),
        ("refs/stepstone/kin/", "a copy of this store on this machine, run "),
    ):
        if ref.startswith(prefix):
            rest = ref[len(prefix) :]
            if prefix == "refs/stepstone/kin/":
                rest = rest.partition("/")[2]  # after the copy's hash
            return said + rest
    return ref


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
    if 0 <= age <= limit:
        return record
    if age < 0:  # a clock ahead made it: how old it is, and whether its key is kept, unknown
        why = (
            f"this intent is dated {_span(-age)} in the future (the clock of the process that "
            f"made it was ahead): its age, and whether the receiver still keeps its key, "
            f"cannot be told, so a retry with its key might be a new request"
        )
        subject = "its intent is dated in the future"
    else:
        why = (
            f"the receiver forgets keys after {_span(limit)}; this intent is {_span(age)} "
            f"old, so a retry with its key would be a new request"
        )
        subject = "its key expired"
    if record.state != "unresolved" or record.error != why:
        record = record.model_copy(update={"state": "unresolved", "error": why})
        _save(run, record, subject)
    raise UnresolvedEffect(run.id, step, record.key, record.intent, why)


def _refuse_what_may_have_happened(
    run: Run, asking: Asking, name: str, first: str, payload: str | None, basis: str
) -> None:
    """Refuse a new effect that may be one which happened (or may have) under another
    identity: its name with another payload still in doubt; its name with another payload
    on the same inputs (a payload made from a clock); a new name where the step, on the
    same inputs, asked for another one before (a name made from a clock, or the effect
    renamed); an effect renamed together with its step."""
    book, step, identity = run.effect_book, asking.step, asking.identity
    doubt = book.in_doubt_named(first, payload)
    if doubt is not None:
        raise EffectChanged(asking.step, name, doubt.key, doubt.state, doubt.receipt)
    changed = book.changed_payload(identity, first, basis, payload)
    if changed is not None:
        raise EffectChanged(step, name, changed.key, changed.state, changed.receipt)
    lone = book.lone_member(identity, first, basis)
    if lone is not None:
        raise _lone_member(step, name, lone)
    earlier = book.not_asked_again(identity, first, basis, payload)
    if earlier is not None:
        raise EffectRenamed(
            step,
            name,
            earlier.key,
            f"an earlier run of this step performed effect {earlier.name!r} ({earlier.state} "
            f"at {earlier.intent}){_on_what(earlier, basis, payload)}, which this run has "
            f"not asked for before {name!r}",
            f"If {name!r} is {earlier.name!r} renamed, pass was={earlier.name!r} and it is "
            f"not sent again; if it is another effect, perform {earlier.name!r} first as "
            f"before, or pass new=True",
        )
    other = book.left_behind(identity, run.identities(), run.left_the_plan(), payload)
    if other is not None:
        same = "with the same payload" if payload is not None else "(neither has a payload)"
        raise EffectRenamed(
            step,
            name,
            other.key,
            f"effect {other.name!r} {same} was {other.state} at {other.intent} by step "
            f"{other.step!r}, which is no longer in the plan",
            f"If {step!r} is {other.step!r} renamed, say so ({_say_was(run, step, other.step)})"
            + (f" and pass was={other.name!r}" if other.name != first else "")
            + "; it is not sent again. If this is another effect, pass new=True",
        )


def _say_was(run: Run, step: str, was: str) -> str:
    """How to say that step `step` was step `was`, renamed, where the run's steps are."""
    if run.info.cells:
        return f"make the cell's first line `# step: {step} --was {was}`"
    if run.info.plan_mode == "notebook":
        return f"`%%step {step} --was {was}`"
    return f"run.step({step!r}, ..., was={was!r})"


def _on_what(record: EffectRecord, basis: str, payload: str | None) -> str:
    if record.basis is not None and record.basis != basis:
        return " with the same payload" if payload is not None else ", neither with a payload"
    return " on the same inputs"


def _say_what_siblings_sent(run: Run, asking: Asking, name: str, payload: str | None) -> None:
    """Before a new effect is sent: say when another run of the lineage (a parameter set
    of the same notebook, a fork) sent an effect of that name with another payload."""
    other = run.named_elsewhere(name, payload)
    if other is not None:
        asking.said.append(
            f"effect {name}: {other} sent one of that name with another payload; this one "
            f"is another effect and is sent"
        )


def _wait_for_the_earlier_members(run: Run, asking: Asking, name: str, payload: str | None) -> None:
    """A new member of a family (`alert/...`) is asked for while an earlier run of the
    step, on the same inputs, performed members this run has not asked for again yet. In
    one thread they come in the same order, so that is a name made from a clock or a
    random id; a thread pool asks in any order: while other threads run, wait a little
    for them to ask the earlier members first."""
    basis = asking.basis()
    book = run.effect_book
    deadline = time.monotonic() + (FAMILY_WAIT if threading.active_count() > 1 else 0.0)
    while True:
        with run.guard:
            if book.find(name, payload, lambda: None) is not None:
                return
            lone = book.lone_member(asking.identity, name, basis)
            if lone is None:
                return
        if time.monotonic() >= deadline:
            break
        time.sleep(0.01)
    with run.guard, run.turn():
        if run.recorded_elsewhere([run.effect_key(name, payload)]) is not None:
            return
    raise _lone_member(asking.step, name, lone)


FAMILY_WAIT = 2.0  # seconds a new member of a family waits for its step's other threads


def _lone_member(step: str, name: str, lone: EffectRecord) -> EffectRenamed:
    kin = family(name)
    return EffectRenamed(
        step,
        name,
        lone.key,
        f"on the same inputs, an earlier run of this step performed {lone.name!r} "
        f"({lone.state} at {lone.intent}), and this run asks for {name!r}, a new member of "
        f"the family '{kin}/', before asking again for {lone.name!r}. Asked on the same "
        f"inputs, the same members come in the same order: a name made from the time, a "
        f"uuid or a random number is new at every try, so the effect would be sent again",
        f"Name each effect for what it writes, the same at every try (f'{kin}/{{report_id}}'"
        f", not the time). A set of text iterates in another order in each process (Python "
        f"hashes text with a new seed; `stepstone run` fixes the seed for its kernels, a "
        f"Jupyter kernel does not): iterate sorted(...). For an effect that really is new, "
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
            _save(run, back, "not performed")
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
        _save(run, failed, "its request failed")
        raise
    if not finished:
        late = record.model_copy(update={"error": f"no answer within {seconds:g} s"})
        _save(run, late, "timed out")
        raise EffectTimedOut(record.step, record.name, record.key, seconds)
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
    # stored with its credentials redacted: the caller gets its own receipt back, unless it
    # holds a credential, which never reaches the store (nor the caller's saved values): then
    # the one stored, as a replay returns it
    stored = redact(receipt, fields=run.settings.redact_fields)
    done = record.model_copy(
        update={"state": "confirmed", "receipt": stored, "confirmed": now(), "error": None}
    )
    _save(run, done, how)
    return receipt if stored == receipt else stored


def _save(run: Run, record: EffectRecord, detail: str | None = None) -> None:
    run.append_effect(record, detail)


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
                "receipt": redact(receipt, fields=run.settings.redact_fields),
                "confirmed": now(),
                "resolution": resolution,
            }
        )
        subject = "settled by a person: it happened"
    else:
        settled = record.model_copy(
            update={"state": "planned", "resolution": resolution, "settled": record.intent}
        )
        subject = "settled by a person: it did not happen"
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
            IN_DOUBT.format(key=record.key)
            if record.receiver == "blind"
            else f"the next try asks the receiver ({record.receiver}) with the same key"
        )
        if out.get("expires") and _parse_time(out["expires"]) < at:
            out["next_action"] = "the next try is unresolved: the receiver has forgotten its key"
    else:
        out["next_action"] = NEXT_ACTION[record.state]
    return out


IN_DOUBT = (
    "in doubt: it was sent without a key the receiver checks, and whether it arrived is "
    "unknown; look at the receiver, then `stepstone resolve {key} --happened` or "
    "`--not-happened` (the next run stops here until it is settled; it never sends it blind)"
)
NEXT_ACTION = {
    "planned": "performed by the next run",
    "confirmed": "none: never performed again",
    "unresolved": "a person settles it with `stepstone resolve KEY --happened|--not-happened`",
}
