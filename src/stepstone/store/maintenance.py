"""Keeping a store in shape: merging packs, starting `git gc`, repairing a damaged run.

None of this changes what a run holds: merges copy objects, gc is git's own, and
repair only moves a run's ref back to a commit that reads (noting the old tip).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pygit2

from ..errors import InvalidInput, NothingToRepair, StoreError
from ..model import names
from ..model.message import RUN, CommitMessage
from ..settings import Settings
from . import durable, gitobjects
from .derived import DerivedData
from .durable import batch_sync
from .errors import READ_ERRORS
from .objects import Objects
from .refs import BRANCH_REFS, REMOTE_REFS, RUN_REFS, TAG_REFS, Refs

# stepstone's git commands need no hook (a store copied from someone else brings
# theirs), and never delta big values (`bigblobs`): a delta search over blobs of
# hundreds of MB costs memory and time, and reading a delta costs a skip its speed
GIT_OPTIONS = (
    *("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false"),
    *("-c", "core.bigFileThreshold=1m"),
)


class Upkeep:
    """After each commit: merge small packs as they pile up, and start `git gc --auto`
    once git would (more than `gc.auto` loose objects or `gc.autoPackLimit` packs)."""

    def __init__(
        self, repo: pygit2.Repository, git_dir: Path, settings: Callable[[], Settings]
    ) -> None:
        self._repo = repo
        self._git_dir = git_dir
        self._settings = settings
        self._next_gc = 0.0
        self._commits_since_free = 0

    def after_commit(self, writer: gitobjects.ObjectWriter) -> None:
        """Merge small packs once they pile up; the commit is durable already."""
        batch = batch_sync(self._settings())

        def flush() -> None:
            if batch:
                durable.sync_filesystem(self._git_dir)
            elif writer.packs.unflushed is not None:
                writer.packs.unflushed.flush()

        merged = None
        with contextlib.suppress(OSError):
            merged = writer.packs.merge_if_needed(flush)
        self._commits_since_free += 1
        if merged is not None or self._commits_since_free >= 1000:
            # libgit2 keeps every pack it has seen open, removed ones too (by a merge
            # here or a `git gc`); freeing its handles makes it list the packs afresh
            self._commits_since_free = 0
            self._repo.free()
        limit = self._settings().gc_pack_limit
        if writer.packs.total_packs > limit and time.monotonic() > self._next_gc:
            self._next_gc = time.monotonic() + 60  # one `git gc --auto` start a minute at most
            self.collect_garbage_in_background()

    def collect_garbage_in_background(self) -> None:
        """Run `git gc --auto` (detached) once loose objects or packs pile up, as git does
        after commits: more than `gc.auto` (6,700) loose objects, estimated from
        `objects/17`, or more than `gc.autoPackLimit` (50) packs. gc packs everything
        with deltas, ten times smaller than stepstone's own packs, safely beside later
        writers. Without a git executable, nothing happens."""
        if not self._garbage_piled_up():
            return
        # `gc --auto` detaches itself (gc.autoDetach), so this returns at once
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(
                ["git", *GIT_OPTIONS, "--git-dir", str(self._git_dir), "gc", "--auto", "--quiet"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=60,
                check=False,
            )

    def _garbage_piled_up(self) -> bool:
        objects = self._git_dir / "objects"
        settings = self._settings()
        if settings.gc_auto <= 0:
            return False  # gc.auto=0 turns automatic collection off, in git as here
        with contextlib.suppress(OSError):
            if len(os.listdir(objects / "17")) * 256 > settings.gc_auto:
                return True
        with contextlib.suppress(OSError):
            packs = sum(1 for name in os.listdir(objects / "pack") if name.endswith(".pack"))
            return settings.gc_pack_limit > 0 and packs > settings.gc_pack_limit
        return False


class Repair:
    """Finds the history of damaged or lost runs and moves a run back to a sound commit."""

    def __init__(self, path: Path, objects: Objects, refs: Refs, derived: DerivedData) -> None:
        self._path = path
        self._objects = objects
        self._refs = refs
        self._derived = derived
        self._git_dir = refs.git_dir

    def only_run(self) -> str:
        """This store's only run; else say how to choose one, or how to restore a run
        whose ref is gone."""
        runs = self._refs.runs()
        if len(runs) == 1:
            return runs[0]
        if not runs:
            lost = self.lost_runs()
            if lost:
                raise StoreError(
                    str(self._path),
                    f"no run's ref can be read, but the history of run {lost[0]!r} is here "
                    f"(its ref is gone): `stepstone repair --run {lost[0]}` restores it",
                )
            raise InvalidInput(
                f"no run id given and store {self._path} has no runs: pass a run id "
                f"(--run ID, or STEPSTONE_RUN)"
            )
        raise InvalidInput(
            f"store {self._path} has several runs ({', '.join(runs)}): pick one with --run ID"
        )

    def _readable(self, commit_id: str) -> bool:
        """Whether the commit and every record file of its tree can be read."""
        try:
            tree = self._objects.tree_of(commit_id)
            self._objects.files(tree, lambda top: top != "artifacts")
        except (*READ_ERRORS, OSError):
            return False
        return True

    def _commits_of(self, run: str) -> list[tuple[int, str]]:
        """Every commit object of `run` in the database, as (seq, id), newest first."""
        found = [
            (message.seq, oid)
            for oid, message in self._objects.commits()
            if message.all(RUN) == [run]
        ]
        return sorted(found, reverse=True)

    def repair(
        self, run: str, *, force: bool, sound: Callable[[str], bool]
    ) -> tuple[str | None, str, list[str]]:
        """See `GitStore.repair`."""
        damaged_ref = "(a damaged ref)"
        try:
            old = self._refs.tip(run)
        except StoreError:
            old = None
            current = damaged_ref
        else:
            current = old or ""
        if old is not None and self._readable(old) and sound(old):
            raise NothingToRepair(str(self._path), f"run {run!r} reads fine; nothing to repair")
        candidates = self._commits_of(run)
        target = next((cid for _, cid in candidates if self._readable(cid) and sound(cid)), None)
        if target is None:
            raise StoreError(str(self._path), f"no readable commit of run {run!r} was found")
        target_seq = next(seq for seq, cid in candidates if cid == target)
        dropped = [cid for seq, cid in candidates if seq > target_seq]
        risky = []
        if old is not None and old != target and old not in dropped:
            dropped.insert(0, old)  # made by hand (no run trailer), or unreadable
            try:
                self._objects.commit(old)
            except READ_ERRORS:
                risky.append(f"the tip {old[:10]} itself cannot be read")
        for cid in dropped:
            try:
                keys = CommitMessage.parse(self._objects.message(cid)).keys
            except READ_ERRORS:
                keys = []
            if keys:
                risky.append(f"{cid[:10]} recorded effect {keys[0]}")
        if risky and not force:
            raise StoreError(
                str(self._path),
                "repairing would forget: " + "; ".join(risky) + ". Check those effects with "
                "their receivers first, then run `stepstone repair --force`",
            )
        note = self._git_dir / "stepstone" / "damaged" / f"{run}-{int(time.time())}.txt"
        note.parent.mkdir(parents=True, exist_ok=True)
        note.write_text(
            f"run {run}\ndamaged tip {old or current}\nmoved to {target}\n"
            + "".join(f"dropped {cid}\n" for cid in dropped)
        )

        def now_at() -> str:
            try:
                return self._refs.tip(run) or ""
            except StoreError:
                return damaged_ref

        self._refs.move(self._refs.ref(run), target, current, now_at)
        self._derived.forget(run)
        return old, target, dropped

    def traces(self, run: str) -> list[str]:
        """Where this repository shows that `run` has history, although no ref of it can
        be read: ref files, packed refs, its archive tag, notes of an earlier repair."""
        run = names.run_id(run)
        git_dir = self._git_dir
        found = [
            f"ref file {place}"
            for place in (RUN_REFS + run, BRANCH_REFS + run)
            if (git_dir / place).exists()
        ]
        with contextlib.suppress(OSError):
            packed = (git_dir / "packed-refs").read_text(errors="replace").split()
            found += [
                f"packed ref {place}"
                for place in (RUN_REFS + run, BRANCH_REFS + run)
                if place in packed
            ]
        if self._refs.exists(TAG_REFS + run):
            found.append(f"its archive tag {TAG_REFS + run}")
        with contextlib.suppress(OSError):
            found += [
                f"a repair note {note.name}"
                for note in (git_dir / "stepstone" / "damaged").glob(f"{run}-*.txt")
            ]
        with contextlib.suppress(OSError):
            found += [
                f"ref file {ref.relative_to(git_dir).as_posix()}"
                for ref in (git_dir / REMOTE_REFS).glob(f"*/{run}")
            ]
        # HEAD naming the run's missing branch: its commits may be all that is left (the
        # lock file is no hint here: a driver creates it before it opens a new run)
        if not found and self._hints(run, locks=False) and run in self.lost_runs([run]):
            found.append("its commits, which HEAD names")
        return found

    def _hints(self, run: str, *, locks: bool = True) -> str:
        """What names `run` in this repository besides refs: HEAD, its lock file."""
        hints = []
        with contextlib.suppress(OSError):
            if (self._git_dir / "HEAD").read_text().strip() == f"ref: {BRANCH_REFS}{run}":
                hints.append("HEAD")
        if locks and (self._git_dir / "stepstone" / "locks" / f"{run}.lock").exists():
            hints.append("its lock file")
        return " and ".join(hints)

    def lost_runs(self, candidates: list[str] | None = None) -> list[str]:
        """The runs that HEAD or a lock file names, whose commits are in the object
        database but that no ref holds (`candidates`: those to look for; None: the one
        HEAD names and those with a lock file)."""
        if candidates is None:
            candidates = []
            with contextlib.suppress(OSError):
                head = (self._git_dir / "HEAD").read_text().strip()
                if head.startswith(f"ref: {BRANCH_REFS}"):
                    candidates.append(head.removeprefix(f"ref: {BRANCH_REFS}"))
            with contextlib.suppress(OSError):
                candidates += [
                    lock.stem for lock in (self._git_dir / "stepstone" / "locks").glob("*.lock")
                ]
        known = set(self._refs.runs())
        wanted = {run for run in candidates if run not in known and self._hints(run)}
        if not wanted:
            return []
        found: set[str] = set()
        for _, message in self._objects.commits():
            found.update(message.all(RUN)[:1])
            if wanted <= found:
                break
        return sorted(wanted & found)
