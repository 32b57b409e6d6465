"""A driven run's tie to its store's remote: the lease, the fence before each effect's
write, and the background pusher."""

from __future__ import annotations

import contextlib
import warnings
from typing import TYPE_CHECKING

from ..errors import Diverged, StepstoneError, StepstoneWarning, StoreError
from ..settings import OFFLINE_ENV
from ..store import GitStore
from .copies import remote_of_clone, remote_of_copies
from .ledger import Ledger
from .state import head_info

if TYPE_CHECKING:
    from ..remote import BackgroundPusher, LeaseKeeper


class RemoteLink:
    """What a driver holds on the remote (nothing when the store has none)."""

    def __init__(self, ledger: Ledger, notes: list[str]) -> None:
        self.ledger = ledger
        self.state = ledger.state
        self.notes = notes
        self.lease: LeaseKeeper | None = None
        self.remote = False
        self.pusher: BackgroundPusher | None = None
        ledger.before.append(self.check)
        ledger.after.append(self.after_commit)

    def join(self, steal: str | None) -> None:
        """With a remote: take the run's lease there, then bring in the remote's newer
        history of the run before anything runs (a copy that diverged is not driven).
        An unreachable remote is warned about: this copy may be behind."""
        from .. import remote

        store, run = self.state.store, self.state.id
        self.remote = remote.remote_name(store) is not None or _joins_its_remote(store, run)
        if not self.remote:
            return
        keeper = remote.LeaseKeeper(store, run, self.ledger.holder)
        try:
            keeper.take(steal=steal)
        except remote.GitFailed as exc:
            message = (
                f"the remote of run {run!r} cannot be reached ({exc.problem}): driving "
                f"this copy without its lease. Steps go on; an effect's write waits until the "
                f"lease can be taken (or {OFFLINE_ENV}=1 writes without it, at the risk of "
                f"repeating what another copy did)"
            )
            self.notes.append(message)
            warnings.warn(message, StepstoneWarning, stacklevel=4)
        else:
            self.lease = keeper
            self.ledger.epoch = keeper.epoch
            brought = remote.pull(store, run).state
            if brought in ("fast-forwarded", "created"):
                self.notes.append(f"brought in the remote's newer history of the run ({brought})")
        if store.settings.autopush:
            self.pusher = remote.BackgroundPusher(store, run, self.lease)

    def check(self) -> None:
        """Before each commit: a driver whose lease was taken records nothing more."""
        if self.lease is not None:
            self.lease.check()

    def after_commit(self) -> None:
        """Renew the lease when due and wake the pusher."""
        if self.lease is not None:
            try:
                self.lease.renew_if_due()
            except StepstoneError as exc:
                self.notes.append(f"could not renew the lease: {exc}")
        if self.pusher is not None:
            self.pusher.poke()

    def fence(self) -> None:
        """Before an effect's write: with a lease, push the run (its intent included) with
        the lease, atomically; raises `LeaseLost` when another agent took the run. A run
        opened while its remote could not be reached takes the lease now, or refuses the
        write (unless `STEPSTONE_OFFLINE=1`)."""
        if self.lease is None and self.remote and not self.ledger.settings.now().offline:
            self.lease = self._late_lease()
            self.ledger.epoch = self.lease.epoch
        if self.lease is not None:
            with self.ledger.guard:
                self.lease.fence(self.state.snap.commit)

    def _late_lease(self) -> LeaseKeeper:
        from .. import remote

        store, run = self.state.store, self.state.id
        keeper = remote.LeaseKeeper(store, run, self.ledger.holder)
        try:
            keeper.take()
            theirs = remote.remote_tip(store, run)
        except remote.GitFailed as exc:
            raise StoreError(
                str(store.path),
                f"the remote of run {run!r} cannot be reached ({exc.problem}), so this "
                f"copy cannot take the run's lease before writing an effect; nothing was "
                f"sent. Retry when the remote can be reached, or set {OFFLINE_ENV}=1 to write "
                f"without the lease (another copy that drove the run may then be repeated)",
            ) from exc
        if theirs is not None and not store.descends(self.state.snap.commit, theirs):
            with contextlib.suppress(StepstoneError):
                keeper.release()
            raise Diverged(
                run,
                "the remote has history of this run that this copy, opened offline, does not; "
                "nothing was sent. Close the run and open it again to bring that history in "
                "(`stepstone pull` shows both)",
            )
        return keeper

    def let_go(self) -> None:
        """Stop the pusher and hand the lease back (each even if the other fails)."""
        pusher, self.pusher = self.pusher, None
        lease, self.lease = self.lease, None
        try:  # the history it hands over with the lease, if its ref can be read
            tip = self.state.store.refs.tip(self.state.id) if lease is not None else None
        except StepstoneError:
            tip = None
        try:
            if pusher is not None:
                pusher.close()
        finally:
            try:
                if lease is not None and lease.lost is None:
                    lease.release(tip)
            except StepstoneError as exc:
                self.notes.append(f"could not release the lease (it expires by itself): {exc}")


def _joins_its_remote(store: GitStore, run: str) -> bool:
    """Whether a store with no remote configured for its runs holds a run that travels
    through one (its head file says `shared`: a plain `git clone` of the shared remote,
    or a copy on this machine of a store that shared it since): then the clone's
    `origin`, or the copy's remote, is the run's remote, and its lease is taken. A store
    with no remote at all is told how to add it."""
    from .. import remote

    info = head_info(store, run)
    if info is None or not info.shared or store.settings.offline:
        return False
    url = remote_of_clone(store, run) or remote_of_copies(store, run)
    if not url:
        raise StoreError(
            str(store.path),
            f"holds run {run!r}, which travels through a remote whose lease its drivers take "
            f"turns by, and this store has no remote: add the run's remote (`stepstone push "
            f"--remote URL`, or `git --git-dir {store.git_dir} remote add origin URL`), or "
            f"set {OFFLINE_ENV}=1 to drive it without the lease, at the risk of repeating "
            f"what another copy did",
        )
    remote.set_remote(store, url, "origin")
    return True
