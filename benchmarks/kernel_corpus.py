"""Public notebooks, each code cell a step, killed after a random step and resumed:
are the kernel's names those of an uninterrupted run, and does a second run skip
every step? (issue 36; the table is in docs/namespace.md)

    python benchmarks/kernel_corpus.py [--only NAME...] [--kills N] [--jobs J] [--seed S]

For each notebook of `benchmarks/corpus/` (the code cells of textbook chapters nobody
here wrote, see corpus/README.md):

1. its cells run plainly (nbclient); a cell that raises there (a download, a file that
   is not in the corpus) is left out, and so are the cells that then fail for it;
2. the rest, each code cell turned into `%%step cell-N` mechanically, runs twice from
   scratch with `stepstone run`: names that differ between those two clean runs are
   not deterministic (a clock, an unseeded generator) and are left out of the
   comparison (counted);
3. the same notebook is killed (`kill -9` of its kernel) after a random step, run
   again to its end, and every user name is compared with the clean run (type, shape,
   values, dtypes, index names, attributes; and which names share an object);
4. it is run a third time: every step should be skipped.

It prints a table: per notebook, the cells, the names compared and how many are equal
after the resume, the steps that ran again on the second run, the wall time of the
plain run and of the stepped run, the capture overhead per cell, and the store's size.
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

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
DESCRIBE = HERE / "namespace_describe.py"
SETUP = """\
%load_ext stepstone
%resume
def _killpoint(step):
    import os, signal
    if os.path.exists("kill-after") and open("kill-after").read() == step:
        os.remove("kill-after")
        os.kill(os.getpid(), signal.SIGKILL)"""
FINAL = "import _describe\n_describe.write(globals(), 'final.json')"
PRELUDE = "import matplotlib\nmatplotlib.use('Agg')"  # no window; plots still made
TIMEOUT = 300


@dataclass
class Outcome:
    name: str
    cells: int = 0
    dropped: int = 0
    compared: int = 0
    equal: int = 0
    unstable: int = 0
    differ: list[str] = field(default_factory=list)
    shared_lost: list[str] = field(default_factory=list)
    rerun: list[str] = field(default_factory=list)
    killed_after: list[str] = field(default_factory=list)
    plain_s: float = 0.0
    stepped_s: float = 0.0
    store_kb: int = 0
    error: str = ""


def _cells(path: Path) -> list[str]:
    book = nbformat.read(str(path), as_version=4)
    return [c.source for c in book.cells if c.cell_type == "code"]


def _write(path: Path, sources: list[str]) -> None:
    book = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    book.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(book, str(path))


def _folder(root: Path, notebook: Path, label: str) -> Path:
    """A fresh folder with the notebook's data files and the describer."""
    folder = root / label
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for item in notebook.parent.iterdir():
        if item.is_dir():
            shutil.copytree(item, folder / item.name)
    shutil.copy(DESCRIBE, folder / "_describe.py")
    return folder


def plain_cells(notebook: Path, root: Path) -> tuple[list[str], int, float]:
    """The cells that run plainly, the number left out, and the plain run's seconds."""
    cells = _cells(notebook)
    keep = list(range(len(cells)))
    seconds = 0.0
    for _ in range(6):
        folder = _folder(root, notebook, "plain")
        path = folder / "nb.ipynb"
        _write(path, [PRELUDE] + [cells[i] for i in keep])
        book = nbformat.read(str(path), as_version=4)
        client = NotebookClient(
            book, timeout=TIMEOUT, allow_errors=True, resources={"metadata": {"path": str(folder)}}
        )
        started = time.perf_counter()
        client.execute()
        seconds = time.perf_counter() - started
        failed = {
            n - 1
            for n, cell in enumerate(book.cells)
            if n and any(o.output_type == "error" for o in cell.outputs)
        }
        if not failed:
            break
        keep = [i for n, i in enumerate(keep) if n not in failed]
    return [cells[i] for i in keep], len(cells) - len(keep), seconds


def stepped(cells: list[str]) -> list[str]:
    """The notebook as steps: each code cell a `%%step`, a kill point after each."""
    sources = [SETUP, PRELUDE]
    for n, source in enumerate(cells, 1):
        sources.append(f"%%step cell-{n}\n{source}")
        sources.append(f"_killpoint('cell-{n}')")
    sources.append(FINAL)
    return sources


def _stepstone(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stepstone", "run", "nb.ipynb", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=TIMEOUT * 4,
    )


def _ran(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The steps a `stepstone run` ran (not skipped)."""
    return re.findall(r"^\[\d+/\d+\] (\S+): (?!skipped)", result.stderr, re.M)


def _final(folder: Path) -> dict:
    return json.loads((folder / "final.json").read_text())


def _size_kb(folder: Path) -> int:
    return sum(p.stat().st_size for p in (folder / ".stepstone").rglob("*") if p.is_file()) // 1024


def measure(notebook: Path, root: Path, kills: int, seed: int) -> Outcome:
    out = Outcome(f"{notebook.parent.name}/{notebook.stem}")
    try:
        cells, out.dropped, out.plain_s = plain_cells(notebook, root)
        out.cells = len(cells)
        sources = stepped(cells)
        clean = []
        for label in ("clean", "clean2"):
            folder = _folder(root, notebook, label)
            _write(folder / "nb.ipynb", sources)
            started = time.perf_counter()
            done = _stepstone(folder)
            if label == "clean":
                out.stepped_s = time.perf_counter() - started
                out.store_kb = _size_kb(folder)
            if done.returncode != 0:
                raise RuntimeError(f"{label} run failed: {done.stderr[-800:]}")
            clean.append(_final(folder))
        a, b = clean
        unstable = {n for n in a["names"] if a["names"][n] != b["names"].get(n)}
        out.unstable = len(unstable)
        rng = random.Random(f"{seed}/{out.name}")
        for k in range(kills):
            after = rng.randrange(1, len(cells) + 1) if cells else 0
            folder = _folder(root, notebook, f"killed{k}")
            _write(folder / "nb.ipynb", sources)
            (folder / "kill-after").write_text(f"cell-{after}")
            out.killed_after.append(f"cell-{after}")
            first = _stepstone(folder)
            if first.returncode == 0:
                raise RuntimeError(f"the kill after cell-{after} did not happen")
            resumed = _stepstone(folder)
            if resumed.returncode != 0:
                raise RuntimeError(f"resumed run failed: {resumed.stderr[-800:]}")
            got = _final(folder)
            for name, said in a["names"].items():
                if name in unstable:
                    continue
                out.compared += 1
                if got["names"].get(name) == said:
                    out.equal += 1
                else:
                    out.differ.append(name)
            extra = sorted(set(got["names"]) - set(a["names"]))
            out.differ += [f"+{n}" for n in extra]
            lost = {tuple(p) for p in a["shared"]} - {tuple(p) for p in got["shared"]}
            out.shared_lost += sorted("=".join(p) for p in lost if not set(p) & unstable)
            again = _stepstone(folder)
            out.rerun += _ran(again)
    except Exception as exc:  # reported in the table, the others go on
        out.error = f"{type(exc).__name__}: {exc}"[:1200]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="notebooks whose name contains one of these")
    parser.add_argument("--kills", type=int, default=1, help="kills per notebook")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=36)
    parser.add_argument("--json", type=Path, help="write the outcomes here too")
    parser.add_argument("--keep", type=Path, help="keep the folders under this one")
    args = parser.parse_args()
    books = sorted(CORPUS.glob("*/*.ipynb"))
    if args.only:
        books = [b for b in books if any(o in str(b) for o in args.only)]
    root = args.keep or Path(tempfile.mkdtemp(prefix="corpus-"))
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")

    def one(book: Path) -> Outcome:
        return measure(book, root / book.parent.name / book.stem, args.kills, args.seed)

    with ThreadPoolExecutor(args.jobs) as pool:
        outcomes = list(pool.map(one, books))
    print(table(outcomes))
    if args.json:
        args.json.write_text(json.dumps([o.__dict__ for o in outcomes], indent=1))
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


def table(outcomes: list[Outcome]) -> str:
    rows = [
        "| notebook | cells (left out) | names equal after resume | not deterministic | "
        "steps run again on a second run | plain s | stepped s | overhead ms/cell | store KB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    overheads = []
    for o in outcomes:
        if o.error:
            rows.append(f"| {o.name} | {o.cells} ({o.dropped}) | error: {o.error[:300]} |||||||")
            continue
        per = (o.stepped_s - o.plain_s) / max(o.cells, 1) * 1000
        overheads.append(per)
        differ = f" (differ: {', '.join(o.differ[:8])})" if o.differ else ""
        lost = f" (no longer shared: {', '.join(o.shared_lost[:4])})" if o.shared_lost else ""
        rerun = len(o.rerun) if not o.rerun else f"{len(o.rerun)}: {', '.join(o.rerun[:5])}"
        rows.append(
            f"| {o.name} | {o.cells} ({o.dropped}) | {o.equal}/{o.compared}{differ}{lost} "
            f"| {o.unstable} | {rerun} | {o.plain_s:.1f} | {o.stepped_s:.1f} | {per:.0f} "
            f"| {o.store_kb} |"
        )
    good = [o for o in outcomes if not o.error]
    total = sum(o.cells for o in good)
    rows.append(
        f"\n{len(good)} notebooks measured ({len(outcomes) - len(good)} failed), {total} cells; "
        f"all names equal in {sum(o.equal == o.compared and not o.shared_lost for o in good)}; "
        f"no step run again in {sum(not o.rerun for o in good)}; median overhead "
        f"{statistics.median(overheads) if overheads else 0:.0f} ms a cell"
    )
    return "\n".join(rows)


if __name__ == "__main__":
    main()
