"""Effects for the notebooks the tests write: each sends its name and payload to a
loopback receiver (`FX_RECEIVER`, tests/receiver.py) through `stepstone.effect`, so a
test reads what reached the receiver, and how often, from its log.

    import fx
    fx.blind("notify")                        # no key, no lookup: sent twice, seen twice
    fx.blind("alert/7", {"order": 7})
    fx.keyed("charge", {"n": 3})              # the receiver honours the idempotency key
"""

from __future__ import annotations

import os
from typing import Any

from receiver import send

import stepstone


def _url() -> str:
    return os.environ["FX_RECEIVER"]


def blind(name: str, payload: Any = None, **options: Any) -> Any:
    """Send effect `name` to the blind receiver (it applies every request)."""
    body = {"name": name, "payload": payload}
    return stepstone.effect(
        name, lambda key: send(_url(), "blind", {**body, "ref": key}), payload=payload, **options
    )


def keyed(name: str, payload: Any = None, **options: Any) -> Any:
    """Send effect `name` with its idempotency key (the receiver applies a key once)."""
    body = {"name": name, "payload": payload}
    return stepstone.effect(
        name,
        lambda key: send(_url(), "keyed", {**body, "ref": key}, {"Idempotency-Key": key}),
        keyed=True,
        payload=payload,
        **options,
    )
