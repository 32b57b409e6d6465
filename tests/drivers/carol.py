"""Carol drives a run in STORE: she publishes through the receiver at URL, creates READY,
waits for GO to exist (meanwhile another agent steals her lease), then tries to announce.
Exits 3 after printing `LOST` and the reason when the lease was lost (tests/test_promise.py).

    python carol.py STORE URL READY GO
"""

from __future__ import annotations

import json
import pathlib
import sys
import time
import urllib.error
import urllib.request
from typing import Any

import stepstone


def main(store: str, url: str, ready: str, go: str) -> None:
    def post(kind: str, key: str) -> Any:
        request = urllib.request.Request(f"{url}/{kind}", data=json.dumps({"ref": key}).encode())
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)

    def lookup(key: str) -> Any:
        try:
            with urllib.request.urlopen(f"{url}/lookup/{key}", timeout=30) as response:
                return json.load(response)
        except urllib.error.HTTPError:
            return None

    run = stepstone.open_run("job", repo=store)
    run.step(
        "publish",
        lambda: stepstone.effect("publish", lambda k: post("lookup", k), lookup=lookup),
    )
    pathlib.Path(ready).write_text("")
    while not pathlib.Path(go).exists():
        time.sleep(0.05)
    try:
        run.step("announce", lambda: stepstone.effect("announce", lambda k: post("blind", k)))
    except stepstone.LeaseLost as exc:
        print("LOST", exc)
        sys.exit(3)


if __name__ == "__main__":
    store, url, ready, go = sys.argv[1:5]
    main(store, url, ready, go)
