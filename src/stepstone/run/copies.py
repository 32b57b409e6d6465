"""A store copied while its run was driven (`cp -r`, a tarball): before the copy drives,
it takes in what the original did after the copy was taken, or says why it cannot.

The copy holds the run as it was at the copy; the original went on, and may have sent
effects the copy knows nothing of. Driving the copy as it is would send them again. So
the first driver of such a copy brings the original's newer history in (the original is
on this machine: its lock file named it), and refuses when the original is gone or went
apart; `--diverge` drives the copy anyway as a new lineage (`Run` records it).
"""

from __future__ import annotations

import secrets
import shlex
from pathlib import Path

from .. import message
from ..errors import Diverged, StepstoneError
from ..lock import RunLock
from ..remote.git import git
from ..store import GitStore, holder_identity
from .ledger import Ledger
from .state import RunState

ORIGINAL_REFS = "refs/stepstone/original/"  # here: the original's history, fetched


def run_lock(store: GitStore, run: str, holder: str) -> RunLock:
    """The lock that lets one process at a time drive `run` in `store`."""
    return RunLock(store.git_dir / "stepstone" / "locks" / f"{run}.lock", run, holder)


def settle_now(store: GitStore, run: str) -> list[str]:
    """Settle a copy of the store taken while `run` was driven, holding the run for the
    time it takes (before a kernel opens it: a refusal is the command's, not a cell's)."""
    lock = run_lock(store, run, holder_identity())
    lock.acquire()
    try:
        return settle_before_reading(store, run, lock, diverge=False)
    finally:
        lock.release()


def _store_of(lock: Path) -> Path:
    """The store a run lock belongs to (`<git dir>/stepstone/locks/<run>.lock`)."""
    return lock.parent.parent.parent


def take_in_original(store: GitStore, run: str, lock: Path) -> str | None:
    """Bring the history the original store (whose run lock is `lock`) made of `run` after
    this copy was taken; a note of what was taken in, or None when there was nothing.
    Raises `Diverged` when the original is gone or its history went apart from this one."""
    original = _store_of(lock)
    way_on = (
        f"Drive it from the original ({original}), or drive this copy as a new lineage on "
        f"purpose with --diverge (`stepstone run NOTEBOOK --diverge`, `%resume --diverge`, "
        f"open_run(..., diverge=True)), which may send again what the original sent"
    )
    if not original.is_dir():
        raise Diverged(
            run,
            f"this store ({store.path}) was copied from {original} while the run was driven "
            f"there, and that store is gone: what it did after the copy, effects included, "
            f"is not here. {way_on}",
        )
    try:
        source = GitStore(original, create=False)
        there = source.tip(run)
        ref = source.ref(run)
    except StepstoneError as exc:
        problem = f"the store this one was copied from cannot be read ({exc}). {way_on}"
        raise Diverged(run, problem) from exc
    here = store.tip(run)
    if there is None or there == here:
        return None
    fetched = ORIGINAL_REFS + run
    git(store, "fetch", "--quiet", "--no-tags", str(original), f"+{ref}:{fetched}")
    if here is not None and not store.descends(there, here):
        raise Diverged(
            run,
            f"this store ({store.path}) was copied from {original} while the run was driven "
            f"there, and the two histories went apart since (compare them: git --git-dir "
            f"{shlex.quote(str(store.git_dir))} log --graph {store.ref(run)} {fetched}). "
            f"{way_on}",
        )
    store.move_run(run, there, here)
    taken = sum(1 for _ in _between(store, there, here))
    return (
        f"this store was copied from {original} while run {run!r} was driven there: took in "
        f"the {taken} commit(s) the original made since, so nothing it did is done again"
    )


def _between(store: GitStore, tip: str, base: str | None) -> list[str]:
    found = []
    for info in store.log(tip):
        if info.id == base:
            break
        found.append(info.id)
    return found


def settle_before_reading(store: GitStore, run: str, lock: RunLock, *, diverge: bool) -> list[str]:
    """Settle a copy of the store taken while `run` was driven (its `lock` noted it) before
    the run is read: take in the original's newer history. With `diverge`, leave it to
    `diverge_lineage` once the run is read. Notes for the driver."""
    copied = lock.copied_from
    if copied is None or diverge:
        return []
    note = take_in_original(store, run, copied)
    lock.settled()
    return [note] if note else []


def diverge_lineage(state: RunState, ledger: Ledger, lock: RunLock) -> list[str]:
    """Drive a copy taken while its run was driven as a new lineage (`--diverge`): its steps
    confirmed here, or whose effects it records, keep their effects' keys; every other
    effect is keyed anew, so what the original may have sent for those steps is sent
    again. Notes saying so."""
    copied = lock.copied_from
    if copied is None:
        return ["--diverge: this store is no copy taken while its run was driven; nothing to do"]
    known = set(state.effect_book.steps())  # steps whose effects this copy records
    done = [
        name
        for name in state.steps.names
        if ((r := state.records.get(name)) and r.status == "confirmed")
        or state.identity_of(name) in known
    ]
    left = [name for name in state.steps.names if name not in done]
    kept = state.lineages_of({*known, *(state.identity_of(name) for name in done)})
    state.note_info(uid=secrets.token_hex(8), inherited=kept)
    original = _store_of(copied)
    ledger.commit(
        {},
        f"run {state.id}: a new lineage, diverged from {original}",
        [(message.STATUS, "diverged"), (message.FROM, str(original))],
        info_changed=True,
    )
    lock.settled()
    grows = state.info.plan_mode == "incremental"
    again = [*left, "any step its plan does not have yet"] if grows else left
    return [
        f"--diverge: this copy of {original} drives run {state.id!r} as a new lineage; the "
        f"effects of the steps it knows nothing of ({', '.join(again) or 'none'}) are sent "
        f"anew, even where the original sent them"
    ]
