"""The user's script this process runs, and the store beside it."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import InvalidInput, StepstoneError
from ..store import DEFAULT_STORE, GitStore, resolve_store_path


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
        there = GitStore(home, create=False).runs()
    except StepstoneError:
        return
    if run in there:
        raise InvalidInput(
            f"run {run!r} lives in {home}, beside {program.name}, and this folder has no "
            f"store: run the script from {program.parent} (or pass repo={str(home)!r}) "
            f"to go on with it, instead of starting it again in a new store here"
        )
