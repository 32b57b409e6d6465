"""Resume that knows what depends on what: a changed input, a revised decision or an
upstream step that ran again re-runs only the cells that read it. Real notebooks in
real kernels (`stepstone run`); each cell logs its executions to a side file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from conftest import cell_text, clean_env, stepstone_cli
from nbformat.v4 import new_code_cell, new_notebook

from stepstone.rules.dependencies import cell_names

FOLLOW = {"STEPSTONE_FOLLOW_INPUTS": "1"}  # cells may follow their inputs (opt-in)


def cli(*args: str, cwd: Path, follow: bool = True) -> subprocess.CompletedProcess[str]:
    """The `stepstone` command line, with cells following their inputs unless told."""
    return stepstone_cli(*args, cwd=cwd, **(FOLLOW if follow else {}))


DECIDE = '%decide threshold=105 --why "first guess"'
REVISED = '%decide threshold=110 --revise --why "105 flagged too many"'


def _cell(name: str, line: str, body: str) -> str:
    log = f"with open('executions.log', 'a') as log:\n    log.write('{name}\\n')\n"
    return f"%%step {name} {line}\n{log}{body}"


CELLS = [
    (
        "load",
        "--in file:input.csv --check file:clean.csv",
        "import pathlib\n"
        "pathlib.Path('clean.csv').write_text(pathlib.Path('input.csv').read_text().upper())",
    ),
    (
        "count",
        "--check file:count.txt",
        "import pathlib\n"
        "rows = pathlib.Path('clean.csv').read_text().splitlines()\n"
        "pathlib.Path('count.txt').write_text(str(len(rows)))",
    ),
    (
        "other",
        "--check file:other.txt --out other_value",
        "import pathlib\nother_value = 7\npathlib.Path('other.txt').write_text('7')",
    ),
    (
        "report",
        "--check file:report.md",
        "import pathlib, stepstone\n"
        "threshold = stepstone.decided('threshold')\n"
        "pathlib.Path('report.md').write_text(f'threshold: {threshold}')",
    ),
    (
        "final",
        "--check file:final.txt",
        "import pathlib\n"
        "pathlib.Path('final.txt').write_text(str(int(pathlib.Path('other.txt').read_text()) * 2))",
    ),
]


def _notebook(folder: Path, *, decide: str = DECIDE, hang_in: str | None = None) -> Path:
    cells = [new_code_cell("%load_ext stepstone\n%resume"), new_code_cell(decide)]
    for name, line, body in CELLS:
        if name == hang_in:
            body = (
                "import os, time\n"
                "if not os.path.exists('resumed'):\n"
                "    open('kernel.pid', 'w').write(str(os.getpid()))\n"
                "    time.sleep(120)\n" + body
            )
        cells.append(new_code_cell(_cell(name, line, body)))
    path = folder / "job.ipynb"
    nbformat.write(new_notebook(cells=cells), str(path))
    return path


def _run(nb: Path) -> list[str]:
    """Run the notebook to the end; the cells that ran this time, in order."""
    log = nb.parent / "executions.log"
    before = log.read_text().split() if log.exists() else []
    done = cli("run", str(nb), cwd=nb.parent)
    assert done.returncode == 0, done.stderr
    return log.read_text().split()[len(before) :]


def _status(folder: Path) -> dict:
    return json.loads(cli("status", "--json", cwd=folder).stdout)


@pytest.fixture
def first_run(workdir: Path) -> Path:
    (workdir / "input.csv").write_text("a\nb\n")
    nb = _notebook(workdir)
    assert _run(nb) == ["load", "count", "other", "report", "final"]
    return nb


@pytest.mark.kernel
def test_status_json_shows_what_each_step_read(first_run: Path):
    steps = {s["name"]: s for s in _status(first_run.parent)["steps"]}
    assert steps["report"]["inputs"] == {"decision:threshold": "105"}
    assert set(steps["count"]["inputs"]) == {"file:clean.csv", "step:load"}
    assert set(steps["final"]["inputs"]) == {"file:other.txt", "step:other"}
    assert steps["other"]["inputs"] == {}  # it reads nothing an earlier step made
    table = cli("status", cwd=first_run.parent).stdout
    assert "[reads decision threshold]" in table and "[reads clean.csv, step load]" in table


@pytest.mark.kernel
def test_a_changed_input_file_reruns_only_the_cells_that_read_it(first_run: Path):
    workdir = first_run.parent
    (workdir / "input.csv").write_text("a\nb\nc\n")
    reasons = {s["name"]: s["reason"] for s in _status(workdir)["steps"]}
    assert reasons["load"] == "its input input.csv changed since it ran"
    assert reasons["count"] == "it uses what step load made, and step load is stale"
    assert reasons["other"] == reasons["report"] == reasons["final"] == ""
    assert _run(first_run) == ["load", "count"]
    assert (workdir / "count.txt").read_text() == "3"


@pytest.mark.kernel
def test_a_revised_decision_reruns_only_its_readers(first_run: Path):
    workdir = first_run.parent
    _notebook(workdir, decide=REVISED)
    assert _run(first_run) == ["report"]
    assert (workdir / "report.md").read_text() == "threshold: 110"
    (report,) = [s for s in _status(workdir)["steps"] if s["name"] == "report"]
    assert report["state"] == "verified"


@pytest.mark.kernel
def test_an_upstream_that_ran_again_with_the_same_results_leaves_its_readers_verified(
    first_run: Path,
):
    workdir = first_run.parent
    (workdir / "clean.csv").write_text("tampered")  # load's own evidence fails
    assert _run(first_run) == ["load"]  # it makes the same clean.csv: count stays verified


@pytest.mark.kernel
def test_moving_two_independent_cells_reruns_neither(first_run: Path):
    workdir = first_run.parent
    nb = nbformat.read(str(first_run), as_version=4)
    nb.cells[3], nb.cells[4] = nb.cells[4], nb.cells[3]  # count and other
    nbformat.write(nb, str(first_run))
    assert _run(first_run) == []
    assert all(s["state"] == "verified" for s in _status(workdir)["steps"])


@pytest.mark.kernel
def test_a_renamed_step_leaves_the_cells_that_read_it_verified(first_run: Path):
    workdir = first_run.parent
    nb = nbformat.read(str(first_run), as_version=4)
    nb.cells[2].source = nb.cells[2].source.replace("%%step load ", "%%step load-upper ", 1)
    nbformat.write(nb, str(first_run))  # the same body under a new name
    assert _run(first_run) == []
    status = _status(workdir)
    assert all(s["state"] == "verified" for s in status["steps"])
    assert not any("changed" in note for note in status["notes"]), status["notes"]
    count = next(s for s in status["steps"] if s["name"] == "count")
    assert set(count["inputs"]) == {"file:clean.csv", "step:load-upper"}  # named as now
    by_old_name = cli("log", "--step", "load", cwd=workdir)  # its earlier name finds it
    assert by_old_name.returncode == 0 and "step 1 load: confirmed" in by_old_name.stdout
    assert cli("rerun", "load-upper", "--downstream", "--why", "re-issued", cwd=workdir).stdout
    assert _run(first_run) == ["load", "count"]  # count still reads it under its new name


@pytest.mark.kernel
def test_by_default_every_cell_keeps_the_conservative_rule(workdir: Path):
    (workdir / "input.csv").write_text("a\nb\n")
    nb = _notebook(workdir)
    assert cli("run", str(nb), cwd=workdir, follow=False).returncode == 0
    (workdir / "input.csv").write_text("a\nb\nc\n")
    log = workdir / "executions.log"
    before = len(log.read_text().split())
    assert cli("run", str(nb), cwd=workdir, follow=False).returncode == 0
    assert log.read_text().split()[before:] == ["load", "count", "other", "report", "final"]


def test_a_step_with_no_recorded_inputs_keeps_the_conservative_rule(workdir: Path):
    """A `run.step` function cannot be traced: any earlier step redone makes it stale."""
    script = workdir / "job.py"
    script.write_text(
        "import pathlib, stepstone\n"
        "def log(name):\n"
        "    with open('executions.log', 'a') as f:\n"
        "        f.write(name + '\\n')\n"
        "def a():\n"
        "    log('a'); pathlib.Path('a.txt').write_text(pathlib.Path('input.csv').read_text())\n"
        "with stepstone.open_run('py') as run:\n"
        "    run.step('a', a, checks=['file:a.txt'])\n"
        "    run.step('b', lambda: log('b'))\n"
    )
    (workdir / "input.csv").write_text("1")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPSTONE_")}
    for _ in range(2):
        subprocess.run([sys.executable, str(script)], cwd=workdir, env=env, check=True)
    (workdir / "a.txt").write_text("changed")
    subprocess.run([sys.executable, str(script)], cwd=workdir, env=env, check=True)
    assert (workdir / "executions.log").read_text().split() == ["a", "b", "a", "b"]


@pytest.mark.fault
def test_a_kill_in_the_middle_then_a_revised_decision_reruns_only_what_it_must(
    workdir: Path,
):
    (workdir / "input.csv").write_text("a\nb\n")
    nb = _notebook(workdir, hang_in="final")
    env = clean_env(**FOLLOW)
    proc = subprocess.Popen(
        [sys.executable, "-m", "stepstone", "run", str(nb)],
        cwd=workdir,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while not (workdir / "kernel.pid").exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.2)
    os.kill(int((workdir / "kernel.pid").read_text()), signal.SIGKILL)
    proc.wait(timeout=120)
    (workdir / "resumed").write_text("")
    _notebook(workdir, decide=REVISED, hang_in="final")
    assert _run(nb) == ["report", "final"]  # killed in final; report read the decision
    assert (workdir / "report.md").read_text() == "threshold: 110"
    again = _run(nb)
    assert again == []


def test_each_cell_is_read_from_its_own_code_when_cells_follow_one_another():
    from stepstone.notebook.namespace import read_cell

    for a, b in [("x = y", "y = x"), ("x = y\n", "x = y + 1"), ("!ls", "x = y")]:
        first, second = cell_names(a), cell_names(b)
        again = cell_names(a)
        assert again == first  # the second cell's reading did not stand in for the first's
        assert second is not None and second[1] == frozenset({b.split()[0]})
        shape = read_cell(b + "\n")
        assert shape is not None and shape.binds == (b.split()[0],)


def test_a_cells_reads_are_what_it_uses_before_it_binds_them():
    reads, binds = cell_names(
        "with open('log') as f:\n    f.write('x')\ntotal = total + sum(r for r in rows)"
    )
    assert reads == {"open", "total", "sum", "rows"} and binds == {"f", "total"}
    assert cell_names("!ls") is None
    loop = cell_names("for row in table:\n    print(row)\nprint(row)")
    assert loop is not None and loop[0] == {"table", "print", "row"}  # the last: maybe unbound
    guarded = cell_names("try:\n    x = load()\nexcept OSError as e:\n    log(e)\nuse(x)")
    assert guarded is not None and guarded[0] == {"load", "OSError", "log", "use", "x"}
    scoped = cell_names("class A:\n    y = 1\nprint(y)\ndef f(v):\n    return v * k")
    assert scoped is not None and scoped[0] == {"print", "y", "k"} and scoped[1] == {"A", "f"}
    assert "<dynamic>" in (cell_names("words = globals()['w']") or ((),))[0]


@pytest.mark.kernel
def test_revising_a_decision_names_the_steps_that_run_again(first_run: Path):
    workdir = first_run.parent
    _notebook(workdir, decide=REVISED)
    cli("run", str(first_run), cwd=workdir)
    executed = nbformat.read(str(workdir / "job.out.ipynb"), as_version=4)
    said = cell_text(executed.cells[1])
    assert "revised threshold: 105 → 110 (105 flagged too many); runs again: report" in said


@pytest.mark.kernel
def test_rerun_downstream_marks_a_step_and_what_reads_it(first_run: Path):
    workdir = first_run.parent
    marked = cli("rerun", "load", "--downstream", "--why", "the feed was re-issued", cwd=workdir)
    assert marked.returncode == 0, marked.stderr
    assert "load, count run(s) again" in marked.stdout
    reasons = {s["name"]: s["reason"] for s in _status(workdir)["steps"]}
    assert reasons["load"] == "asked to run again: the feed was re-issued"
    assert _run(first_run) == ["load", "count"]
    log = subprocess.run(
        ["git", "log", "--format=%s", "-3"], cwd=workdir / ".stepstone", capture_output=True
    )
    assert b"rerun load, count: the feed was re-issued" in log.stdout


@pytest.mark.kernel
def test_rerun_of_one_step_leaves_readers_verified_when_it_makes_the_same(first_run: Path):
    workdir = first_run.parent
    assert cli("rerun", "load", "--why", "check it", cwd=workdir).returncode == 0
    assert _run(first_run) == ["load"]


def test_a_rerun_step_does_not_perform_its_confirmed_effects_again(workdir: Path):
    import stepstone

    sent = workdir / "sent.log"

    def send() -> object:
        def do(key: str) -> dict:
            with sent.open("a") as f:
                f.write(key + "\n")
            return {"id": 1}

        return stepstone.effect("ping", do, keyed=True)

    with stepstone.open_run("fx") as run:
        run.step("send", send)
        assert run.rerun("send", "resend?") == ["send"]
    with stepstone.open_run("fx") as run:
        result = run.step("send", send)
    assert not result.skipped and result.value == {"id": 1}
    assert len(sent.read_text().split()) == 1


@pytest.mark.kernel
def test_status_verify_and_brief_see_an_edited_notebook_before_it_runs(first_run: Path):
    workdir = first_run.parent
    nb = nbformat.read(str(first_run), as_version=4)
    nb.cells[3].source += "\ncounted_twice = True"  # (a comment would change nothing)
    nb.cells[4], nb.cells[5] = nb.cells[5], nb.cells[4]  # other and report
    nbformat.write(nb, str(first_run))
    said = "the notebook changed since its plan was committed: "
    for command in ("status", "brief", "verify"):
        out = cli(command, cwd=workdir).stdout
        assert said in out, (command, out)
        assert "changed count" in out and "moved report 4->3" in out, (command, out)
    assert _run(first_run) == ["count"]


# Notebooks whose cells pass values through the kernel: each edit must end with the
# same files as a clean run of the edited notebook (the conservative rule holds there).
KERNEL_CASES = {
    "a variable an upstream cell binds": (
        [
            "%%step a --check file:a.txt\nscale = 2\nopen('a.txt', 'w').write('a')",
            "%%step b --check file:b.txt\nopen('b.txt', 'w').write(str(scale * 10))",
        ],
        {0: "%%step a --check file:a.txt\nscale = 3\nopen('a.txt', 'w').write('a')"},
    ),
    "a list changed in place by a middle cell": (
        [
            "%%step a --out rows\nrows = [1, 2]",
            "%%step m --check file:m.txt\nrows.append(3)\nopen('m.txt', 'w').write('m')",
            "%%step c --check file:b.txt\nopen('b.txt', 'w').write(str(len(rows)))",
        ],
        {1: "%%step m --check file:m.txt\nrows.extend([3, 4])\nopen('m.txt', 'w').write('m2')"},
    ),
    "a cell inserted between maker and reader": (
        [
            "%%step a --out x\nx = 1",
            "%%step c --check file:b.txt\nopen('b.txt', 'w').write(str(x))",
        ],
        {-1: "%%step b --out x\nx = x + 100"},
    ),
    "a value a skipped cell would have to make again": (
        [
            "%%step a --check file:a.txt\na_val = 1\nopen('a.txt', 'w').write('a')",
            "%%step o --check file:o.txt\no_val = 7\nopen('o.txt', 'w').write('o')",
            "%%step d --check file:b.txt\nopen('b.txt', 'w').write(str(a_val + o_val))",
        ],
        {0: "%%step a --check file:a.txt\na_val = 2\nopen('a.txt', 'w').write('a')"},
    ),
    "a name bound in a loop of a cell that looks independent": (
        [
            "total = 0",
            "%%step a --check file:a.txt\nopen('a.txt', 'w').write('a')",
            "%%step s --check file:s.txt\nfor i in range(3):\n    total = i\n"
            "open('s.txt', 'w').write('s')",
            "%%step t --check file:b.txt\nopen('b.txt', 'w').write(str(total))",
        ],
        {1: "%%step a --check file:a.txt\nopen('a.txt', 'w').write('a2')"},
    ),
    "a module a cell imports and a later cell uses": (
        [
            "%%step a --check file:a.txt\nopen('a.txt', 'w').write('a')",
            "%%step s --check file:s.txt\nimport json as J\nopen('s.txt', 'w').write('s')",
            "%%step t --check file:b.txt\nopen('b.txt', 'w').write(J.dumps(open('a.txt').read()))",
        ],
        {0: "%%step a --check file:a.txt\nopen('a.txt', 'w').write('a2')"},
    ),
    "a file check spelled ./name": (
        [
            "%%step a --check file:./data.txt\nopen('data.txt', 'w').write('1')",
            "%%step r --check file:b.txt\nopen('b.txt', 'w').write(open('data.txt').read() * 2)",
        ],
        {0: "%%step a --check file:./data.txt\nopen('data.txt', 'w').write('2')"},
    ),
    "an input declared after the first run": (
        [
            "%%step a --check file:a.txt\nopen('a.txt', 'w').write('a')\n"
            "open('data' + '.txt', 'w').write('1')",
            "%%step r --check file:b.txt\n"
            "open('b.txt', 'w').write(open('da' + 'ta.txt').read() * 2)",
        ],
        {
            0: "%%step a --check file:a.txt\nopen('a.txt', 'w').write('a')\n"
            "open('data' + '.txt', 'w').write('2')",
            1: "%%step r --check file:b.txt --in file:data.txt\n"
            "open('b.txt', 'w').write(open('da' + 'ta.txt').read() * 2)",
        },
    ),
    "names reached through globals()": (
        [
            "%%step a --out words\nwords = ['x', 'y']",
            "%%step c --check file:b.txt\n"
            "if 'words' not in globals():\n    words = []\n"
            "open('b.txt', 'w').write(str(len(words)))",
        ],
        {0: "%%step a --out words\nwords = ['x', 'y', 'z']"},
    ),
}


def _plain_notebook(folder: Path, cells: list[str]) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / "job.ipynb"
    book = new_notebook(cells=[new_code_cell("%load_ext stepstone\n%resume")])
    book.cells += [new_code_cell(c) for c in cells]
    nbformat.write(book, str(path))
    return path


@pytest.mark.kernel
@pytest.mark.parametrize("case", sorted(KERNEL_CASES))
def test_cells_that_pass_values_through_the_kernel_end_as_a_clean_run_does(
    workdir: Path, case: str
):
    cells, edits = KERNEL_CASES[case]
    resumed = _plain_notebook(workdir / "resumed", cells)
    assert cli("run", str(resumed), cwd=resumed.parent).returncode == 0
    edited = list(cells)
    for index, source in edits.items():
        if index < 0:
            edited.insert(len(edited) + index, source)
        else:
            edited[index] = source
    _plain_notebook(workdir / "resumed", edited)
    done = cli("run", str(resumed), cwd=resumed.parent)
    assert done.returncode == 0, done.stderr
    clean = _plain_notebook(workdir / "clean", edited)
    assert cli("run", str(clean), cwd=clean.parent).returncode == 0
    assert (resumed.parent / "b.txt").read_text() == (clean.parent / "b.txt").read_text()
