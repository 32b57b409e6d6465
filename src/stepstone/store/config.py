"""A store's Git config: settings stepstone keeps there, and the remotes runs travel to."""

from __future__ import annotations

from pathlib import Path

import pygit2

from .errors import translated


class Config:
    """Reads and writes one repository's Git config."""

    def __init__(self, repo: pygit2.Repository, path: Path) -> None:
        self._repo = repo
        self._path = path

    def get(self, key: str) -> str | None:
        """The value of `key`, or None when it is unset (or cannot be read); a key with
        no value reads as "true", as git reads a boolean."""
        try:
            value = self._repo.config[key]
        except (KeyError, pygit2.GitError):
            return None
        return "true" if value is None else str(value)

    def flag(self, key: str) -> bool:
        """Whether `key` is set to a true value, as git reads booleans."""
        try:
            return bool(self._repo.config.get_bool(key))
        except (KeyError, pygit2.GitError):
            return False

    def set(self, key: str, value: bool | int | str) -> None:
        """Set `key` to `value` in the repository's own config."""
        with translated(self._path, f"set {key} in the store's Git config"):
            self._repo.config[key] = value

    def remote_url(self, name: str) -> str | None:
        """The URL of remote `name`, or None when there is no such remote."""
        try:
            return str(self._repo.remotes[name].url or "")
        except (KeyError, pygit2.GitError):
            return None

    def set_remote_url(self, name: str, url: str) -> None:
        """Point remote `name` at `url`, creating it when it does not exist."""
        with translated(self._path, f"set the URL of remote {name!r}"):
            if name in [remote.name for remote in self._repo.remotes]:
                self._repo.remotes.set_url(name, url)
            else:
                self._repo.remotes.create(name, url)
