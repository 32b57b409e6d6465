"""The oracle of issue 49: after anything, `stepstone run` ends as a fresh plain run
(papermill) of the final notebook on the final data, in another folder.

`Case` holds one notebook's folder; `fresh_beside` copies the final notebook and data
into a new folder and runs papermill there; `differences` compares what the two runs
left: every file (the stores and notebooks aside), every code cell's outputs in the
executed notebook, the exit status, and the kernel's user names at the end (read by a
probe cell the oracle appends: each name's type and value, and which names share
one object).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
from conftest import clean_env
from nbformat.v4 import new_code_cell, new_notebook

NOTEBOOK = "nb.ipynb"
EXECUTED = "out.ipynb"
PROBE_MARK = "# oracle: the kernel's names"
# The probe prints each user name's type and value (addresses taken out), and which
# names are one object; its nonce makes it a cell of its own at every run. It reaches
# the names through `sys.modules`, which stepstone does not take for a cell that may
# read any name (as `globals()` is): the probe's presence changes nothing it saves.
PROBE = (
    PROBE_MARK
    + "\n_oracle_nonce = {nonce!r}\n"
    + """import json as _oj, re as _ore, sys as _osys, types as _ot
def _oracle_value(v):
    try:
        import pandas as _pd
        if isinstance(v, (_pd.DataFrame, _pd.Series)):
            return v.to_json(orient='split', date_format='iso') + str(v.dtypes) + str(v.index.names)
    except ImportError:
        pass
    try:
        import numpy as _np
        if isinstance(v, _np.ndarray):
            return repr(v.tolist()) + str(v.dtype) + str(v.shape)
    except ImportError:
        pass
    return _ore.sub(r' at 0x[0-9a-fA-F]+', ' at 0x', repr(v))[:2000]
_oracle_names = {{}}
_oracle_ids = {{}}
for _on, _ov in sorted(dict(_osys.modules['__main__'].__dict__).items()):
    if _on.startswith('_') or _on in ('In', 'Out', 'get_ipython', 'exit', 'quit', 'open'):
        continue
    if isinstance(_ov, (_ot.ModuleType, _ot.FunctionType, type)):
        _oracle_names[_on] = type(_ov).__name__ + ' ' + getattr(_ov, '__name__', '')
        continue
    _oracle_names[_on] = type(_ov).__name__ + ': ' + _oracle_value(_ov)
    _oracle_ids.setdefault(id(_ov), []).append(_on)
del _on, _ov
_oracle_names['(shared)'] = sorted(v for v in _oracle_ids.values() if len(v) > 1)
print('ORACLE ' + _oj.dumps(_oracle_names, sort_keys=True))
"""
)


def _probe() -> str:
    return PROBE.format(nonce=uuid.uuid4().hex)


@dataclass
class Ended:
    """What one run left: its exit status and what it said."""

    code: int
    said: str


@dataclass
class Case:
    """A notebook's folder, driven by `stepstone run` as a user would."""

    folder: Path
    cells: list[str] = field(default_factory=list)
    data: dict[str, bytes] = field(default_factory=dict)  # the input files, by path
    kernel_name: str = "python3"

    def put(self, path: str, text: str) -> None:
        """Change (or add) an input file, outside any run."""
        target = self.folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        self.took(path)

    def took(self, path: str) -> None:
        """The file at `path` as it is now is an input (changed outside any run)."""
        self.data[path] = (self.folder / path).read_bytes()

    def write(self, cells: list[str] | None = None) -> Path:
        """Write the notebook (these cells, and the probe last)."""
        if cells is not None:
            self.cells = list(cells)
        self.folder.mkdir(parents=True, exist_ok=True)
        book = new_notebook(cells=[new_code_cell(c) for c in [*self.cells, _probe()]])
        for n, cell in enumerate(book.cells):
            cell["id"] = f"c{n}-{hashlib.sha1(cell.source.encode()).hexdigest()[:6]}"
        book.metadata["kernelspec"] = {
            "name": self.kernel_name,
            "display_name": "Python 3",
            "language": "python",
        }
        path = self.folder / NOTEBOOK
        nbformat.write(book, str(path))
        return path

    def run(self, *args: str, timeout: float = 300) -> Ended:
        """`stepstone run nb.ipynb out.ipynb ARGS` in the folder (the probe made new)."""
        self.write()
        done = subprocess.run(
            [sys.executable, "-m", "stepstone", "run", NOTEBOOK, EXECUTED, *args],
            cwd=self.folder,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return Ended(done.returncode, done.stdout + done.stderr)

    def start(self, *args: str) -> subprocess.Popen[str]:
        """`stepstone run` started, not waited for (to be killed)."""
        self.write()
        return subprocess.Popen(
            [sys.executable, "-m", "stepstone", "run", NOTEBOOK, EXECUTED, *args],
            cwd=self.folder,
            env=clean_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )


def fresh_beside(case: Case, folder: Path, timeout: float = 300) -> Ended:
    """The final notebook on the final data, run by papermill in `folder`."""
    folder.mkdir(parents=True)
    shutil.copy(case.folder / NOTEBOOK, folder / NOTEBOOK)
    for path, content in case.data.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(content)
    done = subprocess.run(
        [sys.executable, "-m", "papermill", NOTEBOOK, EXECUTED, "--cwd", "."],
        cwd=folder,
        env=clean_env(PYTHONHASHSEED="0"),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return Ended(done.returncode, done.stdout + done.stderr)


def files(folder: Path) -> dict[str, str]:
    """Every file the runs may write, by path: its sha256."""
    found = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if path.is_dir() or rel.parts[0] in (".stepstone", ".ipynb_checkpoints"):
            continue
        if rel.name in (NOTEBOOK, EXECUTED) or "__pycache__" in rel.parts:
            continue
        found[str(rel)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


_VOLATILE = re.compile(r"0x[0-9a-fA-F]{6,}")


def _output(out: dict[str, Any]) -> dict[str, Any]:
    kind = out.get("output_type")
    if kind == "stream":
        return {"stream": out["name"], "text": "".join(out["text"])}
    if kind == "error":
        return {"error": out["ename"], "value": out["evalue"]}
    data = dict(out.get("data", {}))
    if "image/png" in data:  # pixels may differ by a renderer's run: presence and size
        data["image/png"] = "png"
    shown = {k: ("".join(v) if isinstance(v, list) else v) for k, v in data.items()}
    steady = {k: _VOLATILE.sub("0x", v) if isinstance(v, str) else v for k, v in shown.items()}
    return {"data": steady}


def outputs(executed: Path) -> tuple[list[list[dict[str, Any]]], dict[str, Any]]:
    """Each code cell's outputs (the probe's apart), and the names the probe printed."""
    if not executed.exists():
        return [], {}
    book = json.loads(executed.read_text())
    cells = [c for c in book["cells"] if c["cell_type"] == "code"]
    names: dict[str, Any] = {}
    shown = []
    for cell in cells:
        source = "".join(cell["source"])
        outs = [_output(o) for o in cell.get("outputs", [])]
        if source.startswith(PROBE_MARK):
            for out in outs:
                for line in out.get("text", "").splitlines():
                    if line.startswith("ORACLE "):
                        names = json.loads(line[len("ORACLE ") :])
            continue
        shown.append(outs)
    return shown, names


_NOT_RESTORED = re.compile(r"not restored (.*)$", re.M)


def not_restored(executed: Path) -> set[str]:
    """The names stepstone's cards in the executed notebook say it could not give back
    (`not restored c (sqlite3.Connection)`): a value that cannot be saved comes back only
    by running its cell again, which it does when a cell that runs reads it."""
    if not executed.exists():
        return set()
    found: set[str] = set()
    for cell in json.loads(executed.read_text())["cells"]:
        for text in (cell.get("metadata", {}).get("stepstone") or {}).get("said", []):
            for match in _NOT_RESTORED.finditer(text):
                found.update(re.findall(r"(\w+) \(", match.group(1)))
    return found


def differences(ours: Path, ended: Ended, theirs: Path, fresh: Ended) -> list[str]:
    """What differs between stepstone's folder and the fresh run's, in words."""
    found = []
    if (ended.code == 0) != (fresh.code == 0):
        found.append(f"exit status: stepstone {ended.code}, papermill {fresh.code}")
    mine, other = files(ours), files(theirs)
    for path in sorted(other):  # a file an earlier version of a cell wrote may stay
        if mine.get(path) != other.get(path):
            a, b = ours / path, theirs / path
            what = [p.read_text(errors="replace")[:200] if p.exists() else "(none)" for p in (a, b)]
            found.append(f"file {path}: stepstone {what[0]!r}, papermill {what[1]!r}")
    (cells_a, names_a), (cells_b, names_b) = outputs(ours / EXECUTED), outputs(theirs / EXECUTED)
    for n, (a, b) in enumerate(zip(cells_a, cells_b, strict=False)):
        if a != b:
            found.append(f"outputs of code cell {n}: stepstone {a}, papermill {b}")
    if len(cells_a) != len(cells_b):
        found.append(f"code cells: stepstone {len(cells_a)}, papermill {len(cells_b)}")
    said = not_restored(ours / EXECUTED)
    for name in sorted(set(names_a) | set(names_b)):
        if name not in names_a and name in said:
            continue  # a value that cannot be saved, which no cell that ran needed: said so
        if names_a.get(name) != names_b.get(name):
            ours_, theirs_ = names_a.get(name), names_b.get(name)
            found.append(f"name {name}: stepstone {ours_}, papermill {theirs_}")
    return found


def compare(case: Case, ended: Ended, tmp: Path) -> list[str]:
    """The fresh run of the case's final notebook beside it, and the differences."""
    theirs = tmp / f"fresh-{uuid.uuid4().hex[:8]}"
    fresh = fresh_beside(case, theirs)
    return differences(case.folder, ended, theirs, fresh)
