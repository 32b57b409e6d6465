"""Reading Git objects through libgit2: commits, trees, blobs, and walks of history."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pygit2

from ..model.message import RUN, CommitMessage
from .errors import READ_ERRORS

# Bounds on what a store (perhaps crafted) can make a reader hold in memory: a blob
# read whole (big values are streamed, see `bigblobs`), the files of one tree read
# together, and the depth of a tree walked.
MAX_BLOB = 1 << 30
MAX_TREE_BYTES = 1 << 30
MAX_DEPTH = 32


class TooBig(ValueError):
    """An object or a tree over the bounds a reader keeps (a crafted or damaged store)."""


@dataclass(frozen=True)
class CommitInfo:
    """One commit of a run's history, with its trailers parsed."""

    id: str
    time: int
    author: str
    subject: str
    trailers: dict[str, list[str]]


_SMALL = 16 * 1024  # bytes: a record, not a saved value
_SMALL_KEPT = 16 * 1024 * 1024  # bytes kept in all, then forgotten at once
_SMALL_BLOBS: dict[tuple[str, bytes], bytes] = {}  # by their store and 20-byte id
_small_size = 0


class Objects:
    """The objects of one repository, read by id (hex strings outside, Oids inside).

    A missing or malformed object raises one of `READ_ERRORS`; callers that cannot
    go on turn that into a `StoreError` (see `errors`).
    """

    def __init__(self, repo: pygit2.Repository) -> None:
        self._repo = repo

    def _bounded(self, oid: pygit2.Oid | str) -> pygit2.Oid:
        """`oid`, once its header says it inflates to no more than `MAX_BLOB`."""
        oid = oid if isinstance(oid, pygit2.Oid) else pygit2.Oid(hex=oid)
        _, size = self._repo.odb.read_header(oid)
        if size > MAX_BLOB:
            raise TooBig(
                f"object {oid} would inflate to {size:,} bytes, over the {MAX_BLOB:,} a "
                "reader holds in memory (a store made by hand or damaged)"
            )
        return oid

    def commit(self, oid: str) -> pygit2.Commit:
        """The commit `oid` (KeyError when the object is something else)."""
        obj = self._repo[self._bounded(oid)]
        if not isinstance(obj, pygit2.Commit):
            raise KeyError(f"{oid} is not a commit")
        return obj

    def tree(self, oid: pygit2.Oid | str) -> pygit2.Tree:
        """The tree `oid` (KeyError when the object is something else)."""
        obj = self._repo[self._bounded(oid)]
        if not isinstance(obj, pygit2.Tree):
            raise KeyError(f"{oid} is not a tree")
        return obj

    def blob_data(self, oid: pygit2.Oid | str) -> bytes:
        """The content of blob `oid` (KeyError when the object is something else;
        `TooBig` over `MAX_BLOB`, found from its header before it is inflated). A small
        blob read before in this process is given again: its id is its content's hash,
        so a long-lived reader opening a run anew after a commit inflates only what the
        commit added."""
        raw = oid.raw if isinstance(oid, pygit2.Oid) else bytes.fromhex(oid)
        key = (self._repo.path, raw)  # one store's damage is not hidden by another's copy
        kept = _SMALL_BLOBS.get(key)
        if kept is not None:
            return kept
        kind, data = self._repo.odb.read(self._bounded(oid))
        if kind != pygit2.enums.ObjectType.BLOB:
            raise KeyError(f"{oid} is not a blob")
        found = bytes(data)
        if len(found) <= _SMALL:
            global _small_size
            if _small_size + len(found) > _SMALL_KEPT:
                _SMALL_BLOBS.clear()
                _small_size = 0
            _SMALL_BLOBS[key] = found
            _small_size += len(found)
        return found

    def holds(self, oid: bytes) -> bool:
        """Whether the store has the object `oid` (20 bytes)."""
        return pygit2.Oid(raw=oid) in self._repo.odb

    def raw_tree(self, oid: bytes) -> bytes:
        """The stored content of the tree with the 20-byte id `oid`."""
        kind, data = self._repo.odb.read(self._bounded(pygit2.Oid(raw=oid)))
        if kind != pygit2.enums.ObjectType.TREE:
            raise KeyError(f"{oid.hex()} is not a tree")
        return bytes(data)

    def tree_of(self, commit: str) -> str:
        """The id of commit `commit`'s tree."""
        return str(self.commit(commit).tree_id)

    def message(self, commit: str) -> str:
        """Commit `commit`'s message."""
        return str(self.commit(commit).message)

    def parents(self, commit: str) -> list[str]:
        """The ids of commit `commit`'s parents, the first parent first."""
        return [str(oid) for oid in self.commit(commit).parent_ids]

    def files(self, tree: str, wanted: Callable[[str], bool]) -> dict[str, bytes]:
        """Every file of `tree` under the top-level names `wanted` accepts."""
        out: dict[str, bytes] = {}
        total = 0

        def walk(node: pygit2.Tree, prefix: str, depth: int) -> None:
            nonlocal total
            if depth > MAX_DEPTH:
                raise TooBig(f"tree {prefix} is nested over {MAX_DEPTH} folders deep")
            for entry in node:
                name = entry.name or ""
                if not prefix and not wanted(name):
                    continue
                if isinstance(entry, pygit2.Tree):
                    walk(entry, f"{prefix}{name}/", depth + 1)
                elif isinstance(entry, pygit2.Blob):
                    out[f"{prefix}{name}"] = data = self.blob_data(entry.id)
                    total += len(data)
                    if total > MAX_TREE_BYTES:
                        raise TooBig(f"the files of tree {tree} are over {MAX_TREE_BYTES:,} bytes")

        walk(self.tree(tree), "", 0)
        return out

    def changes(
        self, old: str, new: str, wanted: Callable[[str], bool]
    ) -> tuple[dict[str, bytes], list[str]]:
        """What changed from tree `old` to tree `new` under the top-level names `wanted`
        accepts: the added or changed files with their content, and the removed paths.
        Folders whose tree id did not change are not read."""
        changed: dict[str, bytes] = {}
        deleted: list[str] = []
        if old == new:
            return changed, deleted
        for delta in self.tree(old).diff_to_tree(self.tree(new)).deltas:
            if not wanted(delta.old_file.path.split("/", 1)[0]):
                continue
            if delta.status == pygit2.enums.DeltaStatus.DELETED:
                deleted.append(delta.old_file.path)
            else:
                changed[delta.new_file.path] = self.blob_data(delta.new_file.id)
        return changed, deleted

    def entry_id(self, tree: str, path: str) -> bytes | None:
        """The 20-byte id of `path` in `tree`, or None when absent (or unreadable)."""
        try:
            return bytes((self.tree(tree) / path).id.raw)
        except (KeyError, pygit2.GitError):
            return None

    def blob(self, tree: str, path: str) -> bytes | None:
        """The content of `path` in `tree`, or None when absent (or unreadable)."""
        try:
            entry = self.tree(tree) / path
            return self.blob_data(entry.id)
        except (KeyError, pygit2.GitError):
            return None

    def descends(self, commit: str, ancestor: str) -> bool:
        """Whether `commit` has `ancestor` in its history (False when unreadable)."""
        try:
            found = self._repo.descendant_of(pygit2.Oid(hex=commit), pygit2.Oid(hex=ancestor))
        except READ_ERRORS:
            return False
        return bool(found)

    def merge_base(self, one: str, other: str) -> str | None:
        """The best common ancestor of two commits, or None when they share none."""
        base = self._repo.merge_base(pygit2.Oid(hex=one), pygit2.Oid(hex=other))
        return str(base) if base is not None else None

    def log(self, tip: str) -> Iterator[CommitInfo]:
        """The commits of `tip`'s history, newest first (topologically)."""
        for commit in self._repo.walk(pygit2.Oid(hex=tip), pygit2.enums.SortMode.TOPOLOGICAL):
            message = commit.message
            yield CommitInfo(
                id=str(commit.id),
                time=commit.commit_time,
                author=f"{commit.author.name} <{commit.author.email}>",
                subject=message.splitlines()[0] if message else "",
                trailers=CommitMessage.parse(message).as_dict(),
            )

    def made_by_stepstone(self, commit: str, *, within: int = 200) -> str | None:
        """The newest commit of `commit`'s history that carries a run's trailer, looking
        at `within` commits at most."""
        for found in self._repo.walk(pygit2.Oid(hex=commit), pygit2.enums.SortMode.NONE):
            if CommitMessage.parse(found.message).all(RUN):
                return str(found.id)
            within -= 1
            if within <= 0:
                break
        return None

    def reachable_commits(self) -> set[bytes]:
        """The (raw) ids of every commit a ref reaches; raises when one cannot be read."""
        tips = {ref.peel(pygit2.Commit).id for ref in self._repo.references.iterator()}
        if not tips:
            return set()
        walker = self._repo.walk(tips.pop(), pygit2.enums.SortMode.NONE)
        for tip in tips:
            walker.push(tip)
        return {commit.id.raw for commit in walker}

    def commits(self) -> Iterator[tuple[str, CommitMessage]]:
        """Every readable commit in the object database, reachable or not, with its
        message parsed (one pass over the database, in no order)."""
        for oid in self._repo.odb:
            try:  # the header first: blobs are not inflated, nor crafted giants
                kind, size = self._repo.odb.read_header(oid)
                if kind != pygit2.enums.ObjectType.COMMIT or size > MAX_BLOB:
                    continue
                obj = self._repo[oid]
            except READ_ERRORS:
                continue
            if isinstance(obj, pygit2.Commit):
                yield str(oid), CommitMessage.parse(obj.message)
