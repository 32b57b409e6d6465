"""A step's CPU cost without the disk: 600 steps of one run on tmpfs, median of the
last 500 in ms. Compare two versions in turns:

    PYTHONPATH=/tmp/base/src python benchmarks/step_cpu.py before
    python benchmarks/step_cpu.py after
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

import stepstone


def main() -> None:
    label = sys.argv[1] if len(sys.argv) > 1 else "this"
    folder = tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    os.chdir(folder)
    run = stepstone.open_run("cpu")
    times = []
    for i in range(600):
        start = time.perf_counter()
        run.step(f"s{i}", lambda i=i: i)
        times.append(time.perf_counter() - start)
    run.close()
    print(f"{label}: step median {statistics.median(times[100:]) * 1000:.3f} ms")


if __name__ == "__main__":
    main()
