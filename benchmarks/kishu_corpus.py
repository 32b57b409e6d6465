"""Kishu (VLDB 2025, `pip install kishu`) on the kernel-state corpus, beside stepstone:
the same notebooks, the same cells, the same kill points as `benchmarks/kernel_corpus.py`
(issue 36; the table is in docs/namespace.md).

    python benchmarks/kishu_corpus.py [--only NAME...] [--seed S] [--json OUT]

Run it with a Python that has `kishu` installed (its own virtual environment: Kishu
pins IPython 9), with matplotlib, scipy and seaborn as the corpus needs them. For each
notebook of `benchmarks/corpus/`:

1. its cells run plainly (nbclient); the cells that fail there are left out, as
   kernel_corpus.py does;
2. the same cells run twice with Kishu attached (`init_kishu`, in its test mode, which
   numbers commits `1:0:N` and does not ask a Jupyter front end to save the notebook):
   Kishu checkpoints after every cell; names that differ between the two runs are not
   deterministic and left out of the comparison;
3. a new kernel attaches Kishu to the first run's database, checks out the commit made
   after cell K (K drawn as kernel_corpus.py draws its kill point: what a kill after cell
   K leaves), runs the cells after K, and every user name is compared with the clean run.

It prints, per notebook: the cells, names equal after the checkout and the rest, Kishu's
per-cell overhead over the plain run, its checkout time, and its database's size.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbclient import NotebookClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernel_corpus import CORPUS, FINAL, PRELUDE, TIMEOUT, _folder, plain_cells

ATTACH = "from kishu import init_kishu\ninit_kishu({path!r})"
CHECKOUT = (
    "import sys, time\nsys._kishu_t0 = time.perf_counter()\n"
    "_kishu.checkout({commit!r}, skip_notebook=True)\n"
    "import sys, time\nsys._kishu_took = time.perf_counter() - sys._kishu_t0"
)
TOOK = "import sys, json\njson.dump(sys._kishu_took, open('took.json', 'w'))"


@dataclass
class Outcome:
    name: str
    cells: int = 0
    dropped: int = 0
    compared: int = 0
    equal: int = 0
    unstable: int = 0
    differ: list[str] = field(default_factory=list)
    killed_after: int = 0
    plain_s: float = 0.0
    kishu_s: float = 0.0
    checkout_s: float = 0.0
    db_kb: int = 0
    error: str = ""


def _execute(folder: Path, sources: list[str], *, strict: bool = True) -> float:
    """Run `sources` as a notebook `nb.ipynb` in `folder` under Kishu's test mode; the
    seconds it took. Kishu's own error at attach time (`post_run_cell without
    pre_run_cell`, as the attaching cell ends) is expected; any other error is raised
    (`strict`), or left in the notebook (after a checkout, a cell that fails for what the
    checkout did not give back shows in the names compared)."""
    path = folder / "nb.ipynb"
    book = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    book.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(book, str(path))
    book = nbformat.read(str(path), as_version=4)
    os.environ["TEST_NOTEBOOK_PATH"] = str(path)
    os.environ["ENV_KISHU_TEST_MODE"] = "1"
    client = NotebookClient(
        book, timeout=TIMEOUT, allow_errors=True, resources={"metadata": {"path": str(folder)}}
    )
    started = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - started
    for n, cell in enumerate(book.cells[1:] if strict else [], 1):
        for out in cell.outputs:
            if out.output_type == "error":
                raise RuntimeError(f"cell {n} raised {out.ename}: {out.evalue[:300]}")
    return seconds


def measure(notebook: Path, root: Path, seed: int) -> Outcome:
    out = Outcome(f"{notebook.parent.name}/{notebook.stem}")
    try:
        cells, out.dropped, out.plain_s = plain_cells(notebook, root)
        out.cells = len(cells)
        finals = []
        for label in ("clean", "clean2"):
            folder = _folder(root, notebook, label)
            took = _execute(
                folder, [ATTACH.format(path=str(folder / "nb.ipynb")), PRELUDE, *cells, FINAL]
            )
            if label == "clean":
                out.kishu_s = took
                out.db_kb = (folder / "nb.kishudb").stat().st_size // 1024
            finals.append(json.loads((folder / "final.json").read_text()))
        a, b = finals
        unstable = {n for n in a["names"] if a["names"][n] != b["names"].get(n)}
        out.unstable = len(unstable)
        rng = random.Random(f"{seed}/{out.name}")  # kernel_corpus.py's first kill point
        after = out.killed_after = rng.randrange(1, len(cells) + 1) if cells else 0
        folder = _folder(root, notebook, "resumed")
        shutil.copy(root / "clean" / "nb.kishudb", folder / "nb.kishudb")
        commit = f"1:0:{after + 1}"  # commit N follows the Nth cell after the attaching one
        sources = [
            ATTACH.format(path=str(folder / "nb.ipynb")),
            CHECKOUT.format(commit=commit),
            TOOK,
            *cells[after:],
            FINAL,
        ]
        _execute(folder, sources, strict=False)
        out.checkout_s = json.loads((folder / "took.json").read_text())
        got = json.loads((folder / "final.json").read_text())
        for name, said in a["names"].items():
            if name in unstable:
                continue
            out.compared += 1
            if got["names"].get(name) == said:
                out.equal += 1
            else:
                out.differ.append(name)
    except Exception as exc:  # reported in the table, the others go on
        out.error = f"{type(exc).__name__}: {exc}"[:600]
    return out


def table(outcomes: list[Outcome]) -> str:
    rows = [
        "| notebook | cells (left out) | names equal after checkout | not deterministic | "
        "plain s | with Kishu s | overhead ms/cell | checkout s | database KB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    overheads = []
    for o in outcomes:
        if o.error:
            rows.append(f"| {o.name} | {o.cells} ({o.dropped}) | error: {o.error[:200]} |||||||")
            continue
        per = (o.kishu_s - o.plain_s) / max(o.cells, 1) * 1000
        overheads.append(per)
        differ = f" (differ: {', '.join(o.differ[:6])})" if o.differ else ""
        rows.append(
            f"| {o.name} | {o.cells} ({o.dropped}) | {o.equal}/{o.compared}{differ} | "
            f"{o.unstable} | {o.plain_s:.1f} | {o.kishu_s:.1f} | {per:.0f} | "
            f"{o.checkout_s:.2f} | {o.db_kb} |"
        )
    good = [o for o in outcomes if not o.error]
    rows.append(
        f"\n{len(good)} notebooks measured ({len(outcomes) - len(good)} failed), "
        f"{sum(o.cells for o in good)} cells; all names equal in "
        f"{sum(o.equal == o.compared for o in good)}; median overhead "
        f"{statistics.median(overheads) if overheads else 0:.0f} ms a cell"
    )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="notebooks whose name contains one of these")
    parser.add_argument("--seed", type=int, default=36)
    parser.add_argument("--json", type=Path, help="write the outcomes here too")
    parser.add_argument("--keep", type=Path, help="keep the folders under this one")
    args = parser.parse_args()
    books = sorted(CORPUS.glob("*/*.ipynb"))
    if args.only:
        books = [b for b in books if any(o in str(b) for o in args.only)]
    root = args.keep or Path(tempfile.mkdtemp(prefix="kishu-corpus-"))
    outcomes = [measure(b, root / b.parent.name / b.stem, args.seed) for b in books]
    print(table(outcomes))
    if args.json:
        args.json.write_text(json.dumps([o.__dict__ for o in outcomes], indent=1))
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
