"""Issue 51: what schedulers and scripts moving from papermill depend on, compared with
papermill 2.7 itself on the same input: the output notebook on stdout (`-`), the
exception a script catches, and the message for a missing input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from conftest import clean_env, killed_when, stepstone_cli
from nbformat.v4 import new_code_cell, new_notebook

import stepstone

pytestmark = pytest.mark.kernel


def _notebook(folder: Path, *sources: str) -> Path:
    book = new_notebook(cells=[new_code_cell(source) for source in sources])
    book.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    path = folder / "in.ipynb"
    nbformat.write(book, str(path))
    return path


def _papermill(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "papermill", *args],
        cwd=cwd,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _outputs(text: str) -> list[list[str]]:
    """Each code cell's text outputs, from a notebook's JSON."""
    book = json.loads(text)
    return [
        ["".join(o.get("text", "")) for o in cell.get("outputs", [])]
        for cell in book["cells"]
        if cell["cell_type"] == "code"
    ]


def test_a_dash_for_the_output_writes_the_executed_notebook_to_stdout(tmp_path: Path):
    nb = _notebook(tmp_path, "print('hello')", "x = 2\nprint(x * 21)")
    ours = stepstone_cli("run", str(nb), "-", cwd=tmp_path)
    assert ours.returncode == 0, ours.stderr
    assert not (tmp_path / "-").exists()
    theirs = _papermill(str(nb), "-", cwd=tmp_path)
    assert theirs.returncode == 0, theirs.stderr
    assert _outputs(ours.stdout) == _outputs(theirs.stdout) == [["hello\n"], ["42\n"]]


def test_a_failed_cell_is_caught_as_papermills_execution_error(tmp_path: Path, monkeypatch):
    from papermill.exceptions import PapermillExecutionError

    monkeypatch.chdir(tmp_path)
    nb = _notebook(tmp_path, "x = 1", "raise ValueError('boom')")
    with pytest.raises(PapermillExecutionError) as caught:
        stepstone.execute_notebook(str(nb), str(tmp_path / "out.ipynb"), progress_bar=False)
    failed = caught.value
    assert isinstance(failed, stepstone.CellFailed)
    assert (failed.ename, failed.evalue) == ("ValueError", "boom")
    assert failed.exec_count == 2 and "raise ValueError" in failed.source
    assert any("boom" in line for line in failed.traceback)


def test_a_missing_input_notebook_is_named_without_a_traceback(tmp_path: Path):
    done = stepstone_cli("run", "nosuch.ipynb", "out.ipynb", cwd=tmp_path)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "no notebook at" in done.stderr and "nosuch.ipynb" in done.stderr


@pytest.mark.parametrize("stepped", [False, True], ids=["plain", "step"])
def test_a_cell_past_the_execution_timeout_leaves_the_output_notebook_marked(
    tmp_path: Path, stepped: bool
):
    setup = ["%load_ext stepstone\n%resume"] if stepped else []
    slow = ("%%step slow\n" if stepped else "") + "import time\ntime.sleep(30)"
    nb = _notebook(tmp_path, *setup, "print('before')", slow, "print('after')")
    done = stepstone_cli("run", str(nb), "out.ipynb", "--execution-timeout", "3", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and "timed out" in done.stderr, done.stderr
    book = json.loads((tmp_path / "out.ipynb").read_text())
    tagged = ["papermill-error-cell-tag" in c["metadata"].get("tags", []) for c in book["cells"]]
    anchor = tagged.index(True, 1)  # after the message at the top: the anchor before it
    assert "time.sleep(30)" in "".join(book["cells"][anchor + 1]["source"])  # that cell
    assert _outputs((tmp_path / "out.ipynb").read_text())[len(setup)] == ["before\n"]
    if stepped:
        status = json.loads(stepstone_cli("status", "--json", cwd=tmp_path).stdout)
        (slow_step,) = [s for s in status["steps"] if s["name"] == "slow"]
        assert slow_step["state"] == "failed" and "timed out" in slow_step["reason"], slow_step


def _metadata(path: Path) -> tuple[list[str], dict[str, object], list[tuple[object, ...]]]:
    """An output notebook's papermill metadata without times or paths: the notebook's
    keys, its parameters and exception; each cell's type, tags, status and exception."""
    book = json.loads(path.read_text())
    said = book["metadata"]["papermill"]
    kept = {"parameters": said["parameters"], "exception": said["exception"]}
    cells = [
        (
            c["cell_type"],
            tuple(c["metadata"].get("tags", ["(none)"])),
            c["metadata"].get("papermill", {}).get("status"),
            c["metadata"].get("papermill", {}).get("exception"),
        )
        for c in book["cells"]
    ]
    return sorted(said), kept, cells


@pytest.mark.parametrize("fails", [False, True], ids=["ok", "raises"])
def test_the_output_notebook_carries_papermills_metadata(tmp_path: Path, fails: bool):
    from nbformat.v4 import new_markdown_cell

    parameters = new_code_cell("a = 1")
    parameters.metadata["tags"] = ["parameters"]
    cells = [new_markdown_cell("# T"), parameters, new_code_cell("print(a)")]
    cells += [new_code_cell("raise ValueError('x')" if fails else "b = a + 1")]
    cells += [new_markdown_cell("after"), new_code_cell("print(2)")]
    book = new_notebook(cells=cells)
    book.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(book, str(tmp_path / "in.ipynb"))
    theirs = _papermill("in.ipynb", "theirs.ipynb", "-p", "a", "5", cwd=tmp_path)
    ours = stepstone_cli("run", "in.ipynb", "ours.ipynb", "-p", "a", "5", cwd=tmp_path)
    assert ours.returncode == theirs.returncode == (1 if fails else 0), ours.stderr
    assert _metadata(tmp_path / "ours.ipynb") == _metadata(tmp_path / "theirs.ipynb")


def test_a_run_killed_with_its_process_leaves_the_output_notebook_so_far(tmp_path: Path):
    import time

    nb = _notebook(tmp_path, "print('one')", "import time\ntime.sleep(60)", "print('three')")
    out = tmp_path / "out.ipynb"
    shown_at: list[float] = []

    def into_the_long_cell() -> bool:  # a second after the output notebook appears
        if out.exists() and not shown_at:
            shown_at.append(time.monotonic())
        return bool(shown_at) and time.monotonic() - shown_at[0] >= 1

    argv = [sys.executable, "-m", "stepstone", "run", str(nb), "out.ipynb"]
    killed_when(argv, cwd=tmp_path, ready=into_the_long_cell)
    book = nbformat.read(str(out), as_version=4)  # a notebook Jupyter reads
    assert _outputs(json.dumps(book))[0] == ["one\n"]
    assert [c.source for c in book.cells] == [
        "print('one')",
        "import time\ntime.sleep(60)",
        "print('three')",
    ]  # as written: no setup cell, no %%step line of --cells mode
