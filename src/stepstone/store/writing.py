"""Writing a run's commit: its objects as one pack, then its ref by compare-and-swap.

A commit's objects are gathered in memory (`gitobjects`) and written to the object
database as one pack (`packs`), unflushed; the ref then moves through git's lock-file
protocol (`durable`), whose flush of the lock file is the one `syncfs` that also
makes the objects durable. A crash leaves either the old commit or the new one as
the tip; objects of an unfinished commit are unreachable and harmless. libgit2's
loose-object writer is kept for the few objects not worth a pack (a lease commit).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import pygit2

from .. import faults
from ..settings import Settings
from . import durable, gitobjects
from .bigblobs import StoredBlob
from .durable import batch_sync
from .errors import COMMIT_ERRORS, commit_failed, translated
from .maintenance import Upkeep
from .objects import Objects
from .opening import signature
from .reading import Snapshot
from .refs import Refs

_SIGNATURE = ("stepstone", "stepstone@localhost")  # who signs the commits of leases


class Writer:
    """Commits to the runs of one repository."""

    def __init__(
        self,
        repo: pygit2.Repository,
        path: Path,
        objects: Objects,
        refs: Refs,
        settings: Callable[[], Settings],
        upkeep: Upkeep,
    ) -> None:
        self._repo = repo
        self._path = path
        self._objects = objects
        self._refs = refs
        self._settings = settings
        self._upkeep = upkeep
        self._object_writer: gitobjects.ObjectWriter | None = None
        self.unflushed = durable.Unflushed()  # what the next commit must flush

    def objects(self) -> gitobjects.ObjectWriter:
        """The writer of this repository's packs (made at the first commit)."""
        if self._object_writer is None:
            self._object_writer = gitobjects.ObjectWriter(
                self._refs.git_dir,
                self._objects.raw_tree,
                holds=self._objects.holds,
                unflushed=None if batch_sync(self._settings()) else self.unflushed,
            )
        return self._object_writer

    def commit(
        self,
        run: str,
        parent: Snapshot,
        writes: Mapping[str, bytes | StoredBlob | None],
        message: str,
        *,
        author: str,
    ) -> Snapshot:
        """Commit `writes` (path to content, a blob written before, None deletes) on top
        of `parent`. The ref moves only if it still points at `parent.commit`: a run that
        moved under us is an error, never a silent overwrite. The run's ledger is the
        one caller (tests/test_architecture.py checks it)."""
        writer = self.objects()
        batch = batch_sync(self._settings())
        try:
            updates: dict[tuple[bytes, ...], bytes | None] = {}
            for path, data in writes.items():
                parts = tuple(part.encode() for part in path.split("/"))
                if isinstance(data, StoredBlob):
                    updates[parts] = bytes.fromhex(data.oid)
                else:
                    updates[parts] = None if data is None else writer.write(b"blob", data)
            base = bytes.fromhex(parent.tree) if parent.tree else None
            tree = writer.apply(base, updates) or writer.write_tree(gitobjects.Tree())
            name, email = signature(author, self._settings())
            content = gitobjects.format_commit(
                tree.hex(), [parent.commit] if parent.commit else [], name, email, message
            )
            commit_id = writer.write(b"commit", content).hex()
            writer.finish()
            faults.reached("commit.objects-written")
            self._refs.move(
                self._refs.ref(run),
                commit_id,
                parent.commit,
                lambda: self._refs.tip(run),
                flush=durable.sync_filesystem_of if batch else self.unflushed.flush,
            )
        except COMMIT_ERRORS as exc:
            raise commit_failed(self._path, run, exc) from exc
        finally:
            writer.discard()
        faults.reached("commit.ref-moved")
        self._upkeep.after_commit(writer)
        return Snapshot(commit_id, tree.hex())

    def loose_commit(self, message: str, parents: list[str]) -> str:
        """A commit of the empty tree by stepstone, written by libgit2 as loose objects;
        its id. No ref points at it yet."""
        with translated(self._path, "write a commit"):
            signature = pygit2.Signature(*_SIGNATURE)
            tree = self._repo.TreeBuilder().write()
            oids = [pygit2.Oid(hex=parent) for parent in parents]
            return str(self._repo.create_commit(None, signature, signature, message, tree, oids))
