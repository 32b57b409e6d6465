"""What identifies an effect: its name and its payload's fingerprint within its run's
lineage, its idempotency key made from those, and where its record lives."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import hashlib
import json
import math
import re
import uuid
from pathlib import PurePath
from typing import Any

from ..errors import InvalidInput
from .redaction import redact_like_before

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+=@/-]{0,199}")


def canonical(value: Any) -> Any:
    """`value` as plain JSON data that is the same in every process: sets sorted, tuples
    as lists, dates, decimals, UUIDs, paths and enums as their text or value, bytes as
    their sha256; anything else is refused rather than turned into `str()` text that may
    differ between processes (a set's order changes with `PYTHONHASHSEED`)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [canonical(v) for v in value]
        return sorted(items, key=lambda item: json.dumps(item, sort_keys=True))
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            text = key if isinstance(key, str) else json.dumps(canonical(key), sort_keys=True)
            out[text] = canonical(item)
        return out
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"sha256": hashlib.sha256(bytes(value)).hexdigest()}
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, (decimal.Decimal, uuid.UUID)):
        return str(value)
    if isinstance(value, PurePath):
        return value.as_posix()
    if isinstance(value, enum.Enum):
        return canonical(value.value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return canonical(dataclasses.asdict(value))
    dump_model = getattr(value, "model_dump", None)
    if callable(dump_model):
        return canonical(dump_model(mode="json"))
    raise InvalidInput(
        f"an effect payload holds a {type(value).__name__}, which has no stable form: pass "
        f"JSON-like data (dicts, lists, strings, numbers, sets, dates), or a fingerprint "
        f"of your own, for example payload=order.id"
    )


def fingerprint(payload: Any) -> str | None:
    """The sha256 of a payload's canonical JSON, or None: taken before anything is
    redacted, so that two payloads that differ only in a credential differ."""
    if payload is None:
        return None
    return _sha256_json(canonical(payload))


def fingerprint_before(payload: Any) -> str | None:
    """The fingerprint stepstone recorded before 2026-12 (credential-looking fields
    redacted first): to recognise the effects such a run recorded."""
    if payload is None:
        return None
    return _sha256_json(redact_like_before(canonical(payload)))


def _sha256_json(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def derive_key(lineage: str, name: str, payload: str | None) -> str:
    """The idempotency key of effect `name` with payload fingerprint `payload` in the
    lineage `lineage`: the same in every run of the lineage (its copies, forks and
    parameter sets), after any restart, in any kernel and on any machine, whichever step
    asks for it; another lineage (a run with another id, a store begun again) has keys
    of its own."""
    text = f"effect\0{lineage}\0{name}\0{payload or ''}"
    return f"ss-{hashlib.sha256(text.encode()).hexdigest()[:32]}"


def key_before(run: str, step: str, name: str, uid: str = "") -> str:
    """The key stepstone gave an effect before 2026-12, from its run, its step's identity
    and its name: to find the effects such a run recorded in other histories."""
    text = f"{uid}\0{run}\0{step}\0{name}" if uid else f"{run}\0{step}\0{name}"
    return f"ss-{hashlib.sha256(text.encode()).hexdigest()[:32]}"


def effect_path(key: str) -> str:
    """Where an effect's record lives in a run's tree."""
    return f"effects/{key[3:5]}/{key}.json"


def check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name:
        raise InvalidInput(
            f"invalid effect name {name!r}: use 1-200 letters, digits or . _ : + = @ / -, "
            f"for example email/{{user_id}}"
        )
    return name
