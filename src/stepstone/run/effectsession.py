"""What an effect sees of the run it belongs to: the narrow session `effects/` asks
(`Run` in effects/effects.py), made by the driver from its parts.

The session answers from the run's state (its effect records by identity, the keys an
effect had, the steps that left the plan), from the store (the other histories that
may hold the same effect, who drives them, the store's turn for effects) and commits
through the ledger; the remote link fences a write with the lease.
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

from ..effects.effectbook import MAYBE_HAPPENED, EffectBook, tells_more
from ..effects.effectkeys import effect_path
from ..errors import StepstoneError
from ..model.models import Asking, EffectRecord, RunInfo, load
from ..store.lock import RunLock, driver_of
from ..store.refs import REMOTE_REFS
from . import active, copies
from .ledger import Ledger
from .state import RunState, head_info, lineage_of

if TYPE_CHECKING:
    from .link import RemoteLink
    from .stepping import Stepper


class Driven(Protocol):
    """A driven run's collaborators, which its effect session shares (`stepstone.Run`)."""

    ledger: Ledger
    link: RemoteLink
    stepper: Stepper
    lock: RunLock


class EffectSession:
    """The effects of one driven run (`owner`: the `Run` whose steps ask for them)."""

    def __init__(
        self, owner: object, ledger: Ledger, link: RemoteLink, stepper: Stepper, lock: RunLock
    ) -> None:
        self.owner = owner
        self.state: RunState = ledger.state
        self.store = self.state.store
        self.id = self.state.id
        self.holder = ledger.holder
        self.settings = ledger.settings
        self._ledger, self._link, self._stepper, self._lock = ledger, link, stepper, lock
        self._names: dict[str, list[tuple[str, str | None]]] | None = None
        self._fetched_for: Asking | None = None  # the step attempt that last fetched

    @property
    def info(self) -> RunInfo:
        return self.state.info

    @property
    def guard(self) -> threading.RLock:
        return self._ledger.guard

    @property
    def effect_book(self) -> EffectBook:
        return self.state.effect_book

    @property
    def effects(self) -> dict[str, EffectRecord]:
        return self.state.effect_book.records

    def asking(self) -> Asking | None:
        """The step asking for effects here: the one whose body (or a thread or task it
        started) runs in this context, else the step the run is running now. Refused
        once the run is closed."""
        self._lock.require()
        found = active.asking_here(self.owner)
        return found if found is not None else self._stepper.asking

    def effect_key(self, name: str, payload: str | None) -> str:
        return self.state.effect_key(name, payload)

    def keys_before(self, identity: str, name: str) -> list[str]:
        return self.state.keys_before(identity, name)

    def identities(self) -> set[str]:
        return self.state.identities()

    def left_the_plan(self) -> set[str]:
        """The steps (by identity) that left the plan in its latest change."""
        return set(self.state.info.left)

    def recorded_elsewhere(self, keys: list[str]) -> tuple[str, EffectRecord] | None:
        """The record of an effect (under any of `keys`) that says most of it among the
        other histories of the store (another run, a fork, the remote's history fetched
        here: `tells_more`), and the ref that holds it; None when none holds it."""
        self._fetch_shared_lineage()
        best: tuple[str, EffectRecord] | None = None
        here = self.store.refs.ref(self.id)
        for key in keys:
            for ref, data in self.store.refs.everywhere(effect_path(key), but=here).items():
                try:
                    record = load(EffectRecord, data, ref)
                except StepstoneError:
                    continue  # a damaged copy elsewhere tells nothing; this run's own is read
                if best is None or tells_more(record, best[1]):
                    best = (ref, record)
        return best

    def _fetch_shared_lineage(self) -> None:
        """Bring in the history of the other runs of this run's lineage that is kept
        elsewhere: the remote's, for those that travel through it (a notebook's run
        shared, asked here with other parameters: a clone of the remote may have sent
        for them), and that of the copies of this store on this machine (`copies.fetch_kin`:
        the store this one was cloned from went on with the notebook's run). Their tips
        can hold effects this store never saw. Once for each step's attempt (a family of
        a thousand members fetches once, not a thousand times). A remote that cannot be
        reached leaves what was fetched before (the run's lease, when it has one, says
        the rest)."""
        from .. import remote

        store, attempt = self.store, self._stepper.asking
        if attempt is not None and attempt is self._fetched_for:
            return
        self._fetched_for = attempt
        mine = self.state.lineage
        kin = []
        for run in store.refs.runs():
            info = head_info(store, run) if run != self.id else None
            if info is not None and lineage_of(info) == mine:
                kin.append((run, info))
        copies.fetch_kin(store, mine, self.id)
        if remote.remote_name(store) is None:
            return
        for run, info in kin:
            if not info.shared:
                continue
            try:
                remote.remote_tip(store, run)
            except (StepstoneError, OSError):
                continue

    def named_elsewhere(self, name: str, payload: str | None) -> str | None:
        """Another run of this run's lineage (`run ID`) that recorded an effect called
        `name` that happened (or may have) with another payload, or None."""
        for run, other in self._lineage_names().get(name, ()):
            if other != payload:
                return f"run {run}"
        return None

    def _lineage_names(self) -> dict[str, list[tuple[str, str | None]]]:
        """Effect name -> (run, payload fingerprint) of the effects that happened (or may
        have) in the other runs of the store in this run's lineage, as they were when first
        asked: for what a person is told (what is sent is decided by key)."""
        if self._names is None:
            found: dict[str, list[tuple[str, str | None]]] = {}
            mine = self.state.lineage
            for run in self.store.refs.runs():
                info = head_info(self.store, run) if run != self.id else None
                if info is None or lineage_of(info) != mine:
                    continue
                tip = self.store.refs.tip(run)
                try:
                    files = self.store.effect_files(tip) if tip else {}
                except StepstoneError:
                    continue
                for path, data in files.items():
                    try:
                        record = load(EffectRecord, data, path)
                    except StepstoneError:
                        continue
                    if record.state in MAYBE_HAPPENED:
                        found.setdefault(record.name, []).append((run, record.payload_sha256))
            self._names = found
        return self._names

    def driven_elsewhere(self, ref: str) -> str | None:
        """Who drives, in another process now, the run of this store that `ref` holds
        (None: nobody, or `ref` is not a run of this store, a remote's history)."""
        run = self.store.refs.found().get(ref)
        if run is None or ref.startswith(REMOTE_REFS):
            return None
        holder = driver_of(self.store.git_dir / "stepstone" / "locks" / f"{run}.lock")
        return holder if holder is not None and holder != self.holder else None

    def turn(self) -> AbstractContextManager[object]:
        """The store's turn for effects: no other run of the store looks for an effect or
        records an intent meanwhile (a fork and its source, two parameter sets)."""
        return self.store.turn("effects")

    def fence(self) -> None:
        """Before an effect's write: push the run with its lease (`RemoteLink.fence`)."""
        self._link.fence()

    def append_effect(self, record: EffectRecord, detail: str | None) -> None:
        """Commit an effect's record: the effect's state from now on."""
        self._ledger.append(record, detail=detail)


def session_of(run: Driven) -> EffectSession:
    """The effect session of the driven `run`, made when it first asks for an effect (a
    run that asks for none never makes one); its collaborators are the run's own."""
    session: EffectSession | None = run.__dict__.get("_effect_session")
    if session is None:
        with run.ledger.guard:  # two threads' first effects make one session
            session = run.__dict__.get("_effect_session")
            if session is None:
                session = EffectSession(run, run.ledger, run.link, run.stepper, run.lock)
                run.__dict__["_effect_session"] = session
    return session
