"""The one place where what the layer below raises becomes a `StoreError`.

libgit2 (`pygit2.GitError`, and `KeyError`/`ValueError` for a missing or malformed
object), the OS (`OSError`) and a ref that moved under its writer (`RefMoved`) are
turned here into errors that name the store and say what to do next. Nothing outside
the store package sees pygit2's exceptions, nor names `READ_ERRORS`
(tests/test_architecture.py checks it): what a caller may catch is a `StoreError`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pygit2

from ..errors import RefMoved, StoreError

READ_ERRORS = (pygit2.GitError, KeyError, ValueError)  # what reading a damaged object raises
COMMIT_ERRORS = (OSError, RefMoved, *READ_ERRORS)  # what a commit's write can raise


def damaged_commit(path: Path, run: str, commit: str, exc: Exception) -> StoreError:
    """The error for a commit of `run` that cannot be read."""
    return StoreError(
        str(path),
        f"cannot read commit {commit[:10]} of run {run!r} ({exc}): the store is "
        f"damaged. `stepstone repair --run {run}` moves the run back to its last "
        f"readable commit and keeps the damaged one on record",
    )


def damaged_ref(path: Path, run: str, ref: str, exc: Exception) -> StoreError:
    """The error for a run whose ref cannot be read."""
    return StoreError(
        str(path),
        f"the ref {ref} of run {run!r} is damaged ({exc}); nothing was changed. "
        f"`stepstone repair --run {run}` points it at the run's newest readable commit",
    )


def damaged_repository(path: Path, exc: Exception) -> StoreError:
    """The error for a repository libgit2 cannot open."""
    return StoreError(str(path), f"is a damaged Git repository ({exc})")


def cannot_create(path: Path, exc: Exception) -> StoreError:
    """The error for a store that cannot be created at `path`."""
    parent = path.parent
    hint = ""
    if not os.access(parent, os.W_OK) or "Read-only" in str(exc):
        hint = f": {parent} cannot be written; pass --repo a folder on a writable disk"
    return StoreError(str(path), f"cannot create a repository here ({exc}){hint}")


def commit_failed(path: Path, run: str, exc: Exception) -> StoreError:
    """The error for a commit to `run` that did not happen (one of `COMMIT_ERRORS`)."""
    if isinstance(exc, FileExistsError):
        return StoreError(
            str(path),
            f"the ref of run {run!r} is locked ({exc.filename}): another git process is "
            f"writing it, or a killed one left the lock; reopen the run to clear a stale one",
        )
    if isinstance(exc, OSError):
        return StoreError(
            str(path), f"could not write ({exc.strerror}); free space or fix permissions"
        )
    detail = exc.detail if isinstance(exc, RefMoved) else str(exc)
    return StoreError(
        str(path),
        f"could not commit to run {run!r} ({detail}); nothing was recorded for this "
        f"attempt. If another process moved the run, reopen it",
    )


@contextlib.contextmanager
def translated(path: Path, doing: str) -> Iterator[None]:
    """Raise what goes wrong while `doing` (libgit2, the OS) as a `StoreError`."""
    try:
        yield
    except StoreError:
        raise
    except (OSError, *READ_ERRORS) as exc:
        raise StoreError(str(path), f"could not {doing} ({exc})") from exc
