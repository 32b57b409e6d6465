"""Pushing a run in the background, so that a step never waits on the network."""

from __future__ import annotations

import threading

from ..errors import StepstoneError
from ..store import GitStore
from .lease import LeaseKeeper
from .sync import push


class BackgroundPusher:
    """Pushes the run after commits without making a step wait on the network; with a
    lease, through it (the run and the lease in one atomic push), so a driver whose
    lease was taken pushes nothing more."""

    def __init__(self, store: GitStore, run: str, lease: LeaseKeeper | None = None) -> None:
        self.store = store
        self.run = run
        self.lease = lease
        self.last_error: str | None = None
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._loop, daemon=True, name="stepstone-push")
        self._thread.start()

    def poke(self) -> None:
        """A new commit is durable locally: push it soon."""
        self._wake.set()

    def _push_once(self) -> None:
        try:
            store = GitStore(self.store.path, create=False)  # libgit2 handles stay per thread
            if self.lease is not None:
                self.lease.fence(store.refs.tip(self.run), renew=False)
            else:
                push(store, self.run)
            self.last_error = None
        except StepstoneError as exc:
            self.last_error = str(exc)  # the next commit or `stepstone push` catches up

    def _loop(self) -> None:
        while not self._stop:
            self._wake.wait()
            self._wake.clear()
            self._push_once()

    def close(self, timeout: float = 30) -> None:
        """Push what is left, then stop."""
        self._stop = True
        self._wake.set()
        self._thread.join(timeout)
        self._push_once()
