"""A run whose middle step performs one effect against the loopback receiver, pausing at
the boundary the test kills it at (tests/test_effects.py).

Environment: RECEIVER (the receiver's base address), KIND (its endpoint: keyed, lookup
or blind), PAUSE (where to pause: before-intent, before-request, in-flight,
after-commit, after-confirm; empty: nowhere). At a pause it creates `paused` in the
current folder and sleeps, or has the receiver hold the request.
"""

from __future__ import annotations

import json
import os
import pathlib
import time
import urllib.error
import urllib.request
from typing import Any

import stepstone

URL, KIND, PAUSE = os.environ["RECEIVER"], os.environ["KIND"], os.environ.get("PAUSE", "")


def pause(point: str) -> None:
    if point == PAUSE:
        pathlib.Path("paused").write_text(point)
        time.sleep(120)


def post(key: str) -> Any:
    headers = {"Content-Type": "application/json"}
    if KIND == "keyed":
        headers["Idempotency-Key"] = key
    if PAUSE == "in-flight":
        headers["X-Delay-Before"] = "120"
    if PAUSE == "after-commit":
        headers["X-Delay-After"] = "120"
    body = json.dumps({"ref": key, "msg": "hello"}).encode()
    request = urllib.request.Request(URL + "/" + KIND, data=body, headers=headers)
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.load(response)


def lookup(key: str) -> Any:
    try:
        with urllib.request.urlopen(URL + "/lookup/" + key, timeout=30) as response:
            return json.load(response)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


def notify() -> Any:
    pause("before-intent")

    def do(key: str) -> Any:
        pause("before-request")
        return post(key)

    receipt = stepstone.effect(
        "notify",
        do,
        keyed=KIND == "keyed",
        lookup=lookup if KIND == "lookup" else None,
        payload={"msg": "hello"},
    )
    pause("after-confirm")
    return receipt


def main() -> None:
    with stepstone.open_run("fx") as run:
        run.step("prepare", lambda: 1)
        run.step("notify", notify)
        run.step("after", lambda: 2)


if __name__ == "__main__":
    main()
