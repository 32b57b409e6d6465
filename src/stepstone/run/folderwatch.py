"""The files opened under a run's folder by code Python's audit hook does not see: a C
library that opens a file itself (pyarrow's Parquet reader, h5py, SQLite's writes) and
the processes a step starts (`!sort -o names.txt names.txt`). Linux's inotify watches
each folder under the run's folder (hidden ones and `__pycache__` aside); the kernel
queues what happened to their files, and a step reads the queue once before its code
runs (to drop what came before) and once after (what its code, or anything at the same
time, opened and wrote). Seeing too much is safe: a file seen read that the step did
not read only makes it re-verified by that file.

Where inotify is missing (not Linux, no more watches to give), nothing is watched and
the audit hook's record stands alone.
"""

from __future__ import annotations

import ctypes
import os
import struct
from pathlib import Path

from .filetrace import FileTrace

_OPEN, _MODIFY, _CLOSE_WRITE = 0x20, 0x2, 0x8
_MOVED_FROM, _MOVED_TO, _CREATE, _DELETE = 0x40, 0x80, 0x100, 0x200
_OVERFLOW, _ISDIR = 0x4000, 0x40000000
_WROTE = _MODIFY | _CLOSE_WRITE | _MOVED_FROM | _MOVED_TO | _CREATE | _DELETE
_MASK = _OPEN | _WROTE
_HEAD = struct.Struct("iIII")
MOST_FOLDERS = 2000  # a data tree larger than this is watched down to this many folders


def _skipped(name: str) -> bool:
    return name.startswith(".") or name == "__pycache__"


class FolderWatch:
    """inotify on a folder and the folders under it."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.folders: dict[int, str] = {}  # watch descriptor -> folder
        self.fd = -1
        self.overflowed = False
        try:  # the process's own symbols: libc's (find_library would start ldconfig)
            self._libc = ctypes.CDLL(None, use_errno=True)
            self.fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        except (OSError, AttributeError):
            return
        if self.fd < 0:
            return
        for folder, subfolders, _ in os.walk(root):
            subfolders[:] = [s for s in subfolders if not _skipped(s)]
            if not self._watch(folder):
                break

    @property
    def watching(self) -> bool:
        return self.fd >= 0 and bool(self.folders)

    def _watch(self, folder: str) -> bool:
        if len(self.folders) >= MOST_FOLDERS:
            return False
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(folder), _MASK)
        if wd < 0:
            return False
        self.folders[wd] = folder
        return True

    def _events(self) -> list[tuple[str, int]]:
        """What the kernel queued since the last reading: (path, mask)."""
        found: list[tuple[str, int]] = []
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return found
            except OSError:
                return found
            at = 0
            while at + _HEAD.size <= len(data):
                wd, mask, _, size = _HEAD.unpack_from(data, at)
                name = data[at + _HEAD.size : at + _HEAD.size + size].rstrip(b"\0")
                at += _HEAD.size + size
                if mask & _OVERFLOW:
                    self.overflowed = True
                folder = self.folders.get(wd)
                if folder is not None:
                    found.append(
                        (os.path.join(folder, os.fsdecode(name)) if name else folder, mask)
                    )

    def drop(self) -> None:
        """Forget what happened before now."""
        if self.watching:
            self._events()
            self.overflowed = False

    def note(self, trace: FileTrace) -> None:
        """Add to `trace` the files opened and written since the last reading (a folder
        made meanwhile is watched from now on)."""
        if not self.watching:
            return
        for path, mask in self._events():
            name = os.path.basename(path)
            if mask & _ISDIR:
                if mask & (_CREATE | _MOVED_TO) and not _skipped(name):
                    self._watch(path)
                continue
            if name.endswith(".ipynb") or _skipped(name):
                continue  # the notebooks a client saves as the step runs
            if mask & _WROTE:
                trace.wrote.add(path)
            elif mask & _OPEN:
                trace.read.add(path)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


_watches: dict[str, FolderWatch] = {}
KEPT = 2  # watches a process keeps open (inotify instances are few: 128 a user by default)


def watch_of(root: Path) -> FolderWatch:
    """The watch of `root` in this process (made on first use; the one used least
    recently is closed when a process drives runs in more folders than `KEPT`)."""
    key = os.path.realpath(root)
    found = _watches.pop(key, None)
    if found is None:
        found = FolderWatch(key)
    _watches[key] = found  # the newest last
    while len(_watches) > KEPT:
        _watches.pop(next(iter(_watches))).close()
    return found
