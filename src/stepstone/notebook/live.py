"""Which step a headless run of a notebook runs now, for readers in other processes
(the JupyterLab extension): `stepstone run` points a small file kept for the notebook
in this user's cache at the run's event stream (`model/events.py`), with its pid.
Nothing here is durable: a pointer lost or stale says only that nothing runs."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ..model.events import RunEnded, StepEnded, StepStarted, Tail
from ..store.lock import process_alive


def pointer(notebook: Path) -> Path:
    """The pointer file kept for the notebook at `notebook` (this user's only)."""
    key = hashlib.sha256(str(notebook.absolute()).encode()).hexdigest()[:20]
    return Path.home() / ".cache" / "stepstone" / "live" / f"{key}.json"


def point(notebook: Path, events: Path) -> None:
    """Say that this process runs `notebook` and writes its events to `events`."""
    path = pointer(notebook)
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        temp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        temp.write_text(json.dumps({"pid": os.getpid(), "events": str(events)}))
        os.replace(temp, path)
    except OSError:
        pass  # a reader then sees nothing running: the run itself is not concerned


def unpoint(notebook: Path) -> None:
    """This process's run of `notebook` ended: its pointer goes (unless another run of
    the notebook pointed it elsewhere since)."""
    path = pointer(notebook)
    try:
        if int(json.loads(path.read_text())["pid"]) == os.getpid():
            path.unlink()
    except (OSError, ValueError, KeyError, TypeError):
        pass


def running(notebook: Path) -> tuple[str | None, set[str]]:
    """What a live `stepstone run` of `notebook` does now: the step it runs (or skips)
    now, else None, and the steps it skipped on their evidence so far."""
    nothing: tuple[str | None, set[str]] = (None, set())
    try:
        said = json.loads(pointer(notebook).read_text())
        pid, events = int(said["pid"]), Path(said["events"])
    except (OSError, ValueError, KeyError, TypeError):
        return nothing
    if not process_alive(pid) or not events.is_file():
        return nothing
    now: str | None = None
    skipped: set[str] = set()
    for event in Tail(events).read():
        if isinstance(event, StepStarted):
            now = event.name
        elif isinstance(event, StepEnded):
            if event.outcome == "skipped":
                skipped.add(event.name)
            if event.name == now:
                now = None
        elif isinstance(event, RunEnded):
            return nothing
    return now, skipped
