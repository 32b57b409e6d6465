"""Build the kernel-state corpus: the code cells of public notebooks of the PyData
stack, as their authors wrote them, with the small data files they read.

    python benchmarks/corpus/build.py [--from DIR]

Each source is cloned from GitHub at the commit named below (or read from DIR/NAME,
a clone made beforehand); each chosen notebook keeps its code cells, their sources
and their ids, nothing else (the books' prose is under licences of its own; their code
is MIT or CC0, see README.md). Run it again and the corpus is the same files.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

SOURCES = {
    "pdsh": {
        "url": "https://github.com/jakevdp/PythonDataScienceHandbook",
        "commit": "d66231454ef753818dc9213c9b5942e067266966",
        "notebooks": r"notebooks/0[23]\.(0[1-9]|1[0-2])-.*\.ipynb",
        "data": [
            "notebooks/data/births.csv",
            "notebooks/data/president_heights.csv",
            "notebooks/data/state-abbrevs.csv",
            "notebooks/data/state-areas.csv",
            "notebooks/data/state-population.csv",
        ],
        "strip": "notebooks/",
    },
    "pydata": {
        "url": "https://github.com/wesm/pydata-book",
        "commit": "d86d8056fa17b180e2a7dc1d9ae1cfb830967d50",
        "notebooks": r"(ch0[2-58]|ch1[01]|appa)\.ipynb",
        "data": [
            "examples/segismundo.txt",
            "examples/yahoo_price.pkl",
            "examples/yahoo_volume.pkl",
            "examples/macrodata.csv",
            "examples/stock_px.csv",
            "examples/tips.csv",
        ],
        "strip": "",
    },
    "wwt": {
        "url": "https://github.com/jakevdp/WhirlwindTourOfPython",
        "commit": "6f1daf714fe52a8dde6a288674ba46a7feed8816",
        "notebooks": r"(0[3-9]|1[0-4])-.*\.ipynb",
        "data": [],
        "strip": "",
    },
}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


def code_only(notebook: dict) -> dict:
    """A notebook with only its code cells: source and id, no outputs."""
    cells = []
    for i, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "code":
            continue
        source = cell["source"]
        source = "".join(source) if isinstance(source, list) else source
        if not source.strip():
            continue
        cells.append(
            {
                "cell_type": "code",
                "id": cell.get("id") or f"cell-{i}",
                "metadata": {},
                "execution_count": None,
                "outputs": [],
                "source": source,
            }
        )
    return {
        "cells": cells,
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def build(name: str, repo: Path) -> list[str]:
    source = SOURCES[name]
    out = HERE / name
    out.mkdir(exist_ok=True)
    commit = _git(repo, "rev-parse", source["commit"] + "^{commit}").strip()
    made = []
    for path in _git(repo, "ls-tree", "-r", "--name-only", commit).split():
        if re.fullmatch(source["notebooks"], path):
            book = code_only(json.loads(_git(repo, "show", f"{commit}:{path}")))
            if book["cells"]:
                target = out / Path(path).name
                target.write_text(json.dumps(book, indent=1) + "\n")
                made.append(target.name)
    for path in source["data"]:
        target = out / path.removeprefix(source["strip"])
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(
            subprocess.run(
                ["git", "-C", str(repo), "show", f"{commit}:{path}"],
                capture_output=True,
                check=True,
            ).stdout
        )
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--from",
        dest="clones",
        type=Path,
        help="a folder holding a clone of each source, by its name",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        for name, source in SOURCES.items():
            repo = args.clones / name if args.clones else Path(scratch) / name
            if not args.clones:
                subprocess.run(["git", "clone", "--quiet", source["url"], str(repo)], check=True)
            made = build(name, repo)
            print(f"{name}: {len(made)} notebooks")


if __name__ == "__main__":
    main()
