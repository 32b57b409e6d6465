"""`GitStore`: the one door into a store. It speaks in runs, commits and files, and
hands each job to the collaborator that owns it (refs, reading, writing, upkeep)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TypeVar

from ..errors import StoreError
from ..model import names
from ..settings import Settings
from . import durable, torn
from .bigblobs import BigBlobs, StoredBlob, StoredReader
from .config import Config
from .derived import CatchUp, DerivedData
from .errors import READ_ERRORS, damaged_commit, translated
from .maintenance import Repair, Upkeep
from .objects import CommitInfo, Objects
from .opening import batch_sync, enable_fsync, make_dedicated, open_repository, resolve_store_path
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
        self._config = Config(self._repo, self.path)
        self._base_settings = base
        self.settings = base.with_config(self._config.get)
        """How this store behaves: the process's settings and what its Git config says."""
        self._objects = Objects(self._repo)
        self.refs = self._refs = Refs(self._repo, self.path, self._objects, self._config)
        """Every ref: where runs live and where each ref points (`Refs`)."""
        self._derived = DerivedData(self.git_dir, self._objects)
        self._reader = Reader(self.path, self._objects, self._derived, self._refs.tip)
        self._upkeep = Upkeep(self._repo, self.git_dir, lambda: self.settings)
        self._committer = Writer(
            self._repo, self.path, self._objects, self._refs, lambda: self.settings, self._upkeep
        )
        self._repair = Repair(self.path, self._objects, self._refs, self._derived)
        self.big_blobs = BigBlobs(str(self.git_dir / "objects" / "pack"), self._unflushed)

    @property
    def git_dir(self) -> Path:
        """The repository's Git directory (where objects, refs and locks live)."""
        return self._refs.git_dir

    @property
    def autopush(self) -> bool:
        """Whether each commit is pushed to the remote in the background."""
        return self.settings.autopush

    @property
    def dedicated(self) -> bool:
        """Whether this is a store of stepstone's own (runs on branches, HEAD on a run):
        known from the refs, so it travels; `stepstone.dedicated` says it before then."""
        return self._refs.dedicated

    # -- config -----------------------------------------------------------------

    def config(self, key: str) -> str | None:
        """The value of `key` in the store's Git config, or None when unset."""
        return self._config.get(key)

    def set_config(self, key: str, value: bool | int | str) -> None:
        """Set `key` in the store's Git config; `settings` then says what it changed."""
        self._config.set(key, value)
        self.settings = self._base_settings.with_config(self._config.get)

    def remote_url(self, name: str) -> str | None:
        """The URL of the Git remote `name`, or None when there is no such remote."""
        return self._config.remote_url(name)

    def set_remote_url(self, name: str, url: str) -> None:
        """Point the Git remote `name` at `url`, creating it when it does not exist."""
        self._config.set_remote_url(name, url)

    def dedicate(self) -> None:
        """Make this bare repository a store of stepstone's own (runs on branches)."""
        with translated(self.path, "configure the store"):
            make_dedicated(self._repo, self.path)
        self._refs.forget_dedicated()
        self.settings = self._base_settings.with_config(self._config.get)

    # -- runs and refs ----------------------------------------------------------

    def ref(self, run: str) -> str:
        """The local ref that holds `run`'s history (or will, for a new run)."""
        return self._refs.ref(run)

    def runs(self) -> list[str]:
        """The ids of the runs in this store, sorted."""
        return self._refs.runs()

    def pick_run(self, run: str | None = None) -> str:
        """`run`, else `STEPSTONE_RUN`, else this store's only run; else say how to choose."""
        return run or self.settings.run or self._repair.only_run()

    def tip(self, run: str) -> str | None:
        """The id of the latest commit of `run`, or None when it has none.

        A run with no local ref starts from its remote-tracking branch, if any.
        """
        return self._refs.tip(run)

    def move_run(self, run: str, commit: str, expected: str | None) -> None:
        """Point `run`'s ref at `commit` if it is still at `expected` (else `RefMoved`)."""
        with translated(self.path, f"move run {run!r}"):
            self._refs.move(self.ref(run), commit, expected, lambda: self.tip(run))

    def tagged(self, run: str) -> bool:
        """Whether the run's archive tag `stepstone/<run>` exists."""
        return self._refs.exists(TAG_REFS + names.run_id(run))

    def tag(self, run: str, commit: str) -> str:
        """Tag `commit` as `stepstone/<run>` (the archive of a finished run)."""
        name = TAG_REFS + names.run_id(run)
        self._refs.set(name, commit)
        if batch_sync(self.settings):
            durable.sync_filesystem(self.git_dir)
        return name

    def point_head_at(self, run: str) -> None:
        """In a bare store of stepstone's own, make HEAD the run's branch (for `git log`)."""
        self._refs.point_head_at(run)

    def clear_leftovers(self, run: str, *, locks: bool = True, always: bool = False) -> list[str]:
        """Clear what a crash left: torn packs (`torn`); with `locks` (run lock held), ref locks."""
        said = torn.clear(self.git_dir, needed=self._objects.reachable_commits, always=always)
        if said:  # libgit2 keeps the packs it has listed: have it list them afresh
            self._repo.free()
        stale = self._refs.clear_stale_locks(run) if locks else []
        return said + [f"removed a stale lock {p.name} left by a killed process" for p in stale]

    # -- reading ----------------------------------------------------------------

    def head(self, run: str, *, at: str | None = None) -> Snapshot:
        """The latest commit of `run` (or commit `at`) without its files: ids, message."""
        return self._reader.head(run, at=at)

    def read(
        self,
        run: str,
        *,
        skip: tuple[str, ...] = ("artifacts",),
        cached: bool = True,
        at: str | None = None,
    ) -> Snapshot:
        """The files of the latest commit of `run` (or of commit `at`; top folders in
        `skip` are left out); `cached=False` reads every file from Git, not through the
        read cache."""
        return self._reader.read(run, skip=skip, cached=cached, at=at)

    def damaged(self, run: str, commit: str, exc: Exception) -> StoreError:
        """The error for a commit of `run` that cannot be read."""
        return damaged_commit(self.path, run, commit, exc)

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
        tip = self.tip(run)
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
            return self._derived.catch_up(run, kind, at.tree or "", wanted, decode, cached=cached)
        except READ_ERRORS as exc:
            raise self.damaged(run, at.commit or "", exc) from exc

    def save_derived(self, run: str, kind: str, data: bytes) -> None:
        """Keep derived data of `kind` about `run` (best effort: never flushed)."""
        self._derived.save(run, kind, data)

    # -- writing ----------------------------------------------------------------

    def commit(
        self,
        run: str,
        parent: Snapshot,
        writes: Mapping[str, bytes | StoredBlob | None],
        message: str,
        *,
        author: str,
    ) -> Snapshot:
        """Commit `writes` (path to content, a blob written before, None deletes) on
        top of `parent`.

        The ref moves only if it still points at `parent.commit`: a run that
        moved under us is an error, never a silent overwrite.
        """
        return self._committer.commit(run, parent, writes, message, author=author)

    def empty_commit(self, message: str, parents: list[str]) -> str:
        """A commit of the empty tree by stepstone (a lease's); no ref points at it yet."""
        return self._committer.loose_commit(message, parents)

    def _unflushed(self) -> durable.Unflushed | None:
        return None if batch_sync(self.settings) else self._committer.unflushed

    # -- maintenance ------------------------------------------------------------

    def collect_garbage_in_background(self) -> None:
        """Run `git gc --auto` once loose objects or packs pile up, as git does after commits:
        more than `gc.auto` (6,700) loose objects, estimated from `objects/17`, or more
        than `gc.autoPackLimit` (50) packs. gc packs everything with deltas, ten times
        smaller than stepstone's own packs, safely beside later writers. Without a git
        executable, nothing happens."""
        self._upkeep.collect_garbage_in_background()

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
            return self._repair.repair(run, force=force, sound=sound)

    def traces(self, run: str) -> list[str]:
        """Where this repository shows that `run` has history, although no ref of it can
        be read: ref files, packed refs, its archive tag, notes of an earlier repair."""
        return self._repair.traces(run)
