"""The runs of one notebook share a lineage: a run with parameters (`stepstone run NB -p
...`, run `NB-1a2b3c4d`) and the notebook's run without them (`NB`) are the same job on
other inputs, so an effect either performed, with the same name and payload, is never
sent again by the other (docs/effects.md). A run with an id of its own (`--run NAME`)
starts a lineage of its own.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..model import message
from ..model.models import RunInfo
from ..store import GitStore
from .ledger import Ledger
from .state import RunState, head_info, lineage_of


def notebook_run(run: str, stem: str) -> bool:
    """Whether `run` is an id `stepstone run` gives a notebook called `stem`: `stem`, or
    `stem-` and the 8 hex digits of a parameter set."""
    return run == stem or re.fullmatch(re.escape(stem) + r"-[0-9a-f]{8}", run) is not None


def join_siblings(state: RunState, ledger: Ledger, notebook: Path, stem: str) -> str | None:
    """Put a new run of `notebook` (one that recorded nothing yet, named as `stepstone
    run` names the notebook's runs) in the lineage of the notebook's other runs in its
    store; a note saying so, or None. Done in the store's turn for effects, so that two
    parameter sets started at once end in one lineage."""
    store = state.store
    if (
        state.info.lineage
        or state.effect_book.records
        or len(state.records)
        or not (notebook_run(state.id, stem))
    ):
        return None
    with ledger.guard, store.turn("effects"):
        siblings = [
            info
            for run in store.refs.runs()
            if run != state.id
            and notebook_run(run, stem)
            and (info := head_info(store, run)) is not None
            and _notebook_of(store, info) == notebook.resolve()
        ]
        if not siblings:
            return None
        chosen = sorted(siblings, key=lambda info: (info.created, info.run))[0]
        lineage = lineage_of(chosen)
        if lineage == state.lineage:
            return None
        state.note_info(lineage=lineage)
        ledger.commit(
            {},
            f"run {state.id}: in the lineage of run {chosen.run} (the same notebook)",
            [(message.STATUS, "lineage")],
            info_changed=True,
        )
    return (
        f"run {state.id} is {notebook.name} with other parameters than run {chosen.run}: "
        f"an effect that run performed, with the same name and payload, is not sent again"
    )


def _notebook_of(store: GitStore, info: RunInfo) -> Path | None:
    """The notebook a run's head file records, as an absolute path (None: none)."""
    if not info.notebook:
        return None
    return (store.path.parent / info.workdir / info.notebook).resolve()
