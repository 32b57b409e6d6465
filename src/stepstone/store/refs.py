"""Refs: where each run lives, and every ref stepstone writes.

A run lives on `refs/stepstone/runs/<run>` (any repository) or on the branch
`refs/heads/<run>` (a store of stepstone's own); in a work-tree clone, a run only on
a remote-tracking branch is read from there. Besides runs, stepstone writes HEAD (in
its own stores), archive tags, the lease refs of a shared remote and the refs that
keep a diverged copy of a run. A run's ref moves only by compare-and-swap through
git's lock-file protocol (`durable`); the other refs are set outright.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path

import pygit2

from ..model import names
from ..model.message import RUN, CommitMessage
from . import durable
from .config import Config
from .durable import write_atomic
from .errors import READ_ERRORS, damaged_ref, translated
from .objects import Objects
from .opening import DEDICATED_KEY

RUN_REFS = "refs/stepstone/runs/"  # runs in any repository
BRANCH_REFS = "refs/heads/"  # runs in a store of stepstone's own
REMOTE_REFS = "refs/remotes/"  # runs of a work-tree clone's remotes
TAG_REFS = "refs/tags/stepstone/"  # the archives of finished runs
LEASE_REFS = "refs/stepstone/leases/"  # on a shared remote: who drives each run
TRACKING_REFS = "refs/stepstone/remote/"  # here: the remote's history of each run
TRACKING_LEASE_REFS = "refs/stepstone/remote-leases/"  # here: the remote's lease commits
DIVERGED_REFS = "refs/stepstone/diverged/"  # the copy of a run that `pull` did not keep
KIN_REFS = "refs/stepstone/kin/"  # here: a copy's history of a run of this lineage
HISTORY_REFS = (
    RUN_REFS, BRANCH_REFS, REMOTE_REFS, TRACKING_REFS, DIVERGED_REFS, TAG_REFS, KIN_REFS
)  # fmt: skip


class Refs:
    """The refs of one repository: which hold runs, where they point, and their writes."""

    def __init__(
        self, repo: pygit2.Repository, path: Path, objects: Objects, config: Config
    ) -> None:
        self._repo = repo
        self._path = path
        self._objects = objects
        self._config = config
        self.git_dir = Path(repo.path)
        self._run_refs: dict[str, str] = {}  # run -> the local ref that holds it, once found
        self._dedicated: bool | None = None

    # -- finding runs -----------------------------------------------------------

    @property
    def dedicated(self) -> bool:
        """Whether this is a store of stepstone's own (runs on branches, HEAD on a run):
        known from the refs, so it travels; `stepstone.dedicated` says it before then."""
        if self._dedicated is None:
            self._dedicated = self._config.flag(DEDICATED_KEY) or any(
                ref.startswith((BRANCH_REFS, REMOTE_REFS)) for ref in self.found()
            )
        return self._dedicated

    def forget_dedicated(self) -> None:
        """Read whether this is a store of stepstone's own afresh (its config changed)."""
        self._dedicated = None

    def _names(self) -> set[str]:
        """Every ref libgit2 lists, and the loose ref files where runs live that it skips
        because they cannot be read (a damaged ref is still a run's history)."""
        found = set(self._repo.references)
        for prefix in (RUN_REFS, BRANCH_REFS):
            with contextlib.suppress(OSError):
                for entry in os.scandir(self.git_dir / prefix):
                    if entry.is_file() and not entry.name.endswith(".lock"):
                        found.add(prefix + entry.name)
        return found

    def _holds_run(self, ref: str, run: str) -> bool | None:
        """Whether `ref`'s tip is a commit of `run` (its trailer says so, or, after a
        commit made by hand, its tree's `run.json` names the run); None when it cannot be
        read."""
        try:
            reference = self._repo.references.get(ref)
            if reference is None:
                return False
            commit = self._repo[reference.resolve().target]
            if not isinstance(commit, pygit2.Commit):
                return False
            if CommitMessage.parse(commit.message).all(RUN) == [run]:
                return True
            if "run.json" not in commit.tree:
                return False
            head = json.loads(self._objects.blob_data(commit.tree["run.json"].id))
            return isinstance(head, dict) and head.get("run") == run
        except READ_ERRORS:
            return None

    def found(self) -> dict[str, str]:
        """Ref -> run for every ref holding a run: under `refs/stepstone/runs/`, on a
        branch, or on a remote-tracking branch of a work-tree clone (damaged ones too
        where the place says it is a run)."""
        found: dict[str, str] = {}
        for ref in self._names():
            if ref.startswith(RUN_REFS):
                run = ref[len(RUN_REFS) :]
                holds: bool | None = True
            elif ref.startswith(BRANCH_REFS):
                run = ref[len(BRANCH_REFS) :]
                holds = self._holds_run(ref, run)
                if holds is None:  # unreadable: a run's branch if this is a store
                    holds = (
                        self._config.flag(DEDICATED_KEY) or (self.git_dir / "stepstone").is_dir()
                    )
            elif ref.startswith(REMOTE_REFS) and ref.count("/") == 3:
                run = ref.rsplit("/", 1)[1]
                holds = run != "HEAD" and self._holds_run(ref, run) is not False
            else:
                continue
            if holds and "/" not in run:
                found[ref] = run
        return found

    def ref(self, run: str) -> str:
        """The local ref that holds `run`'s history (or will, for a new run)."""
        run = names.run_id(run)
        known = self._run_refs.get(run)
        if known is not None:
            return known
        refs = self.found()
        for place in (RUN_REFS + run, BRANCH_REFS + run):
            if place in refs:
                self._run_refs[run] = place
                return place
        if self._upstream(run, refs) is not None:
            return BRANCH_REFS + run  # a work-tree clone: the run continues on its branch
        return (BRANCH_REFS if self.dedicated else RUN_REFS) + run

    def _upstream(self, run: str, refs: Mapping[str, str] | None = None) -> str | None:
        """A remote-tracking ref holding `run` (origin's first), for a run with no local ref."""
        refs = self.found() if refs is None else refs
        tracking = sorted(
            (ref for ref, name in refs.items() if name == run and ref.startswith(REMOTE_REFS)),
            key=lambda ref: (not ref.startswith(REMOTE_REFS + "origin/"), ref),
        )
        return tracking[0] if tracking else None

    def runs(self) -> list[str]:
        """The ids of the runs in this repository, sorted."""
        return sorted(set(self.found().values()))

    def histories(self) -> dict[str, str]:
        """Ref -> commit for every ref that may hold a run's history, of any run: runs,
        remote-tracking branches, the remote's history fetched here, copies `pull` set
        aside and archive tags (unreadable refs left out)."""
        found = {}
        for ref in self._names():
            if not ref.startswith(HISTORY_REFS) or ref.endswith("/HEAD"):
                continue
            with contextlib.suppress(*READ_ERRORS, KeyError):
                found[ref] = str(self._repo.references[ref].resolve().target)
        return found

    def everywhere(self, path: str, *, but: str | None = None) -> dict[str, bytes]:
        """Ref -> the content of `path` at the tip of every ref of `histories` but `but`."""
        found = {}
        for ref, commit in self.histories().items():
            if ref == but:
                continue
            try:
                data = self._objects.blob(self._objects.tree_of(commit), path)
            except READ_ERRORS:
                continue  # a damaged history holds nothing readable here
            if data is not None:
                found[ref] = data
        return found

    # -- reading where refs point -------------------------------------------------

    def tip(self, run: str) -> str | None:
        """The latest commit of `run`, or None; a run with no local ref starts from its
        remote-tracking branch, if any."""
        ref = self.ref(run)
        loose = _loose_target(self.git_dir / ref)
        if loose is not None:
            return loose
        try:
            reference = self._repo.references.get(ref)
        except pygit2.GitError as exc:
            raise damaged_ref(self._path, run, ref, exc) from exc
        if reference is not None:
            return str(reference.target)
        upstream = self._upstream(run)
        if upstream is None:
            return None
        return str(self._repo.references[upstream].resolve().target)

    def target(self, ref: str) -> str | None:
        """The commit `ref` points at, or None when there is no such ref."""
        with translated(self._path, f"read the ref {ref}"):
            reference = self._repo.references.get(ref)
            return str(reference.resolve().target) if reference is not None else None

    def exists(self, ref: str) -> bool:
        """Whether `ref` exists and can be read."""
        try:
            return self._repo.references.get(ref) is not None
        except pygit2.GitError:
            return False

    # -- writing ----------------------------------------------------------------

    def move(
        self,
        ref: str,
        new: str,
        expected: str | None,
        read_current: Callable[[], str | None],
        *,
        flush: Callable[[int], None] = os.fsync,
    ) -> None:
        """Point `ref` at `new` if it still points at `expected` (`read_current` says
        where it is, under its lock); raises `RefMoved` otherwise, and what the OS
        raises (`FileExistsError`: the ref is locked) as it is."""
        durable.update_ref(self.git_dir, ref, new, expected, read_current, flush)

    def set(self, ref: str, commit: str) -> None:
        """Point `ref` at `commit`, whatever it pointed at (not a run's ref)."""
        with translated(self._path, f"set the ref {ref}"):
            self._repo.references.create(ref, pygit2.Oid(hex=commit), force=True)

    def point_head_at(self, run: str) -> None:
        """In a bare store of stepstone's own, make HEAD the run's branch (for `git log`)."""
        if not self.dedicated or not self._repo.is_bare:
            return
        target = self.ref(run)
        if not target.startswith(BRANCH_REFS):
            return
        try:
            head = self._repo.references.get("HEAD")
        except pygit2.GitError:  # a torn HEAD: in a store of stepstone's own, only a pointer
            head = None
        if (
            head is not None
            and head.type == pygit2.enums.ReferenceType.SYMBOLIC
            and head.target == target
        ):
            return
        # written whole, not under git's HEAD.lock: a driver killed here leaves no lock
        # that would stop every later open
        write_atomic(self.git_dir / "HEAD", f"ref: {target}\n".encode())

    def clear_stale_locks(self, run: str) -> list[Path]:
        """Remove the lock files of the run's ref and tag that a killed writer left; the ones
        removed (call it holding the run lock)."""
        locks = [
            self.git_dir / (self.ref(run) + ".lock"),
            self.git_dir / (TAG_REFS + names.run_id(run) + ".lock"),  # the run's archive tag
            self.git_dir / "packed-refs.lock",
        ]
        stale = [lock for lock in locks if lock.exists()]
        for lock in stale:
            lock.unlink(missing_ok=True)
        return stale


def _loose_target(path: Path) -> str | None:
    """The commit a loose ref file names, read directly (a step's commit reads its
    ref under the lock; libgit2 spends far more on it); None when the ref is packed,
    symbolic or unreadable (libgit2 then reads it, and says what is wrong)."""
    try:
        with open(path, "rb") as handle:
            content = handle.read(42)
    except OSError:
        return None
    if len(content) != 41 or content[40:] != b"\n" or content[:40].strip(_HEX):
        return None
    return content[:40].decode("ascii")


_HEX = b"0123456789abcdef"
