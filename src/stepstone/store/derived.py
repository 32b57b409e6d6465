"""Derived data about a run, keyed by the tree id it describes: never authoritative.

The read cache (a run's files) and the step index (its plan and step records as
columns) are both kept in `<git dir>/stepstone/cache/` with the id of the tree they
describe. Git objects are content-addressed, so an unchanged path in an unchanged
tree has unchanged content: catching up with a newer tree reads only what a tree
diff says changed. A missing, stale or damaged file only means a full read.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from .objects import Objects

CACHE_AFTER = 200  # files read from Git before the read is worth caching

T = TypeVar("T")


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


@dataclass
class CatchUp(Generic[T]):
    """What was kept (None: nothing usable, so every file was read) and what changed
    since the tree it describes: the added or changed files and the removed paths."""

    kept: T | None
    changed: dict[str, bytes] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)

    @property
    def read(self) -> int:
        """How many files this catch-up read from Git (or found removed)."""
        return len(self.changed) + len(self.deleted)


class DerivedData:
    """The derived-data files of one store's runs, by run and kind (`json`, `index`)."""

    def __init__(self, git_dir: Path, objects: Objects) -> None:
        self._git_dir = git_dir
        self._objects = objects

    def path(self, run: str, kind: str = "json") -> Path:
        """Where derived data of `kind` about `run` is kept."""
        return self._git_dir / "stepstone" / "cache" / f"{run}.{kind}"

    def catch_up(
        self,
        run: str,
        kind: str,
        tree: str,
        wanted: Callable[[str], bool],
        decode: Callable[[bytes], tuple[str, T]],
        *,
        cached: bool = True,
    ) -> CatchUp[T]:
        """What is kept about `run` (`decode` makes the kept bytes the tree id they
        describe and the data), and the files under the top-level names `wanted`
        accepts that changed from that tree to `tree`. With nothing usable kept (or not
        `cached`), every such file of `tree` (one of `READ_ERRORS` when it cannot be
        read); an unusable file is removed, so that it is not read again."""
        path = self.path(run, kind)
        if cached:
            try:
                old, kept = decode(path.read_bytes())
                changed, deleted = self._objects.changes(old, tree, wanted)
                return CatchUp(kept, changed, deleted)
            except FileNotFoundError:
                pass
            except Exception:  # derived data: whatever is wrong with it means a full read
                with contextlib.suppress(OSError):
                    path.unlink(missing_ok=True)
        return CatchUp(None, self._objects.files(tree, wanted))

    def save(self, run: str, kind: str, data: bytes) -> None:
        """Keep `data` (which names the tree it describes) for the next catch-up (best
        effort: never flushed)."""
        write_derived(self.path(run, kind), data)

    def forget(self, run: str) -> None:
        """Remove everything kept about `run` (its history was rewritten)."""
        for kind in ("json", "index"):
            self.path(run, kind).unlink(missing_ok=True)
