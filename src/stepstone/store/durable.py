"""Durable writes: a file replaced atomically (temp file in the same folder, fsync,
rename, fsync the folder), a commit's new files made durable at once, and a Git ref
moved the way git does.

A commit writes a pack, its index and (through the ref's lock file) the new tip.
They are flushed together, before the lock file is renamed over the ref: by
default each file and its folder is fsynced, all at once on a few threads
(`Unflushed`), so that the file system can make them durable in one journal
commit and a step never waits for other processes' dirty data; or (with
`STEPSTONE_SYNC=syncfs`) by one `syncfs`, which flushes every dirty page of the
file system, a few ms cheaper on an idle disk and hundreds of ms dearer beside a
process that writes a lot. The ref moves through git's own lock-file protocol
(`<ref>.lock` created exclusively, written, flushed, renamed over the ref, folder
fsynced), so a crash at any instant leaves the old tip or the new one, never a
tip whose objects are missing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import RefMoved

if TYPE_CHECKING:  # imported when first used: it costs a new process's start
    from concurrent.futures import ThreadPoolExecutor

    from ..settings import Settings

_libc: ctypes.CDLL | None = None
_syncfs_missing = False


def fsync_dir(path: Path) -> None:
    """Flush a directory entry (a rename or a new file) to disk."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(path: Path) -> None:
    """Flush every file and folder under `path` (a tree built aside, before it is
    renamed into place: a power cut must not leave its name over missing entries)."""
    for folder, _, files in os.walk(path, topdown=False):
        for name in files:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY | os.O_NOFOLLOW)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(folder))


def batch_sync(settings: Settings) -> bool:
    """Whether commits flush their objects with one `syncfs` (else each object is fsynced)."""
    return not settings.sync_each and can_sync_filesystem()


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that a crash leaves the old or the new content, whole."""
    write_chunks(path, (data,))


def write_chunks(path: Path, chunks: Iterable[bytes]) -> None:
    """`write_atomic` of the bytes `chunks` yield, one at a time; an error while they
    are made leaves `path` as it was."""
    folder = path.parent
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            for chunk in chunks:
                handle.write(chunk)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(folder)


def _syncfs_function() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    global _libc, _syncfs_missing
    if _syncfs_missing:
        return None
    if _libc is None:
        try:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        except OSError:
            _syncfs_missing = True
            return None
    function = getattr(_libc, "syncfs", None)
    if function is None:
        _syncfs_missing = True
    return function


def can_sync_filesystem() -> bool:
    """Whether this platform has `syncfs` (Linux)."""
    return _syncfs_function() is not None


def sync_filesystem(path: Path) -> None:
    """Flush every written file of the file system holding `path` to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        sync_filesystem_of(fd)
    finally:
        os.close(fd)


def sync_filesystem_of(fd: int) -> None:
    """Flush every written file of the file system holding the open file `fd`."""
    function = _syncfs_function()
    if function is None:
        os.sync()
        return
    if function(fd) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


_pools: dict[str, ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


def helper_threads(name: str, workers: int) -> ThreadPoolExecutor:
    """This process's pool of `workers` helper threads named `stepstone-NAME`, made
    when first asked for (importing `concurrent.futures` costs a new process's start)."""
    with _pools_lock:
        pool = _pools.get(name)
        if pool is None:
            from concurrent.futures import ThreadPoolExecutor

            pool = _pools[name] = ThreadPoolExecutor(
                workers, thread_name_prefix=f"stepstone-{name}"
            )
        return pool


def _fsync_path(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        # merged away or repacked meanwhile (a `git gc`, another run's pack merge): whoever
        # removed it flushed the pack that holds its objects first; its folder is flushed
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Unflushed:
    """Files written since the last commit and not yet flushed: `flush` fsyncs them,
    their folders and the caller's open file all at once, and returns when all are
    durable."""

    def __init__(self) -> None:
        self._paths: list[str] = []
        self._lock = threading.Lock()

    def add(self, *paths: str) -> None:
        """Files to flush with the next commit (by their final names)."""
        with self._lock:
            self._paths.extend(paths)

    def flush(self, fd: int | None = None) -> None:
        """fsync the files added so far, their folders and `fd`, concurrently."""
        with self._lock:
            paths, self._paths = self._paths, []
        folders = {os.path.dirname(path) for path in paths}
        pool = helper_threads("fsync", 4)
        waiting = [pool.submit(_fsync_path, path) for path in [*paths, *folders]]
        try:
            if fd is not None:
                os.fsync(fd)
            failed = next((e for job in waiting if (e := job.exception()) is not None), None)
            if failed is not None:
                raise failed
        except BaseException:
            for job in waiting:
                job.exception()  # none is left running
            with self._lock:
                self._paths.extend(paths)  # flushed with the next commit
            raise


def _take_lock_file(lock: Path, *, patience: float = 2.0) -> int:
    """Create `lock` exclusively, waiting a little for a brief holder (a `git gc`, say)."""
    deadline = time.monotonic() + patience
    while True:
        try:
            return os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileNotFoundError:
            lock.parent.mkdir(parents=True, exist_ok=True)  # a new ref's first commit
        except FileExistsError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.02)


def update_ref(
    git_dir: Path,
    ref: str,
    new: str,
    expected: str | None,
    read_current: Callable[[], str | None],
    flush: Callable[[int], None] = os.fsync,
) -> None:
    """Point `ref` at `new` if it still points at `expected`, durably and atomically.

    `read_current` is called while the ref's lock file is held, as git does.
    `flush(fd)` makes the lock file's content durable before it is renamed over
    the ref: an fsync of it, or one `syncfs` that also flushes the commit's
    objects written just before, so one flush serves both.
    """
    path = git_dir / ref
    lock = path.with_name(path.name + ".lock")
    fd = _take_lock_file(lock)
    try:
        current = read_current()
        if current != expected:
            raise RefMoved(str(git_dir), ref, current, expected)
        os.write(fd, f"{new}\n".encode())
        flush(fd)
        os.close(fd)
        fd = -1
        os.replace(lock, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        lock.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
