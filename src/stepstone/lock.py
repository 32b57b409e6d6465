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
            raise RunLocked(self.run, self.describe_holder()) from None
        info = json.dumps({"holder": self.holder, "since": now()}).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, info, 0)
        self._fd = fd

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
