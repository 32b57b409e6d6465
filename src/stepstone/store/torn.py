"""Pack files a power cut left torn, and setting them aside.

A commit's pack is written whole under a temporary name and renamed into place,
then flushed with the commit before the run's ref moves. A power cut in between
can leave it under its final name with some of its bytes never written: no ref
names its objects (the ref had not moved), but libgit2 may stop at its index, and
`git fsck` and `git gc` do. The next reader or driver (or `stepstone repair`) moves
such packs to `<git dir>/stepstone/damaged/packs/`: nothing is deleted.

A pack is torn when its index does not hold together (size, magic, checksum) or
does not match the pack (object count, trailer, the last offset, its hash end to
end: bytes can be lost in the middle of a pack whose trailer survived).

A pack's index is derived data, and not flushed with its commit (only the pack,
its folder and the ref's lock file are): a power cut after the commit may leave the
pack whole and its index torn or empty. Such an index is rebuilt from its pack
(`git index-pack`) before anything is set aside.

Only a power cut tears a pack or loses an index, and a power cut means a new boot:
packs are checked on the first open after the machine started again (or in a store
copied from another machine: the boot id recorded in
`<git dir>/stepstone/checked-boot` differs), and by every `stepstone repair`.
Otherwise nothing is read.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
import subprocess
from collections.abc import Callable
from pathlib import Path

from .durable import fsync_dir, write_atomic
from .packs import read_index

_INDEX_HEADER = 8 + 256 * 4
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
CHECKED = "checked-boot"
_Hashed = tuple[bytes, int, bytes, bytes]  # header, size, sha1 of all but the trailer, trailer


def torn_packs(
    git_dir: Path,
    *,
    needed: Callable[[], set[bytes]] | None = None,
    hashed: dict[Path, _Hashed | None] | None = None,
) -> list[str]:
    """The names (`pack-<sha>`) of the torn packs in `git_dir`'s objects/pack that no
    commit needs: a pack whose index is sound is kept when it holds a commit of
    `needed()` (the commits the refs reach) and not all of its objects are in sound
    packs too (damage to a written pack is `stepstone repair`'s, not this). `hashed`
    keeps the packs' hashes for a caller that reads them again."""
    folder = git_dir / "objects" / "pack"
    try:
        names = sorted(n[:-4] for n in os.listdir(folder) if n.endswith(".idx"))
    except OSError:
        return []
    indexes = {name: _index(folder / f"{name}.idx") for name in names}
    hashed = {} if hashed is None else hashed
    sound = {
        name: _sound(folder / f"{name}.pack", index, hashed) for name, index in indexes.items()
    }
    torn = [name for name, ok in sound.items() if not ok]
    if not torn or needed is None:
        return torn
    elsewhere = {oid for name, ok in sound.items() if ok for oid in _ids(indexes[name]) or ()}
    found: list[tuple[str, set[bytes] | None]] = []
    unsure: list[tuple[str, set[bytes] | None]] = []
    for name in torn:
        ids = _ids(indexes[name])
        (found if ids is None or ids <= elsewhere else unsure).append((name, ids))
    if unsure:
        try:
            commits = needed()
        except Exception:  # a history that cannot be walked: leave those where they are
            commits = None
        if commits is not None:
            found += [(name, ids) for name, ids in unsure if ids is not None and not ids & commits]
    return sorted(name for name, _ in found)


def _index(path: Path) -> bytes | None:
    """The bytes of a pack index that holds together (a version 2 index whose size fits
    its object count and whose checksum matches), or None."""
    try:
        index = path.read_bytes()
    except OSError:
        return None
    if _last_offset(index) is None or hashlib.sha1(index[:-20]).digest() != index[-20:]:
        return None
    return index


def _ids(index: bytes | None) -> set[bytes] | None:
    """The object ids a sound index lists, or None."""
    return None if index is None else {oid for oid, _, _ in read_index(index)}


def _hash(pack_path: Path, hashed: dict[Path, _Hashed | None]) -> _Hashed | None:
    """A pack's first 12 bytes, its size, the hash of what precedes its trailer and the
    trailer (once per `hashed`); None when it cannot be read whole."""
    if pack_path in hashed:
        return hashed[pack_path]
    found: _Hashed | None = None
    try:
        with open(pack_path, "rb") as pack:
            size = os.fstat(pack.fileno()).st_size
            header = pack.read(12)
            summed = hashlib.sha1(header)
            left = size - 32
            while left > 0:
                chunk = pack.read(min(left, 1 << 20))
                if not chunk:
                    break
                summed.update(chunk)
                left -= len(chunk)
            if size >= 32 and left == 0:
                found = (header, size, summed.digest(), pack.read(20))
    except OSError:
        pass  # an index without its pack
    hashed[pack_path] = found
    return found


def _sound(pack_path: Path, index: bytes | None, hashed: dict[Path, _Hashed | None]) -> bool:
    """Whether the pack matches its sound `index`: header, object count, the last
    offset, and its hash end to end, which its trailer and the index both give."""
    last = None if index is None else _last_offset(index)
    if index is None or last is None:
        return False
    found = _hash(pack_path, hashed)
    if found is None:
        return False
    header, size, digest, trailer = found
    return (
        header[:4] == b"PACK"
        and header[8:12] == index[1028:1032]
        and trailer == index[-40:-20] == digest
        and last < size - 20
    )


def _whole(pack_path: Path, hashed: dict[Path, _Hashed | None]) -> bool:
    """Whether a pack holds together on its own: its header, and a trailer that is the
    hash of everything before it."""
    found = _hash(pack_path, hashed)
    return found is not None and found[0][:4] == b"PACK" and found[3] == found[2]


def _last_offset(index: bytes) -> int | None:
    """The greatest object offset a version 2 index gives (12 for an empty pack), or
    None when the index is not one or its size does not fit its object count."""
    if index[:8] != b"\377tOc\0\0\0\2" or len(index) < _INDEX_HEADER + 40:
        return None
    (count,) = struct.unpack(">I", index[1028:1032])
    at = _INDEX_HEADER + 24 * count  # past the ids and the CRCs
    if len(index) < at + 4 * count + 40:
        return None
    small = struct.unpack(f">{count}I", index[at : at + 4 * count]) if count else ()
    large = sum(1 for offset in small if offset & 0x80000000)
    if len(index) != at + 4 * count + 8 * large + 40:
        return None
    if not large:
        return int(max(small, default=12))
    table = at + 4 * count
    return int(max(struct.unpack(f">{large}Q", index[table : table + 8 * large])))


def clear(git_dir: Path, *, needed: Callable[[], set[bytes]], always: bool = False) -> list[str]:
    """Set aside the torn packs (see `torn_packs`), on the first open of a new boot or
    `always`; what was done, said. Where the store cannot be written (a reader on a
    read-only copy), the packs are only named."""
    boot = _boot_id()
    marker = git_dir / "stepstone" / CHECKED
    with contextlib.suppress(OSError):
        if not always and boot and marker.read_text() == boot:
            return []
    hashed: dict[Path, _Hashed | None] = {}  # each pack read and hashed once
    try:
        rebuilt = rebuild_indexes(git_dir, hashed)
    except OSError:
        rebuilt = []
    said = [f"rebuilt the index of pack {name} (a power cut lost it)" for name in rebuilt]
    found = torn_packs(git_dir, needed=needed, hashed=hashed)
    try:
        moved = set_aside(git_dir, found)
        if boot:
            write_atomic(marker, boot.encode())
    except OSError:
        return said + [
            f"torn pack {name} (left by a power cut; no run needs it): "
            "`stepstone repair` on a writable copy sets it aside"
            for name in found
        ]
    return said + [
        f"set aside torn pack {name} (left by a power cut; no run needs it) in "
        f"{git_dir}/stepstone/damaged/packs"
        for name in moved
    ]


def rebuild_indexes(git_dir: Path, hashed: dict[Path, _Hashed | None] | None = None) -> list[str]:
    """Rebuild the index of every pack that is whole (its trailer is the hash of its
    bytes) but whose index is torn, empty or missing; the packs whose index was rebuilt.
    Needs `git` (without it, such a pack is left to `torn_packs`)."""
    hashed = {} if hashed is None else hashed
    folder = git_dir / "objects" / "pack"
    try:
        names = sorted(n[:-5] for n in os.listdir(folder) if n.endswith(".pack"))
    except OSError:
        return []
    rebuilt = []
    for name in names:
        pack = folder / f"{name}.pack"
        if _sound(pack, _index(folder / f"{name}.idx"), hashed) or not _whole(pack, hashed):
            continue
        tmp = folder / f"tmp_idx_stepstone_{os.getpid()}"
        try:
            subprocess.run(
                ["git", "index-pack", "-o", str(tmp), str(pack)],
                cwd=git_dir,
                capture_output=True,
                check=True,
            )
        except (OSError, subprocess.CalledProcessError):
            tmp.unlink(missing_ok=True)
            continue
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, folder / f"{name}.idx")
        rebuilt.append(name)
    if rebuilt:
        fsync_dir(folder)
    return rebuilt


def _boot_id() -> str:
    """This boot's id (Linux), or "" where there is none: then packs are checked on
    every open."""
    try:
        return _BOOT_ID.read_text().strip()
    except OSError:
        return ""


def set_aside(git_dir: Path, names: list[str]) -> list[str]:
    """Move the packs `names` (both files) to `<git dir>/stepstone/damaged/packs/`;
    the ones moved (another process may have moved one first)."""
    if not names:
        return []
    folder = git_dir / "objects" / "pack"
    aside = git_dir / "stepstone" / "damaged" / "packs"
    aside.mkdir(parents=True, exist_ok=True)
    moved = []
    for name in names:
        for suffix in (".idx", ".pack"):  # the index first: git ignores a pack without one
            with contextlib.suppress(FileNotFoundError):
                os.replace(folder / f"{name}{suffix}", aside / f"{name}{suffix}")
                if name not in moved:
                    moved.append(name)
    fsync_dir(aside)
    fsync_dir(folder)
    return moved
