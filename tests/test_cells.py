"""Every cell a step (issue 37): a notebook nobody annotated, run with `stepstone run`,
resumes after a kill at any cell with the names and the executed notebook of an
uninterrupted run, and a second run executes no cell."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat
import pytest
from conftest import clean_env, stepstone_cli
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
        "with open('names.json', 'w') as f:\n    json.dump(names, f)\nnames",
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


def test_resume_cells_in_a_live_kernel_runs_each_cell_as_its_step(
    tmp_path: Path, monkeypatch, capsys
):
    """JupyterLab runs a cell as it shows it: with `%resume --cells`, a cell of the saved
    notebook runs as its step (found by its cell id), and is skipped after a restart."""
    from IPython.core.interactiveshell import InteractiveShell

    path = _notebook(tmp_path)
    book = nbformat.read(str(path), as_version=4)
    code = [c for c in book.cells if c.cell_type == "code"]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STEPSTONE_NOTEBOOK", str(path))
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "stepstone")
    said = []
    try:
        for restart in (False, True):
            if restart:  # a new kernel: none of the cells' names
                for name in ("rng", "rows", "draws", "more", "names", "np", "json"):
                    ip.user_ns.pop(name, None)
            ip.run_line_magic("resume", "--cells")
            for cell in code:
                ip.run_cell(cell.source, store_history=True, cell_id=cell.id)
            said.append(capsys.readouterr().out)
            run = ip.magics_manager.registry["StepstoneMagics"].session.run
            assert list(run.steps.names) == ["cell-2", "draw", "cell-4", "cell-5", "cell-6"]
            assert all(run.records[n].status == "confirmed" for n in run.steps.names)
        assert ip.user_ns["rows"] == json.loads((tmp_path / "names.json").read_text())["rows"]
        assert "step 2 draw: confirmed" in said[0] and "step 2 draw: skipped" in said[1]
        assert "step 5 cell-6: skipped" in said[1]
    finally:
        ip.run_line_magic("unload_ext", "stepstone")


def _execute_as_jupyterlab(client: Any, code: str, cell_id: str) -> dict:
    """Send a cell as JupyterLab sends it (its cell id in the request's metadata); the reply."""
    msg = client.session.msg(
        "execute_request",
        {"code": code, "silent": False, "store_history": True, "user_expressions": {},
         "allow_stdin": False, "stop_on_error": True},
        metadata={"cellId": cell_id},
    )  # fmt: skip
    client.shell_channel.send(msg)
    while True:
        reply = client.get_shell_msg(timeout=120)
        if reply["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
            return reply["content"]


def test_resume_cells_in_a_jupyter_kernel_finds_each_cell_by_its_id(tmp_path: Path):
    from jupyter_client.manager import start_new_kernel

    path = _notebook(tmp_path)
    code = [c for c in nbformat.read(str(path), as_version=4).cells if c.cell_type == "code"]
    env = clean_env(STEPSTONE_NOTEBOOK=str(path))
    for _ in range(2):  # then a restarted kernel: every cell skipped
        manager, client = start_new_kernel(kernel_name="python3", cwd=str(tmp_path), env=env)
        try:
            reply = _execute_as_jupyterlab(client, "%load_ext stepstone\n%resume --cells", "x")
            assert reply["status"] == "ok", reply
            for cell in code:
                reply = _execute_as_jupyterlab(client, cell.source, cell.id)
                assert reply["status"] == "ok", reply
        finally:
            client.stop_channels()
            manager.shutdown_kernel(now=True)
        status = json.loads(stepstone_cli("status", "--json", cwd=tmp_path).stdout)
        assert [s["name"] for s in status["steps"]] == [
            "cell-2",
            "draw",
            "cell-4",
            "cell-5",
            "cell-6",
        ]
        assert all(s["state"] == "verified" for s in status["steps"])
    log = stepstone_cli("log", cwd=tmp_path).stdout
    assert log.count("step 2 draw: confirmed") == 1, log  # the restarted kernel skipped it


def test_a_file_a_later_cell_removes_by_a_shell_command_is_no_missing_evidence(tmp_path: Path):
    # as public notebooks clean up: `!rm some_array.npy` after the cells that wrote it
    cells = [
        "import numpy as np\nnp.save('some_array', np.arange(10))",
        "np.load('some_array.npy').sum()",
        "!rm some_array.npy",
        "done = True",
    ]
    book = new_notebook(cells=[new_code_cell(c) for c in cells])
    book.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    nbformat.write(book, str(tmp_path / "clean.ipynb"))
    first = stepstone_cli("run", "clean.ipynb", cwd=tmp_path)
    assert first.returncode == 0, first.stderr  # it said "not done: the file ... is gone"
    again = stepstone_cli("run", "clean.ipynb", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stderr.count(": skipped") == 4, again.stderr  # `!rm` is a step too
