"""Public notebooks with no stepstone markup at all, run with `stepstone run --cells`:
what does the mode cost against a plain run, does a kill at a random cell then a resume
end with the names and the executed notebook of an uninterrupted run, does a second run
execute no cell, and how long does resuming take when 90% of the cells are done?
(issue 37; the table is in docs/performance.md)

    python benchmarks/cells_corpus.py [--only NAME...] [--jobs J] [--seed S] [--json F]

For each notebook of `benchmarks/corpus/` (see corpus/README.md), with the cells that
run plainly (as `kernel_corpus.py` chooses them) and a last cell that describes every
name (`namespace_describe.py`):

1. `stepstone run nb.ipynb --no-cells` (executed as nbclient does) and `stepstone run
   nb.ipynb` (no magics, so every code cell is a step), in turns, each from scratch,
   twice: the wall times, and what differs between the two clean runs (a clock, an
   unseeded generator: left out of the comparison, counted);
2. a run whose kernel is killed (`kill -9`) as a random cell ends, then resumed: names
   and executed-notebook outputs compared with the clean run's;
3. the same run again: every cell should be skipped;
4. a run killed when 90% of its cells have ended, then resumed: the resume's wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernel_corpus import CORPUS, FINAL, PRELUDE, _final, _folder, _write, plain_cells
from killing import killed_after

TIMEOUT = 1200
RUN = [sys.executable, "-m", "stepstone", "run", "nb.ipynb", "out.ipynb"]


@dataclass
class Outcome:
    name: str
    cells: int = 0
    plain_s: list[float] = field(default_factory=list)
    cells_s: list[float] = field(default_factory=list)
    compared: int = 0
    equal: int = 0
    unstable: int = 0
    differ: list[str] = field(default_factory=list)
    outputs_compared: int = 0
    outputs_equal: int = 0
    outputs_differ: list[str] = field(default_factory=list)
    rerun: list[str] = field(default_factory=list)
    killed_after: int = 0
    resume90_s: float = 0.0
    error: str = ""


def _run(folder: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "stepstone", "run", "nb.ipynb", "out.ipynb", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    return done, time.perf_counter() - started


def _outputs(path: Path) -> list[list[dict[str, Any]]]:
    """Each code cell's outputs, execution counts and metadata aside, a stream's text
    as one output, the folder's path written as <folder>."""
    book = json.loads(path.read_text().replace(str(path.parent), "<folder>"))
    cells = []
    for c in book["cells"]:
        if c["cell_type"] != "code":
            continue
        outs: list[dict[str, Any]] = []
        for o in c.get("outputs", []):
            o = {k: v for k, v in o.items() if k not in ("execution_count", "metadata")}
            if isinstance(o.get("text"), list):
                o["text"] = "".join(o["text"])
            last = outs[-1] if outs else {}
            same = o["output_type"] == last.get("output_type") == "stream"
            if same and o["name"] == last["name"]:
                last["text"] += o["text"]
            else:
                outs.append(o)
        cells.append(outs)
    return cells


def _ran(result: subprocess.CompletedProcess[str]) -> list[str]:
    return re.findall(r"^\[\d+/\d+\] (\S+): (?!skipped)", result.stderr, re.M)


def measure(notebook: Path, root: Path, seed: int) -> Outcome:
    out = Outcome(f"{notebook.parent.name}/{notebook.stem}")
    try:
        cells, _, _ = plain_cells(notebook, root)
        out.cells = len(cells)
        sources = [PRELUDE, *cells, FINAL]
        steps = len(sources)
        names, outputs = [], []
        for turn in range(2):
            for mode in ("plain", "cells"):
                folder = _folder(root, notebook, f"{mode}{turn}")
                _write(folder / "nb.ipynb", sources)
                done, seconds = _run(folder, *(["--no-cells"] if mode == "plain" else []))
                if done.returncode != 0:
                    raise RuntimeError(f"{mode} run failed: {done.stderr[-800:]}")
                (out.plain_s if mode == "plain" else out.cells_s).append(seconds)
                if mode == "cells":
                    names.append(_final(folder)["names"])
                    outputs.append(_outputs(folder / "out.ipynb"))
        a, b = names
        unstable = {n for n in a if a[n] != b.get(n)}
        out.unstable = len(unstable)
        steady = [n for n, (x, y) in enumerate(zip(*outputs, strict=True)) if x == y]
        rng = random.Random(f"{seed}/{out.name}")
        out.killed_after = rng.randrange(1, steps)
        folder = _folder(root, notebook, "killed")
        _write(folder / "nb.ipynb", sources)
        if killed_after(RUN, folder, out.killed_after, TIMEOUT) == 0:
            raise RuntimeError(f"the kill after cell {out.killed_after} did not happen")
        resumed, _ = _run(folder)
        if resumed.returncode != 0:
            raise RuntimeError(f"resumed run failed: {resumed.stderr[-800:]}")
        got = _final(folder)["names"]
        for name, said in a.items():
            if name not in unstable:
                out.compared += 1
                if got.get(name) == said:
                    out.equal += 1
                else:
                    out.differ.append(name)
        out.differ += [f"+{n}" for n in sorted(set(got) - set(a))]
        mine = _outputs(folder / "out.ipynb")
        for n in steady:
            out.outputs_compared += 1
            if mine[n] == outputs[0][n]:
                out.outputs_equal += 1
            else:
                out.outputs_differ.append(f"cell {n}")
        again, _ = _run(folder)
        out.rerun = _ran(again)
        folder = _folder(root, notebook, "ninety")
        _write(folder / "nb.ipynb", sources)
        killed_after(RUN, folder, max(1, (steps * 9) // 10), TIMEOUT)
        resumed, out.resume90_s = _run(folder)
        if resumed.returncode != 0:
            raise RuntimeError(f"resume at 90% failed: {resumed.stderr[-800:]}")
    except Exception as exc:  # reported in the table, the others go on
        out.error = f"{type(exc).__name__}: {exc}"[:1200]
    return out


def table(outcomes: list[Outcome]) -> str:
    rows = [
        "| notebook | cells | plain s | --cells s | overhead | ms a cell | names equal "
        "after a kill | outputs equal | ran again | resume at 90% s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    good = [o for o in outcomes if not o.error]
    for o in outcomes:
        if o.error:
            rows.append(f"| {o.name} | {o.cells} | error: {o.error[:300]} ||||||||")
            continue
        plain, stepped = statistics.median(o.plain_s), statistics.median(o.cells_s)
        differ = f" (differ: {', '.join(o.differ)})" if o.differ else ""
        odiffer = f" ({', '.join(o.outputs_differ)})" if o.outputs_differ else ""
        rows.append(
            f"| {o.name} | {o.cells} | {plain:.2f} | {stepped:.2f} | "
            f"{(stepped - plain) / plain:+.0%} | {(stepped - plain) / (o.cells + 2) * 1000:.0f} | "
            f"{o.equal}/{o.compared}{differ} | {o.outputs_equal}/{o.outputs_compared}{odiffer} | "
            f"{len(o.rerun)} | {o.resume90_s:.2f} |"
        )
    if good:
        plain = sum(statistics.median(o.plain_s) for o in good)
        stepped = sum(statistics.median(o.cells_s) for o in good)
        cells = sum(o.cells + 2 for o in good)
        per = [
            (statistics.median(o.cells_s) - statistics.median(o.plain_s)) / (o.cells + 2) * 1000
            for o in good
        ]
        ratio = [statistics.median(o.cells_s) / statistics.median(o.plain_s) for o in good]
        resume = [o.resume90_s / statistics.median(o.cells_s) for o in good]
        fixed, slope = 0.0, 0.0
        if len(good) > 2:  # the added seconds of a notebook: fixed + slope * its cells
            slope, fixed = statistics.linear_regression(
                [o.cells + 2 for o in good],
                [statistics.median(o.cells_s) - statistics.median(o.plain_s) for o in good],
            )
        rows.append(
            f"\n{len(good)} notebooks ({len(outcomes) - len(good)} failed), {cells} cells: "
            f"plain {plain:.0f} s, --cells {stepped:.0f} s in all ({stepped / plain - 1:+.0%}); "
            f"median per notebook {statistics.median(ratio) - 1:+.0%}, "
            f"{statistics.median(per):.0f} ms a cell; names equal after a kill "
            f"{sum(o.equal for o in good)}/{sum(o.compared for o in good)}, outputs equal "
            f"{sum(o.outputs_equal for o in good)}/{sum(o.outputs_compared for o in good)}, "
            f"cells run again on a second run: {sum(len(o.rerun) for o in good)}; "
            f"resume at 90% / a run from scratch: median {statistics.median(resume):.2f}; "
            f"added time fitted over the notebooks: {fixed:.2f} s a run + "
            f"{slope * 1000:.0f} ms a cell"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="notebooks whose name contains one of these")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=37)
    parser.add_argument("--json", type=Path, help="write the outcomes here too")
    args = parser.parse_args()
    books = sorted(CORPUS.glob("*/*.ipynb"))
    if args.only:
        books = [b for b in books if any(o in str(b) for o in args.only)]
    root = Path(tempfile.mkdtemp(prefix="cells-corpus-"))
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    for key in [k for k in os.environ if k.startswith("STEPSTONE_")]:
        del os.environ[key]

    def one(book: Path) -> Outcome:
        return measure(book, root / book.parent.name / book.stem, args.seed)

    with ThreadPoolExecutor(args.jobs) as pool:
        outcomes = list(pool.map(one, books))
    print(table(outcomes))
    if args.json:
        args.json.write_text(json.dumps([o.__dict__ for o in outcomes], indent=1))
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
