"""The states a power cut can leave, from a trace of file-system operations.

The model is the weak one POSIX allows (as in ALICE, OSDI '14, and CrashMonkey):

- a write or truncation of a file is durable once an `fsync`/`fdatasync` of that
  file, or a `sync`/`syncfs`, began after it completed;
- a name made, renamed, linked or removed in a folder (and a folder made or
  removed) is durable once an `fsync` of that folder (of both folders, for a
  rename across two), or a `sync`/`syncfs`, began after it;
- at a cut, every operation that is not yet durable may be lost or kept, in any
  combination (so later operations may survive earlier ones: reordering within a
  flush interval), and a kept write may be torn: only a prefix of it reached the
  disk (at 512-byte sectors), or its size did but its bytes are zeros.

An `fsync` of a new file does not make its name durable here (ext4 happens to, XFS
and btrfs need not): a program that wants its names to survive fsyncs their folders.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .trace import Op

SECTOR = 512


@dataclass(frozen=True)
class Event:
    """An operation on inodes: what a crash state replays."""

    kind: str  # create symlink mkdir rmdir rename link unlink write truncate fsync sync mark
    path: str = ""
    to: str = ""
    ino: int = -1
    offset: int = 0
    data: bytes = b""
    size: int = 0
    label: str = ""

    @property
    def changes(self) -> bool:
        return self.kind not in ("fsync", "sync", "mark", "fsync-dir")

    @property
    def folders(self) -> tuple[str, ...]:
        """The folders whose entries this event changes."""
        if self.kind in ("rename", "link"):
            return tuple({os.path.dirname(self.path), os.path.dirname(self.to)})
        if self.kind in ("create", "symlink", "mkdir", "rmdir", "unlink"):
            return (os.path.dirname(self.path),)
        return ()


def events(ops: list[Op], root: str) -> list[Event]:
    """Give each file an inode number, as the run saw them."""
    names: dict[str, int] = {}
    sizes: dict[int, int] = {}
    folders = {root}
    found: list[Event] = []
    next_ino = 0

    def new() -> int:
        nonlocal next_ino
        next_ino += 1
        sizes[next_ino] = 0
        return next_ino

    for op in ops:
        if op.kind == "open":
            if op.path in folders:
                continue
            if op.path not in names and "O_CREAT" in op.label:
                names[op.path] = ino = new()
                found.append(Event("create", path=op.path, ino=ino))
            elif op.path in names and "O_TRUNC" in op.label:
                sizes[names[op.path]] = 0
                found.append(Event("truncate", ino=names[op.path], size=0))
        elif op.kind == "symlink":
            names[op.path] = ino = new()
            found.append(Event("symlink", path=op.path, ino=ino, data=op.data))
        elif op.kind == "mkdir":
            folders.add(op.path)
            found.append(Event("mkdir", path=op.path))
        elif op.kind == "rmdir":
            folders.discard(op.path)
            found.append(Event("rmdir", path=op.path))
        elif op.kind == "write":
            ino = names[op.path]
            offset = sizes[ino] if op.offset < 0 else op.offset
            sizes[ino] = max(sizes[ino], offset + len(op.data))
            found.append(Event("write", ino=ino, offset=offset, data=op.data))
        elif op.kind in ("truncate", "extend"):
            ino = names[op.path]
            size = op.size if op.kind == "truncate" else max(sizes[ino], op.size)
            sizes[ino] = size
            found.append(Event("truncate", ino=ino, size=size))
        elif op.kind in ("rename", "link"):
            if op.path in folders:  # a folder moves with everything in it
                _move(names, folders, op.path, op.to)
                found.append(Event("rename", path=op.path, to=op.to, ino=0))
                continue
            ino = names[op.path]
            if op.kind == "rename":
                del names[op.path]
            names[op.to] = ino
            found.append(Event(op.kind, path=op.path, to=op.to, ino=ino))
        elif op.kind == "unlink":
            ino = names.pop(op.path)
            found.append(Event("unlink", path=op.path, ino=ino))
        elif op.kind == "fsync":
            if op.path in folders:
                found.append(Event("fsync-dir", path=op.path))
            elif op.path in names:
                found.append(Event("fsync", ino=names[op.path]))
        elif op.kind == "sync":
            found.append(Event("sync"))
        elif op.kind == "mark":
            found.append(Event("mark", label=op.label))
    return found


def _move(names: dict[str, int], folders: set[str], old: str, new: str) -> None:
    """Rename folder `old` to `new` in a name table, with everything under it."""
    prefix = old + "/"
    for path in [p for p in names if p.startswith(prefix)]:
        names[new + path[len(old) :]] = names.pop(path)
    for path in [p for p in folders if p == old or p.startswith(prefix)]:
        folders.discard(path)
        folders.add(new + path[len(old) :])


def durable_from(trace: list[Event]) -> list[float]:
    """For each event, the index of the first flush that makes it durable (inf: none)."""
    found = [float("inf")] * len(trace)
    waiting: dict[int, set[str]] = {}  # event -> its folders not flushed since
    for j, flush in enumerate(trace):
        if flush.kind not in ("fsync", "fsync-dir", "sync"):
            if flush.changes:
                waiting[j] = set(flush.folders)
            continue
        for i, folders in list(waiting.items()):
            event = trace[i]
            if flush.kind == "sync":
                done = True
            elif event.kind in ("write", "truncate"):
                done = flush.kind == "fsync" and flush.ino == event.ino
            else:
                if flush.kind == "fsync-dir":
                    folders.discard(flush.path)
                done = not folders
            if done:
                found[i] = j
                del waiting[i]
    return found


@dataclass
class State:
    """A file-system state: names to inodes, folders, and each inode's bytes."""

    names: dict[str, int] = field(default_factory=dict)
    folders: set[str] = field(default_factory=set)
    data: dict[int, bytearray] = field(default_factory=dict)
    links: dict[int, bytes] = field(default_factory=dict)

    def apply(self, event: Event, torn: tuple[str, int] | None = None) -> None:
        kind = event.kind
        if kind in ("create", "symlink"):
            self.names[event.path] = event.ino
            self.data.setdefault(event.ino, bytearray())
            if kind == "symlink":
                self.links[event.ino] = event.data
        elif kind == "mkdir":
            self.folders.add(event.path)
        elif kind == "rmdir":
            self.folders.discard(event.path)
        elif kind in ("rename", "link"):
            if event.ino == 0:
                if event.path in self.folders:
                    _move(self.names, self.folders, event.path, event.to)
                return
            self.names[event.to] = event.ino
            self.data.setdefault(event.ino, bytearray())
            if kind == "rename" and self.names.get(event.path) == event.ino:
                del self.names[event.path]
        elif kind == "unlink":
            if self.names.get(event.path) == event.ino:
                del self.names[event.path]
        elif kind == "write":
            content = self.data.setdefault(event.ino, bytearray())
            data = event.data
            if torn is not None:
                how, cut = torn
                data = data[:cut] if how == "prefix" else bytes(len(data))
            end = event.offset + len(data)
            if len(content) < event.offset:
                content.extend(bytes(event.offset - len(content)))
            content[event.offset : end] = data
        elif kind == "truncate":
            content = self.data.setdefault(event.ino, bytearray())
            if event.size <= len(content):
                del content[event.size :]
            else:
                content.extend(bytes(event.size - len(content)))

    def visible(self, root: str) -> tuple[dict[str, bytes], dict[str, bytes], list[str]]:
        """What a reader finds under `root`: files, symlinks, folders (reachable only)."""

        def reachable(path: str) -> bool:
            parent = os.path.dirname(path)
            while parent != root and parent.startswith(root):
                if parent not in self.folders:
                    return False
                parent = os.path.dirname(parent)
            return True

        folders = sorted(f for f in self.folders if f != root and reachable(f))
        files, links = {}, {}
        for path, ino in self.names.items():
            if reachable(path):
                if ino in self.links:
                    links[path] = self.links[ino]
                else:
                    files[path] = bytes(self.data.get(ino, b""))
        return files, links, folders

    def digest(self, root: str) -> str:
        files, links, folders = self.visible(root)
        h = hashlib.sha256()
        for path in folders:
            h.update(b"d" + path.encode() + b"\0")
        for path, data in sorted(files.items()):
            h.update(b"f" + path.encode() + b"\0" + hashlib.sha256(data).digest())
        for path, target in sorted(links.items()):
            h.update(b"l" + path.encode() + b"\0" + target)
        return h.hexdigest()

    def write(self, root: str, into: Path) -> None:
        """Make this state's files under `into` (standing for `root`)."""
        files, links, folders = self.visible(root)
        into.mkdir(parents=True, exist_ok=True)
        for path in folders:
            (into / os.path.relpath(path, root)).mkdir(parents=True, exist_ok=True)
        for path, data in files.items():
            (into / os.path.relpath(path, root)).write_bytes(data)
        for path, target in links.items():
            os.symlink(target, into / os.path.relpath(path, root))
        _the_same_store(root, into)


def _the_same_store(root: str, into: Path) -> None:
    """A run lock names its store's path and the lock file itself (so that a copy knows
    it is one): the state stands for the store at `root`, not a copy of it, so its locks
    name the state's own path and file, as the store's would after the power cut."""
    for lock in into.glob(".stepstone/stepstone/locks/*.lock"):
        try:
            info = json.loads(lock.read_bytes())
        except ValueError:
            continue  # torn or empty: it names nothing
        if isinstance(info, dict) and "lock" in info:
            info["lock"] = str(lock.resolve())
            stat = lock.stat()
            info["file"] = [stat.st_dev, stat.st_ino]
            lock.write_text(json.dumps(info))


@dataclass(frozen=True)
class Cut:
    """One crash state: cut after `at` events; of the volatile ones, `lost` never
    reached the disk and `torn` did only in part."""

    at: int
    lost: frozenset[int]
    torn: tuple[tuple[int, str, int], ...]  # event, "prefix" | "zeros", bytes kept

    def describe(self, trace: list[Event], root: str = "") -> str:
        def say(i: int) -> str:
            e = trace[i]
            to = f" -> {os.path.relpath(e.to, root)}" if e.to else ""
            what = os.path.relpath(e.path, root) if e.path else f"inode {e.ino}"
            return f"#{i} {e.kind} {what}{to}"

        def some(items: list[str]) -> str:
            if len(items) > 6:
                items = [*items[:2], f"({len(items) - 5} more)", *items[-3:]]
            return ", ".join(items) or "nothing"

        lost = some([say(i) for i in sorted(self.lost)])
        torn = some([f"{say(i)} ({how} {n} B)" for i, how, n in self.torn])
        return f"cut after event {self.at}; lost: {lost}; torn: {torn}"


def state_of(trace: list[Event], cut: Cut) -> State:
    state = State(folders=set())
    tears = {i: (how, n) for i, how, n in cut.torn}
    for i in range(cut.at):
        if i not in cut.lost and trace[i].changes:
            state.apply(trace[i], tears.get(i))
    return state


def cuts(trace: list[Event], seed: int) -> Iterator[Cut]:
    """Crash states to check, without end: at each cut point the one where every
    volatile operation survived and the one where none did, in a random order,
    each followed by a random mix (a random point, random survivors, torn writes)."""
    durable = durable_from(trace)
    rng = random.Random(seed)
    points = [k for k in range(len(trace) + 1) if k == 0 or trace[k - 1].changes]

    def volatile(k: int) -> list[int]:
        return [i for i in range(k) if trace[i].changes and durable[i] >= k]

    planned = [Cut(k, frozenset(), ()) for k in points]
    planned += [Cut(k, frozenset(volatile(k)), ()) for k in points if volatile(k)]
    rng.shuffle(planned)
    while True:
        if planned:
            yield planned.pop()
        k = rng.choice(points)
        candidates = volatile(k)
        if not candidates:
            continue
        keep = rng.choice((0.1, 0.5, 0.9))
        lost = frozenset(i for i in candidates if rng.random() > keep)
        torn = []
        for i in candidates:
            event = trace[i]
            if i in lost or event.kind != "write" or len(event.data) < 2 or rng.random() > 0.2:
                continue
            if rng.random() < 0.7:
                cut = rng.randrange(0, len(event.data) // SECTOR + 1) * SECTOR
                torn.append((i, "prefix", min(cut, len(event.data) - 1)))
            else:
                torn.append((i, "zeros", len(event.data)))
        yield Cut(k, lost, tuple(torn))
