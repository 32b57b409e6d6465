"""`stepstone pull` of a run its caller holds: the remote's history brought here and,
when both copies advanced and one is kept, the effects the other performed carried onto
it by a commit of the run's ledger, the one writer (remote/ sits below run/: it says
what to carry, this commits it)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ..model.message import FROM, KEY, STATUS, CommitMessage
from ..rules.index import INDEXED
from ..store import GitStore
from .ledger import Ledger
from .state import RunState

if TYPE_CHECKING:
    from ..remote import PullResult


def pull(store: GitStore, run: str, *, keep: str | None = None, holder: str) -> PullResult:
    """Bring the remote's history of `run` here (`remote.pull`: copies that both
    advanced raise `Diverged` unless `keep` is "local" or "remote"). The history kept
    takes in the effects that the other performed (or may have), since they happened: a
    later run never performs them again; kept, the local history is then pushed over
    the remote's. The caller holds the run (`holding`)."""
    from .. import remote

    result = remote.pull(store, run, keep=keep)
    if result.preserved is None or result.local is None or result.remote is None:
        return result
    kept, other = (
        (result.remote, result.local) if keep == "remote" else (result.local, result.remote)
    )
    carried = _carry(store, run, kept=kept, other=other, holder=holder)
    if keep == "local":
        remote.push(store, run, force_over=result.remote)
    return replace(result, carried=carried)


def _carry(store: GitStore, run: str, *, kept: str, other: str, holder: str) -> tuple[str, ...]:
    """Commit onto `kept`, the run's tip, the effect records of `other` that are further
    along (`remote.effects_to_carry`); their paths."""
    from .. import remote

    writes = remote.effects_to_carry(store, kept=kept, other=other)
    if not writes:
        return ()
    state = RunState(store, run, tolerant=True)
    state.read(store.reader.read(run, skip=("artifacts", *INDEXED)), cached=True)
    ledger = Ledger(state, holder, store.settings)
    ledger.number_after(CommitMessage.parse(store.commit_message(other)).seq)
    keys = [(KEY, path.rsplit("/", 1)[1].removesuffix(".json")) for path in sorted(writes)]
    ledger.commit(  # the keys let `repair` see that dropping this commit forgets effects
        writes,
        f"pull: carried over {len(writes)} effect(s) from the history not kept",
        [(STATUS, "carried"), (FROM, other), *keys],
        finished_too=True,
        verbatim=True,
    )
    return tuple(sorted(writes))
