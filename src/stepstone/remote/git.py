"""Running `git` against a store's remote, and which remote that is."""

from __future__ import annotations

import os
import subprocess

from ..errors import GitFailed, StoreError
from ..store import GitStore

REMOTE_KEY = "stepstone.remote"  # the Git config key naming the remote runs travel to


def gist(stderr: str) -> str:
    """The line of git's error output that says what went wrong."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    for line in lines:
        if line.startswith(("fatal:", "error:", "! [rejected]", "! [remote rejected]")):
            return line
    return lines[-1] if lines else "failed"


def git_env() -> dict[str, str]:
    """The environment of a git command: the user's, without credential prompts."""
    return {**os.environ, "GIT_TERMINAL_PROMPT": "0"}


def git(store: GitStore, *args: str, check: bool = True, timeout: float = 60) -> str:
    """Run git in the store's Git directory; return stdout."""
    try:
        done = subprocess.run(
            ["git", "--git-dir", str(store.git_dir), *args],
            capture_output=True,
            text=True,
            env=git_env(),
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError as exc:
        raise StoreError(
            str(store.path), "git is not installed; install git to use remotes"
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise GitFailed(
            str(store.path), f"`git {args[0]}` timed out after {timeout:.0f} s"
        ) from exc
    if check and done.returncode != 0:
        raise GitFailed(
            str(store.path), f"`git {args[0]}` failed: {gist(done.stderr)}", done.stderr
        )
    return done.stdout


def remote_name(store: GitStore) -> str | None:
    """The remote this store's runs travel to, if one is configured."""
    return store.config(REMOTE_KEY) or None


def remote_url(store: GitStore) -> str:
    """The URL of the store's remote ("" when it has none)."""
    return store.remote_url(remote_name(store) or "origin") or ""


def set_remote(store: GitStore, url: str, name: str = "origin") -> None:
    """Configure (or change) the remote runs are pushed to and pulled from."""
    store.set_remote_url(name, url)
    store.set_config(REMOTE_KEY, name)


def require_remote(store: GitStore) -> str:
    """The store's remote; a `StoreError` saying how to add one when it has none."""
    name = remote_name(store)
    if name is None:
        raise StoreError(
            str(store.path),
            "has no remote: run `stepstone push --remote URL` once (or `stepstone clone URL`)",
        )
    return name
