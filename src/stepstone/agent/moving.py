"""Moving a run between machines, as actions: push it to its remote, pull the remote's
history, clone a store, hand the run off. The command line's `push`, `pull`, `clone`
and `handoff` and the MCP server's tools of the same names call these; each returns
the JSON `--json` prints. A remote's URL is shown without its credentials."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..errors import StoreError
from ..remote.git import require_remote
from ..run.opening import holding
from ..settings import AUTOPUSH_KEY
from ..store import GitStore, holder_identity
from .actions import driver, reader


def shown_url(url: str) -> str:
    """`url` without a password or token (`https://user:secret@host/x` → `https://***@host/x`)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc or not parts.scheme:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"***@{host}"))


def _store(repo: str | None, home: str | None) -> GitStore:
    if repo is None and home is not None:
        repo = str(Path(home) / ".stepstone")
    return GitStore(repo, create=False)


def push(
    run: str | None,
    repo: str | None,
    *,
    url: str | None = None,
    auto: bool | None = None,
    home: str | None = None,
) -> dict[str, Any]:
    """Push the run's history to the store's remote (set to `url` first, when given),
    never over another copy's work; `auto` also pushes after every commit from now on."""
    from .. import remote

    store = _store(repo, home)
    view = reader(run, str(store.path), home=home)
    if not url:
        require_remote(store)  # refused before the run is marked shared
    if not view.info.shared and not view.info.finished:
        _share(store, view.id)  # refused (a copy that went apart): nothing is set
    if url:
        remote.set_remote(store, url)
    if auto is not None:
        store.set_config(AUTOPUSH_KEY, auto)
    tip = remote.push(store, view.id)
    return {"run": view.id, "tip": tip, "remote": shown_url(remote.remote_url(store))}


def _share(store: GitStore, run_id: str) -> None:
    """Record in the run, before its first push, that its drivers take turns by the
    remote's lease: a plain `git clone` of the remote then takes it too. Driven here now,
    the push goes on without it (that driver records it once it takes the lease)."""
    from ..errors import RunLocked
    from ..run import Run

    try:
        with Run(store, run_id, workdir=None, create=False, remote=False) as run:
            run.share()
    except RunLocked:
        pass


def _unsaved_notebook(workdir: Path, notebook: str) -> str | None:
    """A note when the run's notebook has changes its project's Git repository does not
    have (a `%decide` line rewritten by a revision, an edited cell): the next agent gets
    the notebook from there."""
    if not notebook:
        return None
    done = subprocess.run(
        ["git", "status", "--porcelain", "--", notebook],
        cwd=workdir,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0 or not done.stdout.strip():
        return None  # not in a Git work tree, or committed
    return (
        f"{notebook} has changes its project's Git repository does not have: commit and "
        f"push it too (git commit {notebook}; git push), so that the next agent's notebook "
        f"says what this run did"
    )


def pull(
    run: str | None, repo: str | None, *, keep: str | None = None, home: str | None = None
) -> dict[str, Any]:
    """Bring the remote's history of the run here. Diverged copies are shown, not merged:
    `keep` (`local` or `remote`) says which history becomes the run; the other is kept."""
    from .. import remote
    from ..run import pulling

    store = _store(repo, home)
    run_name = store.pick_run(run)
    with holding(store, run_name):
        # keeping the local history overwrites the remote's: not under a live driver
        lease = remote.LeaseKeeper(store, run_name, holder_identity()) if keep == "local" else None
        if lease is not None:
            lease.take()
        try:
            result = pulling.pull(store, run_name, keep=keep, holder=holder_identity())
        finally:
            if lease is not None:
                lease.release()
    return {
        "run": run_name,
        "state": result.state,
        "preserved": result.preserved or None,
        "carried": len(result.carried),
    }


def clone(url: str, directory: str | None = None, *, home: str | None = None) -> dict[str, Any]:
    """Clone a store from `url` into `directory` (default: `.stepstone` in `home`, else
    here): plan, records and artifacts of every run, ready to resume."""
    from .. import remote

    path = Path(directory or ".stepstone")
    if not path.is_absolute() and home is not None:
        path = Path(home) / path
    try:
        store = remote.clone(url, path)
    except StoreError as exc:  # git's message names the URL: not its credentials
        raise StoreError(str(path), str(exc).replace(url, shown_url(url))) from None
    return {"store": str(store.path), "remote": shown_url(url), "runs": store.refs.runs()}


def handoff(
    run: str | None,
    repo: str | None,
    *,
    via: str,
    home: str | None = None,
    tools: bool = False,
    url: str | None = None,
) -> dict[str, Any]:
    """Push the run, release its lease, and give the brief and the next agent's commands
    (with `tools`, for an agent with MCP tools: the brief ends with the tool that goes
    on, and the remote's URL is shown without credentials everywhere). `url` sets the
    store's remote first, as `push` does."""
    from .. import remote
    from ..present import brief as briefing
    from ..present import render

    view = reader(run, repo, home=home)
    if view.info.finished:  # nobody drives a finished run: no lease to let go
        if url:
            remote.set_remote(view.store, url)
        tip = remote.push(view.store, view.id)
        state, where = view.status(), briefing.Context.of(view)
    else:
        with driver(view.id, repo, via, home=home) as held:  # refused: nothing is set
            if url:
                remote.set_remote(held.store, url)
                held.share()
            tip = remote.push(held.store, held.id)
            state, where = held.status(), briefing.Context.of(held)
    pushed_to = remote.remote_url(view.store)
    return {
        "run": view.id,
        "tip": tip,
        "remote": shown_url(pushed_to),
        "brief": render.brief(state, where, tools=tools),
        "next_agent": render.next_agent(
            state, where, run=view.id, url=shown_url(pushed_to) if tools else pushed_to
        ),
        "note": _unsaved_notebook(where.workdir, where.notebook),
    }
