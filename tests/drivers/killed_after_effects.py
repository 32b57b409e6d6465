"""A step that confirms two effects, then is killed (SIGKILL) before it ends
(tests/test_seams.py). Run in the test's folder."""

from __future__ import annotations

import os
import signal

import stepstone


def work() -> None:
    stepstone.effect("first", lambda k: {"n": 1})
    stepstone.effect("second", lambda k: {"n": 2})
    os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    with stepstone.open_run("job") as run:
        run.set_plan(["send", "after"])
        run.step("send", work)


if __name__ == "__main__":
    main()
