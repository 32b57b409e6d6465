"""Git pack files: each commit's objects written as one pack, small packs merged as they pile up.

A step's commit has five objects. As loose files they are five new files in
five folders; as a pack they are two files (`.pack` and its `.idx`) in one
folder, which is what a flush of the file system pays for. The format is git's
own (pack version 2, index version 2), so git, libgit2 and `git fsck` read
these packs like any other.

One pack per commit would leave thousands of packs, and every object lookup
looks through each. So once more than `pack_limit` small packs exist, they
are merged geometrically (as `git repack --geometric=2` does): the smallest
packs are merged until every pack is at least twice the size of all smaller
packs together, so each object is copied a logarithmic number of times.
Merging copies the packs' entries byte for byte (an entry does not depend on
where it sits), so it costs no compression. Packs over `merge_max` bytes
(64 MB) are left to git: `git gc --auto` repacks everything with deltas once
more than `gc.autoPackLimit` packs exist (the store starts it, detached, as git
does after its own commits). The limit is high on purpose: a full repack of a
large store beside a run costs its steps more, for minutes, than a rare merge
of a few tens of MB inside one step (measured at 50,000 steps: an 8 MB limit
let `git gc --auto` start every few thousand steps).
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import mmap
import os
import struct
import threading
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from .durable import Unflushed

TYPE_CODES = {b"commit": 1, b"tree": 2, b"blob": 3}
_COMPRESSION = 1  # objects are small; git's pack default is -1, loose objects 1
_INDEX_MAGIC = b"\377tOc"
_COMPANIONS = (".keep", ".promisor", ".mtimes", ".bitmap", ".rev")


@dataclass(frozen=True)
class PackedObject:
    """One object as it sits in a pack: id, the crc32 of its entry, its entry's bytes."""

    oid: bytes
    crc: int
    entry: bytes


def pack_entry(kind: bytes, content: bytes) -> bytes:
    """An undeltified pack entry: type and size header, then the zlib stream (a tree's
    stored: its object ids do not compress, and compressing costs a step more than the
    bytes it saves)."""
    packed = stored(content) if kind == b"tree" else deflate(content)
    return entry_header(TYPE_CODES[kind], len(content)) + packed


def stored(content: bytes) -> bytes:
    """`content` as a zlib stream of stored (uncompressed) deflate blocks."""
    blocks = [b"\x78\x01"]
    for at in range(0, len(content), 65535):
        block = content[at : at + 65535]
        final = at + 65535 >= len(content)
        blocks.append(struct.pack("<BHH", final, len(block), len(block) ^ 0xFFFF))
        blocks.append(block)
    if not content:
        blocks.append(b"\x01\x00\x00\xff\xff")
    blocks.append(struct.pack(">I", zlib.adler32(content)))
    return b"".join(blocks)


def deflate(content: bytes) -> bytes:
    """`content` as a zlib stream whose window is no larger than the content: as small
    as with zlib's full window, and up to 10x faster for a commit's small objects
    (zlib sets up its full 256 KB state for each call)."""
    bits = min(15, max(9, (len(content) - 1).bit_length()))
    packer = zlib.compressobj(_COMPRESSION, zlib.DEFLATED, bits, min(8, bits - 7))
    return packer.compress(content) + packer.flush()


def entry_header(type_code: int, size: int) -> bytes:
    """A pack entry's header: its type and its content's size, in git's varint."""
    byte = (type_code << 4) | (size & 0x0F)
    size >>= 4
    header = bytearray()
    while size:
        header.append(byte | 0x80)
        byte = size & 0x7F
        size >>= 7
    header.append(byte)
    return bytes(header)


def format_pack(entries: Sequence[bytes]) -> tuple[bytes, list[int]]:
    """A pack of `entries` and each entry's offset; the pack ends with its SHA-1."""
    parts = [b"PACK", struct.pack(">II", 2, len(entries))]
    offsets = []
    at = 12
    for entry in entries:
        offsets.append(at)
        parts.append(entry)
        at += len(entry)
    body = b"".join(parts)
    return body + hashlib.sha1(body).digest(), offsets


def format_index(objects: Iterable[tuple[bytes, int, int]], pack_sha: bytes) -> bytes:
    """A version 2 index of (id, crc32, offset) triples for the pack named by `pack_sha`."""
    ordered = sorted(objects)
    oids = b"".join([oid for oid, _, _ in ordered])
    first_bytes = oids[::20]  # sorted, so the fan-out table is a bisection per byte value
    fanout = [bisect.bisect_right(first_bytes, byte) for byte in range(256)]
    offsets = [offset for _, _, offset in ordered]
    large: list[int] = []
    if offsets and max(offsets) >= 0x80000000:
        for i, offset in enumerate(offsets):
            if offset >= 0x80000000:
                offsets[i] = 0x80000000 | len(large)
                large.append(offset)
    body = b"".join(
        [
            _INDEX_MAGIC,
            struct.pack(">I", 2),
            struct.pack(">256I", *fanout),
            oids,
            struct.pack(f">{len(ordered)}I", *[crc for _, crc, _ in ordered]),
            struct.pack(f">{len(offsets)}I", *offsets),
            struct.pack(f">{len(large)}Q", *large),
            pack_sha,
        ]
    )
    return body + hashlib.sha1(body).digest()


def read_index(raw: bytes) -> list[tuple[bytes, int, int]]:
    """The (id, crc32, offset) triples of a version 2 index."""
    return list(zip(*index_columns(raw), strict=True))


def index_columns(raw: bytes) -> tuple[list[bytes], tuple[int, ...], list[int]]:
    """The ids, crc32s and offsets of a version 2 index, in the index's (id) order."""
    if raw[:4] != _INDEX_MAGIC or struct.unpack(">I", raw[4:8])[0] != 2:
        raise ValueError("not a version 2 pack index")
    count = struct.unpack(">I", raw[8 + 255 * 4 : 8 + 256 * 4])[0]
    at = 8 + 256 * 4
    oids = [raw[i : i + 20] for i in range(at, at + 20 * count, 20)]
    at += 20 * count
    crcs = struct.unpack_from(f">{count}I", raw, at)
    at += 4 * count
    offsets = list(struct.unpack_from(f">{count}I", raw, at))
    at += 4 * count
    if offsets and max(offsets) & 0x80000000:
        for i, offset in enumerate(offsets):
            if offset & 0x80000000:
                (offsets[i],) = struct.unpack_from(">Q", raw, at + 8 * (offset & 0x7FFFFFFF))
    return oids, crcs, offsets


class PackWriter:
    """Packs into `<git dir>/objects/pack`, unflushed: each new file is added to
    `unflushed` (to be fsynced with the commit), or left to a `syncfs` when None."""

    def __init__(
        self,
        pack_dir: str,
        *,
        unflushed: Unflushed | None = None,
        pack_limit: int = 32,
        merge_max: int = 64 << 20,
    ):
        self.pack_dir = pack_dir
        self.unflushed = unflushed
        self.pack_limit = pack_limit
        self.merge_max = merge_max
        self.total_packs = 0  # every pack in the folder at the last scan, large ones too
        self._packs: dict[str, int] | None = None  # small pack -> size in bytes, as last seen
        self._unmergeable: set[str] = set()
        self._undeltified: set[str] = set()  # packs known to hold no delta

    def write(self, objects: Sequence[PackedObject]) -> str:
        """Write `objects` as one pack and its index; the pack's name (`pack-<sha>`)."""
        pack, offsets = format_pack([o.entry for o in objects])
        sha = pack[-20:]
        name = f"pack-{sha.hex()}"
        index = format_index(
            ((o.oid, o.crc, at) for o, at in zip(objects, offsets, strict=True)), sha
        )
        # the .pack before its .idx: readers find a pack through its index, which is not
        # flushed (derived data: a power cut that tears it has it rebuilt, see `torn`)
        self._install(f"{name}.pack", pack)
        self._install(f"{name}.idx", index, flush=False)
        self._undeltified.add(name)
        if self._packs is not None:
            self._packs[name] = len(pack)
            self.total_packs += 1
        return name

    def _tmp_path(self) -> str:
        # `git prune` clears `tmp_*` files in the pack folder that a killed writer left
        return f"{self.pack_dir}/tmp_pack_stepstone_{os.getpid()}_{threading.get_ident()}"

    def _create_tmp(self) -> tuple[int, str]:
        """A new read-only temporary file in the pack folder, open for writing."""
        tmp = self._tmp_path()
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
        try:
            return os.open(tmp, flags, 0o444), tmp
        except FileExistsError:
            os.unlink(tmp)  # left by a killed writer that had this process's id
        except FileNotFoundError:
            os.makedirs(self.pack_dir, exist_ok=True)
        return os.open(tmp, flags, 0o444), tmp

    def _install(self, filename: str, data: bytes, *, flush: bool = True) -> None:
        fd, tmp = self._create_tmp()
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, f"{self.pack_dir}/{filename}")
        if flush and self.unflushed is not None:
            self.unflushed.add(f"{self.pack_dir}/{filename}")

    def scan(self) -> dict[str, int]:
        """The packs that can be merged (under `merge_max`, no .keep, bitmap or other
        companion), with their sizes."""
        try:
            names = os.listdir(self.pack_dir)
        except FileNotFoundError:
            names = []
        present = set(names)
        packs: dict[str, int] = {}
        self.total_packs = sum(1 for n in names if n.endswith(".pack"))
        for filename in names:
            if not (filename.startswith("pack-") and filename.endswith(".idx")):
                continue
            name = filename[:-4]
            if (
                f"{name}.pack" not in present
                or name in self._unmergeable
                or any(name + c in present for c in _COMPANIONS)
            ):
                continue
            try:
                size = os.stat(f"{self.pack_dir}/{name}.pack").st_size
            except OSError:
                continue  # removed meanwhile
            if size <= self.merge_max:
                packs[name] = size
        self._packs = packs
        return packs

    def merge_if_needed(self, flush: Callable[[], None]) -> str | None:
        """Merge the smallest packs when too many have piled up; the merged pack's name.

        `flush` makes the merged pack durable before the packs it replaces are removed.
        """
        if self._packs is not None and len(self._packs) <= self.pack_limit:
            return None
        packs = self.scan()  # afresh: another writer may have merged meanwhile
        if len(packs) <= self.pack_limit:
            return None
        chosen = geometric_prefix(packs)
        if len(chosen) < 2:
            return None
        try:
            merged = self._merge(chosen)
        except (OSError, ValueError, struct.error):
            # another writer merged or removed them, or one holds deltas: look again next time
            self._packs = None
            with contextlib.suppress(OSError):
                os.unlink(self._tmp_path())
            return None
        flush()
        for name in chosen:
            if name == merged:
                continue
            for ext in (".idx", ".pack"):  # the index first, as git does
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"{self.pack_dir}/{name}{ext}")
            packs.pop(name, None)
            self._undeltified.discard(name)
            self.total_packs -= 1
        return merged

    def _deltas_checked(self, name: str, pack: mmap.mmap, offsets: list[int]) -> None:
        """Refuse a pack holding deltas (they point at offsets): checked once a pack."""
        if name in self._undeltified:
            return
        if any((pack[offset] >> 4) & 7 not in (1, 2, 3, 4) for offset in offsets):
            self._unmergeable.add(name)  # left as is, to git
            raise ValueError(f"{name} holds deltas")
        self._undeltified.add(name)

    def _merge(self, names: Sequence[str]) -> str:
        """Copy the entries of `names` into one new pack, each object once: a pack none of
        whose objects came before is copied in one piece, its offsets shifted."""
        plan: list[tuple[str, list[int], list[tuple[int, int]]]] = []  # pack, offsets, spans
        triples: list[tuple[bytes, int, int]] = []
        seen: set[bytes] = set()
        at = 12
        for name in names:
            with open(f"{self.pack_dir}/{name}.idx", "rb") as handle:
                oids, crcs, offsets = index_columns(handle.read())
            end_of_entries = os.path.getsize(f"{self.pack_dir}/{name}.pack") - 20
            if seen.isdisjoint(oids):
                start = min(offsets, default=end_of_entries)
                spans = [(start, end_of_entries)]
                shifted = [offset - start + at for offset in offsets]
                triples.extend(zip(oids, crcs, shifted, strict=True))
                at += end_of_entries - start
                seen.update(oids)
            else:  # entry by entry, leaving out the objects already taken
                spans = []
                index = sorted(zip(oids, crcs, offsets, strict=True), key=lambda t: t[2])
                for k, (oid, crc, offset) in enumerate(index):
                    end = index[k + 1][2] if k + 1 < len(index) else end_of_entries
                    if oid in seen:
                        continue
                    seen.add(oid)
                    spans.append((offset, end))
                    triples.append((oid, crc, at))
                    at += end - offset
            plan.append((name, offsets, spans))
        fd, tmp = self._create_tmp()
        with os.fdopen(fd, "wb") as out:
            head = b"PACK" + struct.pack(">II", 2, len(triples))
            sha = hashlib.sha1(head)
            out.write(head)
            for name, offsets, spans in plan:
                with (
                    open(f"{self.pack_dir}/{name}.pack", "rb") as handle,
                    mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as pack,
                ):
                    self._deltas_checked(name, pack, offsets)
                    for start, end in spans:
                        entries = pack[start:end]
                        sha.update(entries)
                        out.write(entries)
            digest = sha.digest()
            out.write(digest)
        name = f"pack-{digest.hex()}"
        os.replace(tmp, f"{self.pack_dir}/{name}.pack")
        if self.unflushed is not None:
            self.unflushed.add(f"{self.pack_dir}/{name}.pack")
        self._install(f"{name}.idx", format_index(triples, digest))  # flushed: it replaces
        assert self._packs is not None
        self._packs[name] = at + 20  # header and entries, then the checksum
        self._undeltified.add(name)
        self.total_packs += 1
        return name


def geometric_prefix(packs: dict[str, int], factor: int = 2) -> list[str]:
    """The smallest packs to merge so each remaining pack is at least `factor` times
    the size of all smaller ones together (empty when none need merging)."""
    ordered = sorted(packs.items(), key=lambda item: (item[1], item[0]))
    end = 0
    total = 0
    for i, (_, size) in enumerate(ordered):
        if i and size < factor * total:
            end = i + 1
        total += size
    return [name for name, _ in ordered[:end]]
