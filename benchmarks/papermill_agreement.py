"""papermill's own test notebooks through `stepstone run IN OUT`, beside `papermill IN OUT`
with the same arguments: do the output notebooks agree (cells and outputs, execution
counts and metadata aside)? And run again with nothing to do (answered from the records,
or by a kernel)? And after a `kill -9` of the kernel partway and a resume?
(issue 37; the table is in docs/clients.md)

    python benchmarks/papermill_agreement.py --papermill-repo PATH [--only NAME...]

PATH is a clone of https://github.com/nteract/papermill (its notebooks are not copied
here); the parameters are the ones papermill's own tests give each notebook.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from killing import clean_env, killed_after

# what papermill's tests (papermill/tests/test_execute.py) pass to each notebook
PARAMETERS: dict[str, dict[str, str]] = {
    "simple_execute.ipynb": {"msg": "Hello"},
    "no_parameters.ipynb": {"msg": "Hello"},
    "report_mode_test.ipynb": {"a": "0"},
    "nb_version_4.4.ipynb": {"var": "It works"},
    "blank-vscode.ipynb": {"var": "It works"},
}
TIMEOUT = 180


def _cells(path: Path) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """Each cell's type, source and outputs: execution counts and metadata aside, the
    notebook's folder written as `<folder>`, and consecutive text of one stream as one
    output (how the kernel cut it into messages depends on timing, as nbclient's
    `coalesce_streams` knows)."""
    text = path.read_text().replace(str(path.parent), "<folder>")
    book = json.loads(text)
    cells = []
    for c in book["cells"]:
        outputs: list[dict[str, Any]] = []
        for o in c.get("outputs", []):
            o = {k: v for k, v in o.items() if k not in ("execution_count", "metadata")}
            if "text" in o and isinstance(o["text"], list):
                o["text"] = "".join(o["text"])
            last = outputs[-1] if outputs else None
            if (
                last
                and o["output_type"] == last["output_type"] == "stream"
                and last["name"] == o["name"]
            ):
                last["text"] += o["text"]
            else:
                outputs.append(o)
        source = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
        cells.append((c["cell_type"], source, outputs))
    return cells


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            args, cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=TIMEOUT
        )
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(args, -1, "", "timed out")


def _first_difference(a: list[Any], b: list[Any]) -> str:
    if len(a) != len(b):
        return f"{len(a)} cells against papermill's {len(b)}"
    for n, (x, y) in enumerate(zip(a, b, strict=True)):
        if x != y:
            return f"cell {n}: {str(x)[:120]} | papermill's: {str(y)[:120]}"
    return ""


def measure(source: Path) -> dict[str, Any]:
    name = source.name
    root = Path(tempfile.mkdtemp(prefix="pm-"))
    given = [a for k, v in PARAMETERS.get(name, {}).items() for a in ("-p", k, v)]
    row: dict[str, Any] = {"notebook": name, "parameters": " ".join(given[1::3]) or "none"}
    folders = {}
    for label in ("papermill", "stepstone", "killed"):
        folder = root / label
        shutil.copytree(source.parent, folder, ignore=shutil.ignore_patterns("*.ipynb"))
        shutil.copy(source, folder / "in.ipynb")
        folders[label] = folder
    papermill = [sys.executable, "-m", "papermill", "in.ipynb", "out.ipynb", *given]
    stepstone = [sys.executable, "-m", "stepstone", "run", "in.ipynb", "out.ipynb", *given]
    theirs = _run(papermill, folders["papermill"])
    ours = _run(stepstone, folders["stepstone"])
    row["papermill"] = "ok" if theirs.returncode == 0 else f"exit {theirs.returncode}"
    row["stepstone"] = "ok" if ours.returncode == 0 else f"exit {ours.returncode}"
    out_theirs, out_ours = folders["papermill"] / "out.ipynb", folders["stepstone"] / "out.ipynb"
    if not out_theirs.exists():
        row["agree"] = "papermill wrote no output notebook"
        return row
    if not out_ours.exists():
        row["agree"] = f"no output notebook: {ours.stderr.strip()[-200:]}"
        return row
    expected = _cells(out_theirs)
    differ = _first_difference(_cells(out_ours), expected)
    row["agree"] = "yes" if not differ else f"no: {differ}"
    if ours.returncode == 0:  # again with nothing to do: from the records, no kernel
        again = _run(stepstone, folders["stepstone"])
        differ = _first_difference(_cells(out_ours), expected)
        how = "no kernel" if "no kernel was started" in again.stderr else "a kernel"
        row["again"] = (
            (f"yes ({how})" if not differ else f"no ({how}): {differ}")
            if again.returncode == 0
            else f"exit {again.returncode}"
        )
    steps = ours.stderr.count("]")  # `[k/N] name: ...` lines
    if ours.returncode == 0 and steps >= 2:
        killed_after(stepstone, folders["killed"], steps // 2, TIMEOUT)
        resumed = _run(stepstone, folders["killed"])
        differ = _first_difference(_cells(folders["killed"] / "out.ipynb"), expected)
        row["after a kill"] = (
            ("yes" if not differ else f"no: {differ}")
            if resumed.returncode == 0
            else f"resume exit {resumed.returncode}"
        )
    else:
        row["after a kill"] = "—"
    shutil.rmtree(root, ignore_errors=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--papermill-repo", type=Path, required=True)
    parser.add_argument("--only", nargs="*")
    args = parser.parse_args()
    books = sorted((args.papermill_repo / "papermill" / "tests" / "notebooks").glob("*.ipynb"))
    if args.only:
        books = [b for b in books if any(o in b.name for o in args.only)]
    rows = [measure(book) for book in books]
    columns = ["notebook", "parameters", "papermill", "stepstone", "outputs agree"]
    columns += ["run again", "after a kill"]
    print("| " + " | ".join(columns) + " |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r['notebook']} | {r['parameters']} | {r['papermill']} | {r['stepstone']} | "
            f"{r['agree']} | {r.get('again', '—')} | {r.get('after a kill', '—')} |"
        )


if __name__ == "__main__":
    main()
