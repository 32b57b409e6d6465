"""One driver per run: an advisory `flock` the kernel releases when its holder dies.

The lock file keeps the name of its last holder and which file it was (`lock`, its
path, and `file`, its device and inode): a store copied (`cp -r`, a tarball) carries
it, and the copy, whose lock file is another file, knows it is a copy of that store
(`RunLock.copied_from`; `run/copies.py` takes it from there). A store moved keeps
the same file, and is no copy.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path

from ..errors import RunLocked, StepstoneError, StoreError
from ..model.models import now
from .opening import host_of

HOLDER_WAIT = 3.0  # seconds to wait for a new holder's name before saying "another process"


class RunLock:
    """An exclusive lock on a run, held by one process until `release` or its death."""

    def __init__(self, path: Path, run: str, holder: str) -> None:
        self.path = path
        self.run = run
        self.holder = holder
        self.copied_from: Path | None = None
        """The lock file of the store this one is a copy of, as the last acquire found."""
        self.copied_idle = False
        """Whether nobody drove the run there when the copy was taken (its lock file was
        released then)."""
        self._fd: int | None = None
        self._others: list[int] = []  # the locks of this store's copies, held with it

    def acquire(self) -> None:
        """Take the lock, or raise `RunLocked` naming the live holder."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreError(
                str(self.path.parent),
                f"cannot take the run lock ({exc.strerror}): driving a run needs a writable "
                f"store; readers such as `stepstone status` still work",
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = self.describe_holder()
            if holder.startswith(f"{self.holder} since"):
                holder = (
                    f"this process ({self.holder}), which opened the run already: close "
                    f"that run (run.close(), or use `with`) before opening it again"
                )
            raise RunLocked(self.run, holder) from None
        self.copied_from, self.copied_idle = _copied_from(fd, self.path)
        _write_holder(fd, self.holder, self.path)
        self._fd = fd

    def hold_also(self, path: Path, what: str) -> None:
        """Hold the lock file `path` of a copy of this store (`what` names it) too, until
        `release`: nobody drives the run there meanwhile; `RunLocked` if somebody does."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return  # a copy that cannot be locked cannot be driven either
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = RunLock(path, self.run, "").describe_holder()
            raise RunLocked(
                self.run,
                f"{holder}, in {what}; copies of a store take turns: wait for it to finish",
            ) from None
        _write_holder(fd, self.holder, self.path)
        self._others.append(fd)

    def describe_holder(self) -> str:
        """`user@host pid N since T` from the lock file, as well as it can be read."""
        # The holder writes its name just after it takes the lock: on a busy machine
        # (eight processes racing on two cores) that can take a while to be scheduled.
        deadline = time.monotonic() + HOLDER_WAIT
        pause = 0.002
        while True:
            try:
                info = json.loads(self.path.read_text())
                if not info.get("released"):
                    held = f"{info['holder']} since {info['since']}"
                    there = Path(info.get("lock", self.path)).parent.parent.parent
                    if there != self.path.resolve().parent.parent.parent:
                        held += f", in the copy of this store at {there} (copies take turns)"
                    return held
            except (OSError, ValueError, KeyError, TypeError):
                pass
            if time.monotonic() > deadline:
                return "another process"
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    @property
    def held(self) -> bool:
        """Whether this object holds the lock now."""
        return self._fd is not None

    def require(self) -> None:
        """Refuse to change a run this object does not hold (opened read-only, closed)."""
        if self._fd is None:
            raise StepstoneError(
                f"run {self.run!r} was opened read-only or is closed; open it with "
                f"stepstone.open_run({self.run!r}) to drive it"
            )

    def release(self) -> None:
        """Let go of the lock, and of the copies' locks held with it (closing a
        descriptor releases its flock). The file keeps who held it last."""
        for fd in [*self._others, *([self._fd] if self._fd is not None else [])]:
            _mark_released(fd)
            os.close(fd)
        self._others = []
        self._fd = None


def _identity(fd: int) -> list[int]:
    stat = os.fstat(fd)
    return [stat.st_dev, stat.st_ino]


def copied_from(path: Path) -> tuple[Path | None, bool]:
    """`RunLock.copied_from` and `copied_idle` of the lock file at `path`, read without
    taking the lock (for a reader)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None, False
    try:
        return _copied_from(fd, path)
    finally:
        os.close(fd)


def _copied_from(fd: int, path: Path) -> tuple[Path | None, bool]:
    """The lock file a store's lock file was copied from: the one its content names,
    when that is another file (a moved store keeps the very file: no copy); and whether
    it was released when copied (nobody drove the run there then)."""
    try:
        info = json.loads(os.pread(fd, 4096, 0))
        named = Path(info["lock"])
    except (ValueError, KeyError, TypeError):
        return None, False
    if named == path.resolve() or info.get("file") == _identity(fd):
        return None, False
    return named, bool(info.get("released"))


def _write_holder(fd: int, holder: str, lock: Path) -> None:
    info = {"holder": holder, "since": now(), "lock": str(lock.resolve()), "file": _identity(fd)}
    data = json.dumps(info).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def _mark_released(fd: int) -> None:
    try:
        info = json.loads(os.pread(fd, 4096, 0))
        info["released"] = now()
        data = json.dumps(info).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
    except (OSError, ValueError, TypeError, AttributeError):
        pass  # the flock is what excludes; the name is for messages and copies


class TurnLock:
    """A short exclusive turn across the processes of one store (blocking `flock`), for
    what must be read and written with no other run of the store in between: the runs
    of a lineage looking for an effect before one of them records its intent."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._depth = 0

    def __enter__(self) -> TurnLock:
        if self._depth == 0:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise StoreError(
                    str(self.path.parent),
                    f"cannot take a turn in the store ({exc.strerror}): an effect is written "
                    f"only by a driver that can write the store",
                ) from exc
            fcntl.flock(fd, fcntl.LOCK_EX)  # the holder's turn is short: wait for it
            self._fd = fd
        self._depth += 1
        return self

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth == 0 and self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases its flock
            self._fd = None


def driver_of(path: Path) -> str | None:
    """Who drives the run whose lock file is `path` now, from what the file says (its
    holder, not released, alive on this host), without taking the lock; None when
    nobody does. For a look from another run: the lock itself decides who drives."""
    try:
        info = json.loads(path.read_text())
        holder = str(info["holder"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if info.get("released"):
        return None
    pid = holder.rpartition(" pid ")[2]
    if host_of(holder) == socket.gethostname() and pid.isdigit() and not process_alive(int(pid)):
        return None  # killed while it held the lock: nobody drives now
    return holder


def process_alive(pid: int) -> bool:
    """Whether process `pid` of this host runs (another user's counts; a zombie, which
    has exited and whose parent has not read its status yet, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[:1] != ["Z"]
    except OSError:
        return True
