"""Reading a run: one commit's ids and message, and its files through the read cache."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .derived import CACHE_AFTER, DerivedData
from .errors import READ_ERRORS, damaged_commit
from .objects import Objects


@dataclass
class Snapshot:
    """One commit of a run: its ids, and its files when it was read (not after a commit)."""

    commit: str | None
    tree: str | None
    files: dict[str, bytes] = field(default_factory=dict)
    message: str = ""


class Reader:
    """Reads the commits of runs, a run's latest by default."""

    def __init__(
        self,
        path: Path,
        objects: Objects,
        derived: DerivedData,
        tip: Callable[[str], str | None],
    ) -> None:
        self._path = path
        self._objects = objects
        self._derived = derived
        self._tip = tip

    def head(self, run: str, *, at: str | None = None) -> Snapshot:
        """The latest commit of `run` (or commit `at`) without its files: ids, message."""
        commit_id = at or self._tip(run)
        if commit_id is None:
            return Snapshot(None, None)
        try:
            commit = self._objects.commit(commit_id)
        except READ_ERRORS as exc:
            raise damaged_commit(self._path, run, commit_id, exc) from exc
        return Snapshot(commit_id, str(commit.tree_id), message=commit.message)

    def read(
        self,
        run: str,
        *,
        skip: tuple[str, ...] = ("artifacts",),
        cached: bool = True,
        at: str | None = None,
    ) -> Snapshot:
        """The files of the latest commit of `run` (or of commit `at`), but those under
        the top folders in `skip`; `cached=False` reads them all from Git, not through
        the read cache."""
        found = self.head(run, at=at)
        if found.commit is None or found.tree is None:
            return found
        try:
            self._objects.tree(found.tree)
            if cached:
                found.files = self._read_cached(run, found.tree, skip)
            else:
                found.files = self._objects.files(found.tree, lambda top: top not in skip)
        except READ_ERRORS as exc:
            raise damaged_commit(self._path, run, found.commit, exc) from exc
        return found

    def _read_cached(self, run: str, tree: str, skip: tuple[str, ...]) -> dict[str, bytes]:
        """The files of `tree`, reading only what changed since the cached tree (a cache
        kept with other folders skipped is of no use)."""

        def decode(data: bytes) -> tuple[str, dict[str, bytes]]:
            cached = json.loads(data)
            if cached.get("skip") != list(skip):
                raise ValueError("cached with other folders skipped")
            files = {path: text.encode() for path, text in cached["files"].items()}
            return cached["tree"], files

        found = self._derived.catch_up(run, "json", tree, lambda top: top not in skip, decode)
        files = found.kept if found.kept is not None else {}
        for path in found.deleted:
            files.pop(path, None)
        files.update(found.changed)
        if found.read >= CACHE_AFTER:
            self._save(run, tree, files, skip)
        return files

    def _save(self, run: str, tree: str, files: dict[str, bytes], skip: tuple[str, ...]) -> None:
        try:
            payload = {
                "tree": tree,
                "skip": list(skip),
                "files": {p: data.decode() for p, data in files.items()},
            }
        except UnicodeDecodeError:
            return  # a binary file: read in full next time
        self._derived.save(run, "json", json.dumps(payload, separators=(",", ":")).encode())
