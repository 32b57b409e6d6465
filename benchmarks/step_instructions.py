"""What a step costs the CPU, counted in instructions (valgrind's callgrind), which
this machine's drifting disk and noisy neighbours do not move: the instructions a
`%%step` cell adds to the same plain cell in a real IPython shell, and those of a
Python-API step, per step, with the store on tmpfs (no disk wait is counted).

    python benchmarks/step_instructions.py                   # this checkout
    python benchmarks/step_instructions.py /tmp/base/src     # and another, in turns

Each figure is (instructions of a run of N `%%step` cells - those of N plain cells) / N,
and (those of N API steps - those of a run of none) / N: the start-up of Python,
IPython and stepstone cancels out. Needs
`valgrind` (Debian: `apt-get install valgrind`); two to three minutes per checkout.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CELLS = """
import contextlib, io, os, sys, tempfile
from IPython.core.interactiveshell import InteractiveShell
import stepstone
folder = tempfile.mkdtemp(dir=sys.argv[3]); os.chdir(folder)
ip = InteractiveShell.instance(); ip.run_line_magic("load_ext", "stepstone")
n, mode = int(sys.argv[1]), sys.argv[2]
with contextlib.redirect_stdout(io.StringIO()):
    ip.run_line_magic("resume", f"--run magic --repo {folder}/store")
    run = stepstone.open_run("api", repo=f"{folder}/api")
    for i in range(20):  # warm: the first steps read and build what later ones reuse
        ip.run_cell(f"%%step w{i}\\nx = 1  # cell {i}", store_history=True)
        ip.run_cell(f"x = 1  # cell {i}", store_history=True)
        run.step(f"w{i}", lambda: None)
    for i in range(n):
        if mode == "magic":
            ip.run_cell(f"%%step m{i}\\nx = 1  # cell {i}", store_history=True)
        elif mode == "api":
            run.step(f"s{i}", lambda: None)
        elif mode == "plain":
            ip.run_cell(f"x = 1  # cell {i}", store_history=True)
    run.close()
ip.magics_manager.registry["StepstoneMagics"].close()
"""


def instructions(src: str | None, n: int, mode: str, script: Path, scratch: str) -> int:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    env = {k: v for k, v in env.items() if not k.startswith("STEPSTONE_")}
    if src:
        env["PYTHONPATH"] = src
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            str(script),
            str(n),
            mode,
            scratch,
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise SystemExit(f"the cells failed ({mode}):\n{done.stderr[-3000:]}")
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"callgrind printed no count:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("sources", nargs="*", help="other src/ folders to compare, in turns")
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("needs valgrind (apt-get install valgrind)")
    scratch = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    here = str(Path(__file__).resolve().parents[1] / "src")
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "cells.py"
        script.write_text(CELLS)
        print(f"| {'source':<40} | %%step adds, M instr | API step, M instr |")
        print(f"| {'-' * 40} | -------------------- | ----------------- |")
        for src in [here, *args.sources]:
            modes = ("none", "plain", "magic", "api")
            counts = {m: instructions(src, args.steps, m, script, scratch) for m in modes}
            added = (counts["magic"] - counts["plain"]) / args.steps / 1e6
            api = (counts["api"] - counts["none"]) / args.steps / 1e6
            print(f"| {src:<40} | {added:20.2f} | {api:17.2f} |")


if __name__ == "__main__":
    main()
