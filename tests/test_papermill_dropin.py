"""Issue 51: what schedulers and scripts moving from papermill depend on, compared with
papermill 2.7 itself on the same input: the output notebook on stdout (`-`), the
exception a script catches, and the message for a missing input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from conftest import clean_env, killed_when, stepstone_cli
from nbformat.v4 import new_code_cell, new_notebook

import stepstone

pytestmark = pytest.mark.kernel


def _notebook(folder: Path, *sources: str) -> Path:
    return _written(folder, [new_code_cell(source) for source in sources])


def _written(folder: Path, cells: list[Any]) -> Path:
    """`cells` as the notebook `in.ipynb` in `folder`, for Python 3."""
    book = new_notebook(cells=cells)
    book.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
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


def _prepared(path: Path) -> tuple[list[tuple[str, str, tuple[str, ...], bool]], object]:
    """A prepared notebook: each cell's type, source, tags and whether its source is
    hidden, and its papermill parameters."""
    book = json.loads(path.read_text())
    cells = [
        (
            c["cell_type"],
            "".join(c["source"]),
            tuple(c["metadata"].get("tags", [])),
            bool(c["metadata"].get("jupyter", {}).get("source_hidden")),
        )
        for c in book["cells"]
    ]
    assert all(not c.get("outputs") for c in book["cells"])  # nothing ran
    return cells, book["metadata"]["papermill"]["parameters"]


def _with_parameters(folder: Path) -> Path:
    from nbformat.v4 import new_markdown_cell

    parameters = new_code_cell("a = 1")
    parameters.metadata["tags"] = ["parameters"]
    return _written(folder, [new_markdown_cell("# T"), parameters, new_code_cell("print(a)")])


def test_prepare_only_writes_the_notebook_with_its_parameters_as_papermill_does(tmp_path: Path):
    _with_parameters(tmp_path)
    flags = ["-p", "a", "5", "--prepare-only", "--report-mode"]
    theirs = _papermill("in.ipynb", "theirs.ipynb", *flags, cwd=tmp_path)
    ours = stepstone_cli("run", "in.ipynb", "ours.ipynb", *flags, cwd=tmp_path)
    assert ours.returncode == theirs.returncode == 0, ours.stderr
    assert _prepared(tmp_path / "ours.ipynb") == _prepared(tmp_path / "theirs.ipynb")
    cells, parameters = _prepared(tmp_path / "ours.ipynb")
    assert parameters == {"a": 5} and cells[2][1] == "# Parameters\na = 5\n"
    assert [hidden for kind, _, _, hidden in cells] == [False, True, True, True]  # code only
    assert not (tmp_path / ".stepstone").exists()  # no run was made


def test_stdout_and_stderr_files_hold_what_the_cells_wrote_as_papermills_do(tmp_path: Path):
    nb = _notebook(
        tmp_path, "print('one')", "import sys\nprint('oops', file=sys.stderr)", "print('two')"
    )
    theirs = _papermill(
        str(nb), "theirs.ipynb", "--stdout-file", "t.out", "--stderr-file", "t.err", cwd=tmp_path
    )
    assert theirs.returncode == 0, theirs.stderr
    for attempt in ("first", "resumed"):  # the second run skips every cell: the same files
        ours = stepstone_cli(
            "run", str(nb), "ours.ipynb", "--stdout-file", "o.out", "--stderr-file", "o.err",
            cwd=tmp_path,
        )  # fmt: skip
        assert ours.returncode == 0, (attempt, ours.stderr)
        assert (tmp_path / "o.out").read_text() == (tmp_path / "t.out").read_text(), attempt
        assert (tmp_path / "o.err").read_text() == (tmp_path / "t.err").read_text(), attempt
    assert (tmp_path / "o.out").read_text() == "one\ntwo\n"


def test_injected_paths_are_the_parameters_papermill_passes(tmp_path: Path):
    nb = _notebook(tmp_path, "print(PAPERMILL_INPUT_PATH, PAPERMILL_OUTPUT_PATH)")
    theirs = _papermill(str(nb), "theirs.ipynb", "--inject-paths", cwd=tmp_path)
    ours = stepstone_cli("run", str(nb), "theirs.ipynb", "--inject-paths", cwd=tmp_path)
    assert ours.returncode == theirs.returncode == 0, ours.stderr
    printed = _outputs((tmp_path / "theirs.ipynb").read_text())[-1]
    assert printed == [f"{nb} theirs.ipynb\n"]
    only_input = stepstone_cli("run", str(nb), "o.ipynb", "--inject-input-path", cwd=tmp_path)
    assert only_input.returncode == 1 and "PAPERMILL_OUTPUT_PATH" in only_input.stderr


def test_papermills_log_level_engine_and_language_options(tmp_path: Path):
    nb = _notebook(tmp_path, "print('hi')")
    quiet = stepstone_cli(
        "run", str(nb), "out.ipynb", "--log-level", "ERROR", "--no-progress-bar", cwd=tmp_path
    )
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    told = stepstone_cli("run", str(nb), "out.ipynb", "--log-level", "INFO", cwd=tmp_path)
    assert told.stderr.startswith("running in.ipynb"), told.stderr
    for flags in (["--engine", "other"], ["-l", "R"]):
        refused = stepstone_cli("run", str(nb), "out.ipynb", *flags, cwd=tmp_path)
        assert refused.returncode == 2 and "only" in refused.stderr, refused.stderr
    kept = stepstone_cli("run", str(nb), "out.ipynb", "--engine", "nbclient", cwd=tmp_path)
    assert kept.returncode == 0, kept.stderr


def test_autosave_saves_the_output_notebook_during_a_long_cell(tmp_path: Path):
    import time

    nb = _notebook(
        tmp_path, "print('one')", "import time\nprint('started', flush=True)\ntime.sleep(2)\n"
        "print('still going', flush=True)\ntime.sleep(60)",
    )  # fmt: skip
    out = tmp_path / "out.ipynb"

    def saved_mid_cell() -> bool:
        try:
            return "still going" in "".join(_outputs(out.read_text())[1])
        except (OSError, ValueError, IndexError):
            return False

    argv = [sys.executable, "-m", "stepstone", "run", str(nb), "out.ipynb"]
    began = time.monotonic()
    killed_when([*argv, "--autosave-cell-every", "1"], cwd=tmp_path, ready=saved_mid_cell)
    assert time.monotonic() - began < 50  # saved during the cell, not at its end
    assert "".join(_outputs(out.read_text())[1]) == "started\nstill going\n"


def test_without_saving_on_cell_execute_the_output_is_written_at_the_end_only(tmp_path: Path):
    nb = _notebook(tmp_path, "print('one')", "print('two')")
    done = stepstone_cli(
        "run", str(nb), "out.ipynb", "--no-request-save-on-cell-execute", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert _outputs((tmp_path / "out.ipynb").read_text()) == [["one\n"], ["two\n"]]


def test_run_from_another_folder_says_where_its_kernel_runs_first(tmp_path: Path):
    (tmp_path / "nb").mkdir()
    nb = _notebook(tmp_path / "nb", "import os\nprint(os.getcwd())")
    away = stepstone_cli("run", "nb/in.ipynb", "out.ipynb", cwd=tmp_path)
    assert away.returncode == 0, away.stderr
    first = away.stderr.splitlines()[0]
    assert first.startswith("running in.ipynb") and "--cwd ." in first, first
    assert _outputs((tmp_path / "out.ipynb").read_text()) == [[f"{nb.parent}\n"]]
    here = stepstone_cli(  # another run: the kernel's folder is not among a cell's inputs
        "run", "nb/in.ipynb", "out2.ipynb", "--cwd", ".", "--run", "elsewhere", cwd=tmp_path
    )
    assert "--cwd ." not in here.stderr
    assert _outputs((tmp_path / "out2.ipynb").read_text()) == [[f"{tmp_path}\n"]]


def test_execute_notebook_takes_papermills_keywords(tmp_path: Path, monkeypatch, capfd):
    import io

    from nbformat.v4 import new_markdown_cell

    monkeypatch.chdir(tmp_path)
    node = new_notebook(cells=[new_markdown_cell("# T"), new_code_cell("print('hi')")])
    node.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    printed = io.StringIO()
    for attempt in ("first", "resumed"):
        ran = stepstone.execute_notebook(
            node,
            str(tmp_path / "out.ipynb"),
            progress_bar=False,
            report_mode=True,
            autosave_cell_every=0,
            stdout_file=printed,
        )
        assert [c.metadata.get("jupyter", {}).get("source_hidden") for c in ran.cells] == [
            None,
            True,
        ], attempt  # markdown shows, code is hidden
        assert ran.cells[1].outputs[0]["text"] == "hi\n"
    assert printed.getvalue() == "hi\nhi\n"
    said = capfd.readouterr().err  # (the kernel's own stderr may hold its shutdown noise)
    assert "running" not in said and "[1/1]" not in said and "stepstone" not in said, said
    status = json.loads(stepstone_cli("status", "--json", "--run", "out", cwd=tmp_path).stdout)
    assert [s["state"] for s in status["steps"]] == ["verified"]


@pytest.mark.parametrize("stop", ["sys.exit()", "sys.exit(0)", "raise SystemExit"])
def test_a_notebook_that_stops_itself_shows_the_same_stop_when_run_again(tmp_path: Path, stop: str):
    nb = _notebook(tmp_path, "print(1)", f"import sys\n{stop}", "print(3)")
    theirs = _papermill(str(nb), "theirs.ipynb", cwd=tmp_path)
    assert theirs.returncode == 0, theirs.stderr
    expected = json.loads((tmp_path / "theirs.ipynb").read_text())["cells"][1]["outputs"]
    for attempt in ("first", "again"):  # again: the cell is skipped, its exit given back
        ours = stepstone_cli("run", str(nb), "ours.ipynb", cwd=tmp_path)
        assert ours.returncode == 0, (attempt, ours.stderr)
        book = json.loads((tmp_path / "ours.ipynb").read_text())
        shown = book["cells"][1]["outputs"]
        assert _errors(shown) == _errors(expected) != [], attempt


def _errors(outputs: list[dict[str, object]]) -> list[tuple[object, object]]:
    return [(o["ename"], o["evalue"]) for o in outputs if o["output_type"] == "error"]


def test_the_stdout_file_is_no_steps_writing(tmp_path: Path):
    nb = _notebook(
        tmp_path,
        "import time\nprint('one', flush=True)\ntime.sleep(0.5)",
        "import time\nprint('two', flush=True)\ntime.sleep(0.5)",
    )
    flags = ["--stdout-file", "printed.txt"]
    first = stepstone_cli("run", str(nb), "out.ipynb", *flags, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    status = json.loads(stepstone_cli("status", "--json", cwd=tmp_path).stdout)
    assert not any("printed.txt" in note for note in status["notes"]), status["notes"]
    for step in ("cell-1", "cell-2"):  # neither wrote it: this command did, as they ran
        shown = stepstone_cli("show", step, cwd=tmp_path).stdout
        assert "printed.txt" not in shown, shown
    again = stepstone_cli("run", str(nb), "out.ipynb", *flags, cwd=tmp_path)
    assert again.returncode == 0 and "no kernel was started" in again.stderr, again.stderr
    assert (tmp_path / "printed.txt").read_text() == "one\ntwo\n"
