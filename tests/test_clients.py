"""`stepstone run` runs every notebook nbclient runs, with the same outcome: nbclient's
own test notebooks, as they are and with a first cell that opens a run of any id."""

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from conftest import clean_env, git
from conftest import stepstone_cli as cli
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

pytestmark = pytest.mark.kernel

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
def test_a_notebook_without_stepstone_runs_as_nbclient_runs_it_with_no_cells(
    workdir: Path, name: str
):
    path = _copy(workdir, name, opens=False)
    outcome, seen = _by_nbclient(path)
    done = cli("run", str(path), "--no-cells", cwd=workdir)
    assert done.returncode == (0 if outcome == "ok" else 1), done.stdout + done.stderr
    if outcome == "ok":
        assert "no steps (it opens no stepstone run" in done.stdout
    else:
        assert f"a cell failed: {outcome}" in done.stderr
    executed = json.loads((workdir / f"{path.stem}.out.ipynb").read_text())
    assert _seen(executed["cells"]) == seen
    assert not (workdir / ".stepstone").exists()  # no store for a notebook that uses none
    assert "over TCP without encryption" not in done.stderr  # its kernel talks over sockets


def _killed_after(path: Path, step: int) -> subprocess.CompletedProcess[str]:
    """`stepstone run` of `path`, its kernel killed (kill -9) once `step` steps ended."""
    import psutil

    lines = []
    with subprocess.Popen(
        [sys.executable, "-m", "stepstone", "run", str(path)],
        cwd=path.parent,
        env=clean_env(),
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    ) as proc:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if line.startswith(f"[{step}/"):
                for child in psutil.Process(proc.pid).children(recursive=True):
                    child.kill()
        proc.wait(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, "", "".join(lines))


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_an_unannotated_notebook_in_cells_mode_shows_what_nbclient_shows_after_a_kill(
    workdir: Path, name: str
):
    """nbclient's own test notebooks, every cell a step (the default for a notebook with
    no stepstone magics): the same outputs as nbclient, after a kill and a resume too."""
    path = _copy(workdir, name, opens=False)
    outcome, seen = _by_nbclient(path)
    done = cli("run", str(path), cwd=workdir)
    assert done.returncode == (0 if outcome == "ok" else 1), done.stdout + done.stderr
    assert "in --cells mode" in done.stderr
    executed = json.loads((workdir / f"{path.stem}.out.ipynb").read_text())
    assert _seen(executed["cells"]) == seen
    if outcome != "ok":
        return
    shutil.rmtree(workdir / ".stepstone")
    total = done.stderr.count(": done")
    if total >= 2:  # (on a busy machine the last cells may end before the kill lands)
        _killed_after(path, total // 2)
    resumed = cli("run", str(path), cwd=workdir)
    assert resumed.returncode == 0, resumed.stderr
    executed = json.loads((workdir / f"{path.stem}.out.ipynb").read_text())
    assert _seen(executed["cells"]) == seen
    again = cli("run", str(path), cwd=workdir)
    assert again.stderr.count(": done") == 0 and again.returncode == 0, again.stderr


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


def _cards(path: Path) -> dict[str, dict[str, str]]:
    """By step name, the outcome bundle its cell showed, which the executed notebook keeps
    in the cell's metadata (its outputs are what the cell's code displayed)."""
    found = {}
    for cell in json.loads(path.read_text())["cells"]:
        source = "".join(cell.get("source", ""))
        if cell.get("cell_type") != "code" or not source.startswith("%%step"):
            continue
        assert not any("stepstone" in (o.get("metadata") or {}) for o in cell["outputs"])
        for data in cell["metadata"].get("stepstone", {}).get("shown", []):
            if "stepstone-outcome" in _text(data.get("text/html", "")):
                found[source.split()[1]] = {k: _text(v) for k, v in data.items()}
    return found


def test_each_step_cell_shows_its_outcome_in_the_executed_notebook(workdir: Path):
    root = Path(__file__).resolve().parents[1]
    shutil.copy(root / "notebooks" / "quickstart.ipynb", workdir)
    nb = workdir / "quickstart.ipynb"
    assert cli("run", str(nb), cwd=workdir).returncode == 0
    first = _cards(workdir / "quickstart.out.ipynb")
    assert "ran — confirmed" in first["make-data"]["text/html"]
    assert first["make-data"]["text/plain"].startswith("step 1 make-data: confirmed (")

    (workdir / "out" / "report.md").write_text("edited by hand\n")
    assert cli("run", str(nb), cwd=workdir).returncode == 0
    cards = _cards(workdir / "quickstart.out.ipynb")
    skipped = cards["make-data"]
    assert "stepstone-skipped" in skipped["text/html"]
    assert "skipped — evidence verified" in skipped["text/html"]
    assert "file:data/prices.csv" in skipped["text/html"]
    assert skipped["text/plain"].startswith("step 1 make-data: skipped, verified (")
    assert "restored f, fields, n_rows" in cards["make-data"]["text/plain"]
    again = cards["report"]
    assert "stepstone-again" in again["text/html"] and "why it ran again" in again["text/html"]
    assert "out/report.md changed" in again["text/plain"]


def test_a_failing_step_cell_keeps_a_failed_card_beside_its_traceback(workdir: Path):
    book = nbformat.v4.new_notebook()
    book.cells = [
        nbformat.v4.new_code_cell("%load_ext stepstone\n%resume"),
        nbformat.v4.new_code_cell("%%step fetch\nraise RuntimeError('feed is <down>')"),
    ]
    nb = workdir / "job.ipynb"
    nbformat.write(book, str(nb))
    done = cli("run", str(nb), cwd=workdir)
    assert done.returncode == 1 and "step fetch failed" in done.stderr
    cards = _cards(workdir / "job.out.ipynb")
    assert "stepstone-failed" in cards["fetch"]["text/html"]
    assert "RuntimeError: feed is &lt;down&gt;" in cards["fetch"]["text/html"]  # escaped
    assert "step 1 fetch: failed" in cards["fetch"]["text/plain"]

    # fixed and run again: confirmed, not "ran again" (nothing had held before)
    book.cells[1] = nbformat.v4.new_code_cell("%%step fetch\nprint('fetched')")
    nbformat.write(book, str(nb))
    assert cli("run", str(nb), cwd=workdir).returncode == 0
    fixed = _cards(workdir / "job.out.ipynb")["fetch"]
    assert "ran — confirmed" in fixed["text/html"], fixed["text/html"]
    assert "stepstone-again" not in fixed["text/html"] and "RuntimeError" not in fixed["text/plain"]


ENGINES = {
    "nbconvert": ["jupyter", "nbconvert", "--to", "notebook", "--execute", "job.ipynb"],
    "papermill": ["papermill", "job.ipynb", "job.out.ipynb"],
}
SLOW = """%%step two --check file:b.txt
open("executions.log", "a").write("two\\n")
open("two-started", "w").write("")
import time; time.sleep(8)
open("b.txt", "w").write("B")"""


def _engine_notebook(folder: Path) -> Path:
    book = nbformat.v4.new_notebook()
    book.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    book.cells = [
        nbformat.v4.new_code_cell("%load_ext stepstone\n%resume"),
        nbformat.v4.new_code_cell(
            '%%step one --check file:a.txt\nopen("executions.log", "a").write("one\\n")\n'
            'open("a.txt", "w").write("A")'
        ),
        nbformat.v4.new_code_cell(SLOW),
        nbformat.v4.new_code_cell(
            '%%step three --check file:c.txt\nopen("executions.log", "a").write("three\\n")\n'
            'open("c.txt", "w").write(open("a.txt").read() + open("b.txt").read())'
        ),
    ]
    path = folder / "job.ipynb"
    nbformat.write(book, str(path))
    return path


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_an_engine_killed_mid_step_resumes_from_that_step(workdir: Path, engine: str):
    import os
    import signal
    import subprocess
    import time

    from conftest import clean_env

    _engine_notebook(workdir)
    env = clean_env()
    started = subprocess.Popen(
        ENGINES[engine],
        cwd=workdir,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 90
    while not (workdir / "two-started").exists():
        assert started.poll() is None and time.monotonic() < deadline, "step two never began"
        time.sleep(0.1)
    os.killpg(started.pid, signal.SIGKILL)  # the engine and its kernel: a machine gone
    started.wait()
    assert not (workdir / "b.txt").exists()

    again = subprocess.run(ENGINES[engine], cwd=workdir, env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-2000:]
    assert (workdir / "executions.log").read_text().split() == ["one", "two", "two", "three"]
    assert (workdir / "c.txt").read_text() == "AB"  # as a run top to bottom makes it
    status = json.loads(cli("status", "--run", "job", "--json", cwd=workdir).stdout)
    assert status["plan_mode"] == "notebook"  # it knew its notebook: the whole plan
    assert [s["state"] for s in status["steps"]] == ["verified"] * 3


def test_each_client_names_its_notebook_its_own_way(workdir: Path, monkeypatch: pytest.MonkeyPatch):
    from stepstone.kernel import clients

    folder = workdir / "sub" / "dir"
    folder.mkdir(parents=True)
    nb = folder / "job.ipynb"
    nb.write_text("{}")
    monkeypatch.chdir(folder)  # a kernel runs in its notebook's folder
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    assert clients.notebook_of({"__vsc_ipynb_file__": str(nb)}) == nb  # VS Code
    assert clients.notebook_of({"__session__": "sub/dir/job.ipynb"}) == nb  # JupyterLab
    monkeypatch.setenv("JPY_SESSION_NAME", "sub/dir/job.ipynb")  # relative to the root
    assert clients.notebook_of({}) == nb
    monkeypatch.setenv("JPY_SESSION_NAME", "elsewhere/job.ipynb")  # not this folder's
    assert clients.notebook_of({}) is None


def _parameterised(folder: Path) -> Path:
    book = nbformat.v4.new_notebook()
    tagged = nbformat.v4.new_code_cell("threshold = 105\nregion = 'eu'")
    tagged.metadata["tags"] = ["parameters"]
    book.cells = [
        nbformat.v4.new_code_cell("%load_ext stepstone\n%resume"),
        tagged,
        nbformat.v4.new_code_cell(
            "%%step report --check file:report.txt\n"
            'open("executions.log", "a").write("report\\n")\n'
            'open("report.txt", "w").write(f"{region} {threshold!r}")'
        ),
    ]
    path = folder / "job.ipynb"
    nbformat.write(book, str(path))
    return path


def test_stepstone_run_takes_papermills_parameters_and_makes_a_run_of_each_set(workdir: Path):
    import hashlib

    nb = _parameterised(workdir)
    (workdir / "params.yaml").write_text("region: us\n")
    done = cli("run", str(nb), "-f", "params.yaml", "-p", "threshold", "110", cwd=workdir)
    assert done.returncode == 0, done.stderr
    assert (workdir / "report.txt").read_text() == "us 110"  # -p typed as papermill does
    wanted = json.dumps({"region": "us", "threshold": 110}, sort_keys=True, separators=(",", ":"))
    run_id = "job-" + hashlib.sha256(wanted.encode()).hexdigest()[:8]
    assert f"as run {run_id}" in done.stderr
    executed = json.loads((workdir / "job.out.ipynb").read_text())
    tags = [c["metadata"].get("tags") for c in executed["cells"]]
    assert tags[1:3] == [["parameters"], ["injected-parameters"]]  # right after, as papermill
    status = json.loads(cli("status", "--run", run_id, "--json", cwd=workdir).stdout)
    assert [s["state"] for s in status["steps"]] == ["verified"]
    info = json.loads(git("show", f"{run_id}:run.json", cwd=workdir / ".stepstone"))
    assert info["parameters"] == wanted

    again = cli("run", str(nb), "-f", "params.yaml", "-p", "threshold", "110", cwd=workdir)
    assert again.returncode == 0 and "[1/1] report: skipped" in again.stderr, again.stderr
    other = cli("run", str(nb), "--run", run_id, "-p", "threshold", "120", cwd=workdir)
    assert other.returncode == 2 and "was made with" in other.stderr  # before any kernel
    assert (workdir / "executions.log").read_text().split() == ["report"]
