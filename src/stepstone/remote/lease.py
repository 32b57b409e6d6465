"""The lease: which agent drives a run, kept as a ref on the shared remote.

The lease is `refs/stepstone/leases/<run>` on the remote, whose commits say who holds
the run until when; it moves only by compare-and-swap (`git push
--force-with-lease`), so two agents can never both take it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from ..errors import GitFailed, LeaseHeld, LeaseLost
from ..store import LEASE_REFS, TRACKING_LEASE_REFS, GitStore
from ..store.opening import host_of
from .git import git, require_remote
from .sync import remote_ref

DEFAULT_LEASE_SECONDS = 600  # how long a lease lasts unrenewed, unless the store says


@dataclass(frozen=True)
class Lease:
    """Who holds a run, until when (from the remote's lease ref)."""

    holder: str
    expires: str
    released: bool = False
    stolen_from: str | None = None
    why: str = ""
    epoch: int = 0  # one more at each take: a fencing token (0: written before epochs)

    @property
    def live(self) -> bool:
        """Held and not expired."""
        if self.released:
            return False
        return datetime.fromisoformat(self.expires.replace("Z", "+00:00")) > datetime.now(
            timezone.utc
        )


def _dead_here(holder: str, me: str) -> bool:
    """Whether `holder` ran on this host and its process is gone (a crash, not a hand-off)."""
    if host_of(holder) != host_of(me):
        return False
    pid = holder.rsplit(" pid ", 1)[-1]
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:  # a zombie has exited; only its parent has not read its status yet
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


class LeaseKeeper:
    """Takes, renews, checks and releases a run's lease on the remote.

    Each lease commit's parent is the lease's last steal (or none), so the lease ref
    keeps every steal with its reason and does not grow with each open. Once the lease
    is lost (another agent took it), every later check raises `LeaseLost`.
    """

    def __init__(self, store: GitStore, run: str, holder: str) -> None:
        self.store = store
        self.run = run
        self.holder = holder
        self.remote = require_remote(store)
        self.ref = LEASE_REFS + run
        self.seconds = store.settings.lease_seconds
        self.lost: str | None = None  # who took the lease from us, once it happened
        self.run_ref = store.refs.ref(run)  # where the remote keeps the run (known at `take`)
        self._ours: str | None = None
        self._base: str | None = None  # the last steal, parent of our lease commits
        self._renewed = 0.0
        self.epoch = 0  # of the lease this keeper took
        self._pushing = threading.Lock()  # the fence and the background pusher take turns

    def current(self) -> tuple[Lease | None, str | None]:
        """The lease on the remote now, and its commit id."""
        out = git(self.store, "ls-remote", self.remote, self.ref)
        if not out.strip():
            return None, None
        git(
            self.store,
            "fetch",
            "--quiet",
            "--no-tags",
            self.remote,
            f"+{self.ref}:{TRACKING_LEASE_REFS}{self.run}",
        )
        # what was fetched, not what ls-remote saw: another agent may have moved it since
        oid = self.store.refs.target(TRACKING_LEASE_REFS + self.run) or out.split()[0]
        data = json.loads(self.store.commit_message(oid).split("\n\n", 1)[1])
        known = {k: v for k, v in data.items() if k in Lease.__dataclass_fields__}
        return Lease(**known), oid

    def take(self, *, steal: str | None = None) -> Lease:
        """Take the lease, or raise `LeaseHeld` naming the live holder."""
        self.run_ref = remote_ref(self.store, self.run)[0]
        lease, oid = self.current()
        stolen_from = None
        if lease is not None and lease.live and lease.holder != self.holder:
            if steal is None and not _dead_here(lease.holder, self.holder):
                raise LeaseHeld(self.run, lease.holder, lease.expires)
            stolen_from = lease.holder if steal is not None else None
        if oid is not None:
            parents = self.store.parents(oid)
            first_parent = parents[0] if parents else None
            self._base = oid if lease is not None and lease.stolen_from else first_parent
        self.epoch = (lease.epoch if lease is not None else 0) + 1
        return self._write(oid, released=False, stolen_from=stolen_from, why=steal or "")

    def _new_commit(
        self, *, released: bool, stolen_from: str | None, why: str
    ) -> tuple[str, Lease]:
        expires = (
            (datetime.now(timezone.utc) + timedelta(seconds=self.seconds))
            .isoformat(timespec="seconds")
            .replace("+00:00", "Z")
        )
        lease = Lease(self.holder, expires, released, stolen_from, why, self.epoch)
        verb = "release" if released else ("steal" if stolen_from else "take")
        message = f"lease {self.run}: {verb} by {self.holder}\n\n" + json.dumps(lease.__dict__)
        commit = self.store.writer.loose_commit(message, [self._base] if self._base else [])
        if stolen_from:
            self._base = commit  # a steal stays in the lease's history
        self.store.refs.set(TRACKING_LEASE_REFS + self.run, commit)
        return commit, lease

    def _write(
        self, expected: str | None, *, released: bool, stolen_from: str | None = None, why: str = ""
    ) -> Lease:
        commit, lease = self._new_commit(released=released, stolen_from=stolen_from, why=why)
        with self._pushing:
            self._push(expected, commit)
        self._ours = commit
        self._renewed = time.monotonic()
        return lease

    def _push(self, expected: str | None, commit: str, *also: str) -> None:
        """Move the remote's lease from `expected` to `commit` (and push `also` refspecs
        in the same atomic push), or raise `LeaseHeld` naming who holds it now."""
        try:
            git(
                self.store,
                "push",
                "--quiet",
                "--atomic",
                f"--force-with-lease={self.ref}:{expected or ''}",
                self.remote,
                f"{commit}:{self.ref}",
                *also,
            )
        except GitFailed as exc:
            if "stale info" in exc.stderr or "rejected" in exc.stderr:
                current, _ = self.current()
                holder = current.holder if current else "another agent"
                raise LeaseHeld(self.run, holder, current.expires if current else "?") from exc
            raise

    def check(self) -> None:
        """Raise `LeaseLost` once another agent took the lease."""
        if self.lost is not None:
            raise LeaseLost(self.run, self.lost)

    def renew_if_due(self) -> None:
        """Renew the lease when half of it has run out (after each commit); a lease found
        taken is noted as lost (the next check raises), never raised here."""
        if self._ours is None or time.monotonic() - self._renewed <= self.seconds / 2:
            return
        try:
            self._write(self._ours, released=False)
        except LeaseHeld as exc:
            self._lose(exc.holder)

    def _lose(self, holder: str) -> None:
        self.lost = holder
        self._ours = None

    def fence(self, tip: str | None, *, renew: bool = True) -> None:
        """Push the run up to `tip` together with the lease, atomically: before an
        effect's write (the intent included, so the next holder sees that the effect
        may have happened), and from the background pusher (`renew=False`). Raises
        `LeaseLost` when another agent took the lease or moved the run."""
        self.check()
        if self._ours is None:
            return
        with self._pushing:
            due = renew and time.monotonic() - self._renewed > self.seconds / 2
            commit = (
                self._new_commit(released=False, stolen_from=None, why="")[0] if due else self._ours
            )
            try:
                self._push(self._ours, commit, *([f"{tip}:{self.run_ref}"] if tip else []))
            except LeaseHeld as exc:
                self._lose(exc.holder)
                raise LeaseLost(self.run, exc.holder) from exc
            if due:
                self._ours = commit
                self._renewed = time.monotonic()

    def release(self, tip: str | None = None) -> None:
        """Let go of the lease so another agent can drive the run at once, handing over
        the run's history up to `tip` in the same push: the next holder brings it in
        instead of doing its steps again. A remote whose run moved past `tip` meanwhile
        keeps its history (pull shows both); the lease is let go all the same."""
        if self._ours is None:
            return
        commit, _ = self._new_commit(released=True, stolen_from=None, why="")
        with self._pushing:
            ours, self._ours = self._ours, None
            if ours is None:
                return
            try:
                self._push(ours, commit, *([f"{tip}:{self.run_ref}"] if tip else []))
            except (GitFailed, LeaseHeld):
                if not tip:
                    raise
                self._push(ours, commit)
