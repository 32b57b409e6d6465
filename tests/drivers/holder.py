"""Open a run as its driver (optionally doing one step), create the file READY, then hold
the run until killed (tests of locks, leases and copied stores)."""

from __future__ import annotations

import argparse
import pathlib
import time

import stepstone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("run", help="the run's id")
    parser.add_argument("ready", help="the file to create once the run is held")
    parser.add_argument("--repo", help="the store (default: `.stepstone` here)")
    parser.add_argument("--step", help="a step (returning 1) to do before READY")
    parser.add_argument("--seconds", type=float, default=120, help="how long to hold it")
    args = parser.parse_args()
    run = stepstone.open_run(args.run, repo=args.repo)
    if args.step is not None:
        run.step(args.step, lambda: 1)
    pathlib.Path(args.ready).write_text("")
    time.sleep(args.seconds)  # holding `run` until killed


if __name__ == "__main__":
    main()
