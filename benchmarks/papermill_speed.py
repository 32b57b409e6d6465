"""`stepstone run` beside papermill and `jupyter execute`, as whole processes (issue 51):
a first run, a run with nothing to do, and a resume after a failure at 50% and 90% of
the notebook, against papermill running all of it.

    python benchmarks/papermill_speed.py [--rounds 5] [--cells 30] [--slow 0.3 | --slow 0]

Two notebooks with no stepstone magics (every code cell a step):

- *quick*: a parameters cell and `--cells` - 1 cells that compute and print;
- *slow*: the same with each cell also sleeping `--slow` seconds (what real cells do).

For a resume the cell at 50% (or 90%) fails the first time (it looks for a file that is
not there yet); the file is made and `stepstone run` timed again: it skips the cells
before and runs the rest. papermill's row for it is its full run of the same notebook.
Each figure is the median of `--rounds`, the commands of a round taken in turns, each in
a scratch folder of its own. Figures are wall times of the whole command.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

STEPSTONE = [sys.executable, "-m", "stepstone", "run"]
PAPERMILL = [sys.executable, "-m", "papermill"]
JUPYTER = [sys.executable, "-m", "jupyter", "execute"]


def notebook(folder: Path, cells: int, slow: float, fails_at: int | None = None) -> Path:
    book = new_notebook(cells=[new_code_cell("n = 3", metadata={"tags": ["parameters"]})])
    for i in range(1, cells):
        source = f"x{i} = {i} * n\nprint('cell', {i}, x{i})"
        if slow:
            source = f"import time\ntime.sleep({slow})\n{source}"
        if i == fails_at:
            source = "import os\nif not os.path.exists('go'):\n    raise RuntimeError('not yet')\n"
            source += "print('going')"
        book.cells.append(new_code_cell(source))
    book.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    path = folder / "nb.ipynb"
    nbformat.write(book, str(path))
    return path


def timed(argv: list[str], cwd: Path, ok: tuple[int, ...] = (0,)) -> float:
    began = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    took = time.perf_counter() - began
    if done.returncode not in ok:
        sys.exit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return took


def fresh(cells: int, slow: float, fails_at: int | None = None) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="pmspeed-"))
    notebook(folder, cells, slow, fails_at)
    return folder


def cases(cells: int, slow: float) -> dict[str, Callable[[], float]]:
    def papermill() -> float:
        return timed([*PAPERMILL, "nb.ipynb", "out.ipynb"], fresh(cells, slow))

    def jupyter() -> float:
        return timed([*JUPYTER, "nb.ipynb"], fresh(cells, slow))

    def first() -> float:
        return timed([*STEPSTONE, "nb.ipynb", "out.ipynb"], fresh(cells, slow))

    def nothing(through_kernel: bool) -> Callable[[], float]:
        def run() -> float:
            folder = fresh(cells, slow)
            timed([*STEPSTONE, "nb.ipynb", "out.ipynb"], folder)
            if through_kernel:  # no earlier output to answer from: a kernel skips every cell
                (folder / "out.ipynb").unlink()
            return timed([*STEPSTONE, "nb.ipynb", "out.ipynb"], folder)

        return run

    def resumed(share: float) -> Callable[[], float]:
        def run() -> float:
            folder = fresh(cells, slow, fails_at=max(1, round(cells * share)))
            timed([*STEPSTONE, "nb.ipynb", "out.ipynb"], folder, ok=(1,))
            (folder / "go").write_text("")
            return timed([*STEPSTONE, "nb.ipynb", "out.ipynb"], folder)

        return run

    return {
        "papermill, all of it": papermill,
        "jupyter execute, all of it": jupyter,
        "stepstone run, first run": first,
        "stepstone run, nothing to do": nothing(False),
        "stepstone run, nothing to do, through a kernel": nothing(True),
        "stepstone run, resume at 50%": resumed(0.5),
        "stepstone run, resume at 90%": resumed(0.9),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cells", type=int, default=30)
    parser.add_argument("--slow", type=float, default=0.3, help="0: the quick notebook only")
    args = parser.parse_args()
    notebooks = [("quick", 0.0)] + (
        [(f"slow ({args.slow} s a cell)", args.slow)] if args.slow else []
    )
    for title, slow in notebooks:
        measured = cases(args.cells, slow)
        times: dict[str, list[float]] = {name: [] for name in measured}
        for _ in range(args.rounds):
            for name, case in measured.items():
                times[name].append(case())
        base = statistics.median(times["papermill, all of it"])
        print(f"\n{title}: {args.cells} cells, median of {args.rounds} rounds in turns\n")
        print("| case | median s | min-max s | ÷ papermill |")
        print("| --- | --- | --- | --- |")
        for name, got in times.items():
            mid = statistics.median(got)
            print(f"| {name} | {mid:.2f} | {min(got):.2f}-{max(got):.2f} | {mid / base:.2f} |")
    for leftover in Path(tempfile.gettempdir()).glob("pmspeed-*"):
        shutil.rmtree(leftover, ignore_errors=True)


if __name__ == "__main__":
    main()
