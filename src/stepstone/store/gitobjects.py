"""Git objects made by stepstone itself: trees changed in memory, a commit's objects packed.

libgit2 spends a dozen system calls on each loose object it writes (a freshen,
a rescan of the pack folder, a link and an unlink), and a step's commit has
five objects (the record, three trees, the commit): five new files in five
folders. Here a commit's objects are gathered in memory and written as one
pack (`packs.py`), unflushed: the caller flushes the batch together with the
ref's lock file. The formats are git's own, so git, libgit2 and `git fsck`
read these objects like any other.

Trees are changed from parsed copies kept in memory: the trees a commit writes
are the ones the next commit starts from, so a run's steps never re-read them.
"""

from __future__ import annotations

import bisect
import hashlib
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path

from .durable import Unflushed
from .packs import PackedObject, PackWriter, pack_entry

BLOB_MODE = b"100644"
TREE_MODE = b"40000"

TreeReader = Callable[[bytes], bytes]  # raw content of a tree, by its 20-byte id

_KEPT_TREES = 64  # parsed; a run's root and its folders on the last few paths
# Older trees kept as stored bytes, so that a step in a large run rarely reads a tree
# back from the packs: at 100,000 steps about 4,400 folders are current.
_FORMATTED_BUDGET = 32 << 20


class Tree:
    """A tree's entries, kept in git's order so that writing it is one join.

    Git sorts entries by name, a folder as if its name ended in "/"; that sort
    key is what `order` holds and what `lines` (each entry's bytes) is keyed by.
    """

    __slots__ = ("lines", "order")

    def __init__(self, lines: dict[bytes, bytes] | None = None, order: list[bytes] | None = None):
        self.lines = lines if lines is not None else {}
        self.order = order if order is not None else []

    @classmethod
    def parse(cls, raw: bytes) -> Tree:
        """The entries of a tree object's content (already in git's order)."""
        tree = cls()
        at, end = 0, len(raw)
        while at < end:
            space = raw.index(b" ", at)
            nul = raw.index(b"\0", space)
            name = raw[space + 1 : nul]
            key = name + b"/" if raw[at:space] == TREE_MODE else name
            tree.lines[key] = raw[at : nul + 21]
            tree.order.append(key)
            at = nul + 21
        return tree

    def get(self, name: bytes) -> tuple[bytes, bytes] | None:
        """(mode, 20-byte id) of entry `name`, or None."""
        line = self.lines.get(name) or self.lines.get(name + b"/")
        if line is None:
            return None
        return line[: line.index(b" ")], line[-20:]

    def set(self, name: bytes, mode: bytes, oid: bytes) -> None:
        key = name + b"/" if mode == TREE_MODE else name
        if key not in self.lines:
            self.remove(name)  # a file becoming a folder, or the reverse
            bisect.insort(self.order, key)
        self.lines[key] = mode + b" " + name + b"\0" + oid

    def remove(self, name: bytes) -> None:
        for key in (name, name + b"/"):
            if self.lines.pop(key, None) is not None:
                self.order.remove(key)

    def __len__(self) -> int:
        return len(self.order)

    def format(self) -> bytes:
        """The tree object's content."""
        return b"".join(map(self.lines.__getitem__, self.order))


def _clean(text: str) -> str:
    return "".join(c for c in text if c not in "<>\n\0").strip() or "unknown"


def format_commit(
    tree: str, parents: list[str], name: str, email: str, message: str, when: float | None = None
) -> bytes:
    """A commit object's content; author and committer are the same person, now."""
    seconds = int(time.time() if when is None else when)
    offset = time.localtime(seconds).tm_gmtoff // 60
    sign = "-" if offset < 0 else "+"
    stamp = f"{seconds} {sign}{abs(offset) // 60:02d}{abs(offset) % 60:02d}"
    person = f"{_clean(name)} <{_clean(email)}> {stamp}"
    head = [f"tree {tree}"] + [f"parent {p}" for p in parents]
    head += [f"author {person}", f"committer {person}"]
    return ("\n".join(head) + "\n\n" + message).encode()


class ObjectWriter:
    """Gathers a commit's objects; `finish` writes them to `<git dir>/objects/pack`."""

    def __init__(
        self,
        git_dir: Path,
        read_tree: TreeReader,
        *,
        holds: Callable[[bytes], bool] = lambda oid: False,
        unflushed: Unflushed | None = None,
    ):
        self.packs = PackWriter(str(git_dir / "objects" / "pack"), unflushed=unflushed)
        self._read_tree = read_tree
        # whether the store has an object: a blob a tree names may be missing (a run
        # repaired back to a commit whose saved values were lost), and is then written
        self._holds = holds
        self._trees: OrderedDict[bytes, Tree] = OrderedDict()
        # trees evicted from `_trees`, as stored; an OrderedDict because removing the
        # oldest from a plain dict makes finding the next oldest slower each time
        self._formatted: OrderedDict[bytes, bytes] = OrderedDict()
        self._formatted_size = 0
        self._pending: dict[bytes, PackedObject] = {}

    def write(self, kind: bytes, content: bytes, *, stored: bytes | None = None) -> bytes:
        """Add one object (`kind` is b"blob", b"tree" or b"commit"); its 20-byte id.
        `stored`: the id of an object the store has, not written again if it is this."""
        oid = hashlib.sha1(kind + b" " + str(len(content)).encode() + b"\0" + content).digest()
        if oid != stored and oid not in self._pending:
            entry = pack_entry(kind, content)
            self._pending[oid] = PackedObject(oid, zlib.crc32(entry), entry)
        return oid

    def finish(self) -> None:
        """Write the objects added since the last call as one pack (not flushed)."""
        if self._pending:
            objects = list(self._pending.values())
            self._pending.clear()
            self.packs.write(objects)

    def discard(self) -> None:
        """Forget the objects added since the last `finish` (the commit failed)."""
        self._pending.clear()

    def take(self, oid: bytes) -> Tree:
        """The entries of a stored tree, for the caller to change: the caches let go of
        it (a tree changed is superseded; one left as it was is kept again when written)."""
        kept = self._trees.pop(oid, None)
        if kept is not None:
            return kept
        raw = self._formatted.pop(oid, None)
        if raw is not None:
            self._formatted_size -= len(raw)
            return Tree.parse(raw)
        return Tree.parse(self._read_tree(oid))

    def write_tree(self, tree: Tree, *, stored: bytes | None = None) -> bytes:
        """Add `tree`; its id. `stored`: the id of the stored tree it was changed from,
        not written again when the changes left it as it was."""
        oid = self.write(b"tree", tree.format(), stored=stored)
        self._keep(oid, tree)
        return oid

    def _keep(self, oid: bytes, tree: Tree) -> None:
        self._trees[oid] = tree
        self._trees.move_to_end(oid)
        while len(self._trees) > _KEPT_TREES:
            old, evicted = self._trees.popitem(last=False)
            if old not in self._formatted:
                raw = evicted.format()
                self._formatted[old] = raw
                self._formatted_size += len(raw)
        while self._formatted_size > _FORMATTED_BUDGET:
            self._formatted_size -= len(self._formatted.popitem(last=False)[1])

    def apply(
        self, tree: bytes | None, updates: Mapping[tuple[bytes, ...], bytes | None]
    ) -> bytes | None:
        """Write the tree that is `tree` with `updates` (path parts to blob id, None
        deletes); its id, or None when it ends up empty."""
        entries = self.take(tree) if tree is not None else Tree()
        children: dict[bytes, dict[tuple[bytes, ...], bytes | None]] = {}
        for parts, blob in updates.items():
            if len(parts) == 1:
                if blob is None:
                    entries.remove(parts[0])
                elif entries.get(parts[0]) == (BLOB_MODE, blob) and self._holds(blob):
                    self._pending.pop(blob, None)  # stored already, where the tree has it
                else:
                    entries.set(parts[0], BLOB_MODE, blob)
            else:
                children.setdefault(parts[0], {})[parts[1:]] = blob
        for name, sub in children.items():
            existing = entries.get(name)
            subtree = existing[1] if existing is not None and existing[0] == TREE_MODE else None
            new = self.apply(subtree, sub)
            if new is None:
                entries.remove(name)
            else:
                entries.set(name, TREE_MODE, new)
        if not entries and tree is not None:
            return None
        return self.write_tree(entries, stored=tree)
