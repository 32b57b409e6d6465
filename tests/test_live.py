"""Which step a headless run runs now, as another process (the JupyterLab server) reads
it: `stepstone run` points a file kept for the notebook at its events (notebook/live.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from stepstone.model import events
from stepstone.model.events import RunEnded, StepEnded, StepStarted
from stepstone.notebook import live


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _events(path: Path, *said: object) -> Path:
    events.append(path, said)  # type: ignore[arg-type]
    return path


def test_the_step_started_and_not_ended_is_running_and_the_skipped_ones_are_named(
    tmp_path: Path, home: Path
):
    notebook = tmp_path / "job.ipynb"
    stream = _events(
        tmp_path / "events.jsonl",
        StepStarted(number=1, name="load", skip=True, reason=""),
        StepEnded(number=1, name="load", outcome="skipped"),
        StepStarted(number=2, name="train", skip=False, reason="not run yet"),
    )
    live.point(notebook, stream)
    assert live.pointer(notebook).is_relative_to(home)
    assert live.running(notebook) == ("train", {"load"})
    _events(stream, StepEnded(number=2, name="train", outcome="done"))
    assert live.running(notebook) == (None, {"load"})
    _events(stream, RunEnded(outcome="ok", message="", exit_code=0))
    assert live.running(notebook) == (None, set())


def test_nothing_runs_when_the_process_that_pointed_is_gone(tmp_path: Path, home: Path):
    notebook = tmp_path / "job.ipynb"
    stream = _events(
        tmp_path / "events.jsonl", StepStarted(number=1, name="load", skip=False, reason="")
    )
    code = (
        "import sys; from pathlib import Path; from stepstone.notebook import live; "
        "live.point(Path(sys.argv[1]), Path(sys.argv[2]))"
    )
    subprocess.run([sys.executable, "-c", code, str(notebook), str(stream)], check=True)
    assert live.pointer(notebook).is_file()
    assert live.running(notebook) == (None, set())  # that process ended mid-step
    live.point(notebook, stream)
    assert live.running(notebook) == ("load", set())


def test_another_notebook_of_the_same_name_elsewhere_is_not_running(tmp_path: Path, home: Path):
    here, there = tmp_path / "a" / "job.ipynb", tmp_path / "b" / "job.ipynb"
    stream = _events(
        tmp_path / "events.jsonl", StepStarted(number=1, name="load", skip=False, reason="")
    )
    live.point(here, stream)
    assert live.running(here)[0] == "load"
    assert live.running(there) == (None, set())


def test_the_pointer_goes_when_its_run_ends_unless_another_run_took_it(tmp_path: Path, home: Path):
    notebook = tmp_path / "job.ipynb"
    live.point(notebook, tmp_path / "events.jsonl")
    live.unpoint(notebook)
    assert not live.pointer(notebook).exists()
    code = (
        "import sys; from pathlib import Path; from stepstone.notebook import live; "
        "live.point(Path(sys.argv[1]), Path(sys.argv[2]))"
    )
    subprocess.run([sys.executable, "-c", code, str(notebook), "x"], check=True)
    live.unpoint(notebook)  # another process's: kept
    assert live.pointer(notebook).exists()
