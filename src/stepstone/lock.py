"""One driver per run: an advisory `flock` the kernel releases when its holder dies."""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

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
            self._refuse_a_copy_being_driven(os.pread(fd, 4096, 0))
        except BaseException:
            os.close(fd)
            raise
        info = json.dumps(
            {"holder": self.holder, "since": now(), "lock": str(self.path.resolve())}
        ).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, info, 0)
        self._fd = fd

    def _refuse_a_copy_being_driven(self, previous: bytes) -> None:
        """A store copied (`cp -r`, a tarball) while its run was driven carries the lock
        file of the original: when the original's lock is still held, this copy is a
        second driver of the same run, whose effects would be repeated."""
        try:
            original = Path(json.loads(previous)["lock"])
        except (ValueError, KeyError, TypeError):
            return
        if original == self.path.resolve() or not original.exists():
            return
        try:
            fd = os.open(original, os.O_RDONLY)
        except OSError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = RunLock(original, self.run, "").describe_holder()
            raise RunLocked(
                self.run,
                f"{holder}, in the store this one was copied from ({original.parent.parent.parent}"
                f"); a copy made while a run is driven would repeat its effects: wait for that "
                f"process to finish, then copy the store again",
            ) from None
        finally:
            os.close(fd)

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
