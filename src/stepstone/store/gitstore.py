"""`GitStore`: the one door into a store. It speaks in runs, commits and files, and
shows the collaborators it is made of, as dulwich's `Repo` shows its `refs` and
`object_store`: callers use `refs`, `config`, `reader`, `writer`, `derived`, `upkeep`
and `repairs` directly; its own methods do work of their own or combine them (and
turn what libgit2 raises while reading objects into `StoreError`s)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import TypeVar

from ..model import names
from ..settings import Settings
from . import durable, torn
from .bigblobs import BigBlobs, StoredReader
from .config import Config
from .derived import CatchUp, DerivedData
from .durable import batch_sync
from .errors import READ_ERRORS, damaged_commit, translated
from .lock import TurnLock
from .maintenance import Repair, Upkeep
from .objects import CommitInfo, Objects
from .opening import enable_fsync, make_dedicated, open_repository, resolve_store_path
from .reading import Reader, Snapshot
from .refs import TAG_REFS, Refs
from .writing import Writer

T = TypeVar("T")


class GitStore:
    """A Git repository holding runs. Narrow: read files, commit changes, list history."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        create: bool = True,
        settings: Settings | None = None,
    ) -> None:
        base = settings or Settings.from_env()
        self.path = resolve_store_path(path, settings=base)
        if self.path.name == ".git" and (self.path / "HEAD").is_file():
            self.path = self.path.parent  # a work-tree clone: the store is the folder
        enable_fsync(base)
        self._repo = open_repository(self.path, create=create)
        self.config = Config(self._repo, self.path)
        """The store's Git config: keys, remotes (`Config`; `set_config` for a setting)."""
        self._base_settings = base
        self.settings = base.with_config(self.config.get)
        """How this store behaves: the process's settings and what its Git config says."""
        self._objects = Objects(self._repo)
        self.refs = Refs(self._repo, self.path, self._objects, self.config)
        """Every ref: where runs live and where each ref points (`Refs`)."""
        self.git_dir = self.refs.git_dir
        """The repository's Git directory (where objects, refs and locks live)."""
        self.derived = DerivedData(self.git_dir, self._objects)
        """Data derived from commits, keyed by tree id: read caches, step indexes."""
        self.reader = Reader(self.path, self._objects, self.derived, self.refs.tip)
        """A run's commit (`head`) and its files (`read`)."""
        self.upkeep = Upkeep(self._repo, self.git_dir, lambda: self.settings)
        """Pack merges after commits and `git gc --auto` in the background."""
        self.writer = Writer(
            self._repo, self.path, self._objects, self.refs, lambda: self.settings, self.upkeep
        )
        """A run's commit (`commit`: one pack, then the ref by compare-and-swap), and a
        lease's (`loose_commit`)."""
        self.repairs = Repair(self.path, self._objects, self.refs, self.derived)
        """A damaged run moved back to its newest readable commit; a lost one's traces."""
        self._turns: dict[str, TurnLock] = {}
        self.big_blobs = BigBlobs(str(self.git_dir / "objects" / "pack"), self._unflushed)

    def turn(self, what: str) -> TurnLock:
        """A short exclusive turn across the processes that use this store (`with
        store.turn("effects"):`); re-entered by the thread that holds it. Hold it only
        while the run's guard (`Ledger.guard`) is held, so that threads take turns too."""
        lock = self._turns.get(what)
        if lock is None:
            lock = self._turns[what] = TurnLock(
                self.git_dir / "stepstone" / "locks" / f"{what}.turn"
            )
        return lock

    # -- config -----------------------------------------------------------------

    def set_config(self, key: str, value: bool | int | str) -> None:
        """Set `key` in the store's Git config; `settings` then says what it changed."""
        self.config.set(key, value)
        self.settings = self._base_settings.with_config(self.config.get)

    def dedicate(self) -> None:
        """Make this bare repository a store of stepstone's own (runs on branches)."""
        with translated(self.path, "configure the store"):
            make_dedicated(self._repo, self.path)
        self.refs.forget_dedicated()
        self.settings = self._base_settings.with_config(self.config.get)

    # -- runs and refs ----------------------------------------------------------

    def pick_run(self, run: str | None = None) -> str:
        """`run`, else `STEPSTONE_RUN`, else this store's only run; else say how to choose."""
        return run or self.settings.run or self.repairs.only_run()

    def move_run(self, run: str, commit: str, expected: str | None) -> None:
        """Point `run`'s ref at `commit` if it is still at `expected` (else `RefMoved`)."""
        with translated(self.path, f"move run {run!r}"):
            self.refs.move(self.refs.ref(run), commit, expected, lambda: self.refs.tip(run))

    def tagged(self, run: str) -> bool:
        """Whether the run's archive tag `stepstone/<run>` exists."""
        return self.refs.exists(TAG_REFS + names.run_id(run))

    def tag(self, run: str, commit: str) -> str:
        """Tag `commit` as `stepstone/<run>` (the archive of a finished run)."""
        name = TAG_REFS + names.run_id(run)
        self.refs.set(name, commit)
        if batch_sync(self.settings):
            durable.sync_filesystem(self.git_dir)
        return name

    def clear_leftovers(self, run: str, *, locks: bool = True, always: bool = False) -> list[str]:
        """Clear what a crash left: torn packs (`torn`); with `locks` (run lock held), ref locks."""
        said = torn.clear(self.git_dir, needed=self._objects.reachable_commits, always=always)
        if said:  # libgit2 keeps the packs it has listed: have it list them afresh
            self._repo.free()
        stale = self.refs.clear_stale_locks(run) if locks else []
        return said + [f"removed a stale lock {p.name} left by a killed process" for p in stale]

    # -- reading ----------------------------------------------------------------

    def blob(self, tree: str, path: str) -> bytes | None:
        """The content of `path` in `tree`, or None when absent (a `StoreError` when it
        is over the bounds a reader keeps)."""
        with translated(self.path, f"read {path}"):
            return self._objects.blob(tree, path)

    def open_blob(self, tree: str, path: str) -> StoredReader | None:
        """A file over `path` in `tree` if it is a big blob (`bigblobs`), else None."""
        oid = self._objects.entry_id(tree, path)
        return None if oid is None else self.big_blobs.reader(oid)

    def tree_files(self, tree: str, wanted: Callable[[str], bool]) -> dict[str, bytes]:
        """Every file of `tree` under the top-level names `wanted` accepts (a
        `StoreError` when one cannot be read)."""
        with translated(self.path, f"read tree {tree[:10]}"):
            return self._objects.files(tree, wanted)

    def effect_files(self, commit: str) -> dict[str, bytes]:
        """The effect records of a commit's tree, by path (a `StoreError` when they
        cannot be read)."""
        with translated(self.path, f"read the effects of commit {commit[:10]}"):
            return self._objects.files(self._objects.tree_of(commit), lambda top: top == "effects")

    def commit_message(self, commit: str) -> str:
        """The message of `commit` (a `StoreError` when it cannot be read)."""
        with translated(self.path, f"read commit {commit[:10]}"):
            return self._objects.message(commit)

    def parents(self, commit: str) -> list[str]:
        """The parents of `commit`, the first parent first."""
        with translated(self.path, f"read commit {commit[:10]}"):
            return self._objects.parents(commit)

    def descends(self, commit: str | None, ancestor: str) -> bool:
        """Whether `commit` is `ancestor` or has it in its history."""
        if commit is None:
            return False
        return commit == ancestor or self._objects.descends(commit, ancestor)

    def merge_base(self, one: str, other: str) -> str | None:
        """The best common ancestor of two commits, or None when they share none."""
        with translated(self.path, f"compare commits {one[:10]} and {other[:10]}"):
            return self._objects.merge_base(one, other)

    def made_by_stepstone(self, commit: str, *, within: int = 200) -> str | None:
        """The newest commit of `commit`'s history that stepstone made (it carries a
        run's trailer): `commit` itself unless it was made by hand (a `StoreError` when
        its history cannot be read)."""
        with translated(self.path, f"read the history of commit {commit[:10]}"):
            return self._objects.made_by_stepstone(commit, within=within)

    def log(self, tip: str) -> Iterator[CommitInfo]:
        """The commits of `tip`'s history, newest first (a `StoreError` when one cannot
        be read)."""
        with translated(self.path, f"read the history of commit {tip[:10]}"):
            yield from self._objects.log(tip)

    def history(self, run: str) -> Iterator[CommitInfo]:
        """The commits of `run`, newest first."""
        tip = self.refs.tip(run)
        if tip is not None:
            yield from self.log(tip)

    # -- derived data -------------------------------------------------------------

    def catch_up(
        self,
        run: str,
        kind: str,
        at: Snapshot,
        wanted: Callable[[str], bool],
        decode: Callable[[bytes], tuple[str, T]],
        *,
        cached: bool = True,
    ) -> CatchUp[T]:
        """Derived data of `kind` about `run` brought up to commit `at` (see
        `DerivedData.catch_up`); a commit that cannot be read is a `StoreError`."""
        try:
            return self.derived.catch_up(run, kind, at.tree or "", wanted, decode, cached=cached)
        except READ_ERRORS as exc:
            raise damaged_commit(self.path, run, at.commit or "", exc) from exc

    # -- writing and maintenance --------------------------------------------------

    def _unflushed(self) -> durable.Unflushed | None:
        return None if batch_sync(self.settings) else self.writer.unflushed

    def repair(
        self,
        run: str,
        *,
        force: bool = False,
        sound: Callable[[str], bool] = lambda commit: True,
    ) -> tuple[str | None, str, list[str]]:
        """Move a damaged run back to its newest fully readable commit (one whose
        objects all read and that `sound` accepts: its records are valid).

        Returns (old tip, new tip, the commits dropped from the run). Works when the
        tip or a record cannot be read, and when the ref itself is damaged or gone
        (the commits are found by their run trailer). Refuses when a dropped commit
        recorded an effect (its intent would be forgotten) or cannot be read, unless
        `force`. Nothing is deleted: the old tip is noted in
        `<git dir>/stepstone/damaged/`.
        """
        with translated(self.path, f"repair run {run!r}"):
            return self.repairs.repair(run, force=force, sound=sound)
