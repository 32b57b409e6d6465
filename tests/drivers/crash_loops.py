"""Drivers that commit without end until the test kills them (tests/test_crash.py).

    commits          revise seven decisions over and over; `ready` after the first commit
    merges delete    the same, merging packs every few commits, and killing itself just
                     after a merged pack is written, before the old ones are removed
    merges random    the same without killing itself; `ready` once all seven are decided
    indexed          step through a 400-step plan, saving the step index every 3 commits

Run with the test's folder as the current directory (the store is `.stepstone` there).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import signal
from typing import Any

import stepstone
from stepstone.settings import Settings


def commits() -> None:
    with stepstone.open_run("loop") as run:
        i = 0
        while True:
            i += 1
            # a value no earlier process decided: each decide is a new commit (a process
            # killed early under load left d1 = "1", which a later i == 1 did not change)
            run.decide(f"d{i % 7}", f"{os.getpid()}-{i}", "churn", revise=True)
            if i == 1:  # at least one new commit before the test starts its timer
                pathlib.Path("ready").write_text("")


def merges(mode: str) -> None:
    kill_at_first_delete = mode == "delete"
    real_unlink = os.unlink

    def unlink(path: Any, *args: Any, **kwargs: Any) -> None:
        if kill_at_first_delete and str(path).endswith(".idx"):
            os.kill(os.getpid(), signal.SIGKILL)  # merged pack written, old ones not yet gone
        real_unlink(path, *args, **kwargs)

    os.unlink = unlink
    with stepstone.open_run("loop") as run:
        run.store.writer.objects().packs.pack_limit = 2  # merge every few commits
        i = 0
        while True:
            i += 1
            run.decide(f"d{i % 7}", str(i), "churn", revise=True)
            if i == 7:  # every one of the seven keys decided at least once
                pathlib.Path("ready").write_text("")


def indexed() -> None:
    # save the step index often, to be killed while at it
    with stepstone.open_run("long", settings=Settings.from_env(index_every=3)) as run:
        if not run.steps:
            run.set_plan([f"s{i}" for i in range(400)])
        for i in range(len(run.records), 400):
            run.step(f"s{i}", lambda: None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    loops = parser.add_subparsers(dest="loop", required=True)
    loops.add_parser("commits")
    loops.add_parser("merges").add_argument("mode", choices=["delete", "random"])
    loops.add_parser("indexed")
    args = parser.parse_args()
    if args.loop == "commits":
        commits()
    elif args.loop == "merges":
        merges(args.mode)
    else:
        indexed()


if __name__ == "__main__":
    main()
