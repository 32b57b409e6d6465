"""Pack files a power cut left torn, and setting them aside.

A commit's pack is written whole under a temporary name and renamed into place,
then flushed with the commit before the run's ref moves. A power cut in between
can leave it under its final name with some of its bytes never written: no ref
names its objects (the ref had not moved), but libgit2 may stop at its index, and
`git fsck` and `git gc` do. The next reader or driver (or `stepstone repair`) moves
such packs to `<git dir>/stepstone/damaged/packs/`: nothing is deleted.

A pack is torn when its index does not hold together (size, magic, checksum) or
does not match the pack (object count, trailer, the last offset). With `whole`,
packs under `WHOLE_BELOW` bytes are also hashed end to end, which finds bytes lost
in the middle of a pack whose trailer survived.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
from collections.abc import Callable
from pathlib import Path

from ..atomic import fsync_dir

WHOLE_BELOW = 8 << 20
_INDEX_HEADER = 8 + 256 * 4


def torn_packs(
    git_dir: Path, *, whole: bool = False, needed: Callable[[], set[bytes]] | None = None
) -> list[str]:
    """The names (`pack-<sha>`) of the torn packs in `git_dir`'s objects/pack that no
    commit needs: a pack whose index is sound is kept when it holds a commit of
    `needed()` (the commits the refs reach) and not all of its objects are in sound
    packs too (damage to a written pack is `stepstone repair`'s, not this)."""
    folder = git_dir / "objects" / "pack"
    try:
        names = sorted(n[:-4] for n in os.listdir(folder) if n.endswith(".idx"))
    except OSError:
        return []
    sound = {name: _sound(folder / name, whole=whole) for name in names}
    torn = [name for name, ok in sound.items() if not ok]
    if not torn or needed is None:
        return torn
    elsewhere: set[bytes] = set()
    for name in (n for n, ok in sound.items() if ok):
        elsewhere.update(_ids(folder / f"{name}.idx") or ())
    try:
        commits = needed()
    except Exception:  # a history that cannot be walked: leave every pack where it is
        return []
    found = []
    for name in torn:
        ids = _ids(folder / f"{name}.idx")
        if ids is None or ids <= elsewhere or not ids & commits:
            found.append(name)
    return found


def _ids(index_path: Path) -> set[bytes] | None:
    """The object ids a sound version 2 index lists, or None."""
    try:
        index = index_path.read_bytes()
    except OSError:
        return None
    if _last_offset(index) is None or hashlib.sha1(index[:-20]).digest() != index[-20:]:
        return None
    (count,) = struct.unpack(">I", index[1028:1032])
    return {index[at : at + 20] for at in range(_INDEX_HEADER, _INDEX_HEADER + 20 * count, 20)}


def _sound(stem: Path, *, whole: bool) -> bool:
    try:
        index = stem.with_suffix(".idx").read_bytes()
        with open(stem.with_suffix(".pack"), "rb") as pack:
            size = os.fstat(pack.fileno()).st_size
            header = pack.read(12)
            pack.seek(max(size - 20, 0))
            trailer = pack.read(20)
            if whole and 32 <= size < WHOLE_BELOW:
                pack.seek(0)
                body = pack.read(size - 20)
                if hashlib.sha1(body).digest() != trailer:
                    return False
    except OSError:
        return False  # an index without its pack
    if len(index) < _INDEX_HEADER + 40 or hashlib.sha1(index[:-20]).digest() != index[-20:]:
        return False
    last = _last_offset(index)
    if last is None or size < 32 or header[:4] != b"PACK" or header[8:12] != index[1028:1032]:
        return False
    return trailer == index[-40:-20] and last < size - 20


def _last_offset(index: bytes) -> int | None:
    """The greatest object offset a version 2 index gives (12 for an empty pack), or
    None when the index is not one or its size does not fit its object count."""
    if index[:8] != b"\377tOc\0\0\0\2" or len(index) < _INDEX_HEADER + 40:
        return None
    (count,) = struct.unpack(">I", index[1028:1032])
    at = _INDEX_HEADER + 24 * count  # past the ids and the CRCs
    small = struct.unpack(f">{count}I", index[at : at + 4 * count]) if count else ()
    large = sum(1 for offset in small if offset & 0x80000000)
    if len(index) != at + 4 * count + 8 * large + 40:
        return None
    if not large:
        return int(max(small, default=12))
    table = at + 4 * count
    return int(max(struct.unpack(f">{large}Q", index[table : table + 8 * large])))


def clear(git_dir: Path, *, whole: bool, needed: Callable[[], set[bytes]]) -> list[str]:
    """Set aside the torn packs (see `torn_packs`); what was done, said. Where the store
    cannot be written (a reader on a read-only copy), the packs are only named."""
    found = torn_packs(git_dir, whole=whole, needed=needed)
    try:
        moved = set_aside(git_dir, found)
    except OSError:
        return [
            f"torn pack {name} (left by a power cut; no run needs it): "
            "`stepstone repair` on a writable copy sets it aside"
            for name in found
        ]
    return [
        f"set aside torn pack {name} (left by a power cut; no run needs it) in "
        f"{git_dir}/stepstone/damaged/packs"
        for name in moved
    ]


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
