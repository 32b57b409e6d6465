"""Five steps that write a file each; step 3 sleeps until killed unless `resumed` exists
(tests/test_crash.py). Run with the test's folder as the current directory."""

from __future__ import annotations

import pathlib
import time
from collections.abc import Callable

import stepstone


def work(name: str) -> Callable[[], None]:
    def do() -> None:
        with open("executions.log", "a") as log:
            log.write(name + "\n")
        if name == "step3" and not pathlib.Path("resumed").exists():
            pathlib.Path("in-step3").write_text("x")
            time.sleep(60)  # killed here
        pathlib.Path(name + ".txt").write_text(name)

    return do


def main() -> None:
    with stepstone.open_run("five") as run:
        run.set_plan([{"name": f"step{i}", "checks": [f"file:step{i}.txt"]} for i in range(1, 6)])
        for i in range(1, 6):
            run.step(f"step{i}", work(f"step{i}"))


if __name__ == "__main__":
    main()
