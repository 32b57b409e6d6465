"""Big blobs: streamed into a pack of their own, uncompressed, and read back without zlib.

A saved array or table of hundreds of MB is mostly incompressible, and deflating
it into a Git object costs ~10 ms per MB. So a big blob is written as a pack that
holds it alone, its zlib stream made of *stored* deflate blocks (a valid stream,
level 0): every Git tool reads it, `git push`, `clone` and `gc` copy the entry as
it is (no recompression), and its bytes sit in the file at offsets known by
arithmetic. The content is hashed while written (the object id, the pack's
checksum on this thread, as it writes; the object id and the caller's sha256 on a
second, the entry's CRC and the stream's Adler-32 on a third), from chunks streamed in:
one copy of the value in memory at most, the caller's own.

Reading finds the blob's pack through the pack indexes and, if the entry is still
laid out this way (not re-deltified by a `git gc`, say), hands out a seekable
file over its bytes; otherwise the caller reads the blob through libgit2. As git
does with its packs, content read this way is not hashed again: packs are hashed
when written and when received (`git index-pack`), and `git fsck` re-hashes them.
"""

from __future__ import annotations

import hashlib
import io
import os
import struct
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .durable import Unflushed, helper_threads
from .packs import TYPE_CODES, entry_header, format_index, read_index

BLOCK = 65535  # the largest stored deflate block
_BLOB = TYPE_CODES[b"blob"]
_ZLIB_HEADER = b"\x78\x01"  # deflate, 32K window, no dictionary, "fastest"
_IOV = 512  # stored blocks handed to one writev (header and data each take a slot)
_BACKGROUND = 4 << 20  # reads this big are summed on a helper thread


@dataclass(frozen=True)
class StoredBlob:
    """A blob written before its commit: Git id (hex), the content's sha256 and size."""

    oid: str
    sha256: str
    size: int


def _block_header(length: int, final: bool) -> bytes:
    return struct.pack("<BHH", 1 if final else 0, length, length ^ 0xFFFF)


class BlobSink:
    """Writes one blob of exactly `size` bytes as a pack of its own in `pack_dir`.

    `write` takes the content in chunks (bytes or memoryviews, any sizes); `close`
    installs the pack and its index, unflushed (added to `unflushed`, fsynced with
    the commit; None: the commit's `syncfs` covers them), and returns the `StoredBlob`.
    """

    def __init__(self, pack_dir: str, size: int, *, unflushed: Unflushed | None = None) -> None:
        self._dir = pack_dir
        self._size = size
        self._unflushed = unflushed
        self._written = 0
        self._oid = hashlib.sha1(b"blob %d\0" % size)
        self._sha256 = hashlib.sha256()
        self._pack_sha = hashlib.sha1()
        self._adler = 1
        os.makedirs(pack_dir, exist_ok=True)
        self._tmp = f"{pack_dir}/tmp_pack_stepstone_big_{os.getpid()}_{threading.get_ident()}"
        if os.path.exists(self._tmp):
            os.unlink(self._tmp)  # left by a killed writer that had this process's id
        self._fd = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        head = b"PACK" + struct.pack(">II", 2, 1)
        entry_start = entry_header(_BLOB, size) + _ZLIB_HEADER
        self._crc = zlib.crc32(entry_start)
        self._pack_sha.update(head + entry_start)
        self._out(head + entry_start)
        if size == 0:
            self._emit([_block_header(0, True)])

    def _out(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def _emit(self, pieces: list[Any]) -> None:
        for piece in pieces:
            self._pack_sha.update(piece)
        total = sum(len(p) for p in pieces)
        done = os.writev(self._fd, pieces)
        if done < total:  # a short write: finish it piece by piece
            flat = b"".join(bytes(p) for p in pieces)
            self._out(flat[done:])

    def write(self, chunk: bytes | memoryview) -> None:
        """Add the next `chunk` of the content."""
        view = memoryview(chunk).cast("B")
        if self._written + len(view) > self._size:
            raise ValueError(f"blob is longer than the {self._size} bytes announced")
        pieces: list[Any] = []  # the chunk as stored blocks: block headers and views
        at = 0
        while at < len(view):
            in_block = self._written % BLOCK
            if in_block == 0:
                length = min(BLOCK, self._size - self._written)
                pieces.append(_block_header(length, self._written + length == self._size))
            take = min(BLOCK - in_block, len(view) - at)
            pieces.append(view[at : at + take])
            at += take
            self._written += take
        helpers = helper_threads("hash", 2)
        jobs = [helpers.submit(self._hash_content, view), helpers.submit(self._sum, pieces, view)]
        try:
            for at in range(0, len(pieces), _IOV):
                self._emit(pieces[at : at + _IOV])
        finally:
            for job in jobs:
                job.result()

    def _hash_content(self, view: memoryview) -> None:
        self._oid.update(view)
        self._sha256.update(view)

    def _sum(self, pieces: list[Any], view: memoryview) -> None:
        for piece in pieces:
            self._crc = zlib.crc32(piece, self._crc)
        self._adler = zlib.adler32(view, self._adler)

    def close(self) -> StoredBlob:
        """Finish the pack and install it with its index; the blob written."""
        if self._written != self._size:
            self.abort()
            raise ValueError(f"blob has {self._written} of the {self._size} bytes announced")
        tail = struct.pack(">I", self._adler)
        self._crc = zlib.crc32(tail, self._crc)
        self._pack_sha.update(tail)
        self._out(tail)
        digest = self._pack_sha.digest()
        self._out(digest)
        os.close(self._fd)
        self._fd = -1
        oid = self._oid.digest()
        name = f"{self._dir}/pack-{digest.hex()}"
        os.replace(self._tmp, f"{name}.pack")
        tmp_index = self._tmp + "_idx"
        with open(tmp_index, "wb") as handle:
            handle.write(format_index([(oid, self._crc, 12)], digest))
        os.replace(tmp_index, f"{name}.idx")
        if self._unflushed is not None:
            self._unflushed.add(f"{name}.pack")  # the index is not flushed: see `torn`
        return StoredBlob(oid.hex(), self._sha256.hexdigest(), self._size)

    def abort(self) -> None:
        """Drop what was written (the value could not be saved)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if os.path.exists(self._tmp):
            os.unlink(self._tmp)


class PackIndexes:
    """Where each object of a pack folder sits: (pack file, offset), indexes read once."""

    def __init__(self, pack_dir: str) -> None:
        self._dir = pack_dir
        self._read: dict[str, dict[bytes, int]] = {}

    def find(self, oid: bytes) -> tuple[str, int] | None:
        """The pack file holding `oid` and the offset of its entry, or None."""
        try:
            names = [n[:-4] for n in os.listdir(self._dir) if n.endswith(".idx")]
        except FileNotFoundError:
            return None
        present = set(names)
        for gone in set(self._read) - present:
            del self._read[gone]
        for name in names:
            offsets = self._read.get(name)
            if offsets is None:
                try:
                    with open(f"{self._dir}/{name}.idx", "rb") as handle:
                        triples = read_index(handle.read())
                except (OSError, ValueError, struct.error):
                    continue
                offsets = {o: at for o, _, at in triples}
                self._read[name] = offsets
            if oid in offsets:
                return f"{self._dir}/{name}.pack", offsets[oid]
        return None


def open_stored(pack: str, offset: int) -> StoredReader | None:
    """A reader over the blob whose entry is at `offset` of `pack`, if it is a stored
    (uncompressed) blob as `BlobSink` writes them; None otherwise."""
    try:
        fd = os.open(pack, os.O_RDONLY)
    except OSError:
        return None
    try:
        head = os.pread(fd, 24, offset)
        if not head or (head[0] >> 4) & 7 != _BLOB:
            raise ValueError("not a blob")
        size, shift, at = head[0] & 0x0F, 4, 0
        while head[at] & 0x80:
            at += 1
            size |= (head[at] & 0x7F) << shift
            shift += 7
        at += 1
        start = offset + at + len(_ZLIB_HEADER)
        first = _block_header(min(BLOCK, size), size <= BLOCK)
        blocks = max(1, -(-size // BLOCK))
        end = start + size + 5 * blocks + 4
        last = size - (blocks - 1) * BLOCK
        last_at = start + (blocks - 1) * (BLOCK + 5)
        if (
            head[at : at + 2] != _ZLIB_HEADER
            or os.pread(fd, 5, start) != first
            or os.pread(fd, 5, last_at) != _block_header(last, True)
        ):
            raise ValueError("not stored blocks")
        if os.fstat(fd).st_size < end + 20:
            raise ValueError("pack shorter than the blob it claims")
    except (OSError, ValueError, IndexError):
        os.close(fd)
        return None
    return StoredReader(fd, start, size)


class StoredReader(io.RawIOBase):
    """A read-only, seekable file over a stored blob's content."""

    def __init__(self, fd: int, start: int, size: int) -> None:
        self._fd = fd
        self._start = start
        self.size = size
        self._at = 0
        self._checked = 0  # the content up to here was read in order: its Adler-32 is
        self._adler = 1  # summed on one helper thread, in order, as big reads go on
        self._summing: list[Any] = []
        self._batch: list[memoryview] = []
        self._batched = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._at

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._at, io.SEEK_END: self.size}[whence]
        self._at = max(0, base + offset)
        return self._at

    def readinto(self, buffer: Any) -> int:
        """Read on from the position; every block header met is checked, and content
        read in order is checked against the stream's Adler-32 at its end (zlib's own
        check, as git's inflate makes it): a damaged pack is an `OSError`."""
        view = memoryview(buffer).cast("B")
        done = 0
        header = bytearray(5)
        while done < len(view) and self._at < self.size:
            block, within = divmod(self._at, BLOCK)
            take = min(BLOCK - within, len(view) - done, self.size - self._at)
            where = self._start + block * (BLOCK + 5) + 5 + within
            part = view[done : done + take]
            if within:
                got = os.preadv(self._fd, [part], where)
            else:
                length = min(BLOCK, self.size - self._at)
                got = os.preadv(self._fd, [header, part], where - 5) - 5
                if header != _block_header(length, self._at + length == self.size):
                    raise OSError(f"stored blob damaged: a bad block header at byte {self._at}")
            if got <= 0:
                raise OSError(f"pack ends inside a stored blob (at byte {self._at})")
            if self._at <= self._checked < self._at + got:
                fresh = part[self._checked - self._at : got]
                self._checked = self._at + got
                if len(view) < _BACKGROUND:
                    self._add_to_sum([fresh])
                else:  # the caller's own big buffer: it stays as read, sum it meanwhile
                    self._batch.append(fresh)
                    self._batched += len(fresh)
                    if self._batched >= _BACKGROUND or self._checked == self.size:
                        self._summing.append(
                            helper_threads("adler", 1).submit(self._add_to_sum, self._batch)
                        )
                        self._batch, self._batched = [], 0
                if self._checked == self.size:
                    self._check_adler()
            done += got
            self._at += got
        return done

    def _add_to_sum(self, parts: list[memoryview]) -> None:
        for data in parts:
            self._adler = zlib.adler32(data, self._adler)

    def _check_adler(self) -> None:
        for job in self._summing:
            job.result()
        self._summing = []
        blocks = max(1, -(-self.size // BLOCK))
        trailer = os.pread(self._fd, 4, self._start + self.size + 5 * blocks)
        if trailer != struct.pack(">I", self._adler):
            raise OSError("stored blob damaged: its content does not match its Adler-32")

    def close(self) -> None:
        if not self.closed and self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        super().close()


class BigBlobs:
    """The big blobs of one repository: sinks to write them, readers to read them."""

    def __init__(self, pack_dir: str, unflushed: Callable[[], Unflushed | None]) -> None:
        self.scratch_dir = pack_dir
        self._unflushed = unflushed
        self._indexes = PackIndexes(pack_dir)

    def sink(self, size: int) -> BlobSink:
        """A sink for a blob of `size` bytes."""
        return BlobSink(self.scratch_dir, size, unflushed=self._unflushed())

    def reader(self, oid: bytes) -> StoredReader | None:
        """A reader over blob `oid` if it is stored uncompressed in a pack, else None."""
        found = self._indexes.find(oid)
        return None if found is None else open_stored(*found)
