"""What `%%step` adds to a cell as one IPython shell runs more and more of them.

    python benchmarks/magic_steps.py                         # 5,000 steps (10,000 cells)
    python benchmarks/magic_steps.py --steps 10000
    python benchmarks/magic_steps.py --src /tmp/base/src     # and another checkout, after
    python benchmarks/magic_steps.py --no-history            # IPython's history off

Each step is a `%%step sN` cell of `x = 1` less the same plain cell run just before it
(IPython names every cell's input `_i<N>` in the kernel's namespace, so a long
notebook's kernel holds more names than it has cells), timed beside the durable-write
floor in the same process. Prints, for windows of 200 steps at points of the run, the
median added cost and its ratio to the floor's median in that window. Each checkout
runs in its own process, one after the other: compare ratios, not times.

`--no-history` turns IPython's history database off (`HistoryManager.enabled`): its
thread writes each cell to SQLite while the next one runs and takes the interpreter's
lock whenever a step waits on the disk, so this isolates what stepstone itself adds.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RECORD = b'{"step": 1, "status": "confirmed", ' + b'"x": "' + b"a" * 250 + b'"}\n'
WINDOW = 200


def measure(steps: int, at: list[int], history: bool) -> dict[int, tuple[float, float]]:
    """Run `steps` step cells; the median added cost and floor (ms) of the window
    of steps starting at each of `at`."""
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    from stepstone.store.durable import write_atomic

    tmp = Path(tempfile.mkdtemp(prefix="magic-steps-"))
    config = Config()
    config.HistoryManager.enabled = history
    ip = InteractiveShell.instance(config=config)
    ip.run_line_magic("load_ext", "stepstone")
    quiet = contextlib.redirect_stdout(io.StringIO())
    added: list[float] = []
    floor: list[float] = []
    with quiet:
        ip.run_line_magic("resume", f"--run growth --repo {tmp / 'store'}")
        for i in range(steps):
            start = time.perf_counter()
            write_atomic(tmp / "floor.json", RECORD)
            floor.append(time.perf_counter() - start)
            start = time.perf_counter()
            ip.run_cell(f"x = 1  # cell {i}", store_history=True)
            plain = time.perf_counter() - start
            start = time.perf_counter()
            ip.run_cell(f"%%step s{i}\nx = 1  # cell {i}", store_history=True)
            added.append(time.perf_counter() - start - plain)
    ip.magics_manager.registry["StepstoneMagics"].close()
    return {
        a: (
            statistics.median(added[a : a + WINDOW]) * 1e3,
            statistics.median(floor[a : a + WINDOW]) * 1e3,
        )
        for a in at
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--src", action="append", default=[], help="another checkout's src")
    parser.add_argument("--no-history", action="store_true", help="IPython's history off")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    at = sorted({0, *(n - WINDOW for n in (1000, 2500, 5000, 10000) if n <= args.steps)})
    at = [a for a in at if a + WINDOW <= args.steps]
    if args.child:
        print(json.dumps(measure(args.steps, at, not args.no_history)))
        return
    here = str(Path(__file__).resolve().parent.parent / "src")
    rows = []
    for src in [here, *args.src]:
        env = {**os.environ, "PYTHONPATH": src}
        done = subprocess.run(
            [sys.executable, __file__, "--child", "--steps", str(args.steps)]
            + (["--no-history"] if args.no_history else []),
            env=env,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            sys.exit(f"{src}: {done.stderr}")
        figures = {int(k): v for k, v in json.loads(done.stdout.splitlines()[-1]).items()}
        rows.append((src, figures))
    history = "off" if args.no_history else "on"
    print(f"`%%step` added cost, median of {WINDOW} steps from each point (ms, × floor);")
    print(f"IPython's history {history}\n")
    print("| checkout | " + " | ".join(f"steps {a + 1}-{a + WINDOW}" for a in at) + " |")
    print("| --- |" + " --- |" * len(at))
    for src, figures in rows:
        cells = [f"{figures[a][0]:.2f} ({figures[a][0] / figures[a][1]:.1f}×)" for a in at]
        print(f"| {src} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
