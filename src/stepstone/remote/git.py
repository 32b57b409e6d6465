"""Running `git` against a store's remote, and which remote that is."""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
from pathlib import Path

from ..errors import GitFailed, StoreError
from ..settings import child_environment
from ..store import GIT_OPTIONS, GitStore
from ..values import trust

# settings of a store's own config that make git run a command (hooks and fsmonitor
# are turned off by GIT_OPTIONS instead)
_RUNS_COMMANDS = re.compile(
    r"^(core\.(sshcommand|askpass|gitproxy)|credential\.(.*\.)?helper"
    r"|remote\..*\.(uploadpack|receivepack|vcs)|protocol\..*allow|uploadpack\..*hook"
    r"|include\..*|includeif\..*)$"
)

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
    return child_environment({"GIT_TERMINAL_PROMPT": "0"})


_read_configs: dict[Path, tuple[tuple[int, int], list[str]]] = {}  # path -> (stat, keys)


def commands_in_config(git_dir: Path) -> list[str]:
    """The settings in the store's own config that would make git run a command (read
    again only when the file changed: every git command of a lease asks)."""
    path = git_dir / "config"
    try:
        info = path.stat()
    except OSError:
        return []
    stamp = (info.st_mtime_ns, info.st_size)
    known = _read_configs.get(path)
    if known is not None and known[0] == stamp:
        return known[1]
    done = subprocess.run(
        ["git", "config", "--file", str(path), "--name-only", "--list"],
        capture_output=True,
        text=True,
        check=False,
    )
    keys = [key for key in done.stdout.split() if _RUNS_COMMANDS.match(key.lower())]
    _read_configs[path] = (stamp, keys)
    return keys


def refuse_untrusted_commands(store: GitStore) -> None:
    """Raise, naming them, when a store this user does not trust sets command-valued git
    settings: stepstone's git would run what whoever wrote the store chose."""
    if trust.store_trusted(store.git_dir):
        return
    keys = commands_in_config(store.git_dir)
    if keys:
        where = shlex.quote(str(store.git_dir))
        unset = "; ".join(f"git --git-dir {where} config --unset-all {k}" for k in keys)
        raise StoreError(
            str(store.path),
            f"its Git config sets {', '.join(keys)}, which make git run a command, and you "
            f"have not said you trust this store, so stepstone runs no git command on it. "
            f"Remove them ({unset}) or, if you trust who wrote it, `stepstone trust --repo "
            f"{shlex.quote(str(store.path))}`",
        )


def git(store: GitStore, *args: str, check: bool = True, timeout: float = 60) -> str:
    """Run git in the store's Git directory, with no hooks and no command-valued
    settings of an untrusted store (`refuse_untrusted_commands`); return stdout."""
    refuse_untrusted_commands(store)
    try:
        done = subprocess.run(
            ["git", *GIT_OPTIONS, "--git-dir", str(store.git_dir), *args],
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
    if done.returncode == -signal.SIGINT:  # Ctrl-C reached git's process group first
        raise KeyboardInterrupt
    if check and done.returncode != 0:
        said = f"`git {args[0]}` failed: {gist(done.stderr)}{way_on(done.stderr)}"
        raise GitFailed(str(store.path), said, done.stderr)
    return done.stdout


_AUTH = ("Authentication failed", "401", "403", "could not read Username")
_LINK = (
    "Failed to connect",
    "Could not resolve host",
    "Connection reset",
    "Connection refused",
    "remote end hung up",
    "RPC failed",
    "early EOF",
    "Empty reply",
    "transfer closed",
)


def way_on(stderr: str) -> str:
    """What to do about a remote's refusal or a broken connection, as a sentence."""
    if any(sign in stderr for sign in _AUTH):
        return (
            ". The remote refused the credentials: check what your Git credential helper "
            "gives for this URL (`git config credential.helper`); stepstone keeps none"
        )
    if any(sign in stderr for sign in _LINK):
        return (
            ". The connection to the remote failed: nothing here was changed, and the "
            "remote takes a push whole or not at all; run the same command again"
        )
    return ""


def remote_name(store: GitStore) -> str | None:
    """The remote this store's runs travel to, if one is configured."""
    return store.config.get(REMOTE_KEY) or None


def remote_url(store: GitStore) -> str:
    """The URL of the store's remote ("" when it has none)."""
    return store.config.remote_url(remote_name(store) or "origin") or ""


def set_remote(store: GitStore, url: str, name: str = "origin") -> None:
    """Configure (or change) the remote runs are pushed to and pulled from."""
    store.config.set_remote_url(name, url)
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
