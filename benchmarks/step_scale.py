"""How a `%%step` cell's time moves as a run grows: N cells in a real IPython shell, one
run, the store on tmpfs (`/dev/shm`) so that the disk's drift does not hide the CPU.

    python benchmarks/step_scale.py                          # this checkout
    python benchmarks/step_scale.py /tmp/base/src --cells 5000 --rounds 2

Each checkout runs in its own process, in turns with the others. Printed: the median
time of a whole cell over the first, middle and last 500 cells, and the total of all
cells (pack merges, which come every few dozen cells, show in the total, not in the
medians). Each cell binds `x` to one of seven values, so the same value is often saved
again, as in a notebook whose cells keep a small table of settings.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CELLS = """
import contextlib, io, json, os, statistics, sys, tempfile, time
from IPython.core.interactiveshell import InteractiveShell
folder = tempfile.mkdtemp(dir=sys.argv[2]); os.chdir(folder)
ip = InteractiveShell.instance(); ip.run_line_magic("load_ext", "stepstone")
n = int(sys.argv[1])
times = []
with contextlib.redirect_stdout(io.StringIO()):
    ip.run_line_magic("resume", f"--run scale --repo {folder}/store")
    for i in range(n):
        started = time.perf_counter()
        ip.run_cell(f"%%step m{i}\\nx = {i % 7}  # cell {i}", store_history=True)
        times.append(time.perf_counter() - started)
ip.magics_manager.registry["StepstoneMagics"].close()
window = min(500, n)
print(json.dumps({
    "first": statistics.median(times[:window]),
    "middle": statistics.median(times[n // 2 - window // 2 : n // 2 + window // 2]),
    "last": statistics.median(times[-window:]),
    "total": sum(times),
}))
"""


def one_run(src: str | None, cells: int, scratch: str) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPSTONE_")}
    if src:
        env["PYTHONPATH"] = src
    done = subprocess.run(
        [sys.executable, "-c", CELLS, str(cells), scratch],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sources", nargs="*", help="other src/ folders to compare, in turns")
    parser.add_argument("--cells", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--scratch", default="/dev/shm" if Path("/dev/shm").is_dir() else None)
    args = parser.parse_args()
    checkouts = {str(Path(__file__).resolve().parents[1] / "src"): None}
    checkouts.update({source: source for source in args.sources})
    n = args.cells
    print(f"| source, round | cells 1-500 ms | middle 500 ms | last 500 ms | all {n} cells s |")
    print("| --- | --- | --- | --- | --- |")
    for round_ in range(1, args.rounds + 1):
        for label, src in checkouts.items():
            with tempfile.TemporaryDirectory(dir=args.scratch) as scratch:
                got = one_run(src, n, scratch)
            print(
                f"| {label}, {round_} | {got['first'] * 1000:.2f} | {got['middle'] * 1000:.2f} "
                f"| {got['last'] * 1000:.2f} | {got['total']:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
