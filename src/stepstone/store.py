"""The Git store: each run is a ref whose commits hold the run's files.

A store is any Git repository whose refs hold runs. What makes a ref a run
travels with the repository: a run's commits carry a `Stepstone-Run:` trailer,
so any copy (`git clone`, bare or with a work tree, `cp -r`, a tarball) is read
as the same store with the same runs. A run lives in one of two places:
`refs/stepstone/runs/<run>` (any repository, the notebook's own project
included, which is never touched elsewhere: not its branches, index or work
tree) or the branch `refs/heads/<run>` (a store of stepstone's own, such as the
embedded default `.stepstone/`, where HEAD names the run driven last so that
`git -C .stepstone log` shows it). In a work-tree clone of such a store, a run
that is only on a remote-tracking branch (`refs/remotes/origin/<run>`) is read
from there and continues on its local branch, as `git checkout` would.

A commit's objects are written straight to the object database as one pack
(`gitobjects`, `packs`: git's own formats), flushed together with the ref's
lock file, and the ref then moves by compare-and-swap through git's lock-file
protocol (`durable`). Reading goes through libgit2 (pygit2). A crash leaves
either the old commit or the new one as the tip; objects of an unfinished
commit are unreachable and harmless.
"""

from __future__ import annotations

import contextlib
import errno
import getpass
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pygit2

from . import durable, gitobjects, names
from .atomic import fsync_dir, write_atomic
from .errors import InvalidInput, StoreError

DEFAULT_STORE = ".stepstone"
STORE_ENV = "STEPSTONE_REPO"
RUN_ENV = "STEPSTONE_RUN"
_DEDICATED_KEY = "stepstone.dedicated"
RUN_REFS = "refs/stepstone/runs/"  # runs in any repository
BRANCH_REFS = "refs/heads/"  # runs in a store of stepstone's own
_REMOTE_REFS = "refs/remotes/"
TAG_REFS = "refs/tags/stepstone/"
CACHE_AFTER = 200  # files read from Git before the read is worth caching
READ_ERRORS = (pygit2.GitError, KeyError, ValueError)  # what reading a damaged object raises

SYNC_ENV = "STEPSTONE_SYNC"
_fsync_enabled = False


def batch_sync() -> bool:
    """Whether commits flush their objects with one `syncfs` (else each object is fsynced)."""
    return os.environ.get(SYNC_ENV, "syncfs") != "each" and durable.can_sync_filesystem()


def _enable_fsync() -> None:
    global _fsync_enabled
    if not _fsync_enabled and not batch_sync():
        pygit2.option(pygit2.enums.Option.ENABLE_FSYNC_GITDIR, 1)
        _fsync_enabled = True


def holder_identity() -> str:
    """Who drives: `user@host pid N`, used in locks, commits and records."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    user = os.environ.get("STEPSTONE_AGENT") or user
    return f"{user}@{socket.gethostname()} pid {os.getpid()}"


_GC_AUTO = 6700  # git's default gc.auto
_GC_AUTO_PACK_LIMIT = 50  # git's default gc.autoPackLimit


def make_dedicated(repo: pygit2.Repository, path: Path) -> None:
    """Configure a bare repository as a store of stepstone's own (runs on branches)."""
    repo.config[_DEDICATED_KEY] = True
    repo.config["core.logAllRefUpdates"] = False
    repo.config["gc.packRefs"] = False  # refs stay loose: only drivers lock them
    # The parent project should not pick the store up as untracked files.
    (path / ".gitignore").write_text("*\n")


@dataclass
class Snapshot:
    """One commit of a run: its ids, and its files when it was read (not after a commit)."""

    commit: str | None
    tree: str | None
    files: dict[str, bytes] = field(default_factory=dict)
    message: str = ""


@dataclass(frozen=True)
class CommitInfo:
    """One commit of a run's history, with its trailers parsed."""

    id: str
    time: int
    author: str
    subject: str
    trailers: dict[str, list[str]]


def parse_trailers(message: str) -> dict[str, list[str]]:
    """The `Key: value` trailers of the last paragraph of a commit message."""
    paragraphs = message.strip().split("\n\n")
    found: dict[str, list[str]] = {}
    if len(paragraphs) < 2:
        return found
    for line in paragraphs[-1].splitlines():
        key, sep, value = line.partition(": ")
        if sep and key and " " not in key:
            found.setdefault(key, []).append(value.strip())
    return found


def write_derived(path: Path, data: bytes) -> None:
    """Replace a derived-data file (a cache) atomically; best effort and not flushed: a
    cache lost or torn by a crash, or not written on a read-only store, only means a
    full read next time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError:
        pass


def resolve_store_path(repo: str | os.PathLike[str] | None) -> Path:
    """The store path from an argument, then `STEPSTONE_REPO`, then `.stepstone`."""
    chosen = repo if repo is not None else os.environ.get(STORE_ENV) or DEFAULT_STORE
    return Path(chosen).expanduser().absolute()


class GitStore:
    """A Git repository holding runs. Narrow: read files, commit changes, list history."""

    def __init__(self, path: str | os.PathLike[str] | None = None, *, create: bool = True):
        self.path = resolve_store_path(path)
        if self.path.name == ".git" and (self.path / "HEAD").is_file():
            self.path = self.path.parent  # a work-tree clone: the store is the folder
        _enable_fsync()
        self.repo = self._open(create)
        self._run_refs: dict[str, str] = {}  # run -> the local ref that holds it, once found
        self._dedicated: bool | None = None
        self._object_writer: gitobjects.ObjectWriter | None = None
        self._next_gc = 0.0
        self._commits_since_free = 0
        self._gc_pack_limit = self._setting("gc.autoPackLimit", _GC_AUTO_PACK_LIMIT)

    # -- opening ---------------------------------------------------------------

    def _open(self, create: bool) -> pygit2.Repository:
        where = str(self.path)
        if self.path.is_file():
            raise StoreError(where, "is a file, not a store; pass --repo a folder")
        if self.path.is_dir():
            found = pygit2.discover_repository(str(self.path))
            if found and Path(found).resolve() in (
                self.path.resolve(),
                (self.path / ".git").resolve(),
            ):
                try:
                    return pygit2.Repository(found)
                except pygit2.GitError as exc:
                    raise StoreError(where, f"is a damaged Git repository ({exc})") from exc
            if any(self.path.iterdir()):
                inside = self.path / DEFAULT_STORE
                raise StoreError(
                    where,
                    "is a folder but not a Git repository; pass --repo an empty or new "
                    "folder, or a Git repository"
                    + (f" (the store here is {inside})" if inside.is_dir() else ""),
                )
        if not create:
            raise StoreError(where, "does not exist; run a notebook or `%resume` to create it")
        return self._create()

    def _create(self) -> pygit2.Repository:
        # Built aside and renamed into place, so that processes creating the same
        # store at once see either no store or a whole one.
        parent = self.path.parent
        tmp = parent / f".{self.path.name}.init-{os.getpid()}"
        try:
            parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(tmp, ignore_errors=True)
            repo = pygit2.init_repository(str(tmp), bare=True)
            make_dedicated(repo, tmp)
            del repo
            try:
                os.rename(tmp, self.path)
            except OSError as exc:
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                shutil.rmtree(tmp, ignore_errors=True)  # another process made it first
            fsync_dir(parent)
            return pygit2.Repository(str(self.path))
        except (OSError, pygit2.GitError) as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            hint = ""
            if not os.access(parent, os.W_OK) or "Read-only" in str(exc):
                hint = f": {parent} cannot be written; pass --repo a folder on a writable disk"
            raise StoreError(
                str(self.path), f"cannot create a repository here ({exc}){hint}"
            ) from exc

    def _flag(self, key: str) -> bool:
        try:
            return bool(self.repo.config.get_bool(key))
        except (KeyError, pygit2.GitError):
            return False

    @property
    def autopush(self) -> bool:
        """Whether each commit is pushed to the remote in the background."""
        return self._flag("stepstone.autopush")

    @property
    def git_dir(self) -> Path:
        """The repository's Git directory (where objects, refs and locks live)."""
        return Path(self.repo.path)

    # -- refs -------------------------------------------------------------------

    @property
    def dedicated(self) -> bool:
        """Whether this is a store of stepstone's own: runs on branches, HEAD on a run.

        Known from the refs (a branch holds a run), so that it travels with any copy;
        the `stepstone.dedicated` setting of a store stepstone made says it before the
        first run exists.
        """
        if self._dedicated is None:
            self._dedicated = self._flag(_DEDICATED_KEY) or any(
                ref.startswith((BRANCH_REFS, _REMOTE_REFS)) for ref in self._run_refs_found()
            )
        return self._dedicated

    def _ref_names(self) -> set[str]:
        """Every ref libgit2 lists, and the loose ref files where runs live that it skips
        because they cannot be read (a damaged ref is still a run's history)."""
        found = set(self.repo.references)
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
            reference = self.repo.references.get(ref)
            if reference is None:
                return False
            commit = self.repo[reference.resolve().target]
            if not isinstance(commit, pygit2.Commit):
                return False
            if parse_trailers(commit.message).get("Stepstone-Run") == [run]:
                return True
            if "run.json" not in commit.tree:
                return False
            head = json.loads(self._blob_data(commit.tree["run.json"].id))
            return isinstance(head, dict) and head.get("run") == run
        except (pygit2.GitError, KeyError, ValueError):
            return None

    def _run_refs_found(self) -> dict[str, str]:
        """Ref -> run for every ref holding a run: under `refs/stepstone/runs/`, on a
        branch, or on a remote-tracking branch of a work-tree clone (damaged ones too
        where the place says it is a run)."""
        found: dict[str, str] = {}
        for ref in self._ref_names():
            if ref.startswith(RUN_REFS):
                run = ref[len(RUN_REFS) :]
                holds: bool | None = True
            elif ref.startswith(BRANCH_REFS):
                run = ref[len(BRANCH_REFS) :]
                holds = self._holds_run(ref, run)
                if holds is None:  # unreadable: a run's branch if this is a store
                    holds = self._flag(_DEDICATED_KEY) or (self.git_dir / "stepstone").is_dir()
            elif ref.startswith(_REMOTE_REFS) and ref.count("/") == 3:
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
        refs = self._run_refs_found()
        for place in (RUN_REFS + run, BRANCH_REFS + run):
            if place in refs:
                self._run_refs[run] = place
                return place
        if self._upstream(run, refs) is not None:
            return BRANCH_REFS + run  # a work-tree clone: the run continues on its branch
        return (BRANCH_REFS if self.dedicated else RUN_REFS) + run

    def _upstream(self, run: str, refs: Mapping[str, str] | None = None) -> str | None:
        """A remote-tracking ref holding `run` (origin's first), for a run with no local ref."""
        refs = self._run_refs_found() if refs is None else refs
        tracking = sorted(
            (ref for ref, name in refs.items() if name == run and ref.startswith(_REMOTE_REFS)),
            key=lambda ref: (not ref.startswith(_REMOTE_REFS + "origin/"), ref),
        )
        return tracking[0] if tracking else None

    def runs(self) -> list[str]:
        """The ids of the runs in this store, sorted."""
        return sorted(set(self._run_refs_found().values()))

    def pick_run(self, run: str | None = None) -> str:
        """`run`, else `STEPSTONE_RUN`, else this store's only run; else say how to choose."""
        chosen = run or os.environ.get(RUN_ENV)
        if chosen:
            return chosen
        runs = self.runs()
        if len(runs) == 1:
            return runs[0]
        if not runs:
            lost = self.lost_runs()
            if lost:
                raise StoreError(
                    str(self.path),
                    f"no run's ref can be read, but the history of run {lost[0]!r} is here "
                    f"(its ref is gone): `stepstone repair --run {lost[0]}` restores it",
                )
            raise InvalidInput(
                f"no run id given and store {self.path} has no runs: pass a run id "
                f"(--run ID, or STEPSTONE_RUN)"
            )
        raise InvalidInput(
            f"store {self.path} has several runs ({', '.join(runs)}): pick one with --run ID"
        )

    def tip(self, run: str) -> str | None:
        """The id of the latest commit of `run`, or None when it has none.

        A run with no local ref starts from its remote-tracking branch, if any.
        """
        ref = self.ref(run)
        try:
            reference = self.repo.references.get(ref)
        except pygit2.GitError as exc:
            raise self.damaged_ref(run, ref, exc) from exc
        if reference is not None:
            return str(reference.target)
        upstream = self._upstream(run)
        if upstream is None:
            return None
        return str(self.repo.references[upstream].resolve().target)

    def descends(self, commit: str | None, ancestor: str) -> bool:
        """Whether `commit` is `ancestor` or has it in its history."""
        if commit is None:
            return False
        if commit == ancestor:
            return True
        try:
            return bool(self.repo.descendant_of(pygit2.Oid(hex=commit), pygit2.Oid(hex=ancestor)))
        except (pygit2.GitError, KeyError, ValueError):
            return False

    def effect_files(self, commit: str) -> dict[str, bytes]:
        """The effect records of a commit's tree, by path."""
        obj = self.repo[commit]
        if not isinstance(obj, pygit2.Commit):
            raise KeyError(f"{commit} is not a commit")
        return self.tree_files(str(obj.tree_id), lambda top: top == "effects")

    def made_by_stepstone(self, commit: str, *, within: int = 200) -> str | None:
        """The newest commit of `commit`'s history that stepstone made (it carries a
        `Stepstone-Run` trailer): `commit` itself unless it was made by hand."""
        for found in self.repo.walk(pygit2.Oid(hex=commit), pygit2.enums.SortMode.NONE):
            if "Stepstone-Run" in parse_trailers(found.message):
                return str(found.id)
            within -= 1
            if within <= 0:
                break
        return None

    def damaged_ref(self, run: str, ref: str, exc: Exception) -> StoreError:
        """The error for a run whose ref cannot be read."""
        return StoreError(
            str(self.path),
            f"the ref {ref} of run {run!r} is damaged ({exc}); nothing was changed. "
            f"`stepstone repair --run {run}` points it at the run's newest readable commit",
        )

    def traces(self, run: str) -> list[str]:
        """Where this repository shows that `run` has history, although no ref of it can
        be read: ref files, packed refs, its archive tag, notes of an earlier repair."""
        run = names.run_id(run)
        found = [
            f"ref file {place}"
            for place in (RUN_REFS + run, BRANCH_REFS + run)
            if (self.git_dir / place).exists()
        ]
        with contextlib.suppress(OSError):
            packed = (self.git_dir / "packed-refs").read_text(errors="replace").split()
            found += [
                f"packed ref {place}"
                for place in (RUN_REFS + run, BRANCH_REFS + run)
                if place in packed
            ]
        with contextlib.suppress(pygit2.GitError):
            if self.repo.references.get(TAG_REFS + run) is not None:
                found.append(f"its archive tag {TAG_REFS + run}")
        with contextlib.suppress(OSError):
            found += [
                f"a repair note {note.name}"
                for note in (self.git_dir / "stepstone" / "damaged").glob(f"{run}-*.txt")
            ]
        with contextlib.suppress(OSError):
            found += [
                f"ref file {ref.relative_to(self.git_dir).as_posix()}"
                for ref in (self.git_dir / _REMOTE_REFS).glob(f"*/{run}")
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
            if (self.git_dir / "HEAD").read_text().strip() == f"ref: {BRANCH_REFS}{run}":
                hints.append("HEAD")
        if locks and (self.git_dir / "stepstone" / "locks" / f"{run}.lock").exists():
            hints.append("its lock file")
        return " and ".join(hints)

    def lost_runs(self, candidates: list[str] | None = None) -> list[str]:
        """Runs whose ref is gone although HEAD or a lock file names them and their
        commits are in the object database (one pass over it)."""
        if candidates is None:
            candidates = []
            with contextlib.suppress(OSError):
                head = (self.git_dir / "HEAD").read_text().strip()
                if head.startswith(f"ref: {BRANCH_REFS}"):
                    candidates.append(head.removeprefix(f"ref: {BRANCH_REFS}"))
            with contextlib.suppress(OSError):
                candidates += [
                    lock.stem for lock in (self.git_dir / "stepstone" / "locks").glob("*.lock")
                ]
        known = set(self._run_refs_found().values())
        wanted = {run for run in candidates if run not in known and self._hints(run)}
        if not wanted:
            return []
        found: set[str] = set()
        for oid in self.repo.odb:
            with contextlib.suppress(pygit2.GitError, KeyError, ValueError):
                obj = self.repo[oid]
                if isinstance(obj, pygit2.Commit):
                    found.update(parse_trailers(obj.message).get("Stepstone-Run", [])[:1])
                    if wanted <= found:
                        break
        return sorted(wanted & found)

    def point_head_at(self, run: str) -> None:
        """In a bare store of stepstone's own, make HEAD the run's branch (for `git log`)."""
        if not self.dedicated or not self.repo.is_bare:
            return
        target = self.ref(run)
        if not target.startswith(BRANCH_REFS):
            return
        try:
            head = self.repo.references.get("HEAD")
        except pygit2.GitError:  # a torn HEAD: in a store of stepstone's own, only a pointer
            write_atomic(self.git_dir / "HEAD", f"ref: {target}\n".encode())
            return
        if (
            head is not None
            and head.type == pygit2.enums.ReferenceType.SYMBOLIC
            and head.target == target
        ):
            return
        self.repo.references.create("HEAD", target, force=True)

    def tagged(self, run: str) -> bool:
        """Whether the run's archive tag `stepstone/<run>` exists."""
        try:
            return self.repo.references.get(TAG_REFS + names.run_id(run)) is not None
        except pygit2.GitError:
            return False

    def tag(self, run: str, commit: str) -> str:
        """Tag `commit` as `stepstone/<run>` (the archive of a finished run)."""
        name = TAG_REFS + names.run_id(run)
        self.repo.references.create(name, pygit2.Oid(hex=commit), force=True)
        if batch_sync():
            durable.sync_filesystem(self.git_dir)
        return name

    def clear_stale_ref_locks(self, run: str) -> list[Path]:
        """Remove the lock files of the run's ref that a killed writer left; the ones
        removed. Call it holding the run lock: only stepstone drivers write a run's ref
        (gc is told not to pack refs), so then any such lock file is stale."""
        locks = [self.git_dir / (self.ref(run) + ".lock"), self.git_dir / "packed-refs.lock"]
        stale = [lock for lock in locks if lock.exists()]
        for lock in stale:
            lock.unlink(missing_ok=True)
        return stale

    # -- reading ----------------------------------------------------------------

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
        found = self.head(run, at=at)
        if found.commit is None or found.tree is None:
            return found
        try:
            tree = self._tree(found.tree)
            if cached:
                found.files = self._read_cached(run, tree, skip)
            else:
                found.files = self.tree_files(found.tree, lambda top: top not in skip)
        except READ_ERRORS as exc:
            raise self.damaged(run, found.commit, exc) from exc
        return found

    def head(self, run: str, *, at: str | None = None) -> Snapshot:
        """The latest commit of `run` (or commit `at`) without its files: ids, message."""
        commit_id = at or self.tip(run)
        if commit_id is None:
            return Snapshot(None, None)
        try:
            commit = self.repo[commit_id]
            if not isinstance(commit, pygit2.Commit):
                raise KeyError(f"{commit_id} is not a commit")
        except READ_ERRORS as exc:
            raise self.damaged(run, commit_id, exc) from exc
        return Snapshot(commit_id, str(commit.tree_id), message=commit.message)

    def damaged(self, run: str, commit: str, exc: Exception) -> StoreError:
        """The error for a commit of `run` that cannot be read."""
        return StoreError(
            str(self.path),
            f"cannot read commit {commit[:10]} of run {run!r} ({exc}): the store is "
            f"damaged. `stepstone repair --run {run}` moves the run back to its last "
            f"readable commit and keeps the damaged one on record",
        )

    def cache_path(self, run: str, kind: str = "json") -> Path:
        """Where derived data about `run` is kept (never authoritative: Git is)."""
        return self.git_dir / "stepstone" / "cache" / f"{run}.{kind}"

    def _read_cached(self, run: str, tree: pygit2.Tree, skip: tuple[str, ...]) -> dict[str, bytes]:
        """The files of `tree`, reading only what changed since the cached tree.

        The cache is derived data keyed by tree id: Git objects are content-addressed,
        so an unchanged path in an unchanged tree has unchanged content. A missing,
        stale or damaged cache only means a full read.
        """
        cache_file = self.cache_path(run)

        def wanted(top: str) -> bool:
            return top not in skip

        try:
            cached = json.loads(cache_file.read_bytes())
            files = {path: text.encode() for path, text in cached["files"].items()}
            if cached.get("skip") != list(skip):
                raise ValueError("cached with other folders skipped")
            changed, deleted = self.tree_changes(cached["tree"], str(tree.id), wanted)
        except (OSError, ValueError, KeyError, TypeError, pygit2.GitError):
            with contextlib.suppress(OSError):  # unusable: do not read it again
                cache_file.unlink(missing_ok=True)
            files = self.tree_files(str(tree.id), wanted)
            count = len(files)
        else:
            for path in deleted:
                files.pop(path, None)
            files.update(changed)
            count = len(changed) + len(deleted)
        if count >= CACHE_AFTER:
            self._write_cache(cache_file, tree, files, skip)
        return files

    def _write_cache(
        self, path: Path, tree: pygit2.Tree, files: dict[str, bytes], skip: tuple[str, ...]
    ) -> None:
        try:
            payload = {
                "tree": str(tree.id),
                "skip": list(skip),
                "files": {p: data.decode() for p, data in files.items()},
            }
        except UnicodeDecodeError:
            return  # a binary file: read in full next time
        write_derived(path, json.dumps(payload, separators=(",", ":")).encode())

    def tree_files(self, tree: str, wanted: Callable[[str], bool]) -> dict[str, bytes]:
        """Every file of `tree` under the top-level names `wanted` accepts."""
        out: dict[str, bytes] = {}

        def walk(node: pygit2.Tree, prefix: str) -> None:
            for entry in node:
                name = entry.name or ""
                if not prefix and not wanted(name):
                    continue
                if isinstance(entry, pygit2.Tree):
                    walk(entry, f"{prefix}{name}/")
                elif isinstance(entry, pygit2.Blob):
                    out[f"{prefix}{name}"] = entry.data

        walk(self._tree(tree), "")
        return out

    def tree_changes(
        self, old: str, new: str, wanted: Callable[[str], bool]
    ) -> tuple[dict[str, bytes], list[str]]:
        """What changed from tree `old` to tree `new` under the top-level names `wanted`
        accepts: the added or changed files with their content, and the removed paths.
        Folders whose tree id did not change are not read."""
        changed: dict[str, bytes] = {}
        deleted: list[str] = []
        if old == new:
            return changed, deleted
        for delta in self._tree(old).diff_to_tree(self._tree(new)).deltas:
            if not wanted(delta.old_file.path.split("/", 1)[0]):
                continue
            if delta.status == pygit2.enums.DeltaStatus.DELETED:
                deleted.append(delta.old_file.path)
            else:
                changed[delta.new_file.path] = self._blob_data(delta.new_file.id)
        return changed, deleted

    def _tree(self, oid: pygit2.Oid | str) -> pygit2.Tree:
        obj = self.repo[oid]
        if not isinstance(obj, pygit2.Tree):
            raise KeyError(f"{oid} is not a tree")
        return obj

    def _blob_data(self, oid: pygit2.Oid | str) -> bytes:
        obj = self.repo[oid]
        if not isinstance(obj, pygit2.Blob):
            raise KeyError(f"{oid} is not a blob")
        return bytes(obj.data)

    def _writer(self) -> gitobjects.ObjectWriter:
        if self._object_writer is None:
            self._object_writer = gitobjects.ObjectWriter(
                self.git_dir, self._raw_tree, fsync_each=not batch_sync()
            )
        return self._object_writer

    def _raw_tree(self, oid: bytes) -> bytes:
        kind, data = self.repo.odb.read(pygit2.Oid(raw=oid))
        if kind != pygit2.enums.ObjectType.TREE:
            raise KeyError(f"{oid.hex()} is not a tree")
        return bytes(data)

    def blob(self, tree: str, path: str) -> bytes | None:
        """The content of `path` in `tree`, or None when absent."""
        try:
            entry = self._tree(tree) / path
            return self._blob_data(entry.id)
        except (KeyError, pygit2.GitError):
            return None

    # -- writing ----------------------------------------------------------------

    def commit(
        self,
        run: str,
        parent: Snapshot,
        writes: Mapping[str, bytes | None],
        message: str,
        *,
        author: str,
    ) -> Snapshot:
        """Commit `writes` (path to content, None deletes) on top of `parent`.

        The ref moves only if it still points at `parent.commit`: a run that
        moved under us is an error, never a silent overwrite.
        """
        writer = self._writer()
        try:
            updates: dict[tuple[bytes, ...], bytes | None] = {}
            for path, data in writes.items():
                parts = tuple(part.encode() for part in path.split("/"))
                updates[parts] = None if data is None else writer.write(b"blob", data)
            base = bytes.fromhex(parent.tree) if parent.tree else None
            tree = writer.apply(base, updates) or writer.write_tree(gitobjects.Tree())
            user, _, rest = author.partition("@")
            content = gitobjects.format_commit(
                tree.hex(),
                [parent.commit] if parent.commit else [],
                user or "stepstone",
                f"{user}@{rest.split(' ')[0]}",
                message,
            )
            commit_id = writer.write(b"commit", content).hex()
            writer.finish()
            durable.update_ref(
                self.git_dir,
                self.ref(run),
                commit_id,
                parent.commit,
                lambda: self.tip(run),
                durable.sync_filesystem_of if batch_sync() else os.fsync,
            )
        except FileExistsError as exc:
            raise StoreError(
                str(self.path),
                f"the ref of run {run!r} is locked ({exc.filename}): another git process is "
                f"writing it, or a killed one left the lock; reopen the run to clear a stale one",
            ) from exc
        except (pygit2.GitError, durable.RefMoved, KeyError, ValueError) as exc:
            raise StoreError(
                str(self.path),
                f"could not commit to run {run!r} ({exc}); nothing was recorded for this "
                f"attempt. If another process moved the run, reopen it",
            ) from exc
        except OSError as exc:
            raise StoreError(
                str(self.path), f"could not write ({exc.strerror}); free space or fix permissions"
            ) from exc
        finally:
            writer.discard()
        self._merge_packs(writer)
        return Snapshot(commit_id, tree.hex())

    def _merge_packs(self, writer: gitobjects.ObjectWriter) -> None:
        """Merge small packs once they pile up; the commit is durable already."""

        def flush() -> None:
            if batch_sync():  # else each file was fsynced as it was written
                durable.sync_filesystem(self.git_dir)

        merged = None
        with contextlib.suppress(OSError):
            merged = writer.packs.merge_if_needed(flush)
        self._commits_since_free += 1
        if merged is not None or self._commits_since_free >= 1000:
            # libgit2 keeps every pack it has seen open, removed ones too (by a merge
            # here or a `git gc`); freeing its handles makes it list the packs afresh
            self._commits_since_free = 0
            self.repo.free()
        if writer.packs.total_packs > self._gc_pack_limit and time.monotonic() > self._next_gc:
            self._next_gc = time.monotonic() + 60  # one `git gc --auto` start a minute at most
            self.collect_garbage_in_background()

    def collect_garbage_in_background(self) -> None:
        """Run `git gc --auto` once loose objects or packs pile up, as git does after commits.

        git's heuristics: more than `gc.auto` (6,700) loose objects, estimated
        from `objects/17`, or more than `gc.autoPackLimit` (50) packs. gc packs
        everything with deltas, ten times smaller than stepstone's own packs;
        it is safe beside later writers. Without a git executable, nothing happens.
        """
        if not self._garbage_piled_up():
            return
        # `gc --auto` detaches itself (gc.autoDetach), so this returns at once
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(
                ["git", "--git-dir", str(self.git_dir), "gc", "--auto", "--quiet"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=60,
                check=False,
            )

    def _setting(self, key: str, default: int) -> int:
        try:
            return int(str(self.repo.config[key]))
        except (KeyError, ValueError):
            return default

    def _garbage_piled_up(self) -> bool:
        objects = self.git_dir / "objects"
        loose_limit = self._setting("gc.auto", _GC_AUTO)
        if loose_limit <= 0:
            return False  # gc.auto=0 turns automatic collection off, in git as here
        pack_limit = self._gc_pack_limit
        with contextlib.suppress(OSError):
            if len(os.listdir(objects / "17")) * 256 > loose_limit:
                return True
        with contextlib.suppress(OSError):
            packs = sum(1 for name in os.listdir(objects / "pack") if name.endswith(".pack"))
            return pack_limit > 0 and packs > pack_limit
        return False

    # -- repair -----------------------------------------------------------------

    def _readable(self, commit_id: str) -> pygit2.Commit | None:
        """The commit if it and every record file of its tree can be read, else None."""
        try:
            commit = self.repo[commit_id]
            if not isinstance(commit, pygit2.Commit):
                return None
            self.tree_files(str(commit.tree_id), lambda top: top != "artifacts")
        except (pygit2.GitError, KeyError, ValueError, OSError):
            return None
        return commit

    def _commits_of(self, run: str) -> list[tuple[int, str]]:
        """Every commit object of `run` in the database, as (seq, id), newest first."""
        found: list[tuple[int, str]] = []
        for oid in self.repo.odb:
            try:
                obj = self.repo[oid]
            except (pygit2.GitError, KeyError, ValueError):
                continue
            if not isinstance(obj, pygit2.Commit):
                continue
            trailers = parse_trailers(obj.message)
            if trailers.get("Stepstone-Run") == [run]:
                seq = trailers.get("Stepstone-Seq", ["0"])[0]
                found.append((int(seq) if seq.isdigit() else 0, str(oid)))
        return sorted(found, reverse=True)

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
        (the commits are found by their `Stepstone-Run` trailer). Refuses when a
        dropped commit recorded an effect (its intent would be forgotten) or cannot be
        read, unless `force`. Nothing is deleted: the old tip is noted in
        `<git dir>/stepstone/damaged/`.
        """
        damaged_ref = "(a damaged ref)"
        try:
            old = self.tip(run)
        except StoreError:
            old = None
            current = damaged_ref
        else:
            current = old or ""
        if old is not None and self._readable(old) and sound(old):
            raise StoreError(str(self.path), f"run {run!r} reads fine; nothing to repair")
        candidates = self._commits_of(run)
        target = next((cid for _, cid in candidates if self._readable(cid) and sound(cid)), None)
        if target is None:
            raise StoreError(str(self.path), f"no readable commit of run {run!r} was found")
        target_seq = next(seq for seq, cid in candidates if cid == target)
        dropped = [cid for seq, cid in candidates if seq > target_seq]
        risky = []
        if old is not None and old != target and old not in dropped:
            dropped.insert(0, old)  # made by hand (no Stepstone-Run trailer), or unreadable
            try:
                self.repo[old]
            except (pygit2.GitError, KeyError, ValueError):
                risky.append(f"the tip {old[:10]} itself cannot be read")
        for cid in dropped:
            try:
                commit = self.repo[cid]
                message = commit.message if isinstance(commit, pygit2.Commit) else ""
            except (pygit2.GitError, KeyError, ValueError):
                message = ""
            keys = parse_trailers(message).get("Stepstone-Key")
            if keys:
                risky.append(f"{cid[:10]} recorded effect {keys[0]}")
        if risky and not force:
            raise StoreError(
                str(self.path),
                "repairing would forget: " + "; ".join(risky) + ". Check those effects with "
                "their receivers first, then run `stepstone repair --force`",
            )
        note = self.git_dir / "stepstone" / "damaged" / f"{run}-{int(time.time())}.txt"
        note.parent.mkdir(parents=True, exist_ok=True)
        note.write_text(
            f"run {run}\ndamaged tip {old or current}\nmoved to {target}\n"
            + "".join(f"dropped {cid}\n" for cid in dropped)
        )

        def now_at() -> str:
            try:
                return self.tip(run) or ""
            except StoreError:
                return damaged_ref

        durable.update_ref(self.git_dir, self.ref(run), target, current, now_at)
        for kind in ("json", "index"):
            self.cache_path(run, kind).unlink(missing_ok=True)
        return old, target, dropped

    # -- history ----------------------------------------------------------------

    def history(self, run: str) -> Iterator[CommitInfo]:
        """The commits of `run`, newest first."""
        tip = self.tip(run)
        if tip is None:
            return
        walker = self.repo.walk(pygit2.Oid(hex=tip), pygit2.enums.SortMode.TOPOLOGICAL)
        for commit in walker:
            message = commit.message
            yield CommitInfo(
                id=str(commit.id),
                time=commit.commit_time,
                author=f"{commit.author.name} <{commit.author.email}>",
                subject=message.splitlines()[0] if message else "",
                trailers=parse_trailers(message),
            )
