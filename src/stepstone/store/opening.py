"""Finding, opening and creating a store; who drives it; how its writes are flushed."""

from __future__ import annotations

import errno
import functools
import getpass
import os
import shutil
import socket
from pathlib import Path

import pygit2
from pygit2 import Config

from ..errors import StoreError
from ..settings import Settings
from .durable import batch_sync, fsync_dir, fsync_tree
from .errors import cannot_create, damaged_repository

DEFAULT_STORE = ".stepstone"
DEDICATED_KEY = "stepstone.dedicated"
_fsync_enabled = False


def resolve_store_path(
    repo: str | os.PathLike[str] | None, *, settings: Settings | None = None
) -> Path:
    """The store path from an argument, then `STEPSTONE_REPO`, then `.stepstone`."""
    if repo is None:
        repo = (settings or Settings.from_env()).store or DEFAULT_STORE
    return Path(repo).expanduser().absolute()


def holder_identity(settings: Settings | None = None) -> str:
    """Who drives: `NAME@host pid N`, used in locks, commits and records. The name is
    named as Git names people: the settings' agent (`STEPSTONE_AGENT`), else
    `GIT_AUTHOR_NAME`, else Git's `user.name`, else the login name."""
    name, _ = person(settings)
    return f"{name}@{socket.gethostname()} pid {os.getpid()}"


def person(settings: Settings | None = None) -> tuple[str, str | None]:
    """(name, email) of whoever acts here, as Git would sign their commit (the email is
    None when Git knows none)."""
    config = _git_config()
    settings = settings or Settings.from_env()
    name = settings.agent or config.get("user.name")
    if not name:
        try:
            name = getpass.getuser()
        except (KeyError, OSError):
            name = "unknown"
    email = settings.agent_email or config.get("user.email")
    return name.replace("\n", " ").strip() or "unknown", email


def who(holder: str) -> str:
    """The person's name in a holder's `NAME@host pid N`."""
    return holder.rpartition("@")[0] or holder


def host_of(holder: str) -> str:
    """The host in a holder's `NAME@host pid N` (a name may hold an "@")."""
    return holder.rpartition("@")[2].split(" ", 1)[0]


def signature(holder: str, settings: Settings | None = None) -> tuple[str, str]:
    """(name, email) that sign a commit made by `holder`: Git's email of whoever acts
    here, else `NAME@host`."""
    name, email = who(holder), person(settings)[1]
    if not email:
        email = f"{name.replace(' ', '.')}@{host_of(holder)}"
    return name, email


@functools.cache
def _git_config() -> dict[str, str]:
    """`user.name` and `user.email` of the user's Git configuration (global and system)."""
    found: dict[str, str] = {}
    for level in (Config.get_global_config, Config.get_xdg_config, Config.get_system_config):
        try:
            config = level()
        except (pygit2.GitError, OSError):
            continue  # no such file
        for key in ("user.name", "user.email"):
            if key not in found and key in config:
                found[key] = str(config[key])
    return found


def enable_fsync(settings: Settings) -> None:
    """Have libgit2 fsync what it writes, once a store of this process flushes each
    object on its own (no `syncfs` flushes the batch)."""
    global _fsync_enabled
    if not _fsync_enabled and not batch_sync(settings):
        pygit2.option(pygit2.enums.Option.ENABLE_FSYNC_GITDIR, 1)
        _fsync_enabled = True


def make_dedicated(repo: pygit2.Repository, path: Path) -> None:
    """Configure a bare repository as a store of stepstone's own (runs on branches)."""
    repo.config[DEDICATED_KEY] = True
    repo.config["core.logAllRefUpdates"] = False
    repo.config["gc.packRefs"] = False  # refs stay loose: only drivers lock them
    # The parent project should not pick the store up as untracked files.
    (path / ".gitignore").write_text("*\n")


def open_repository(path: Path, *, create: bool) -> pygit2.Repository:
    """The repository of the store at `path` (a bare store, or a work tree's `.git`),
    created as a store of stepstone's own when nothing is there and `create`."""
    where = str(path)
    if path.is_file():
        raise StoreError(where, "is a file, not a store; pass --repo a folder")
    if path.is_dir():
        found = pygit2.discover_repository(str(path))
        if found and Path(found).resolve() in (path.resolve(), (path / ".git").resolve()):
            try:
                return pygit2.Repository(found)
            except pygit2.GitError as exc:
                raise damaged_repository(path, exc) from exc
        if any(path.iterdir()):
            inside = path / DEFAULT_STORE
            raise StoreError(
                where,
                "is a folder but not a Git repository; pass --repo an empty or new "
                "folder, or a Git repository"
                + (f" (the store here is {inside})" if inside.is_dir() else ""),
            )
    if not create:
        raise StoreError(where, "does not exist; run a notebook or `%resume` to create it")
    return _create(path)


def _create(path: Path) -> pygit2.Repository:
    # Built aside and renamed into place, so that processes creating the same
    # store at once see either no store or a whole one.
    parent = path.parent
    tmp = parent / f".{path.name}.init-{os.getpid()}"
    try:
        parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        repo = pygit2.init_repository(str(tmp), bare=True)
        make_dedicated(repo, tmp)
        del repo
        fsync_tree(tmp)
        try:
            os.rename(tmp, path)
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # another process made it first
        fsync_dir(parent)
        return pygit2.Repository(str(path))
    except (OSError, pygit2.GitError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise cannot_create(path, exc) from exc
