"""What a long-lived server keeps between calls: each run it read, opened once per tip,
and each answer of a reading action, given again while what it was made from is
unchanged.

An answer is made from the store (the tips of its runs), the run's notebook and the
files its steps' evidence and inputs name; it is kept with their stamp (every tip; each
file's inode, size, modification and change times) and given again only while that
stamp is what it was. So the answer is the one reading anew would give: a commit by
anyone moves a tip, an edit of a file or the notebook changes its stat (a file's
content is checked again only when its stat changed). An effect in doubt's next action
changes with time: while a run has one, answers are kept for `IN_DOUBT_SECONDS` at most.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, TypeVar

from ..errors import StoreError
from ..rules import checks, dependencies
from ..run import Run
from ..store import GitStore
from . import actions

T = TypeVar("T")

KEPT = 64  # answers kept, the oldest forgotten first
IN_DOUBT_SECONDS = 5.0
_WORLD = (dependencies.FILE, dependencies.READ, dependencies.WROTE, dependencies.LISTED)


def signature(path: Path) -> tuple[Any, ...] | None:
    """A file's stat as a stamp (a folder's: each of its files'), None when missing."""
    try:
        st = path.stat()
    except OSError:
        return None
    if not path.is_dir():
        return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    found: list[Any] = []
    for folder, _, files in os.walk(path):
        for name in sorted(files):
            found.append((folder, name, signature(Path(folder) / name)))
    return tuple(found)


class _Opened:
    """A run opened for reading, with the files its answers are made from."""

    def __init__(self, view: Run) -> None:
        self.view = view
        paths: set[Path] = set()
        workdir = view.workdir
        for record in view.records.values():
            for ev in record.evidence:
                if ev.check.startswith(("file:", "sha256:", "keep:")):
                    spec = checks.parse(ev.check)
                    paths.add(workdir / checks.file_named(spec))
            for key in record.inputs or {}:
                if key.startswith(_WORLD):
                    paths.add(workdir / key.partition(":")[2])
        if view.info.notebook:
            paths.add(workdir / view.info.notebook)
        self.paths = sorted(paths)
        self.in_doubt = any(e.state != "confirmed" for e in view.effects.values())

    def stamp(self) -> tuple[Any, ...]:
        files = tuple(signature(path) for path in self.paths)
        when = int(time.monotonic() // IN_DOUBT_SECONDS) if self.in_doubt else 0
        return (files, when)


class Warm:
    """A server's memory of runs and answers (see the module); safe across threads."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._opened: dict[Hashable, tuple[Hashable, _Opened]] = {}
        self._answers: dict[Hashable, tuple[Hashable, Any]] = {}

    @staticmethod
    def tips(repo: str) -> tuple[tuple[str, str | None], ...]:
        """Each run of the store at `repo` and its tip (raises when there is no store)."""
        store = GitStore(repo, create=False)
        return tuple((run, store.refs.tip(run)) for run in store.refs.runs())

    def _open(self, run: str | None, repo: str, home: str | None, cached: bool) -> _Opened:
        tips = self.tips(repo)
        key = (run, repo, home, cached)
        kept = self._opened.get(key)
        if kept is not None and kept[0] == tips:
            return kept[1]
        opened = _Opened(actions.reader(run, repo, cached=cached, home=home))
        self._opened[key] = (tips, opened)
        return opened

    def answer(
        self,
        name: str,
        run: str | None,
        repo: str,
        home: str | None,
        make: Callable[[Run], T],
        *args: Hashable,
        cached: bool = True,
    ) -> T:
        """`make(view)` for the run, or the answer it gave while the stamp is unchanged;
        `name` and `args` tell the answers apart."""
        with self._lock:
            opened = self._open(run, repo, home, cached)
            stamp = (self.tips(repo), opened.stamp())
            key = (name, run, repo, home, cached, *args)
            kept = self._answers.get(key)
            if kept is not None and kept[0] == stamp:
                return kept[1]  # type: ignore[no-any-return]
            made = make(opened.view)
            self._answers.pop(key, None)
            self._answers[key] = (stamp, made)
            while len(self._answers) > KEPT:
                self._answers.pop(next(iter(self._answers)))
            return made

    def runs(self, repo: str, home: str | None) -> list[dict[str, Any]]:
        """`actions.runs`, each run's row kept while its tip is unchanged."""
        with self._lock:
            names = [run for run, _ in self.tips(repo)]
            return [self.answer("runs", run, repo, home, actions.run_row) for run in names]

    def maybe(
        self,
        name: str,
        run: str | None,
        repo: str,
        home: str | None,
        make: Callable[[Run | None], T],
        *args: Hashable,
    ) -> T:
        """`answer`, for an action that also answers when no run is named and the store
        has none yet (`make(None)`, not kept)."""
        if run is None:
            try:
                if not self.tips(repo):
                    return make(None)
            except StoreError:
                return make(None)
        return self.answer(name, run, repo, home, make, *args)
