"""What saving a cell's names adds to a `%%step`, and what giving them back costs.

In one real IPython shell, one run (incremental plan), cells that bind values of
different sizes are stepped in turns with a cell that binds nothing (the `%%step`
floor), `--rounds` times each; then a new run of the same cells is skipped in turns
(restore). Prints median ms, the ratio to the floor and the bytes each step saved.

    python benchmarks/step_namespace.py [--rounds 40]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import tempfile
import time
from pathlib import Path

CELLS = {
    "binds nothing (floor)": "pass",
    "3 small values": "n = 1\nname = 'x'\nrows = [1, 2, 3]",
    "dict of 1,000 items": "table = {str(i): i for i in range(1000)}",
    "OrderedDict of 1,000": (
        "from collections import OrderedDict\nod = OrderedDict((i, i) for i in range(1000))"
    ),
    "1 MB float64 array": "import numpy as np\narr = np.arange(131072, dtype=np.float64)",
    "10 MB float64 array": "import numpy as np\nbig = np.arange(1310720, dtype=np.float64)",
    "imports + def only": "import json, math\ndef helper(x):\n    return math.sqrt(x)",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    rounds = parser.parse_args().rounds
    from IPython.core.interactiveshell import InteractiveShell

    folder = Path(tempfile.mkdtemp(prefix="stepstone-ns-"))
    os.chdir(folder)
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "stepstone")
    magics = ip.magics_manager.registry["StepstoneMagics"]
    quiet = contextlib.redirect_stdout(io.StringIO())
    quiet.__enter__()  # the lines each step prints
    saving: dict[str, list[float]] = {k: [] for k in CELLS}
    sizes: dict[str, int] = {}
    ip.run_line_magic("resume", "--run bench")
    for r in range(rounds):
        for i, (what, cell) in enumerate(CELLS.items()):
            name = f"r{r}c{i}"
            start = time.perf_counter()
            ip.run_cell_magic("step", name, cell)
            saving[what].append(time.perf_counter() - start)
            record = magics.session.run.records[name]
            sizes[what] = sum(a.size for a in record.outputs.values())
    restoring: dict[str, list[float]] = {k: [] for k in CELLS}
    ip.run_line_magic("resume", "--run bench")
    for r in range(rounds):
        for i, (what, cell) in enumerate(CELLS.items()):
            start = time.perf_counter()
            ip.run_cell_magic("step", f"r{r}c{i}", cell)
            restoring[what].append(time.perf_counter() - start)
    magics.close()
    quiet.__exit__(None, None, None)
    floor = statistics.median(saving["binds nothing (floor)"])
    skip_floor = statistics.median(restoring["binds nothing (floor)"])
    print(f"{rounds} rounds, in turns, one run; store {folder}")
    print("| cell | step ms | × floor | saved bytes | skip + restore ms | × skip floor |")
    print("| --- | --- | --- | --- | --- | --- |")
    for what in CELLS:
        step, skip = statistics.median(saving[what]), statistics.median(restoring[what])
        print(
            f"| {what} | {step * 1000:.2f} | {step / floor:.2f} | {sizes[what]:,} "
            f"| {skip * 1000:.2f} | {skip / skip_floor:.2f} |"
        )


if __name__ == "__main__":
    main()
