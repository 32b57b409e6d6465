"""The workload the power-loss checker traces (tests/test_power_loss.py): a run through
the Python API with what a power cut can catch half-written: steps whose files a
`file:` check names and whose values are saved, a decision, keyed and queryable
effects (intent, then the write, then the confirmation), pack merges every few
commits, step-index saves every 3 commits, and a finish.

It marks, for the checker, the moment each effect's write is about to leave
(`sent:KEY`: the receiver could see it from here on) and the moment each step
returned (`step:NAME`: its commit was reported durable). The receiver is the
mark itself: nothing leaves the machine.

Run in the traced folder as the current directory (the store is `.stepstone` there).
"""

from __future__ import annotations

import os
import pathlib
import sys
from collections.abc import Callable

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from powerloss.trace import mark  # type: ignore[import-not-found]

import stepstone
from stepstone.settings import Settings

STEPS = 6


def work(run: stepstone.Run, i: int) -> Callable[[], dict[str, int]]:
    def step() -> dict[str, int]:
        out = pathlib.Path(f"data/s{i}.txt")
        out.parent.mkdir(exist_ok=True)
        out.write_text(f"{i}\n")
        if i % 2 == 1:
            key_name = f"notify/{i}"

            def send(key: str) -> dict[str, str]:
                mark(f"sent:{key}")
                return {"id": key}

            run.effect(
                key_name,
                send,
                keyed=i % 4 == 1,
                lookup=None if i % 4 == 1 else (lambda key: None),
                payload={"i": i},
            )
        return {"i": i, "square": i * i}

    return step


def main() -> None:
    if os.environ.get("STEPSTONE_TEST_NO_FSYNC") == "1":  # to show the checker can fail
        os.fsync = os.fdatasync = lambda fd: None
    settings = Settings.from_env(index_every=3)
    with stepstone.open_run("power", settings=settings) as run:
        run.store.writer.objects().packs.pack_limit = 3  # merge every few commits
        run.set_plan(
            [{"name": f"s{i}", "checks": [f"file:data/s{i}.txt"]} for i in range(STEPS)],
            goal="power-loss trace",
        )
        run.decide("mode", "squares", "the checker needs a decision")
        mark("decided:mode")
        for i in range(STEPS):
            run.step(f"s{i}", work(run, i))
            mark(f"step:s{i}")
        run.finish()
        mark("finished")


if __name__ == "__main__":
    main()
