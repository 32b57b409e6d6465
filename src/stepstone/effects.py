"""External effects: a stable key, an intent before the write, a confirmation after.

Each effect is in exactly one state, and each state leads to one next action:

    planned     nothing sent                  perform it
    submitted   intent durable, no receipt    keyed: retry with the same key;
                                              lookup: ask by key, confirm or perform;
                                              neither: unresolved
    confirmed   receipt recorded              never again; return the receipt
    unresolved  outcome unknown               stop until a person settles it

Records hold keys, states, payload fingerprints and receipts; fields that look
like credentials are replaced by "[redacted]" before anything is written.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .errors import EffectChanged, InvalidInput, StepstoneError, UnresolvedEffect
from .models import EffectRecord, Resolution, dump, now
from .redaction import error_text, redact

if TYPE_CHECKING:
    from .run import Run

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+=@/-]{0,199}")


def fingerprint(payload: Any) -> str | None:
    """The sha256 of a payload's canonical JSON (credentials redacted), or None."""
    if payload is None:
        return None
    canonical = json.dumps(redact(payload), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def derive_key(run: str, step: str, name: str) -> str:
    """The idempotency key of an effect: stable across restarts, kernels and machines."""
    digest = hashlib.sha256(f"{run}\0{step}\0{name}".encode()).hexdigest()
    return f"ss-{digest[:32]}"


def effect_path(key: str) -> str:
    """Where an effect's record lives in a run's tree."""
    return f"effects/{key[3:5]}/{key}.json"


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name:
        raise InvalidInput(
            f"invalid effect name {name!r}: use 1-200 letters, digits or . _ : + = @ / -, "
            f"for example email/{{user_id}}"
        )
    return name


def perform(
    run: Run,
    name: str,
    do: Callable[[str], Any],
    *,
    keyed: bool = False,
    lookup: Callable[[str], Any] | None = None,
    payload: Any = None,
) -> Any:
    """Perform effect `name` of the current step at most once; return its receipt."""
    step = run.current_step
    if step is None:
        raise StepstoneError(
            f"effect {name!r} was called outside a step: call stepstone.effect inside a "
            f"%%step cell or a function run by run.step"
        )
    _check_name(name)
    key = derive_key(run.id, step, name)
    print_ = fingerprint(payload)
    record = run.effects.get(key)
    if record is not None and record.payload_sha256 != print_ and record.state != "planned":
        raise EffectChanged(step, name, key)
    if record is not None and record.state == "confirmed":
        return record.receipt
    if record is None or record.state == "planned":
        attempts = record.attempts + 1 if record is not None else 1
        record = EffectRecord(
            key=key,
            step=step,
            name=name,
            state="submitted",
            payload_sha256=print_,
            intent=now(),
            attempts=attempts,
            receiver="keyed" if keyed else ("lookup" if lookup is not None else "blind"),
        )
        _save(run, record, f"effect {name}: submitted")
        return _do(run, record, do)
    # submitted or unresolved: the write may or may not have landed
    if lookup is not None:
        found = lookup(key)
        if found is not None:
            return _confirm(run, record, found, "found by lookup")
        return _do(run, record.model_copy(update={"attempts": record.attempts + 1}), do)
    if keyed:
        return _do(run, record.model_copy(update={"attempts": record.attempts + 1}), do)
    if record.state != "unresolved":
        record = record.model_copy(update={"state": "unresolved"})
        _save(run, record, f"effect {name}: unresolved")
    raise UnresolvedEffect(run.id, step, key, record.intent)


def _do(run: Run, record: EffectRecord, do: Callable[[str], Any]) -> Any:
    try:
        receipt = do(record.key)
    except Exception as exc:
        failed = record.model_copy(update={"error": error_text(exc, limit=500)})
        _save(run, failed, f"effect {record.name}: request failed")
        raise
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
    run.commit_record(
        effect_path(record.key),
        dump(record),
        subject,
        [
            f"Stepstone-Step: {record.step}",
            f"Stepstone-Status: {record.state}",
            f"Stepstone-Key: {record.key}",
            f"Stepstone-Effect: {record.name}",
        ],
    )
    run.effects[record.key] = record


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


def as_status(record: EffectRecord) -> dict[str, Any]:
    """The `status --json` shape of one effect."""
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
    if record.error:
        out["error"] = record.error
    if record.state == "submitted":
        out["next_action"] = (
            "the next try is unresolved (blind receiver)"
            if record.receiver == "blind"
            else f"the next try asks the receiver ({record.receiver}) with the same key"
        )
    else:
        out["next_action"] = NEXT_ACTION[record.state]
    return out


NEXT_ACTION = {
    "planned": "performed by the next run",
    "confirmed": "none: never performed again",
    "unresolved": "a person settles it with `stepstone resolve KEY --happened|--not-happened`",
}


def effect(
    name: str,
    do: Callable[[str], Any],
    *,
    keyed: bool = False,
    lookup: Callable[[str], Any] | None = None,
    payload: Any = None,
) -> Any:
    """Perform an external write at most once and return its receipt.

    `do(key)` performs the write with the idempotency key and returns a
    JSON-serialisable receipt. `keyed=True`: the receiver honours the key, so
    an unconfirmed attempt is retried with it. `lookup(key)` returns the
    receipt if the effect already exists, else None. With neither, an intent
    found without a confirmation raises `UnresolvedEffect`.
    """
    from .run import active_run

    return perform(active_run(), name, do, keyed=keyed, lookup=lookup, payload=payload)
