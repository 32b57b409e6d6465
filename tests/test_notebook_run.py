"""`stepstone run` on real notebooks in real kernels (nbclient), killed and resumed."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from conftest import cell_text, git
from conftest import stepstone_cli as _stepstone
from nbformat.v4 import new_code_cell, new_notebook

pytestmark = pytest.mark.kernel

ROOT = Path(__file__).resolve().parents[1]
STEPSTONE = [sys.executable, "-m", "stepstone"]


def _step(name: str, body: str, extra: str = "") -> str:
    return (
        f"%%step {name} --check file:{name}.txt{extra}\n"
        f"with open('executions.log', 'a') as f:\n    f.write('{name}\\n')\n"
        f"{body}\n"
        f"open('{name}.txt', 'w').write('{name}')"
    )


def _write_notebook(folder: Path, *, hang_in: str | None = None) -> Path:
    hang = (
        "import os, pathlib, time\n"
        "if not pathlib.Path('resumed').exists():\n"
        "    pathlib.Path('kernel.pid').write_text(str(os.getpid()))\n"
        "    time.sleep(120)"
    )
    cells = [new_code_cell("%load_ext stepstone\n%resume")]
    for name in ("s1", "s2", "s3", "s4"):
        cells.append(new_code_cell(_step(name, hang if name == hang_in else "pass")))
    path = folder / "job.ipynb"
    nbformat.write(new_notebook(cells=cells), str(path))
    return path


def test_killing_the_kernel_mid_step_costs_only_that_step(workdir: Path):
    nb = _write_notebook(workdir, hang_in="s3")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPSTONE_")}
    proc = subprocess.Popen(
        [*STEPSTONE, "run", str(nb)],
        cwd=workdir,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not (workdir / "kernel.pid").exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.2)  # the pid file is written; the write itself is complete
    os.kill(int((workdir / "kernel.pid").read_text()), signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert "kernel died" in err

    (workdir / "resumed").write_text("")
    done = _stepstone("run", str(nb), cwd=workdir)
    assert done.returncode == 0, done.stderr
    assert (workdir / "executions.log").read_text().split() == ["s1", "s2", "s3", "s3", "s4"]
    subjects = git("log", "--format=%s", cwd=workdir / ".stepstone").splitlines()
    assert [s for s in subjects if s.endswith("confirmed")] == [
        f"step {i} s{i}: confirmed" for i in (4, 3, 2, 1)
    ]


def test_an_altered_output_makes_its_step_and_later_steps_run_again(workdir: Path):
    nb = _write_notebook(workdir)
    assert _stepstone("run", str(nb), cwd=workdir).returncode == 0
    (workdir / "s2.txt").write_text("tampered")
    done = _stepstone("run", str(nb), cwd=workdir)
    assert done.returncode == 0, done.stderr
    runs = (workdir / "executions.log").read_text().split()
    assert runs == ["s1", "s2", "s3", "s4", "s2", "s3", "s4"]  # the conservative default
    executed = nbformat.read(str(workdir / "job.out.ipynb"), as_version=4)
    resume_output = cell_text(executed.cells[0])
    assert "stale" in resume_output and "s2.txt changed" in resume_output


def test_a_failing_cell_exits_1_naming_the_step(workdir: Path):
    nb = _write_notebook(workdir)
    book = nbformat.read(str(nb), as_version=4)
    book.cells[2].source = "%%step s2\nraise RuntimeError('feed is down')"
    nbformat.write(book, str(nb))
    done = _stepstone("run", str(nb), cwd=workdir)
    assert done.returncode == 1
    assert "step s2 failed: RuntimeError: feed is down" in done.stderr


def test_a_notebook_that_is_not_valid_is_refused_before_any_kernel(workdir: Path):
    (workdir / "bad.ipynb").write_text("{not json")
    done = _stepstone("run", str(workdir / "bad.ipynb"), cwd=workdir)
    assert done.returncode == 2 and "not a valid notebook" in done.stderr
    assert not (workdir / ".stepstone").exists()


def test_duplicate_step_names_in_a_notebook_are_refused(workdir: Path):
    cells = [
        new_code_cell("%load_ext stepstone\n%resume"),
        new_code_cell("%%step a\npass"),
        new_code_cell("%%step a\npass"),
    ]
    nbformat.write(new_notebook(cells=cells), str(workdir / "dup.ipynb"))
    done = _stepstone("run", str(workdir / "dup.ipynb"), cwd=workdir)
    assert done.returncode == 2 and "appears in cells 2 and 3" in done.stderr


def test_status_log_and_verify_read_a_real_run(workdir: Path):
    nb = _write_notebook(workdir)
    assert _stepstone("run", str(nb), cwd=workdir).returncode == 0
    status = _stepstone("status", "--json", cwd=workdir)
    assert status.returncode == 0, status.stderr
    import json

    shape = json.loads(status.stdout)
    assert shape["run"] == "job" and [s["state"] for s in shape["steps"]] == ["verified"] * 4
    assert {"next_action", "decisions", "unknowns", "effects"} <= set(shape)
    log = _stepstone("log", cwd=workdir).stdout
    assert "step 4 s4: confirmed" in log
    (workdir / "s1.txt").unlink()
    verify = _stepstone("verify", cwd=workdir)
    assert verify.returncode == 1 and "s1: stale" in verify.stdout


def test_the_quickstart_notebook_passes_nbval(workdir: Path):
    shutil.copy(ROOT / "notebooks" / "quickstart.ipynb", workdir)
    env = {**os.environ, "STEPSTONE_RUN": "quickstart"}
    env.pop("STEPSTONE_REPO", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--nbval-lax",
            "-p",
            "no:cacheprovider",
            "-q",
            "-o",
            "addopts=",
            "-o",
            "filterwarnings=",
            "quickstart.ipynb",
        ],
        cwd=workdir,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (workdir / "out" / "report.md").exists()


def test_the_quickstart_reruns_only_report_when_its_decision_is_revised(workdir: Path):
    shutil.copy(ROOT / "notebooks" / "quickstart.ipynb", workdir)
    nb = workdir / "quickstart.ipynb"
    assert _stepstone("run", str(nb), cwd=workdir).returncode == 0
    book = nbformat.read(str(nb), as_version=4)
    (cell,) = [c for c in book.cells if c.source.startswith("%decide threshold=105")]
    cell.source = '%decide threshold=110 --revise --why "105 flagged too many"'
    nbformat.write(book, str(nb))
    done = _stepstone("run", str(nb), cwd=workdir)
    assert done.returncode == 0, done.stderr
    progress = [line for line in done.stderr.splitlines() if line.startswith("[")]
    assert progress[-3:] == [
        "[1/3] make-data: skipped",
        "[2/3] summarise: skipped",
        "[3/3] report: done",
    ], done.stderr
    assert "threshold: 110.0" in (workdir / "out" / "report.md").read_text()


def test_an_edited_notebook_is_detected_and_shown(workdir: Path):
    nb = _write_notebook(workdir)
    assert _stepstone("run", str(nb), cwd=workdir).returncode == 0
    book = nbformat.read(str(nb), as_version=4)
    # rename s4 to t4, move s3 before s2, edit s1's source
    book.cells[4].source = book.cells[4].source.replace("s4", "t4")
    book.cells[2], book.cells[3] = book.cells[3], book.cells[2]
    book.cells[1].source += "\nedited = True"  # (a comment alone changes nothing it does)
    nbformat.write(book, str(nb))
    done = _stepstone("run", str(nb), cwd=workdir)
    assert done.returncode == 0, done.stderr
    executed = nbformat.read(str(workdir / "job.out.ipynb"), as_version=4)
    shown = cell_text(executed.cells[0])
    for change in ("the notebook changed", "added t4", "removed s4", "moved s3 3->2", "changed s1"):
        assert change in shown, change
    runs = (workdir / "executions.log").read_text().split()
    assert runs[4:] == ["s1", "s3", "s2", "t4"]  # the edited step and all after it run again


def test_a_kernel_that_dies_before_it_answers_is_one_line_and_resumable(workdir: Path):
    """Found by the adversary: a kernel killed while it started gave a traceback (and
    an AssertionError at exit) instead of the line that says to run again."""
    import sys

    spec = workdir / "kernels" / "kernels" / "python3"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-c", "import sys; sys.exit(3)"]  # dies before kernel_info
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "language": "python"}))
    nbformat.write(new_notebook(cells=[new_code_cell("%load_ext stepstone\n%resume")]), "nb.ipynb")
    done = _stepstone("run", "nb.ipynb", cwd=workdir, JUPYTER_PATH=str(workdir / "kernels"))
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and "AssertionError" not in done.stderr, done.stderr
    assert "the kernel died; run the same command again" in done.stderr


SHOWING = [
    "%load_ext stepstone\n%resume",
    "%%step text\nprint('to stdout')\nimport sys\nprint('to stderr', file=sys.stderr)\n6 * 7",
    "%%step rich\nfrom IPython.display import HTML, display\ndisplay(HTML('<b>bold</b>'))\n"
    "import pandas as pd\nframe = pd.DataFrame({'a': [1, 2]})\nframe",
    "%%step quiet\nhidden = 1\nhidden;",
    "%%step last\nimport os, signal\n"
    "if os.path.exists('kill-me'):\n    os.remove('kill-me')\n"
    "    os.kill(os.getpid(), signal.SIGKILL)\n"
    "print('last ran')",
]


def _outputs(path: Path) -> list[list[dict]]:
    """Each cell's outputs without execution counts."""
    cells = json.loads(path.read_text())["cells"]
    return [
        [{k: v for k, v in o.items() if k != "execution_count"} for o in c.get("outputs", [])]
        for c in cells
    ]


def test_a_resumed_notebook_has_the_outputs_of_an_uninterrupted_run(tmp_path: Path):
    """The executed notebook is the deliverable: skipped cells show what they showed
    (text, rich displays, the last expression's value), and the outcome card is metadata."""
    clean, killed = tmp_path / "clean", tmp_path / "killed"
    for folder in (clean, killed):
        folder.mkdir()
        cells = [new_code_cell(source) for source in SHOWING]
        nbformat.write(new_notebook(cells=cells), str(folder / "job.ipynb"))
    assert _stepstone("run", "job.ipynb", cwd=clean).returncode == 0
    (killed / "kill-me").write_text("")
    assert _stepstone("run", "job.ipynb", cwd=killed).returncode == 1
    resumed = _stepstone("run", "job.ipynb", cwd=killed)
    assert resumed.returncode == 0 and "rich: skipped" in resumed.stderr, resumed.stderr
    expected = _outputs(clean / "job.out.ipynb")
    assert _outputs(killed / "job.out.ipynb") == expected
    text, rich, quiet = expected[1], expected[2], expected[3]
    results = [o for o in text if o["output_type"] == "execute_result"]
    assert ["".join(o["data"]["text/plain"]) for o in results] == ["42"]
    assert any(o.get("name") == "stderr" for o in text)
    assert "<b>bold</b>" in json.dumps(rich) and "text/html" in rich[-1]["data"]
    assert quiet == []  # a `;` ends it: nothing shown
    said = json.loads((killed / "job.out.ipynb").read_text())["cells"][2]["metadata"]
    assert said["stepstone"]["said"][0].startswith("step 2 rich: skipped")
