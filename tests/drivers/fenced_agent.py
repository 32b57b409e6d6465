"""One of the agents racing to drive run `race` over one shared remote
(tests/test_fenced_race.py), in its own folder with its own clone of the store.

Each step appends to the shared `executions.log` and posts one effect to a fenced
receiver, with `stepstone.fence_token()`: a receiver that has seen a newer lease
refuses it. The agent drives until the run is finished, waiting while another
holds the lease; a copy that diverged (it committed after its lease was taken)
keeps the remote's history and sets its own aside (`pull --keep remote`).

Exit 0: the run is finished (by this agent or another); 3: this agent lost its
lease or was refused by the receiver (the test starts it again).
"""

from __future__ import annotations

import os
import pathlib
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from receiver import find, send  # type: ignore[import-not-found]

import stepstone
from stepstone import remote
from stepstone.store import GitStore

URL = os.environ["RECEIVER"]
LOG = os.environ["RACE_LOG"]
AGENT = os.environ["STEPSTONE_AGENT"]
STEPS = int(os.environ.get("RACE_STEPS", "12"))


def post(key: str) -> Any:
    token = stepstone.fence_token() or ""  # in the body too: the test counts the leases
    return send(URL, "fenced", {"ref": key, "fence": token}, {"X-Fence": token})


def lookup(key: str) -> Any:
    return find(URL, "fenced", key)


def work(i: int) -> Callable[[], Any]:
    def step() -> Any:
        with open(LOG, "a") as log:
            log.write(f"{AGENT} s{i}\n")
        time.sleep(0.3)
        return stepstone.effect(f"notify/{i}", post, lookup=lookup, payload={"i": i})

    return step


def drive() -> None:
    with stepstone.open_run("race", create=False) as run:
        if run.status().finished:
            return
        for i in range(STEPS):
            run.step(f"s{i}", work(i))
        run.finish()


def main() -> int:
    while True:
        try:
            drive()
            return 0
        except stepstone.LeaseHeld:
            time.sleep(0.2)
        except stepstone.LeaseLost:
            return 3
        except stepstone.Diverged:
            remote.pull(GitStore(".stepstone", create=False), "race", keep="remote")
        except stepstone.StepstoneError as exc:
            if "409" in str(exc) or "newer lease" in str(exc):
                return 3
            raise


if __name__ == "__main__":
    raise SystemExit(main())
