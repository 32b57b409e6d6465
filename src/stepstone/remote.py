"""Runs that travel: push, pull, clone, and a lease so one agent drives a run.

The remote is any URL Git accepts; transport is plain `git` (so credentials,
SSH and proxies work as they do for the user). Run history moves as branches
of the dedicated store. The lease is a ref per run on the remote,
`refs/stepstone/leases/<run>`, whose commits say who holds the run until when;
it moves only by compare-and-swap (`git push --force-with-lease`), so two
agents can never both take it. A driver that takes the lease first brings the
remote's newer history of the run in (or stops when the copies diverged), and
before each effect it pushes the run with the lease in one atomic push: a
driver whose lease was stolen fails there, before it writes anything.
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
from urllib.parse import urlparse

import pygit2

from . import durable
from .effectbook import state_rank
from .errors import Diverged, LeaseHeld, LeaseLost, StepstoneError, StoreError
from .store import (
    BRANCH_REFS,
    RUN_REFS,
    GitStore,
    Snapshot,
    make_dedicated,
    parse_trailers,
)

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
    make_dedicated(repo, path)
    repo.config[REMOTE_KEY] = "origin"
    store = GitStore(path)
    # runs kept in a project repository live under refs/stepstone/runs/: bring them too
    git(store, "fetch", "--quiet", "--no-tags", "origin", f"+{RUN_REFS}*:{RUN_REFS}*")
    return store


# -- history ------------------------------------------------------------------


def _remote_refs(store: GitStore, run: str) -> dict[str, str]:
    """Where the remote keeps `run` (either place a run can live), ref -> commit."""
    name = _require_remote(store)
    out = git(store, "ls-remote", name, RUN_REFS + run, BRANCH_REFS + run)
    return {ref: oid for oid, ref in (line.split() for line in out.splitlines() if line.strip())}


def _remote_ref(store: GitStore, run: str) -> tuple[str, str | None]:
    """The remote's ref for `run` (the local one's place when the remote has none yet or
    has it there too) and the commit it points at."""
    local = store.ref(run)
    found = _remote_refs(store, run)
    if local in found or not found:
        return local, found.get(local)
    ref = RUN_REFS + run if RUN_REFS + run in found else BRANCH_REFS + run
    return ref, found[ref]


def remote_tip(store: GitStore, run: str) -> str | None:
    """The commit the remote's history of `run` ends at, or None (fetched here)."""
    return _fetch_run(store, run)


def push(store: GitStore, run: str, *, force_over: str | None = None) -> str:
    """Push the run's history (and its archive tag); refuse to overwrite other work."""
    name = _require_remote(store)
    ref = store.ref(run)
    theirs, _ = _remote_ref(store, run)
    args = ["push", "--quiet", name, f"{ref}:{theirs}"]
    if force_over is not None:
        args.insert(1, f"--force-with-lease={theirs}:{force_over}")
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
    _name_remote_head(store, name, theirs)
    return store.tip(run) or ""


def _local_path(url: str) -> Path | None:
    """The folder of a remote on this machine (a path or a file:// URL), else None."""
    parsed = urlparse(url)
    if parsed.scheme == "file":
        return Path(parsed.path)
    if parsed.scheme or (":" in url and not url.startswith(("/", "."))):
        return None  # https://, ssh://, host:path
    return Path(url)


def _name_remote_head(store: GitStore, name: str, ref: str) -> None:
    """On a bare remote on this machine whose HEAD names no branch yet (as `git init
    --bare` leaves it), point HEAD at the run's branch, so `git log` works there."""
    if not ref.startswith(BRANCH_REFS):
        return
    url = store.repo.remotes[name].url
    path = _local_path(url) if url else None
    if path is None:
        return
    try:
        head = (path / "HEAD").read_text().strip()
        branch = head.removeprefix("ref: ")
        if branch == head or (path / branch).exists() or _packed(path, branch):
            return
    except OSError:
        return
    subprocess.run(
        ["git", "--git-dir", str(path), "symbolic-ref", "HEAD", ref],
        capture_output=True,
        check=False,
        timeout=30,
    )


def _packed(git_dir: Path, ref: str) -> bool:
    try:
        return ref in (git_dir / "packed-refs").read_text().split()
    except OSError:
        return False


@dataclass(frozen=True)
class PullResult:
    """What `pull` did."""

    state: str  # "up to date", "fast-forwarded", "ahead", "created", "kept local", "kept remote"
    local: str | None
    remote: str | None
    preserved: str | None = None
    carried: tuple[str, ...] = ()  # effects of the history not kept, carried onto the kept one


def _fetch_run(store: GitStore, run: str) -> str | None:
    name = _require_remote(store)
    tracking = _TRACKING + run
    theirs, tip = _remote_ref(store, run)
    if tip is None:
        return None
    git(store, "fetch", "--quiet", "--no-tags", name, f"+{theirs}:{tracking}")
    ref = store.repo.references.get(tracking)
    return str(ref.target) if ref is not None else None


def _subjects(store: GitStore, tip: str, base: str | None) -> list[str]:
    out = []
    for commit in store.repo.walk(pygit2.Oid(hex=tip), pygit2.enums.SortMode.TOPOLOGICAL):
        if base is not None and str(commit.id) == base:
            break
        out.append(f"{str(commit.id)[:10]} {commit.message.splitlines()[0]}")
    return out


def pull(
    store: GitStore, run: str, *, keep: str | None = None, holder: str = "stepstone"
) -> PullResult:
    """Bring the remote's history of `run` here; never merge diverged records silently.

    When both copies advanced, raise `Diverged` showing both histories, unless
    `keep` is "local" or "remote": the kept side becomes the run, the other is
    preserved on `refs/stepstone/diverged/<run>/...`, and the effects that the
    other side performed (or may have) are carried onto the kept one, since they
    happened: a later run never performs them again. The caller holds the run.
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
        carried = carry_effects(store, run, kept=remote, other=local, holder=holder)
        return PullResult("kept remote", local, remote, preserved, carried)
    preserved = f"{_DIVERGED}{run}/remote-{stamp}"
    store.repo.references.create(preserved, pygit2.Oid(hex=remote), force=True)
    name = _require_remote(store)
    git(store, "push", "--quiet", name, f"{preserved}:{preserved}")
    carried = carry_effects(store, run, kept=local, other=remote, holder=holder)
    push(store, run, force_over=remote)
    return PullResult("kept local", local, remote, preserved, carried)


def _seq(store: GitStore, commit: str) -> int:
    obj = store.repo[commit]
    message = obj.message if isinstance(obj, pygit2.Commit) else ""
    seq = parse_trailers(message).get("Stepstone-Seq", ["0"])[0]
    return int(seq) if seq.isdigit() else 0


def carry_effects(
    store: GitStore, run: str, *, kept: str, other: str, holder: str
) -> tuple[str, ...]:
    """Commit onto `kept` (the run's tip) every effect record of `other` that is further
    along there (submitted, unresolved or confirmed where `kept` has it planned, less
    far, or not at all); return their paths."""
    theirs = store.effect_files(other)
    ours = store.effect_files(kept)
    writes = {
        path: data
        for path, data in theirs.items()
        if state_rank(data) > max(state_rank(ours.get(path, b"{}")), 0)
    }
    if not writes:
        return ()
    tip = store.repo[kept]
    assert isinstance(tip, pygit2.Commit)
    seq = max(_seq(store, kept), _seq(store, other)) + 1
    keys = "".join(
        f"Stepstone-Key: {path.rsplit('/', 1)[1].removesuffix('.json')}\n"
        for path in sorted(writes)
    )
    message = (  # the keys let `repair` see that dropping this commit would forget effects
        f"pull: carried over {len(writes)} effect(s) from the history not kept\n\n"
        f"Stepstone-Run: {run}\nStepstone-Status: carried\nStepstone-From: {other}\n"
        f"{keys}Stepstone-Seq: {seq}\nStepstone-Holder: {holder}\n"
    )
    store.commit(run, Snapshot(kept, str(tip.tree_id)), writes, message, author=holder)
    return tuple(sorted(writes))


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
        self.remote = _require_remote(store)
        self.ref = _LEASES + run
        try:
            self.seconds = int(str(store.repo.config[LEASE_SECONDS_KEY]))
        except (KeyError, ValueError):
            self.seconds = DEFAULT_LEASE_SECONDS
        self.lost: str | None = None  # who took the lease from us, once it happened
        self.run_ref = store.ref(run)  # where the remote keeps the run (known at `take`)
        self._ours: str | None = None
        self._base: str | None = None  # the last steal, parent of our lease commits
        self._renewed = 0.0
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
            f"+{self.ref}:{_TRACKING_LEASES}{self.run}",
        )
        oid = out.split()[0]
        commit = self.store.repo[oid]
        assert isinstance(commit, pygit2.Commit)
        data = json.loads(commit.message.split("\n\n", 1)[1])
        return Lease(**data), oid

    def take(self, *, steal: str | None = None) -> Lease:
        """Take the lease, or raise `LeaseHeld` naming the live holder."""
        self.run_ref = _remote_ref(self.store, self.run)[0]
        lease, oid = self.current()
        stolen_from = None
        if lease is not None and lease.live and lease.holder != self.holder:
            if steal is None and not _dead_here(lease.holder, self.holder):
                raise LeaseHeld(self.run, lease.holder, lease.expires)
            stolen_from = lease.holder if steal is not None else None
        if oid is not None:
            commit = self.store.repo[oid]
            assert isinstance(commit, pygit2.Commit)
            self._base = oid if lease is not None and lease.stolen_from else _first_parent(commit)
        return self._write(oid, released=False, stolen_from=stolen_from, why=steal or "")

    def _new_commit(
        self, *, released: bool, stolen_from: str | None, why: str
    ) -> tuple[str, Lease]:
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
        parents = [pygit2.Oid(hex=self._base)] if self._base else []
        commit = str(repo.create_commit(None, signature, signature, message, tree, parents))
        if stolen_from:
            self._base = commit  # a steal stays in the lease's history
        repo.references.create(_TRACKING_LEASES + self.run, pygit2.Oid(hex=commit), force=True)
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

    def release(self) -> None:
        """Let go of the lease so another agent can drive the run at once."""
        if self._ours is not None:
            ours, self._ours = self._ours, None
            self._write(ours, released=True)
            self._ours = None


def _first_parent(commit: pygit2.Commit) -> str | None:
    return str(commit.parent_ids[0]) if commit.parent_ids else None


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
                self.lease.fence(store.tip(self.run), renew=False)
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
