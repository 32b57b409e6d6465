"""Which pickled outputs may be loaded here: the ones this user wrote, or a store they trust.

A pickle runs code when it is loaded, so a value that arrived with a copy of a
store (a clone, a tarball, a shared folder) must not be loaded unless its
reader trusts whoever wrote it. What this user's drivers write is signed with
a key that never leaves this user's configuration folder
(`$STEPSTONE_CONFIG`, else `$XDG_CONFIG_HOME/stepstone`, else
`~/.config/stepstone`): an HMAC of the value's sha256 is kept in its step
record, so the values travel with the store and are still recognised as
one's own, while a sender cannot forge the mark. A store trusted as a whole
(`stepstone trust`) is listed in the same folder, never in the store, so
that trust does not travel with a copy either.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
from pathlib import Path

from ..settings import config_dir

_KEY = "key"
_TRUSTED = "trusted-stores"


_keys: dict[Path, bytes] = {}  # read once per process


def _key(*, create: bool) -> bytes | None:
    path = config_dir() / _KEY
    if path in _keys:
        return _keys[path]
    with contextlib.suppress(OSError):
        data = path.read_bytes()
        if len(data) >= 32:
            _keys[path] = data
            return data
    if not create:
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".{_KEY}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(secrets.token_bytes(32))
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:  # another process made it first, or it is torn
            if len(path.read_bytes()) < 32:
                os.replace(tmp, path)
        tmp.unlink(missing_ok=True)
        _keys[path] = path.read_bytes()
        return _keys[path]
    except OSError:
        return None  # no writable configuration folder: nothing is signed


def sign(sha256: str) -> str | None:
    """The mark of a value this user's driver writes now (None when no key can be kept)."""
    key = _key(create=True)
    return None if key is None else hmac.new(key, sha256.encode(), hashlib.sha256).hexdigest()


def signed_here(sha256: str, mark: str | None) -> bool:
    """Whether `mark` says this user wrote the value with sha256 `sha256`."""
    key = _key(create=False)
    if key is None or not mark:
        return False
    return hmac.compare_digest(hmac.new(key, sha256.encode(), hashlib.sha256).hexdigest(), mark)


def user_tag() -> str:
    """A short name for this user's key ("" without one): derived data that depends on
    which values are one's own is kept per user."""
    key = _key(create=False)
    return "" if key is None else hashlib.sha256(key).hexdigest()[:16]


def _store_id(git_dir: Path) -> str:
    return str(git_dir.resolve())


def store_trusted(git_dir: Path) -> bool:
    """Whether this user trusts every value of the store at `git_dir` (`stepstone trust`)."""
    try:
        listed = (config_dir() / _TRUSTED).read_text().splitlines()
    except OSError:
        return False
    return _store_id(git_dir) in listed


def trust_store(git_dir: Path) -> Path:
    """Trust every value of the store at `git_dir`, for this user; the file it is noted in."""
    path = config_dir() / _TRUSTED
    try:
        listed = path.read_text().splitlines()
    except FileNotFoundError:
        listed = []
    if _store_id(git_dir) not in listed:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".{_TRUSTED}.{os.getpid()}.tmp")
        tmp.write_text("".join(f"{line}\n" for line in [*listed, _store_id(git_dir)]))
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    return path
