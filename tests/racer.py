"""A process that races others to drive one run, round after round (tests/test_races.py)."""

from __future__ import annotations

import os
from typing import Any


def race(store: str, rounds: int, barrier: Any, results: Any) -> None:
    import stepstone

    for round_ in range(rounds):
        barrier.wait()
        run = None
        try:
            run = stepstone.open_run("race", repo=store)
            results.put((round_, "won", f"pid {os.getpid()} "))
        except stepstone.RunLocked as exc:
            results.put((round_, "lost", exc.holder))
        except Exception as exc:
            results.put((round_, "error", repr(exc)))
        barrier.wait()  # every process has tried while the winner holds the run
        if run is not None:
            run.close()
        barrier.wait()  # released before the next round
