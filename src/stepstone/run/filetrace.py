"""The files a step opens as it runs, seen by Python's audit hook (`sys.addaudithook`):
what it read and what it wrote (opened for writing, removed or renamed), whatever built
the path (`os.path.join`, `glob`, pandas' and NumPy's readers and writers, which open
through Python).

A folder listed (`glob`, `os.listdir`, `os.scandir`, `pathlib`'s `iterdir`, not the
import system's own listings) is read too, and a database SQLite opens (`sqlite3.connect`).
A file opened by code that is not Python (a C library that opens it itself, as
pyarrow's Parquet reader does) is seen by `folderwatch` where inotify is available. The
hook is installed once, on the first step, and costs a comparison per audited event
while no step runs.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from .. import settings

_WRITING = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


@dataclass
class FileTrace:
    """The absolute paths of the files opened while it was active, by how."""

    read: set[str] = field(default_factory=set)
    wrote: set[str] = field(default_factory=set)
    listed: set[str] = field(default_factory=set)  # the folders whose entries it listed

    def folders(self, root: str, skip: tuple[str, ...] = ()) -> list[str]:
        """The folders it listed under `root` (itself as "."), as `relative` gives files."""
        found = set()
        for path in self.listed:
            rel = os.path.relpath(path, root)
            if rel.startswith("..") or os.path.isabs(rel):
                continue
            parts = rel.split(os.sep)
            if rel != "." and any(p.startswith(".") or p == "__pycache__" for p in parts):
                continue
            if any(path == s or path.startswith(s + os.sep) for s in skip):
                continue
            found.add("/".join(parts))
        return sorted(found)

    def relative(self, root: str, skip: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
        """(the files read but not written, the files written), as paths under `root`
        in POSIX form, sorted; files outside it, in a folder named in `skip` or
        `__pycache__`, or in a hidden folder (`.stepstone`, `.ipynb_checkpoints`) left
        out, and Python's own modules (`.py`, read only when its cached bytecode is
        stale: an import would be an input now and then)."""

        def under(paths: set[str]) -> set[str]:
            found = set()
            for path in paths:
                rel = os.path.relpath(path, root)
                parts = rel.split(os.sep)
                if rel.startswith("..") or os.path.isabs(rel) or rel == ".":
                    continue
                if any(p.startswith(".") or p == "__pycache__" for p in parts[:-1]):
                    continue
                if any(path == s or path.startswith(s + os.sep) for s in skip):
                    continue
                if path.endswith((".py", ".pyc")) and paths is self.read:
                    continue
                found.add("/".join(parts))
            return found

        wrote = under(self.wrote)
        return sorted(under(self.read) - wrote), sorted(wrote)


_active: list[FileTrace] = []
_lock = threading.Lock()
_installed = False


_REMOVING = {"os.remove": (0,), "os.rename": (0, 1)}  # a removal or a rename writes its paths
_LISTING = ("os.listdir", "os.scandir")


def _hook(event: str, args: tuple[object, ...]) -> None:
    if not _active:
        return
    if event in _REMOVING:
        for at in _REMOVING[event]:
            _note(args[at], writing=True)
        return
    if event in _LISTING:
        _listed(args[0] if args else None)
        return
    if event == "sqlite3.connect":
        if (
            args
            and isinstance(args[0], (str, bytes, os.PathLike))
            and args[0] not in ("", ":memory:")
        ):
            _note(args[0], writing=False)
        return
    if event != "open":
        return
    path, mode, flags = args
    if isinstance(mode, str):
        writing = any(c in mode for c in "wax+")
    else:
        writing = isinstance(flags, int) and bool(flags & _WRITING)
    _note(path, writing=writing)


def _absolute(path: object) -> str | None:
    """An audited path as an absolute one; None for a file descriptor (opened before, by
    name) or what is no path."""
    if isinstance(path, int):
        return None
    try:
        return os.path.abspath(os.fsdecode(path))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _note(path: object, *, writing: bool) -> None:
    name = _absolute(path)
    if name is not None:
        for trace in list(_active):
            (trace.wrote if writing else trace.read).add(name)


def _listed(path: object) -> None:
    caller = sys._getframe(2).f_code.co_filename
    if caller.startswith("<frozen importlib"):  # the import system finding modules
        return
    name = _absolute("." if path is None else path)
    if name is not None:
        for trace in list(_active):
            trace.listed.add(name)


class Watch(Protocol):
    """What sees the files opened by code the audit hook does not (`folderwatch`)."""

    def drop(self) -> None: ...
    def note(self, trace: FileTrace) -> None: ...


@contextmanager
def tracing(trace: FileTrace, watch: Watch | None = None) -> Iterator[FileTrace]:
    """While the body runs, every file opened (by any thread) is noted in `trace`; by any
    code at all, with `watch`."""
    global _installed
    with _lock:
        if not _installed:
            sys.addaudithook(_hook)
            _installed = True
        _active.append(trace)
    if watch is not None:
        watch.drop()
    try:
        yield trace
    finally:
        if watch is not None:
            watch.note(trace)
        with _lock:
            _active.remove(trace)


def unwatched(store: str | os.PathLike[str]) -> tuple[str, ...]:
    """The paths no step's trace holds: the run's store, and the files the command that
    started the kernel writes as the cells run (`UNWATCHED_ENV`: `--stdout-file`)."""
    return (os.path.realpath(store), *settings.unwatched())
