"""Runs that travel: push, pull, clone, and a lease so one agent drives a run.

The remote is any URL Git accepts; transport is plain `git` (so credentials,
SSH and proxies work as they do for the user). Run history moves as branches
of the dedicated store. The lease is a ref per run on the remote,
`refs/stepstone/leases/<run>`, whose commits say who holds the run until when;
it moves only by compare-and-swap (`git push --force-with-lease`), so two
agents can never both take it.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pygit2

from . import durable
from .errors import Diverged, LeaseHeld, StoreError
from .store import GitStore, make_dedicated

REMOTE_KEY = "stepstone.remote"
LEASE_SECONDS_KEY = "stepstone.leaseSeconds"
DEFAULT_LEASE_SECONDS = 600
_LEASES = "refs/stepstone/leases/"
_TRACKING = "refs/stepstone/remote/"
_TRACKING_LEASES = "refs/stepstone/remote-leases/"
_DIVERGED = "refs/stepstone/diverged/"


class GitFailed(StoreError):
    """A git command against the remote failed (unreachable, refused, rejected)."""

    def __init__(self, path: str, problem: str, stderr: str = "") -> None:
        super().__init__(path, problem)
        self.stderr = stderr


def _gist(stderr: str) -> str:
    """The line of git's error output that says what went wrong."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    for line in lines:
        if line.startswith(("fatal:", "error:", "! [rejected]", "! [remote rejected]")):
            return line
    return lines[-1] if lines else "failed"


def git(store: GitStore, *args: str, check: bool = True, timeout: float = 60) -> str:
    """Run git in the store's Git directory; return stdout."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    try:
        done = subprocess.run(
            ["git", "--git-dir", str(store.git_dir), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError as exc:
        raise StoreError(
            str(store.path), "git is not installed; install git to use remotes"
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise GitFailed(
            str(store.path), f"`git {args[0]}` timed out after {timeout:.0f} s"
        ) from exc
    if check and done.returncode != 0:
        raise GitFailed(
            str(store.path), f"`git {args[0]}` failed: {_gist(done.stderr)}", done.stderr
        )
    return done.stdout


def remote_name(store: GitStore) -> str | None:
    """The remote this store's runs travel to, if one is configured."""
    try:
        name = store.repo.config[REMOTE_KEY]
    except KeyError:
        return None
    return str(name) or None


def set_remote(store: GitStore, url: str, name: str = "origin") -> None:
    """Configure (or change) the remote runs are pushed to and pulled from."""
    if name in [r.name for r in store.repo.remotes]:
        store.repo.remotes.set_url(name, url)
    else:
        store.repo.remotes.create(name, url)
    store.repo.config[REMOTE_KEY] = name


def clone(url: str, path: Path) -> GitStore:
    """Clone a store: every run, plan, record and artifact, ready to resume."""
    if path.exists() and any(path.iterdir()):
        raise StoreError(str(path), "exists and is not empty; clone into a new folder")
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    done = subprocess.run(
        ["git", "clone", "--bare", "--quiet", url, str(path)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise StoreError(str(path), f"cannot clone {url}: {_gist(done.stderr)}")
    repo = pygit2.Repository(str(path))
    make_dedicated(repo, path, trusted=False)
    repo.config[REMOTE_KEY] = "origin"
    return GitStore(path)


# -- history ------------------------------------------------------------------


def push(store: GitStore, run: str, *, force_over: str | None = None) -> str:
    """Push the run's history (and its archive tag); refuse to overwrite other work."""
    name = _require_remote(store)
    ref = store.ref(run)
    spec = f"{ref}:{ref}"
    args = ["push", "--quiet", name, spec]
    if force_over is not None:
        args.insert(1, f"--force-with-lease={ref}:{force_over}")
    tag = f"refs/tags/stepstone/{run}"
    if store.repo.references.get(tag) is not None:
        args.append(f"+{tag}:{tag}")
    try:
        git(store, *args)
    except GitFailed as exc:
        if "rejected" in exc.stderr or "stale info" in exc.stderr:
            raise Diverged(
                run, "the remote has commits this copy does not: run `stepstone pull` first"
            ) from exc
        raise
    return store.tip(run) or ""


@dataclass(frozen=True)
class PullResult:
    """What `pull` did."""

    state: str  # "up to date", "fast-forwarded", "ahead", "created", "kept local", "kept remote"
    local: str | None
    remote: str | None
    preserved: str | None = None


def _fetch_run(store: GitStore, run: str) -> str | None:
    name = _require_remote(store)
    tracking = _TRACKING + run
    out = git(store, "ls-remote", name, store.ref(run))
    if not out.strip():
        return None
    git(store, "fetch", "--quiet", "--no-tags", name, f"+{store.ref(run)}:{tracking}")
    ref = store.repo.references.get(tracking)
    return str(ref.target) if ref is not None else None


def _subjects(store: GitStore, tip: str, base: str | None) -> list[str]:
    out = []
    for commit in store.repo.walk(pygit2.Oid(hex=tip), pygit2.enums.SortMode.TOPOLOGICAL):
        if base is not None and str(commit.id) == base:
            break
        out.append(f"{str(commit.id)[:10]} {commit.message.splitlines()[0]}")
    return out


def pull(store: GitStore, run: str, *, keep: str | None = None) -> PullResult:
    """Bring the remote's history of `run` here; never merge diverged records silently.

    When both copies advanced, raise `Diverged` showing both histories, unless
    `keep` is "local" or "remote": the kept side becomes the run, the other is
    preserved on `refs/stepstone/diverged/<run>/...`.
    """
    remote = _fetch_run(store, run)
    local = store.tip(run)
    if remote is None:
        return PullResult("ahead" if local else "up to date", local, None)
    if local is None:
        durable.update_ref(store.git_dir, store.ref(run), remote, None, lambda: store.tip(run))
        return PullResult("created", None, remote)
    if local == remote:
        return PullResult("up to date", local, remote)
    base = store.repo.merge_base(pygit2.Oid(hex=local), pygit2.Oid(hex=remote))
    base_id = str(base) if base is not None else None
    if base_id == local:
        durable.update_ref(store.git_dir, store.ref(run), remote, local, lambda: store.tip(run))
        return PullResult("fast-forwarded", local, remote)
    if base_id == remote:
        return PullResult("ahead", local, remote)
    if keep not in ("local", "remote"):
        mine = _subjects(store, local, base_id)
        theirs = _subjects(store, remote, base_id)
        raise Diverged(
            run,
            "both copies advanced since "
            f"{(base_id or 'the start')[:10]}.\n  here:   "
            + "\n          ".join(mine)
            + "\n  remote: "
            + "\n          ".join(theirs)
            + "\nKeep one with `stepstone pull --keep local` or `--keep remote`; the other "
            "is preserved on a ref, nothing is lost",
        )
    stamp = time.strftime("%Y%m%dT%H%M%S")
    if keep == "remote":
        preserved = f"{_DIVERGED}{run}/local-{stamp}"
        store.repo.references.create(preserved, pygit2.Oid(hex=local), force=True)
        durable.update_ref(store.git_dir, store.ref(run), remote, local, lambda: store.tip(run))
        return PullResult("kept remote", local, remote, preserved)
    preserved = f"{_DIVERGED}{run}/remote-{stamp}"
    store.repo.references.create(preserved, pygit2.Oid(hex=remote), force=True)
    name = _require_remote(store)
    git(store, "push", "--quiet", name, f"{preserved}:{preserved}")
    push(store, run, force_over=remote)
    return PullResult("kept local", local, remote, preserved)


def _require_remote(store: GitStore) -> str:
    name = remote_name(store)
    if name is None:
        raise StoreError(
            str(store.path),
            "has no remote: run `stepstone push --remote URL` once (or `stepstone clone URL`)",
        )
    return name


# -- the lease ------------------------------------------------------------------


@dataclass(frozen=True)
class Lease:
    """Who holds a run, until when (from the remote's lease ref)."""

    holder: str
    expires: str
    released: bool = False
    stolen_from: str | None = None
    why: str = ""

    @property
    def live(self) -> bool:
        """Held and not expired."""
        if self.released:
            return False
        return datetime.fromisoformat(self.expires.replace("Z", "+00:00")) > datetime.now(
            timezone.utc
        )


def _host(holder: str) -> str:
    return holder.split("@", 1)[-1].split(" ", 1)[0]


def _dead_here(holder: str, me: str) -> bool:
    """Whether `holder` ran on this host and its process is gone (a crash, not a hand-off)."""
    if _host(holder) != _host(me):
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
    return False


class LeaseKeeper:
    """Takes, renews and releases a run's lease on the remote."""

    def __init__(self, store: GitStore, run: str, holder: str) -> None:
        self.store = store
        self.run = run
        self.holder = holder
        self.remote = _require_remote(store)
        self.ref = _LEASES + run
        try:
            self.seconds = int(str(store.repo.config[LEASE_SECONDS_KEY]))
        except (KeyError, ValueError):
            self.seconds = DEFAULT_LEASE_SECONDS
        self._ours: str | None = None
        self._renewed = 0.0

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
            f"+{self.ref}:{_TRACKING_LEASES}{self.run}",
        )
        oid = out.split()[0]
        commit = self.store.repo[oid]
        assert isinstance(commit, pygit2.Commit)
        data = json.loads(commit.message.split("\n\n", 1)[1])
        return Lease(**data), oid

    def take(self, *, steal: str | None = None) -> Lease:
        """Take the lease, or raise `LeaseHeld` naming the live holder."""
        lease, oid = self.current()
        stolen_from = None
        if lease is not None and lease.live and lease.holder != self.holder:
            if steal is None and not _dead_here(lease.holder, self.holder):
                raise LeaseHeld(self.run, lease.holder, lease.expires)
            stolen_from = lease.holder if steal is not None else None
        return self._write(oid, released=False, stolen_from=stolen_from, why=steal or "")

    def _write(
        self, parent: str | None, *, released: bool, stolen_from: str | None = None, why: str = ""
    ) -> Lease:
        expires = (
            (datetime.now(timezone.utc) + timedelta(seconds=self.seconds))
            .isoformat(timespec="seconds")
            .replace("+00:00", "Z")
        )
        lease = Lease(self.holder, expires, released, stolen_from, why)
        verb = "release" if released else ("steal" if stolen_from else "take")
        message = f"lease {self.run}: {verb} by {self.holder}\n\n" + json.dumps(lease.__dict__)
        repo = self.store.repo
        signature = pygit2.Signature("stepstone", "stepstone@localhost")
        tree = repo.TreeBuilder().write()
        commit = repo.create_commit(
            None, signature, signature, message, tree, [pygit2.Oid(hex=parent)] if parent else []
        )
        local = _TRACKING_LEASES + self.run
        repo.references.create(local, commit, force=True)
        try:
            git(
                self.store,
                "push",
                "--quiet",
                f"--force-with-lease={self.ref}:{parent or ''}",
                self.remote,
                f"{local}:{self.ref}",
            )
        except GitFailed as exc:
            if "stale info" in exc.stderr or "rejected" in exc.stderr:
                current, _ = self.current()
                holder = current.holder if current else "another agent"
                raise LeaseHeld(self.run, holder, current.expires if current else "?") from exc
            raise
        self._ours = str(commit)
        self._renewed = time.monotonic()
        return lease

    def renew_if_due(self) -> None:
        """Renew the lease when half of it has run out (called after each commit)."""
        if self._ours is not None and time.monotonic() - self._renewed > self.seconds / 2:
            self._write(self._ours, released=False)

    def release(self) -> None:
        """Let go of the lease so another agent can drive the run at once."""
        if self._ours is not None:
            ours, self._ours = self._ours, None
            self._write(ours, released=True)
            self._ours = None


class BackgroundPusher:
    """Pushes the run after commits without making a step wait on the network."""

    def __init__(self, store: GitStore, run: str) -> None:
        self.store = store
        self.run = run
        self.last_error: str | None = None
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._loop, daemon=True, name="stepstone-push")
        self._thread.start()

    def poke(self) -> None:
        """A new commit is durable locally: push it soon."""
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop:
            self._wake.wait()
            self._wake.clear()
            try:
                push(GitStore(self.store.path, create=False), self.run)
                self.last_error = None
            except StoreError as exc:
                self.last_error = str(exc)  # the next commit or `stepstone push` catches up

    def close(self, timeout: float = 30) -> None:
        """Push what is left, then stop."""
        self._stop = True
        self._wake.set()
        self._thread.join(timeout)
        try:
            push(self.store, self.run)
        except StoreError as exc:
            self.last_error = str(exc)
