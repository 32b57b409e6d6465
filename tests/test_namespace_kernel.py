"""A notebook killed (`kill -9` of its kernel) at every step boundary and resumed
ends as a clean top-to-bottom run does: its skipped steps' imports, helpers, classes
and data are back for the cells after them."""

import os
import shutil
from pathlib import Path

import nbformat
import pytest
from conftest import cell_text, stepstone_cli
from nbformat.v4 import new_code_cell, new_notebook

pytestmark = pytest.mark.kernel

STEPS = {
    "setup": """\
import json
from collections import Counter, OrderedDict, defaultdict
import numpy as np
import pandas as pd

class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y
    def __eq__(self, other):
        return type(other) is Point and (other.x, other.y) == (self.x, self.y)
    def __repr__(self):
        return f"Point({self.x}, {self.y})"

def scaled(values):
    return [v * factor for v in values]  # reads a global a later step makes
""",
    "data": """\
factor = 10
points = [Point(1, 2), Point(3, 4)]
body = {"zeta": 1, "alpha": {"y": 2, "b": [3, (4, 5)]}}
tally = defaultdict(list)
tally["z"].append(1)
order = OrderedDict(b=1, a=2)
counts = Counter("mississippi")
grid = np.asfortranarray(np.arange(12, dtype=np.int16).reshape(3, 4))
frame = pd.DataFrame({"v": [1.5, 2.5, 3.5]}, index=pd.date_range("2026-01-01", periods=3, freq="D"))
frame.attrs["unit"] = "m"
""",
    "use": """\
tally["a"].append(2)
total = sum(scaled([p.x for p in points]))
""",
}

DESCRIBE = """\
import json as _json
_seen = {
    "body": [repr(body), list(body), list(body["alpha"])],
    "tally": [repr(tally), tally.default_factory.__name__],
    "order": repr(order), "counts": repr(counts), "total": total, "points": repr(points),
    "grid": [str(grid.dtype), grid.shape, bool(grid.flags.f_contiguous), grid.tolist()],
    "frame": [repr(frame), str(frame.index.freq), frame.attrs],
    "helpers": [scaled([1]), Point(1, 2) == points[0], type(json).__name__, type(np).__name__],
}
open("final.txt", "w").write(_json.dumps(_seen, indent=1))
"""


def _kill_point(after: str) -> str:
    return (
        "import os as _os, pathlib as _pathlib, signal as _signal\n"
        f"if _pathlib.Path('kill-after-{after}').exists():\n"
        f"    _pathlib.Path('kill-after-{after}').unlink()\n"
        "    _os.kill(_os.getpid(), _signal.SIGKILL)"
    )


def _notebook(folder: Path) -> Path:
    cells = [new_code_cell("%load_ext stepstone\n%resume")]
    for name, body in STEPS.items():
        log = f"open('executions.log', 'a').write('{name}\\n')\n"
        cells.append(new_code_cell(f"%%step {name}\n{log}{body}"))
        cells.append(new_code_cell(_kill_point(name)))
    cells.append(new_code_cell(DESCRIBE))
    path = folder / "job.ipynb"
    nbformat.write(new_notebook(cells=cells), str(path))
    return path


_CLEAN: list[str] = []  # the clean run's end, made once for every kill point


def _clean_run(folder: Path) -> str:
    if not _CLEAN:
        folder.mkdir()
        done = stepstone_cli("run", str(_notebook(folder)), cwd=folder)
        assert done.returncode == 0, done.stderr
        assert (folder / "executions.log").read_text().split() == list(STEPS)
        _CLEAN.append((folder / "final.txt").read_text())
    return _CLEAN[0]


@pytest.mark.parametrize("after", list(STEPS))
def test_a_kernel_killed_after_a_step_resumes_to_the_clean_runs_end(tmp_path: Path, after: str):
    clean = _clean_run(tmp_path / "clean")
    folder = tmp_path / "killed"
    folder.mkdir()
    notebook = _notebook(folder)
    (folder / f"kill-after-{after}").write_text("")
    killed = stepstone_cli("run", str(notebook), cwd=folder)
    assert killed.returncode == 1 and "kernel died" in killed.stderr, killed.stderr
    assert not (folder / "final.txt").exists()

    resumed = stepstone_cli("run", str(notebook), cwd=folder)
    assert resumed.returncode == 0, resumed.stderr
    assert (folder / "final.txt").read_text() == clean
    assert (folder / "executions.log").read_text().split() == list(STEPS)  # each step once
    assert os.path.getsize(folder / "final.txt") > 200


def _printed(executed: Path) -> list[str]:
    book = nbformat.read(str(executed), as_version=4)
    return [  # what a terminal shows: streams, and the text of displays (step outcomes)
        cell_text(cell) for cell in book.cells if cell.cell_type == "code"
    ]


def test_the_quickstart_needs_no_out_to_resume_as_it_ran(workdir: Path):
    source = Path(__file__).resolve().parents[1] / "notebooks" / "quickstart.ipynb"
    assert "--out" not in source.read_text()
    shutil.copy(source, workdir)
    notebook = workdir / "quickstart.ipynb"
    assert stepstone_cli("run", str(notebook), cwd=workdir).returncode == 0
    first = _printed(workdir / "quickstart.out.ipynb")
    again = stepstone_cli("run", str(notebook), cwd=workdir)  # a new kernel: all skipped
    assert again.returncode == 0 and again.stderr.count(": skipped") == 3, again.stderr
    second = _printed(workdir / "quickstart.out.ipynb")
    assert second[-1] == first[-1] and first[-1].startswith("90 ")
    restored = "kernel: restored f, fields, n_rows, rng, rows; made again csv, pathlib, random"
    assert restored in second[1]
    assert "not restored" not in "".join(second)  # nothing it bound is lost
