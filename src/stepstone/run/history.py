"""What a run's history says about one of its commits."""

from __future__ import annotations

from ..effects.effectbook import state_rank
from ..errors import StoreError
from ..store import GitStore


def refuse_to_start_afresh(store: GitStore, run: str) -> None:
    """Refuse to start afresh a run that has no readable ref but history in the store
    (damaged or hidden): its steps and effects would be done again."""
    traces = store.repairs.traces(run)
    if traces:
        raise StoreError(
            str(store.path),
            f"run {run!r} has history here ({'; '.join(traces)}) but no readable ref, so "
            f"it is not started afresh. `stepstone repair --run {run}` points it at its "
            f"newest readable commit",
        )


def refuse_rolled_back_effects(store: GitStore, run: str, commit: str) -> None:
    """Refuse a tip made by hand that sets back effect records (`rolled_back_effects`)."""
    lost = rolled_back_effects(store, commit)
    if lost:
        raise StoreError(
            str(store.path),
            f"the tip of run {run!r} was made by hand and sets back effect records "
            f"({'; '.join(lost[:3])}), so their effects would be performed again. "
            f"`stepstone repair --run {run}` moves the run back to its newest commit made "
            f"by stepstone",
        )


def rolled_back_effects(store: GitStore, commit: str) -> list[str]:
    """When `commit` was made by hand (a `git commit` in a clone's work tree, say): the
    effects whose records it lost or set back from the last commit stepstone made. A
    driver refuses such a tip, as the effects would be performed again."""
    try:
        base = store.made_by_stepstone(commit)
        if base is None or base == commit:
            return []
        before, after = store.effect_files(base), store.effect_files(commit)
    except StoreError:
        return []
    return [
        f"{path.rsplit('/', 1)[1].removesuffix('.json')} was rolled back by commit {commit[:10]}"
        for path, data in before.items()
        if state_rank(data) > max(state_rank(after.get(path, b"{}")), 0)
    ]
