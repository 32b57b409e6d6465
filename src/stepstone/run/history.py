"""What a run's history says about one of its commits."""

from __future__ import annotations

from ..effectbook import state_rank
from ..store import READ_ERRORS, GitStore


def rolled_back_effects(store: GitStore, commit: str) -> list[str]:
    """When `commit` was made by hand (a `git commit` in a clone's work tree, say): the
    effects whose records it lost or set back from the last commit stepstone made. A
    driver refuses such a tip, as the effects would be performed again."""
    try:
        base = store.made_by_stepstone(commit)
        if base is None or base == commit:
            return []
        before, after = store.effect_files(base), store.effect_files(commit)
    except READ_ERRORS:
        return []
    return [
        f"{path.rsplit('/', 1)[1].removesuffix('.json')} was rolled back by commit {commit[:10]}"
        for path, data in before.items()
        if state_rank(data) > max(state_rank(after.get(path, b"{}")), 0)
    ]
