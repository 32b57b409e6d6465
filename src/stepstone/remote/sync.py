"""Moving a run's history between a store and its remote: clone, push, pull."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from ..effects.effectbook import state_rank
from ..errors import Diverged, GitFailed, StoreError
from ..store import (
    BRANCH_REFS,
    DIVERGED_REFS,
    GIT_OPTIONS,
    RUN_REFS,
    TAG_REFS,
    TRACKING_REFS,
    GitStore,
)
from .git import REMOTE_KEY, gist, git, git_env, require_remote


def clone(url: str, path: Path) -> GitStore:
    """Clone a store: every run, plan, record and artifact, ready to resume."""
    if path.exists() and any(path.iterdir()):
        raise StoreError(str(path), "exists and is not empty; clone into a new folder")
    done = subprocess.run(
        ["git", *GIT_OPTIONS, "clone", "--bare", "--quiet", url, str(path)],
        capture_output=True,
        text=True,
        env=git_env(),
        check=False,
    )
    if done.returncode != 0:
        raise StoreError(str(path), f"cannot clone {url}: {gist(done.stderr)}")
    store = GitStore(path)
    store.dedicate()
    store.set_config(REMOTE_KEY, "origin")
    # runs kept in a project repository live under refs/stepstone/runs/: bring them too
    git(store, "fetch", "--quiet", "--no-tags", "origin", f"+{RUN_REFS}*:{RUN_REFS}*")
    return store


def _remote_refs(store: GitStore, run: str) -> dict[str, str]:
    """Where the remote keeps `run` (either place a run can live), ref -> commit."""
    name = require_remote(store)
    out = git(store, "ls-remote", name, RUN_REFS + run, BRANCH_REFS + run)
    return {ref: oid for oid, ref in (line.split() for line in out.splitlines() if line.strip())}


def remote_ref(store: GitStore, run: str) -> tuple[str, str | None]:
    """The remote's ref for `run` (the local one's place when the remote has none yet or
    has it there too) and the commit it points at."""
    local = store.refs.ref(run)
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
    name = require_remote(store)
    ref = store.refs.ref(run)
    theirs, _ = remote_ref(store, run)
    args = ["push", "--quiet", name, f"{ref}:{theirs}"]
    if force_over is not None:
        args.insert(1, f"--force-with-lease={theirs}:{force_over}")
    if store.tagged(run):
        tag = TAG_REFS + run
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
    return store.refs.tip(run) or ""


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
    url = store.config.remote_url(name)
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
        ["git", *GIT_OPTIONS, "--git-dir", str(path), "symbolic-ref", "HEAD", ref],
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
    name = require_remote(store)
    tracking = TRACKING_REFS + run
    theirs, tip = remote_ref(store, run)
    if tip is None:
        return None
    git(store, "fetch", "--quiet", "--no-tags", name, f"+{theirs}:{tracking}")
    return store.refs.target(tracking)


def _subjects(store: GitStore, tip: str, base: str | None) -> list[str]:
    out = []
    for commit in store.log(tip):
        if base is not None and commit.id == base:
            break
        out.append(f"{commit.id[:10]} {commit.subject}")
    return out


def pull(store: GitStore, run: str, *, keep: str | None = None) -> PullResult:
    """Bring the remote's history of `run` here; never merge diverged records silently.

    When both copies advanced, raise `Diverged` showing both histories, unless
    `keep` is "local" or "remote": the kept side becomes the run and the other is
    preserved on `refs/stepstone/diverged/<run>/...` (`preserved`). The caller holds
    the run, and then carries onto it the effects the other side performed
    (`effects_to_carry`, committed by the run's ledger: run/pulling.py) and, keeping
    the local side, pushes it over the remote's (`push(force_over=remote)`).
    """
    remote = _fetch_run(store, run)
    local = store.refs.tip(run)
    if remote is None:
        return PullResult("ahead" if local else "up to date", local, None)
    if local is None:
        store.move_run(run, remote, None)
        return PullResult("created", None, remote)
    if local == remote:
        return PullResult("up to date", local, remote)
    base = store.merge_base(local, remote)
    if base == local:
        store.move_run(run, remote, local)
        return PullResult("fast-forwarded", local, remote)
    if base == remote:
        return PullResult("ahead", local, remote)
    if keep not in ("local", "remote"):
        mine = _subjects(store, local, base)
        theirs = _subjects(store, remote, base)
        raise Diverged(
            run,
            "both copies advanced since "
            f"{(base or 'the start')[:10]}.\n  here:   "
            + "\n          ".join(mine)
            + "\n  remote: "
            + "\n          ".join(theirs)
            + "\nKeep one with `stepstone pull --keep local` or `--keep remote`; the other "
            "is preserved on a ref, nothing is lost",
        )
    stamp = time.strftime("%Y%m%dT%H%M%S")
    if keep == "remote":
        preserved = f"{DIVERGED_REFS}{run}/local-{stamp}"
        store.refs.set(preserved, local)
        store.move_run(run, remote, local)
        return PullResult("kept remote", local, remote, preserved)
    preserved = f"{DIVERGED_REFS}{run}/remote-{stamp}"
    store.refs.set(preserved, remote)
    git(store, "push", "--quiet", require_remote(store), f"{preserved}:{preserved}")
    return PullResult("kept local", local, remote, preserved)


def effects_to_carry(store: GitStore, *, kept: str, other: str) -> dict[str, bytes]:
    """The effect records of `other` that are further along than in `kept` (submitted,
    unresolved or confirmed where `kept` has them planned, less far, or not at all), by
    path: what the history kept takes in from the one set aside."""
    theirs = store.effect_files(other)
    ours = store.effect_files(kept)
    return {
        path: data
        for path, data in theirs.items()
        if state_rank(data) > max(state_rank(ours.get(path, b"{}")), 0)
    }
