"""Ctrl-C and SIGTERM to a real `stepstone run`: one line, the kernel gone, a clean resume."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from conftest import clean_env
from conftest import stepstone_cli as _stepstone
from nbformat.v4 import new_code_cell, new_notebook

pytestmark = pytest.mark.kernel

STEPSTONE = [sys.executable, "-m", "stepstone"]
RESUME_HINT = "run the same command again to resume"
PROGRESS = re.compile(r"\[\d+/\d+\] [\w.-]+: (done|skipped|failed)")


def _step(name: str, body: str = "pass") -> str:
    return (
        f"%%step {name} --check file:{name}.txt\n"
        f"with open('executions.log', 'a') as f:\n    f.write('{name}\\n')\n"
        f"{body}\n"
        f"open('{name}.txt', 'w').write('{name}')"
    )


def _hang(*, ignore_sigint: bool = False) -> str:
    """A cell body that, before the test writes `resumed`, records the kernel's pid and sleeps."""
    ignore = "    signal.signal(signal.SIGINT, signal.SIG_IGN)\n" if ignore_sigint else ""
    return (
        "import os, pathlib, signal, time\n"
        "if not pathlib.Path('resumed').exists():\n"
        f"{ignore}"
        "    pathlib.Path('kernel.pid.tmp').write_text(str(os.getpid()))\n"
        "    os.replace('kernel.pid.tmp', 'kernel.pid')\n"
        "    time.sleep(60)"
    )


def _notebook(folder: Path, bodies: dict[str, str]) -> Path:
    cells = [new_code_cell("%load_ext stepstone\n%resume")]
    cells += [new_code_cell(_step(name, body)) for name, body in bodies.items()]
    path = folder / "job.ipynb"
    nbformat.write(new_notebook(cells=cells), str(path))
    return path


def _alive(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie awaiting its reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def _interrupt(folder: Path, nb: Path, send: str, signum: int) -> tuple[int, str, float, int]:
    """Start `stepstone run`, signal it once the sleeping cell is running.

    `send` is "group" (the whole process group, as a terminal's Ctrl-C) or
    "process". Returns the exit status, stderr, seconds from the signal to
    the exit, and the kernel's pid.
    """
    proc = subprocess.Popen(
        [*STEPSTONE, "run", str(nb)],
        cwd=folder,
        env=clean_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (folder / "kernel.pid").exists():
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline
            time.sleep(0.05)
        kernel = int((folder / "kernel.pid").read_text())
        sent = time.monotonic()
        if send == "group":
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
        return proc.returncode, err, time.monotonic() - sent, kernel
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _assert_one_line(err: str, step: str) -> None:
    """After the progress line of the step before `step`: one line, naming `step`."""
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    last_progress = max(i for i, line in enumerate(lines) if PROGRESS.fullmatch(line))
    (stopped,) = lines[last_progress + 1 :]
    assert f"step {step}" in stopped and RESUME_HINT in stopped, err


def _assert_gone(pid: int) -> None:
    deadline = time.monotonic() + 10
    while _alive(pid):
        assert time.monotonic() < deadline, f"kernel {pid} is still running"
        time.sleep(0.05)


def _assert_resumes(folder: Path, nb: Path) -> None:
    (folder / "resumed").write_text("")
    done = _stepstone("run", str(nb), cwd=folder)
    assert done.returncode == 0, done.stderr
    assert "s1: skipped" in done.stderr and "s2: done" in done.stderr, done.stderr
    assert (folder / "executions.log").read_text().split() == ["s1", "s2", "s2", "s3"]


def test_ctrl_c_to_the_process_group_stops_in_one_line_and_resumes(workdir: Path):
    nb = _notebook(workdir, {"s1": "pass", "s2": _hang(), "s3": "pass"})
    status, err, _, kernel = _interrupt(workdir, nb, "group", signal.SIGINT)
    assert status == 130, err
    _assert_one_line(err, "s2")
    _assert_gone(kernel)
    _assert_resumes(workdir, nb)


def test_sigterm_to_the_process_stops_in_one_line_and_resumes(workdir: Path):
    nb = _notebook(workdir, {"s1": "pass", "s2": _hang(), "s3": "pass"})
    status, err, _, kernel = _interrupt(workdir, nb, "process", signal.SIGTERM)
    assert status == 143, err
    _assert_one_line(err, "s2")
    _assert_gone(kernel)
    _assert_resumes(workdir, nb)


def test_a_cell_that_ignores_ctrl_c_is_killed_within_a_bounded_time(workdir: Path):
    nb = _notebook(workdir, {"s1": "pass", "s2": _hang(ignore_sigint=True), "s3": "pass"})
    status, err, took, kernel = _interrupt(workdir, nb, "process", signal.SIGINT)
    assert status == 130, err
    assert took < 30, f"the run took {took:.1f} s to stop"
    _assert_one_line(err, "s2")
    _assert_gone(kernel)


def test_a_step_that_prints_skipped_is_reported_from_the_store(workdir: Path):
    nb = _notebook(workdir, {"rows": "print('skipped 3 rows')", "after": "print('ok')"})
    first = _stepstone("run", str(nb), cwd=workdir)
    assert first.returncode == 0, first.stderr
    assert "[1/2] rows: done" in first.stderr.splitlines(), first.stderr
    assert "[2/2] after: done" in first.stderr.splitlines(), first.stderr
    second = _stepstone("run", str(nb), cwd=workdir)
    assert second.returncode == 0, second.stderr
    assert "[1/2] rows: skipped" in second.stderr.splitlines(), second.stderr
    assert "[2/2] after: skipped" in second.stderr.splitlines(), second.stderr
    assert (workdir / "executions.log").read_text().split() == ["rows", "after"]
