"""How long `stepstone status` of the quickstart takes as a new process, beside the
import floor of what it reads records with; other checkouts in turns.

    python benchmarks/startup.py                        # this checkout
    python benchmarks/startup.py /tmp/base/src          # and another, in turns
    python benchmarks/startup.py --samples 21 --command brief

Each row is the median wall time of a new process. "bytecode cached" runs with
Python's default of writing bytecode (kept under a scratch folder, warmed first);
"compiled each time" with `PYTHONDONTWRITEBYTECODE=1`, as on a machine that sets it
(the libraries' installed bytecode is read; a checkout's sources, which have none, are
compiled by every process).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
FLOORS = {
    "python -c pass": "pass",
    "pydantic.BaseModel, pygit2, click": "from pydantic import BaseModel; import pygit2, click",
}


def timed(argv: list[str], env: dict[str, str], cwd: str) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True)
    took = time.perf_counter() - start
    if done.returncode not in (0, 1):
        sys.exit(f"{' '.join(argv)} failed:\n{done.stderr.decode()}")
    return took


def environment(src: str | None, cached: bool, scratch: str, label: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPSTONE_")}
    env.pop("PYTHONPATH", None)
    if src:
        env["PYTHONPATH"] = src
    if cached:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        folder = label.strip("/").replace("/", "_")  # a path label stays inside scratch
        env["PYTHONPYCACHEPREFIX"] = os.path.join(scratch, "pyc", folder)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("PYTHONPYCACHEPREFIX", None)
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("others", nargs="*", help="other checkouts' src folders, in turns")
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--command", default="status", help="the stepstone command timed")
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="stepstone-startup-")
    try:
        folder = os.path.join(scratch, "quickstart")
        os.mkdir(folder)
        shutil.copy(HERE / "notebooks" / "quickstart.ipynb", folder)
        made = subprocess.run(
            [sys.executable, "-m", "stepstone", "run", "quickstart.ipynb"],
            cwd=folder,
            env={**environment(str(HERE / "src"), True, scratch, "setup")},
            capture_output=True,
        )
        if made.returncode != 0:
            sys.exit(f"the quickstart did not run:\n{made.stderr.decode()}")
        checkouts = {"this checkout": str(HERE / "src")}
        checkouts.update({other: other for other in args.others})
        argv = {
            label: [sys.executable, "-m", "stepstone", *args.command.split()] for label in checkouts
        }
        rows: dict[str, list[float]] = {}
        jobs = []
        for cached in (True, False):
            how = "bytecode cached" if cached else "compiled each time"
            for label, src in checkouts.items():
                env = environment(src, cached, scratch, label)
                jobs.append((f"stepstone {args.command}, {label}, {how}", argv[label], env))
            for name, code in FLOORS.items():
                env = environment(None, cached, scratch, "floor")
                jobs.append((f"{name}, {how}", [sys.executable, "-c", code], env))
        for _, command, env in jobs:  # warm: write the bytecode, fill the page cache
            timed(command, env, folder)
        for _ in range(args.samples):
            for name, command, env in jobs:
                rows.setdefault(name, []).append(timed(command, env, folder))
        print(f"| what (median of {args.samples}, in turns) | ms |")
        print("| --- | --- |")
        for name, times in rows.items():
            print(f"| {name} | {statistics.median(times) * 1000:.0f} |")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
