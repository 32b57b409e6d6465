"""One driver per run: an advisory `flock` the kernel releases when its holder dies."""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

from .atomic import write_atomic
from .errors import RunLocked, StoreError
from .models import now


class RunLock:
    """An exclusive lock on a run, held by one process until `release` or its death."""

    def __init__(self, path: Path, run: str, holder: str) -> None:
        self.path = path
        self.run = run
        self.holder = holder
        self._fd: int | None = None

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
        try:
            self._note_a_copy(fd, os.pread(fd, 4096, 0))
        except BaseException:
            os.close(fd)
            raise
        stat = os.fstat(fd)
        info = json.dumps(
            {
                "holder": self.holder,
                "since": now(),
                "lock": str(self.path.resolve()),
                "file": [stat.st_dev, stat.st_ino],
            }
        ).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, info, 0)
        self._fd = fd

    @property
    def _copy_marker(self) -> Path:
        return self.path.with_suffix(".copied-from")

    @property
    def copied_from(self) -> Path | None:
        """The lock file of the store this one was copied from while the run was driven
        there (`cp -r`, a tarball), until the copy is settled (`settled`): what the
        original did after the copy is not in this store."""
        try:
            return Path(json.loads(self._copy_marker.read_bytes())["lock"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def settled(self) -> None:
        """This copy has taken in what its original did, or drives as a new lineage."""
        self._copy_marker.unlink(missing_ok=True)

    def _note_a_copy(self, fd: int, previous: bytes) -> None:
        """A store copied (`cp -r`, a tarball) while its run was driven carries the lock
        file of the original. While the original's lock is held, this copy would be a
        second driver of the same run (refused); after, the copy lacks what the original
        did since, so it is noted until settled. A store moved (the same file) is no copy."""
        try:
            info = json.loads(previous)
            original = Path(info["lock"])
        except (ValueError, KeyError, TypeError):
            return
        stat = os.fstat(fd)
        if original == self.path.resolve() or info.get("file") == [stat.st_dev, stat.st_ino]:
            return
        try:
            other = os.open(original, os.O_RDONLY)
        except OSError:
            other = None  # the original is gone: what it did after the copy is unknown
        if other is not None:
            try:
                fcntl.flock(other, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = RunLock(original, self.run, "").describe_holder()
                raise RunLocked(
                    self.run,
                    f"{holder}, in the store this one was copied from "
                    f"({original.parent.parent.parent}); a copy made while a run is driven "
                    f"would repeat its effects: wait for that process to finish",
                ) from None
            finally:
                os.close(other)
        if not self._copy_marker.exists():
            write_atomic(self._copy_marker, json.dumps({"lock": str(original)}).encode())

    def describe_holder(self) -> str:
        """`user@host pid N since T` from the lock file, as well as it can be read."""
        # The holder writes its name just after it takes the lock: give it a moment.
        for _ in range(20):
            try:
                info = json.loads(self.path.read_text())
                return f"{info['holder']} since {info['since']}"
            except (OSError, ValueError, KeyError, TypeError):
                time.sleep(0.005)
        return "another process"

    @property
    def held(self) -> bool:
        """Whether this object holds the lock now."""
        return self._fd is not None

    def release(self) -> None:
        """Let go of the lock (closing the descriptor releases the flock)."""
        if self._fd is not None:
            os.ftruncate(self._fd, 0)  # the next holder's name, not ours, is what readers see
            os.close(self._fd)
            self._fd = None
