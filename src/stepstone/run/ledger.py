"""The one writer of a run: each change is one commit, numbered in sequence.

The ledger commits files to the run's ref, keeps the `RunState` it writes for in
step with each commit (snapshot, sequence number, head file), saves the step index
now and then, and tells its listeners (the lease, the background pusher) after each
commit. Nothing else in stepstone commits to a run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from ..errors import RunFinished
from ..model.message import entry, run_commit
from ..model.models import Decision, EffectRecord, StepRecord, Unknown, dump, now
from ..rules.index import INDEXED, StepIndex, save_index
from ..settings import Settings
from ..store import StoredBlob
from .layout import RUN_INFO, path_of
from .state import RunState

Trailers = list[tuple[str, str]]
RECORDS = ("steps", "decisions", "unknowns", "effects")  # the folders `append` writes


class Ledger:
    """Commits to one run on behalf of its driver `holder`."""

    def __init__(self, state: RunState, holder: str, settings: Settings) -> None:
        self.state = state
        self.holder = holder
        self.settings = settings
        # Commits are serialised, so a step's effects may be performed from several
        # threads at once; the step protocol holds it around its bookkeeping too.
        self.guard = threading.RLock()
        self.before: list[Callable[[], None]] = []  # may refuse a commit by raising
        self.after: list[Callable[[], None]] = []  # told after each commit
        self._since_save = 0
        # plan entries of steps met incrementally: they ride in the step's first commit
        self.pending: dict[str, bytes | None] = {}
        self.epoch: int | None = None  # the remote lease's epoch while it is held

    def append(
        self,
        *records: StepRecord | Decision | Unknown | EffectRecord,
        attached: Mapping[str, bytes | StoredBlob | None] | None = None,
        detail: str | None = None,
        finished_too: bool = False,
    ) -> None:
        """Commit `records` (one, or the step records a rerun marks) in one commit, each
        where its type says (run/layout.py), described as its type and state say
        (model/message.py), with the files `attached` to them (a step's saved values and
        kept files); the run's state takes them in."""
        state = self.state
        writes = dict(attached or {})
        writes.update({path_of(r, legacy=state.legacy_layout): dump(r) for r in records})
        steps = any(isinstance(r, StepRecord) for r in records)
        with self.guard:
            first = records[0]
            was = state.decisions.get(first.key) if isinstance(first, Decision) else None
            subject, trailers = entry(records, state.step_label, was=was, detail=detail)
            self.commit(
                writes,
                subject,
                trailers,
                indexed=steps,
                finished_too=finished_too,
                verbatim=True,
            )
            for record in records:
                state.apply(record)

    def commit(
        self,
        writes: Mapping[str, bytes | StoredBlob | None],
        subject: str,
        trailers: Trailers,
        *,
        info_changed: bool = False,
        indexed: bool = False,
        finished_too: bool = False,
        verbatim: bool = False,
    ) -> None:
        """Commit `writes` (path -> data, None deletes) with a message of `subject` and
        `trailers`: the head file, the plan, the summary and what `append` attaches.
        Records go through `append`; only `verbatim` writes them as bytes (a hand edit,
        the records a pull carries over from a history set aside). `indexed` says the
        caller keeps the step index's rows in step with what they write to the plan and
        the step records. A finished run takes no commit but those `finished_too` (its
        finishing and reopening, the effects a pull carries over: they happened)."""
        state = self.state
        if not verbatim and any(path.split("/", 1)[0] in RECORDS for path in writes):
            raise ValueError("a run's records are committed by Ledger.append")
        if state.info.finished and not finished_too:
            raise RunFinished(state.id, state.info.finished)
        for check in self.before:
            check()
        with self.guard:
            if not indexed and any(path.split("/", 1)[0] in INDEXED for path in writes):
                state.index_trusted = False
            if self.pending:
                writes = {**self.pending, **writes}
            # The sequence number travels in the commit message, so a step's commit
            # rewrites only its own record, not run.json.
            state.seq += 1
            if info_changed or state.info_changed or state.snap.commit is None:
                state.info = state.info.model_copy(update={"seq": state.seq, "updated": now()})
                writes = {RUN_INFO: dump(state.info), **writes}
                state.info_changed = False
            message = run_commit(
                state.id,
                subject,
                trailers,
                seq=state.seq,
                holder=self.holder,
                via=self.settings.via or self.settings.origin,
                epoch=self.epoch,
            )
            try:
                state.snap = state.store.writer.commit(
                    state.id, state.snap, writes, str(message), author=self.holder
                )
            except BaseException:
                state.index_trusted = False  # the rows may have moved ahead of the store
                raise
            self.pending = {}
            self._since_save += 1
            for listener in self.after:
                listener()

    def number_after(self, seq: int) -> None:
        """Number the next commit after `seq` too (a history set aside by a pull: the
        kept one's next commit outnumbers every commit of the run, as `repair` reads
        them in order of their numbers)."""
        self.state.seq = max(self.state.seq, seq)

    def save_index_if_due(self) -> None:
        """Save the step index once `settings.index_every` commits were made since the last
        save (so that a kill costs the next open at most that many records' reads)."""
        if self._since_save >= self.settings.index_every:
            self.save_index()

    def save_index(self) -> None:
        """Save the step index of the latest commit, so that the next open need not read
        the records committed since the last save. Between steps, the rows match the
        commit; a plan entry not yet committed (`pending`) would not."""
        self._since_save = 0
        state = self.state
        if self.pending or not state.index_trusted:
            return
        if state.snap.tree in (None, state.index_saved_at):
            return
        save_index(
            state.store,
            state.id,
            StepIndex(
                state.snap.tree,
                list[str | None](state.steps.names),
                state.steps.extras,
                state.records.table,
                state.legacy_layout,
            ),
        )
        state.index_saved_at = state.snap.tree
