"""Resume latency, the figure users feel (issue 40): a notebook whose cells keep about
1 GB of state (float arrays and frames with string columns) and 90% of whose cells are
done. How long from the command to the first cell that must run, when stepstone resumes
it, when it is run again from the top, and when Kishu checks its state out?

    python benchmarks/resume_latency.py [--mb 1000] [--work 3] [--rounds 3]
                                        [--kishu-python PATH] [--kishu-rounds 1]

The notebook has ten code cells and no markup (so `stepstone run` runs each as a step):
cells 1-9 each make a tenth of `--mb` (odd cells a float array, even cells a frame of
ids, floats, unique string labels and a city of eight; alternately) and then compute for
`--work` seconds (what real cells do: the restore is measured against it; 0 gives the
worst case for restoring), and cell 10, which reads every value they made, notes the
time it starts and then waits.

Rows, each the median of `--rounds` in turns, each timed from the launch of a new process
to the moment cell 10 starts:

- `stepstone run`, resumed after its kernel was killed (`kill -9`) as cell 9 ended:
  cells 1-9 are skipped, their values restored;
- `stepstone run --no-cells`: the notebook from the top, as nbclient runs it;
- Kishu (`--kishu-python`: a Python with `kishu` installed): a new kernel attaches Kishu
  to the database of a run of cells 1-9 and checks out its last commit (Kishu's own
  figure for the checkout is printed too).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import nbformat
import psutil
from killing import clean_env, killed_after

STEPSTONE_RUN = [sys.executable, "-m", "stepstone", "run", "nb.ipynb"]
SETUP = textwrap.dedent(
    """\
    import time
    import numpy as np
    import pandas as pd

    def work(seconds):
        m = np.random.default_rng(0).random((300, 300))
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            m = m @ m
            m /= np.abs(m).max()
    """
)
ARRAY = "a{n} = np.random.default_rng({n}).standard_normal({items}).cumsum()\nwork({work})"
FRAME = textwrap.dedent(
    """\
    f{n} = pd.DataFrame({{
        "id": np.arange({rows}),
        "value": np.random.default_rng({n}).random({rows}),
        "label": pd.Series(np.arange({rows})).map("item-{{:09d}}".format).astype("str"),
        "city": pd.Series(np.random.default_rng({n}).integers(0, 8, {rows})).map(
            "city-{{}}".format).astype("str"),
    }})
    work({work})"""
)
LAST = textwrap.dedent(  # it reads every value the cells before it made
    """\
    import json, time
    held = [a1, f2, a3, f4, a5, f6, a7, f8, a9]
    json.dump(time.time(), open("reached.json", "w"))
    time.sleep(600)"""
)
KISHU_ATTACH = "from kishu import init_kishu\ninit_kishu({path!r})"
KISHU_CHECKOUT = textwrap.dedent(  # the checkout replaces the names: keep the time in sys
    """\
    import sys, time
    sys.t0 = time.perf_counter()
    try:
        _kishu.checkout({commit!r}, skip_notebook=True)
        took = __import__("time").perf_counter() - __import__("sys").t0
    except Exception as exc:
        took = repr(exc)
    with open("took.json", "w") as f:
        __import__("json").dump(took, f)"""
)
NBCLIENT = textwrap.dedent(
    """\
    import sys, nbformat
    from nbclient import NotebookClient
    book = nbformat.read(sys.argv[1], as_version=4)
    client = NotebookClient(
        book, timeout=3600, allow_errors=True, resources={"metadata": {"path": sys.argv[2]}}
    )
    client.execute()  # Kishu's own error as its attaching cell ends is expected
    for n, cell in enumerate(book.cells[1:], 1):
        for out in cell.outputs:
            if out.output_type == "error":
                print(f"cell {n}: {out.ename}: {out.evalue}", file=sys.stderr)
    """
)


def cells(mb: int, work: float) -> list[str]:
    per = mb * 1_000_000 // 9
    found = [SETUP]
    for n in range(1, 10):
        if n % 2:
            found.append(ARRAY.format(n=n, items=per // 8, work=work))
        else:  # about 40 bytes a row: two numbers, a 14-character label, a city
            found.append(FRAME.format(n=n, rows=per // 40, work=work))
    return found


def write(path: Path, sources: list[str]) -> None:
    book = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    book.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    nbformat.write(book, str(path))


def _until_reached(args: list[str], folder: Path, env: dict[str, str] | None = None) -> float:
    """Launch `args` in `folder`; the seconds until cell 10 starts; then stop it."""
    reached = folder / "reached.json"
    reached.unlink(missing_ok=True)
    started = time.time()
    with subprocess.Popen(
        args, cwd=folder, env=env or clean_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    ) as proc:
        while not reached.exists() or not reached.read_text():
            if proc.poll() is not None:
                raise RuntimeError(f"{args} ended first: {proc.stderr.read().decode()[-800:]}")
            time.sleep(0.01)
        took = json.loads(reached.read_text()) - started
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        proc.kill()
    return took


def _size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=1000, help="the state cells 1-9 keep")
    parser.add_argument("--work", type=float, default=3.0, help="seconds each cell computes")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kishu-python", type=Path)
    parser.add_argument("--kishu-rounds", type=int, default=1, help="its checkout is slow")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="resume-latency-"))
    sources = cells(args.mb, args.work)
    resumed = root / "resumed"
    resumed.mkdir()
    write(resumed / "nb.ipynb", [*sources, LAST])
    killed_after(STEPSTONE_RUN, resumed, 10)  # [10/11]: cell 9 (the setup cell is step 1) has ended
    store_mb = _size_mb(resumed / ".stepstone")
    plain = root / "plain"
    plain.mkdir()
    write(plain / "nb.ipynb", [*sources, LAST])
    kishu_folder, took = root / "kishu", []
    if args.kishu_python:
        kishu_folder.mkdir()
        made = kishu_folder / "made"
        made.mkdir()
        nb = made / "nb.ipynb"
        write(nb, [KISHU_ATTACH.format(path=str(nb)), *sources])
        env = {**clean_env(), "TEST_NOTEBOOK_PATH": str(nb), "ENV_KISHU_TEST_MODE": "1"}
        made_run = subprocess.run(
            [str(args.kishu_python), "-c", NBCLIENT, str(nb), str(made)],
            env=env,
            capture_output=True,
            text=True,
        )
        if made_run.returncode or "cell " in made_run.stderr:
            print(f"Kishu's run of cells 1-9: {made_run.stderr[-600:]}", file=sys.stderr)
        out = kishu_folder / "out"
        out.mkdir()
        shutil.copy(made / "nb.kishudb", out / "nb.kishudb")
        commit = f"1:0:{len(sources)}"  # Kishu numbers the cells after the attaching one
        write(
            out / "nb.ipynb",
            [KISHU_ATTACH.format(path=str(out / "nb.ipynb")), KISHU_CHECKOUT.format(commit=commit),
             LAST],
        )  # fmt: skip
    times: dict[str, list[float]] = {"resumed": [], "from the top": [], "kishu": []}
    for n in range(args.rounds):
        times["resumed"].append(
            _until_reached([sys.executable, "-m", "stepstone", "run", "nb.ipynb"], resumed)
        )
        times["from the top"].append(
            _until_reached(
                [sys.executable, "-m", "stepstone", "run", "nb.ipynb", "--no-cells"], plain
            )
        )
        if args.kishu_python and n < args.kishu_rounds:
            out = kishu_folder / "out"
            env = {
                **clean_env(),
                "TEST_NOTEBOOK_PATH": str(out / "nb.ipynb"),
                "ENV_KISHU_TEST_MODE": "1",
            }
            times["kishu"].append(
                _until_reached(
                    [str(args.kishu_python), "-c", NBCLIENT, str(out / "nb.ipynb"), str(out)],
                    out,
                    env,
                )
            )
            figure = json.loads((out / "took.json").read_text())
            if isinstance(figure, str):
                raise RuntimeError(f"Kishu's checkout failed: {figure}")
            took.append(figure)
    top = statistics.median(times["from the top"])
    print(f"{args.mb} MB kept by 9 cells, {args.work} s of work each; stepstone's store "
          f"{store_mb:.0f} MB; medians of {args.rounds} in turns (Kishu: "
          f"{min(args.rounds, args.kishu_rounds)})\n")  # fmt: skip
    print("| to the first cell that must run | seconds | / from the top |")
    print("| --- | --- | --- |")
    for label, found in times.items():
        if found:
            median = statistics.median(found)
            print(f"| {label} | {median:.2f} | {median / top:.2f} |")
    if took:
        print(f"\nKishu's own checkout figure: {statistics.median(took):.2f} s")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
