"""The user's script this process runs, and the store beside it."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InvalidInput, StepstoneError
from ..store import DEFAULT_STORE, GitStore, resolve_store_path

if TYPE_CHECKING:
    from .state import RunState


def driver_program() -> Path | None:
    """The script this process runs (`python etl.py`), when it is the user's own: not a
    tool installed with Python (a kernel launcher, pytest)."""
    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if script is None or script.suffix != ".py" or not script.is_file():
        return None
    script = script.resolve()
    installed = {"site-packages", "dist-packages"}
    prefixes = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}
    if installed & set(script.parts) or any(script.is_relative_to(p) for p in prefixes):
        return None
    return script


def refuse_a_second_store(run: str | None) -> None:
    """A script run from another folder would make a new `.stepstone` there and redo its
    run: refuse when the script's own folder holds a store with that run."""
    here = resolve_store_path(None)
    program = driver_program()
    if here.exists() or program is None or run is None:
        return
    home = program.parent / DEFAULT_STORE
    if home.resolve() == here.resolve() or not home.is_dir():
        return
    try:
        there = GitStore(home, create=False).refs.runs()
    except StepstoneError:
        return
    if run in there:
        raise InvalidInput(
            f"run {run!r} lives in {home}, beside {program.name}, and this folder has no "
            f"store: run the script from {program.parent} (or pass repo={str(home)!r}) "
            f"to go on with it, instead of starting it again in a new store here"
        )


def settle_workdir(
    state: RunState, asked: Path | None, *, driving: bool, home: Path | None = None
) -> tuple[Path | None, Path]:
    """(the folder the run recorded, if it exists here; the folder relative paths resolve
    in: the one asked for, else the recorded one, else `home`, else the current folder).
    A driver records the folder it was asked to work in, or the one it works in when
    none was recorded yet, and the script that drives it."""
    recorded = state.recorded_workdir()
    workdir = asked or recorded or home or Path.cwd()
    if driving and (asked is not None or not state.info.workdir):
        state.note_info(workdir=state.relative_to_store(workdir))
        program = driver_program()
        if program is not None and not state.info.notebook:
            script = Path(os.path.relpath(program, workdir)).as_posix()
            state.note_info(program=shlex.join([script, *sys.argv[1:]]))
    return recorded, workdir
