"""Opening runs, and the module-level API that acts on the run this process drives."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

from ..effects import effects
from ..errors import StepstoneError
from ..model import names
from ..settings import Settings
from ..store import GitStore, holder_identity
from . import active
from .copies import run_lock
from .effectsession import session_of
from .facade import Run
from .history import rolled_back_effects
from .layout import RUN_INFO
from .program import refuse_a_second_store


def open_run(
    run: str | None = None,
    *,
    repo: str | os.PathLike[str] | None = None,
    workdir: str | os.PathLike[str] | None = None,
    drive: bool = True,
    create: bool = True,
    steal: str | None = None,
    cached: bool = True,
    settings: Settings | None = None,
    diverge: bool = False,
    home: str | os.PathLike[str] | None = None,
) -> Run:
    """Open a run (creating it and its store if new) and hold it as its only driver.

    `run` defaults to `STEPSTONE_RUN`, then to the store's only run; `repo` to
    `STEPSTONE_REPO`, then `.stepstone` in the current folder. With
    `drive=False` the run is opened read-only and no lock is taken. When the
    store has a remote, driving also takes the run's lease there; `steal`
    (a reason) takes a live lease from another agent and records that it did.
    `cached=False` reads every record from Git instead of through the read caches
    (derived data under `<git dir>/stepstone/cache`), as `stepstone verify` does.
    `workdir` is where the run's relative paths (`file:` checks, commands)
    resolve; by default the folder the run recorded (kept relative to the store's
    folder, so a copied project keeps it), else `home` (a server's folder), else the
    current folder. A driver records the folder it works in. `settings` replaces what
    the environment and the store's Git config say (`stepstone.settings.Settings`). A
    store copied while its run was driven takes in what the original did since before
    it drives; with `diverge`, it drives as a new lineage instead (see docs/effects.md).
    """
    if drive and create and repo is None:
        refuse_a_second_store(run)
    store = GitStore(repo, create=create and drive, settings=settings)
    run_id = run or store.settings.run or _default_run(store)
    opened = Run(
        store,
        run_id,
        workdir=Path(workdir).absolute() if workdir is not None else None,
        drive=drive,
        create=create,
        steal=steal,
        cached=cached,
        diverge=diverge or store.settings.diverge,
        home=Path(home).absolute() if home is not None else None,
    )
    if drive:
        active.now_driving(opened)
    return opened


@contextmanager
def holding(store: GitStore, run: str) -> Iterator[None]:
    """Hold `run` (as its driver would) without opening it: for moving its ref."""
    lock = run_lock(store, names.run_id(run), holder_identity(store.settings))
    lock.acquire()
    try:
        store.clear_leftovers(run)
        yield
    finally:
        lock.release()


def problems_at(store: GitStore, run: str, commit: str) -> list[str]:
    """What a driver would refuse in `run`'s commit `commit`: its corrupt records and plan,
    effect records a commit made by hand rolled back (none when the commit is sound);
    `stepstone repair` moves a run to a sound one."""
    try:
        reader = Run(store, run, workdir=None, drive=False, create=False, cached=False, at=commit)
    except StepstoneError as exc:
        return [str(exc)]
    return list(reader.corrupt) + rolled_back_effects(store, commit)


def decided(key: str, default: Any = None) -> Any:
    """The value decided for `key` in the run this process drives, or `default`."""
    return _active().decided(key, default)


def answer(unknown_id: str, default: Any = None) -> Any:
    """The answer to question `unknown_id` (`U1`) in the run this process drives, or
    `default` while it is open; a step that reads it rests on it."""
    return _active().answer(unknown_id, default)


def effect(
    name: str,
    do: Callable[[str], Any],
    *,
    keyed: bool = False,
    lookup: Callable[[str], Any] | None = None,
    payload: Any = None,
    was: str | None = None,
    new: bool = False,
    timeout: float | None = None,
    retention: timedelta | float | None = None,
) -> Any:
    """Perform an external write at most once and return its receipt.

    `do(key)` performs the write with the idempotency key and returns a
    JSON-serialisable receipt. `keyed=True`: the receiver honours the key, so
    an unconfirmed attempt is retried with it. `lookup(key)` returns the
    receipt if the effect already exists, else None (or False). With neither,
    an intent found without a confirmation raises `UnresolvedEffect`.
    `payload` is fingerprinted (never stored): the same key with another
    payload raises `EffectChanged`. `was` is the effect's earlier name when it
    was renamed (it keeps its key); `new=True` says the effect is new, not a
    renamed one: the guards of `EffectRenamed` do not apply to it. `do` may take
    `timeout` seconds (default `STEPSTONE_EFFECT_TIMEOUT`, else 600) before it is
    interrupted and the effect left in doubt with `EffectTimedOut` (on the main
    thread; `do` always runs in the caller's thread). `retention` (a `timedelta` or
    seconds; default `git config stepstone.effectRetention`, else 24 h) is how long a
    keyed receiver keeps keys: an intent older than that is not retried with its key
    but raises `UnresolvedEffect`, as a retry would be a new request.
    """
    options = dict(keyed=keyed, lookup=lookup, payload=payload, was=was, new=new)
    session = session_of(_active())
    return effects.perform(session, name, do, timeout=timeout, retention=retention, **options)


def note(text: str) -> None:
    """Write a note as the evidence of the step running now: what was read, found or
    understood, for a step whose product is understanding (`%%step NAME --note`, or
    `checks=["note"]`). A note is kept in the step's record and shown as **weak**
    evidence: nothing can re-check it."""
    active.write_note(text)


def fence_token() -> str | None:
    """The lease the running step holds, as a fencing token for a receiver that checks
    one (`RUN:EPOCH`; the epoch grows at each take of the run's lease), or None when
    the store has no remote. Pass it with an effect's write: a receiver that refuses a
    token lower than one it has seen refuses a driver that was paused while another
    took the run over."""
    run = _active()
    return None if run.ledger.epoch is None else f"{run.id}:{run.ledger.epoch}"


def _active() -> Run:
    """The run a bare call means (see `active.active_run`)."""
    return cast(Run, active.active_run())


def _default_run(store: GitStore) -> str:
    """The store's only run; of several, the only one that is neither a fork nor made
    with parameters (forks and parameter runs are named with --run: the notebook's own
    run is the default, as `stepstone run NOTEBOOK` picks it); else `pick_run`'s error,
    which lists them."""
    runs = store.refs.runs()
    if len(runs) > 1:
        originals = [r for r in runs if not _derived(store, r)]
        if len(originals) == 1:
            return originals[0]
    return store.pick_run(None)


def _derived(store: GitStore, run: str) -> bool:
    """Whether `run` is a fork of another run or a run of a notebook with parameters."""
    head = store.reader.head(run)
    data = store.blob(head.tree, RUN_INFO) if head.tree else None
    try:
        info = json.loads(data) if data else {}
        return bool(info.get("forked_from") or info.get("parameters"))
    except (ValueError, AttributeError):
        return False
