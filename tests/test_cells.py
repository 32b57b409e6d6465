"""Every cell a step (issue 37): a notebook nobody annotated, run with `stepstone run`,
resumes after a kill at any cell with the names and the executed notebook of an
uninterrupted run, and a second run executes no cell."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from conftest import stepstone_cli
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

pytestmark = pytest.mark.kernel

KILL = (
    "import os, signal\n"
    "if os.path.exists('kill-here'):\n"
    "    os.remove('kill-here')\n"
    "    os.kill(os.getpid(), signal.SIGKILL)\n"
)
CELLS = [
    ("md", "# A report nobody annotated"),
    ("code", "%matplotlib inline"),
    ("code", "import json\nimport numpy as np\nrng = np.random.default_rng(7)\nrows = []"),
    ("code", "# step: draw\ndraws = rng.random(4)\nrows.append(draws.sum())\ndraws.round(3)"),
    (
        "code",
        "print('drew', len(draws))\nwith open('drawn.txt', 'w') as f:\n    f.write(str(rows))",
    ),
    ("code", "more = rng.integers(0, 100, 3)\nrows.append(int(more.sum()))\nmore"),
    (
        "code",
        "names = {'rows': [float(r) for r in rows], 'more': more.tolist()}\n"
        "json.dump(names, open('names.json', 'w'))\nnames",
    ),
]


def _notebook(folder: Path, kill_before: int | None = None) -> Path:
    cells = []
    for n, (kind, source) in enumerate(CELLS):
        if kind == "md":
            cells.append(new_markdown_cell(source))
        else:
            if n == kill_before:  # killed as this cell runs (after its `# step:` line)
                named = source.startswith("# step:")
                head, _, rest = source.partition("\n") if named else ("", "", source)
                source = (head + "\n" if named else "") + KILL + rest
            cells.append(new_code_cell(source))
    book = new_notebook(cells=cells)
    book.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    path = folder / "report.ipynb"
    nbformat.write(book, str(path))
    return path


def _outputs(path: Path) -> list[list[dict]]:
    cells = json.loads(path.read_text())["cells"]
    return [
        [{k: v for k, v in o.items() if k != "execution_count"} for o in c.get("outputs", [])]
        for c in cells
    ]


@pytest.mark.parametrize("kill_before", [3, 5, 6])
def test_an_unannotated_notebook_killed_at_a_cell_resumes_as_an_uninterrupted_run(
    tmp_path: Path, kill_before: int
):
    clean, killed = tmp_path / "clean", tmp_path / "killed"
    for folder in (clean, killed):
        folder.mkdir()
        _notebook(folder, kill_before)  # the same cells: the kill cell does nothing unless told
    first = stepstone_cli("run", "report.ipynb", cwd=clean)
    assert first.returncode == 0, first.stderr
    assert "in --cells mode: every code cell is a step" in first.stderr.splitlines()[0]
    assert "[2/5] draw: done" in first.stderr  # `# step: NAME` names it; %matplotlib is no step
    (killed / "kill-here").write_text("")
    assert stepstone_cli("run", "report.ipynb", cwd=killed).returncode == 1
    resumed = stepstone_cli("run", "report.ipynb", cwd=killed)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stderr.count(": skipped") == kill_before - 2  # the cells before the kill
    for name in ("names.json", "drawn.txt"):
        assert (killed / name).read_text() == (clean / name).read_text()
    assert _outputs(killed / "report.out.ipynb") == _outputs(clean / "report.out.ipynb")
    source = json.loads((killed / "report.out.ipynb").read_text())["cells"]
    assert not any("%%step" in "".join(c["source"]) for c in source)  # as written
    again = stepstone_cli("run", "report.ipynb", cwd=killed)
    assert again.returncode == 0 and again.stderr.count(": skipped") == 5, again.stderr


def test_a_file_a_cell_wrote_is_its_evidence(tmp_path: Path):
    _notebook(tmp_path)
    assert stepstone_cli("run", "report.ipynb", cwd=tmp_path).returncode == 0
    (tmp_path / "drawn.txt").unlink()
    status = json.loads(stepstone_cli("status", "--json", cwd=tmp_path).stdout)
    stale = {s["name"]: s["reason"] for s in status["steps"] if s["state"] == "stale"}
    assert stale["cell-4"] == "the file drawn.txt it wrote is gone since it ran"
    again = stepstone_cli("run", "report.ipynb", cwd=tmp_path)
    assert again.returncode == 0 and "cell-4: done" in again.stderr
    assert (tmp_path / "drawn.txt").exists()


def test_no_cells_runs_an_unannotated_notebook_as_nbclient_does(tmp_path: Path):
    _notebook(tmp_path)
    done = stepstone_cli("run", "report.ipynb", "--no-cells", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "executed as nbclient does" in done.stderr
    assert not (tmp_path / ".stepstone").exists()
