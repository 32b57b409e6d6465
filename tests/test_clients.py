"""`stepstone run` runs every notebook nbclient runs, with the same outcome: nbclient's
own test notebooks, as they are and with a first cell that opens a run of any id."""

import json
import shutil
from pathlib import Path
from typing import Any

import nbformat
import pytest
from conftest import stepstone_cli as cli
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

FILES = Path(__file__).resolve().parent / "files" / "nbclient"
NOTEBOOKS = sorted(p.name for p in FILES.glob("*.ipynb"))
OPENING = "%load_ext stepstone\n%resume --run t"


def _copy(workdir: Path, name: str, *, opens: bool) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    shutil.copy(FILES / "python.png", workdir)
    path = workdir / name
    book = json.loads((FILES / name).read_text())
    if opens:
        book["cells"].insert(
            0,
            {"cell_type": "code", "metadata": {}, "source": OPENING, "outputs": []}
            | ({"id": "opens-a-run"} if book.get("nbformat_minor", 0) >= 5 else {})
            | {"execution_count": None},
        )
    path.write_text(json.dumps(book))
    return path


def _text(value: Any) -> Any:
    return "".join(value) if isinstance(value, list) else value  # as saved: lines


def _seen(cells: list[Any]) -> list[list[tuple[Any, ...]]]:
    """What each code cell showed, without execution counts or tracebacks' colours."""
    return [
        [
            (
                o.get("output_type"),
                o.get("name"),
                _text(o.get("text")),
                _text((o.get("data") or {}).get("text/plain")),
                o.get("ename"),
            )
            for o in cell.get("outputs", [])
        ]
        for cell in cells
        if cell.get("cell_type") == "code"
    ]


def _by_nbclient(path: Path) -> tuple[str, list[Any]]:
    book = nbformat.read(str(path), as_version=4)
    client = NotebookClient(
        book, timeout=60, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    try:
        client.execute()
        outcome = "ok"
    except CellExecutionError as exc:
        outcome = exc.ename
    return outcome, _seen(book.cells)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_a_notebook_without_stepstone_runs_as_nbclient_runs_it(workdir: Path, name: str):
    path = _copy(workdir, name, opens=False)
    outcome, seen = _by_nbclient(path)
    done = cli("run", str(path), cwd=workdir)
    assert done.returncode == (0 if outcome == "ok" else 1), done.stdout + done.stderr
    if outcome == "ok":
        assert "no steps (it opens no stepstone run" in done.stdout
    else:
        assert f"a cell failed: {outcome}" in done.stderr
    executed = json.loads((workdir / f"{path.stem}.out.ipynb").read_text())
    assert _seen(executed["cells"]) == seen
    assert not (workdir / ".stepstone").exists()  # no store for a notebook that uses none
    assert "over TCP without encryption" not in done.stderr  # its kernel talks over sockets


@pytest.mark.parametrize("name", ["HelloWorld.ipynb", "Error.ipynb", "Output.ipynb"])
def test_a_notebook_that_opens_a_run_of_its_own_id_is_read_back_by_that_id(
    workdir: Path, name: str
):
    path = _copy(workdir, name, opens=True)
    outcome, seen = _by_nbclient(_copy(workdir / "plain", name, opens=False))
    done = cli("run", str(path), cwd=workdir)
    assert done.returncode == (0 if outcome == "ok" else 1), done.stdout + done.stderr
    assert "no run" not in done.stderr
    if outcome == "ok":
        assert "as run t: it has no %%step cells yet" in done.stdout
    executed = json.loads((workdir / f"{path.stem}.out.ipynb").read_text())
    assert _seen(executed["cells"])[1:] == seen
    status = cli("status", "--run", "t", "--json", cwd=workdir)
    assert status.returncode == 0 and json.loads(status.stdout)["run"] == "t"


def test_a_notebook_outside_the_schema_runs_after_a_note(workdir: Path):
    path = _copy(workdir, "Output.ipynb", opens=False)  # its kernelspec has no name
    done = cli("run", str(path), cwd=workdir)
    assert "does not match the notebook schema ('name' is a required property)" in done.stderr
    assert "running it as Jupyter does" in done.stderr
    assert "not a valid notebook" not in done.stderr
