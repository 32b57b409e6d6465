"""papermill's users change one word (issue 37): `stepstone run IN OUT` with papermill's
argument forms, and `stepstone.execute_notebook` with papermill's signature, give the
output notebook papermill gives (its cells and outputs), a failed cell marked as
papermill marks it; and the next run resumes."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from conftest import clean_env, stepstone_cli
from nbformat.v4 import new_code_cell, new_notebook

import stepstone

pytestmark = pytest.mark.kernel


def _notebook(folder: Path, *, failing: bool = False) -> Path:
    parameters = new_code_cell("alpha = 1\nbeta = 'b'\ngamma = [1]\ndelta = 0.5\nepsilon = None")
    parameters.metadata["tags"] = ["parameters"]
    cells = [
        parameters,
        new_code_cell("import os\nprint(alpha, repr(beta), gamma, delta, epsilon)"),
        new_code_cell("total = alpha * 2\ntotal"),
        new_code_cell("open('where.txt', 'w').write(os.getcwd())"),
    ]
    if failing:
        cells.append(
            new_code_cell("if not os.path.exists('fixed'):\n    raise ValueError('not yet')")
        )
        cells.append(new_code_cell("print('after the failure')"))
    book = new_notebook(cells=cells)
    book.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    path = folder / "in.ipynb"
    nbformat.write(book, str(path))
    return path


def _cells(path: Path) -> list[tuple[str, str, list[dict]]]:
    """Each cell's type, source and outputs without execution counts or metadata."""
    book = json.loads(path.read_text())
    return [
        (
            c["cell_type"],
            "".join(c["source"]),
            [
                {k: v for k, v in o.items() if k not in ("execution_count", "metadata")}
                for o in c.get("outputs", [])
            ],
        )
        for c in book["cells"]
    ]


ARGUMENTS = [
    "-p", "alpha", "3", "-r", "beta", "7", "-y", "gamma: [2, 3]", "-f", "params.yaml",
    "-b", base64.b64encode(b"epsilon: true").decode(), "-k", "python3",
    "--execution-timeout", "120", "--no-progress-bar",
]  # fmt: skip


def test_papermills_arguments_give_papermills_output_notebook(tmp_path: Path):
    ours, theirs = tmp_path / "ours", tmp_path / "them"
    for folder in (ours, theirs):
        (folder / "elsewhere").mkdir(parents=True)
        _notebook(folder)
        (folder / "params.yaml").write_text("delta: 2.5\n")
    papermill = subprocess.run(
        [sys.executable, "-m", "papermill", "in.ipynb", "out.ipynb", *ARGUMENTS,
         "--cwd", str(theirs / "elsewhere")],
        cwd=theirs, env=clean_env(), capture_output=True, text=True,
    )  # fmt: skip
    assert papermill.returncode == 0, papermill.stderr
    done = stepstone_cli(
        "run", "in.ipynb", "out.ipynb", *ARGUMENTS, "--cwd", str(ours / "elsewhere"), cwd=ours
    )
    assert done.returncode == 0, done.stderr
    assert "[1/" not in done.stderr  # --no-progress-bar
    assert _cells(ours / "out.ipynb") == _cells(theirs / "out.ipynb")
    printed = [o for _, _, outs in _cells(ours / "out.ipynb") for o in outs if "text" in o]
    assert "".join(printed[0]["text"]) == "3 '7' [2, 3] 2.5 True\n"
    assert (ours / "elsewhere" / "where.txt").read_text() == str(ours / "elsewhere")  # --cwd
    again = stepstone_cli(
        "run", "in.ipynb", "out.ipynb", *ARGUMENTS, "--cwd", str(ours / "elsewhere"), cwd=ours
    )
    assert again.returncode == 0 and "executed as nbclient does" not in again.stderr
    status = json.loads(stepstone_cli("status", "--json", cwd=ours).stdout)
    assert all(s["state"] == "verified" for s in status["steps"])


def test_a_failed_cell_is_marked_as_papermill_marks_it_and_the_next_run_resumes(tmp_path: Path):
    ours, theirs = tmp_path / "ours", tmp_path / "them"
    for folder in (ours, theirs):
        folder.mkdir()
        _notebook(folder, failing=True)
    papermill = subprocess.run(
        [sys.executable, "-m", "papermill", "in.ipynb", "out.ipynb"],
        cwd=theirs, env=clean_env(), capture_output=True, text=True,
    )  # fmt: skip
    assert papermill.returncode == 1
    failed = stepstone_cli("run", "in.ipynb", "out.ipynb", cwd=ours)
    assert failed.returncode == 1 and "ValueError: not yet" in failed.stderr
    assert _cells(ours / "out.ipynb") == _cells(theirs / "out.ipynb")
    marked = json.loads((ours / "out.ipynb").read_text())["cells"]
    assert "An Exception was encountered at" in "".join(marked[0]["source"])
    (ours / "fixed").write_text("")
    resumed = stepstone_cli("run", "out.ipynb", "out.ipynb", cwd=ours)  # papermill's habit
    assert resumed.returncode == 0, resumed.stderr
    fixed = json.loads((ours / "out.ipynb").read_text())["cells"]
    assert not any("papermill-error-cell-tag" in c["metadata"].get("tags", []) for c in fixed)


def test_execute_notebook_takes_papermills_arguments_and_resumes(tmp_path: Path, monkeypatch):
    import papermill

    for name in ("ours", "them"):
        (tmp_path / name).mkdir()
        _notebook(tmp_path / name)
    monkeypatch.chdir(tmp_path / "them")
    papermill.execute_notebook("in.ipynb", "out.ipynb", parameters={"alpha": 5}, progress_bar=False)
    monkeypatch.chdir(tmp_path / "ours")
    for _ in range(2):  # the second call skips every cell
        nb = stepstone.execute_notebook(
            "in.ipynb", "out.ipynb", parameters={"alpha": 5}, progress_bar=False
        )
        assert nb.cells[3].outputs[0]["data"]["text/plain"] == "10"
        assert _cells(tmp_path / "ours" / "out.ipynb") == _cells(tmp_path / "them" / "out.ipynb")
    status = json.loads(stepstone_cli("status", "--json", cwd=tmp_path / "ours").stdout)
    assert [s["state"] for s in status["steps"]] == ["verified"] * 3
    stepstone.execute_notebook("in.ipynb", "out.ipynb", stdout_file="x.txt")  # a path too
    assert (tmp_path / "ours" / "x.txt").read_text() == "1 'b' [1] 0.5 None\n"  # defaults


def _papermill_beside(tmp_path: Path, cells: list[str]) -> tuple[Path, Path, int]:
    """The same notebook in `ours` and `them`, run by papermill in `them`."""
    ours, theirs = tmp_path / "ours", tmp_path / "them"
    for folder in (ours, theirs):
        folder.mkdir()
        book = new_notebook(cells=[new_code_cell(c) for c in cells])
        book.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
        nbformat.write(book, str(folder / "in.ipynb"))
    papermill = subprocess.run(
        [sys.executable, "-m", "papermill", "in.ipynb", "out.ipynb"],
        cwd=theirs, env=clean_env(), capture_output=True, text=True,
    )  # fmt: skip
    return ours, theirs, papermill.returncode


def test_a_cell_that_does_not_compile_shows_its_syntax_error_as_papermill_does(tmp_path: Path):
    ours, theirs, code = _papermill_beside(tmp_path, ["x = 1", 'print "old style"', "y = 2"])
    assert code == 1
    failed = stepstone_cli("run", "in.ipynb", "out.ipynb", cwd=ours)
    assert failed.returncode == 1 and "SyntaxError" in failed.stderr
    assert _cells(ours / "out.ipynb") == _cells(theirs / "out.ipynb")  # no frames of stepstone's


def test_a_step_that_called_sys_exit_0_stops_the_notebook_again_when_skipped(tmp_path: Path):
    cells = ["import sys", "open('ran.txt', 'a').write('x')\nsys.exit(0)", "print('not run')"]
    ours, theirs, code = _papermill_beside(tmp_path, cells)
    assert code == 0
    for _ in range(2):  # the second run skips the cell that exited, and stops there again
        done = stepstone_cli("run", "in.ipynb", "out.ipynb", cwd=ours)
        assert done.returncode == 0, done.stderr
        assert _cells(ours / "out.ipynb") == _cells(theirs / "out.ipynb")
    assert (ours / "ran.txt").read_text() == "x"


def test_a_notebook_for_another_language_is_refused_before_a_kernel_starts(tmp_path: Path):
    book = new_notebook(cells=[new_code_cell("x <- 1")])
    book.metadata["kernelspec"] = {"name": "ir", "display_name": "R", "language": "R"}
    nbformat.write(book, str(tmp_path / "in.ipynb"))
    refused = stepstone_cli("run", "in.ipynb", cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr
    assert "written for a R kernel ('ir')" in refused.stderr and "-k python3" in refused.stderr
    assert not (tmp_path / ".stepstone").exists()
