"""Writing a commit's Git objects as loose files, in as few system calls as git's format allows.

libgit2 spends a dozen system calls on each loose object it writes (a freshen,
a rescan of the pack folder, a link and an unlink); a step's commit has five
objects. Here each object is one exclusive create, one write, one close and one
rename, and nothing is flushed: the caller flushes the whole batch at once
(`durable.sync_filesystem`), or asks for an fsync of each file where that is
missing. The format is git's own (zlib of `<type> <size>\\0<content>`, named by
its SHA-1), so git, libgit2 and `git fsck` read these objects like any other.

Trees are changed from parsed copies kept in memory: the trees a commit writes
are the ones the next commit starts from, so a run's steps never re-read them.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path

from .atomic import fsync_dir

BLOB_MODE = b"100644"
TREE_MODE = b"40000"

# a parsed tree: entry name -> (mode, 20-byte object id)
Entries = dict[bytes, tuple[bytes, bytes]]
TreeReader = Callable[[bytes], bytes]  # raw content of a tree, by its 20-byte id

_KEPT_TREES = 64


def parse_tree(raw: bytes) -> Entries:
    """The entries of a tree object's content."""
    entries: Entries = {}
    at = 0
    end = len(raw)
    while at < end:
        space = raw.index(b" ", at)
        nul = raw.index(b"\0", space)
        entries[raw[space + 1 : nul]] = (raw[at:space], raw[nul + 1 : nul + 21])
        at = nul + 21
    return entries


def _sort_key(item: tuple[bytes, tuple[bytes, bytes]]) -> bytes:
    name, (mode, _) = item
    return name + b"/" if mode == TREE_MODE else name  # git sorts a folder as "name/"


def format_tree(entries: Entries) -> bytes:
    """A tree object's content, entries in git's order."""
    return b"".join(
        mode + b" " + name + b"\0" + oid
        for name, (mode, oid) in sorted(entries.items(), key=_sort_key)
    )


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
    """Loose objects into `<git dir>/objects`, unflushed until `flush`."""

    def __init__(self, git_dir: Path, read_tree: TreeReader, *, fsync_each: bool = False):
        self.objects = git_dir / "objects"
        self._read_tree = read_tree
        self._fsync_each = fsync_each
        self._trees: OrderedDict[bytes, Entries] = OrderedDict()
        self._made_dirs: set[Path] = set()

    def write(self, kind: bytes, content: bytes) -> bytes:
        """Store one object (`kind` is b"blob", b"tree" or b"commit"); its 20-byte id."""
        header = kind + b" " + str(len(content)).encode() + b"\0"
        oid = hashlib.sha1(header + content).digest()
        hexid = oid.hex()
        folder = self.objects / hexid[:2]
        tmp = folder / f"tmp_obj_stepstone_{os.getpid()}_{threading.get_ident()}"
        data = zlib.compress(header + content)
        fd = self._create(tmp)
        try:
            os.write(fd, data)
            if self._fsync_each:
                os.fsync(fd)
        finally:
            os.close(fd)
        # an object of the same id has the same content: replacing it is harmless
        os.replace(tmp, folder / hexid[2:])
        if self._fsync_each:
            fsync_dir(folder)
        return oid

    def _create(self, tmp: Path) -> int:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
        try:
            return os.open(tmp, flags, 0o444)
        except FileNotFoundError:
            tmp.parent.mkdir(exist_ok=True)
            self._made_dirs.add(tmp.parent)
        except FileExistsError:
            tmp.unlink()  # left by a killed writer that had this process's id
        return os.open(tmp, flags, 0o444)

    def entries(self, tree: bytes) -> Entries:
        """The parsed entries of a tree (a copy the caller may change)."""
        kept = self._trees.get(tree)
        if kept is None:
            kept = parse_tree(self._read_tree(tree))
            self._keep(tree, kept)
        else:
            self._trees.move_to_end(tree)
        return dict(kept)

    def write_tree(self, entries: Entries) -> bytes:
        oid = self.write(b"tree", format_tree(entries))
        self._keep(oid, entries)
        return oid

    def _keep(self, oid: bytes, entries: Entries) -> None:
        self._trees[oid] = entries
        self._trees.move_to_end(oid)
        while len(self._trees) > _KEPT_TREES:
            self._trees.popitem(last=False)

    def apply(
        self, tree: bytes | None, updates: Mapping[tuple[bytes, ...], bytes | None]
    ) -> bytes | None:
        """Write the tree that is `tree` with `updates` (path parts to blob id, None
        deletes); its id, or None when it ends up empty."""
        entries = self.entries(tree) if tree is not None else {}
        children: dict[bytes, dict[tuple[bytes, ...], bytes | None]] = {}
        for parts, blob in updates.items():
            if len(parts) == 1:
                if blob is None:
                    entries.pop(parts[0], None)
                else:
                    entries[parts[0]] = (BLOB_MODE, blob)
            else:
                children.setdefault(parts[0], {})[parts[1:]] = blob
        for name, sub in children.items():
            existing = entries.get(name)
            subtree = existing[1] if existing is not None and existing[0] == TREE_MODE else None
            new = self.apply(subtree, sub)
            if new is None:
                entries.pop(name, None)
            else:
                entries[name] = (TREE_MODE, new)
        if not entries and tree is not None:
            return None
        return self.write_tree(entries)

    def flush_folders(self) -> None:
        """With fsync of each object: also flush the folders this writer created."""
        if self._fsync_each and self._made_dirs:
            fsync_dir(self.objects)
        self._made_dirs.clear()
