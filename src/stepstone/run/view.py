"""What every `Run` answers, read-only: what the run holds and its status now."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from ..effects.effectbook import MAYBE_HAPPENED, EffectBook, tells_more
from ..effects.effectkeys import effect_path
from ..effects.effects import Asking
from ..errors import InvalidInput, StepstoneError
from ..model import models, names
from ..model.models import Decision, EffectRecord, RunInfo, Unknown, load
from ..rules import dependencies
from ..rules.index import PlanSteps, RecordBook
from ..rules.status import RunStatus
from ..settings import Settings
from ..store import GitStore
from ..store.lock import RunLock, driver_of
from ..store.refs import REMOTE_REFS
from . import active, questions
from .checking import Checker
from .ledger import Ledger
from .state import RunState, head_info, lineage_of
from .stepping import Stepper


class RunView:
    """The reading half of `Run`: its parts are set up by `Run.__init__`."""

    store: GitStore
    id: str
    settings: Settings
    holder: str
    notes: list[str]
    previous_workdir: Path | None
    state: RunState
    ledger: Ledger
    _lock: RunLock
    _checker: Checker
    _stepper: Stepper

    # -- what the run holds -----------------------------------------------------

    @property
    def workdir(self) -> Path:
        """Where the run's relative paths (`file:` checks, commands) resolve."""
        return self._checker.workdir

    @property
    def withheld(self) -> dict[str, list[str]]:
        """By step, the saved values the last status found this user may not load
        (pickles from a store they do not trust): the step stands without them."""
        return self._checker.withheld

    @property
    def info(self) -> RunInfo:
        """The run's head file (`run.json`)."""
        return self.state.info

    @property
    def steps(self) -> PlanSteps:
        """The plan's steps, in order."""
        return self.state.steps

    @property
    def plan(self) -> models.Plan:
        """The committed plan."""
        return self.state.plan

    @property
    def records(self) -> RecordBook:
        """The step records by step name."""
        return self.state.records

    @property
    def decisions(self) -> dict[str, Decision]:
        """The decisions by key."""
        return self.state.decisions

    @property
    def unknowns(self) -> dict[str, Unknown]:
        """The unknowns by id (`U1`...)."""
        return self.state.unknowns

    @property
    def effect_book(self) -> EffectBook:
        """The run's effect records, indexed."""
        return self.state.effect_book

    @property
    def effects(self) -> dict[str, EffectRecord]:
        """The run's effect records by key."""
        return self.state.effect_book.records

    @property
    def corrupt(self) -> list[str]:
        """What a reader found corrupt (a driver refuses to open such a run)."""
        return self.state.corrupt

    @property
    def seq(self) -> int:
        """The run's sequence number: how many commits it has."""
        return self.state.seq

    @property
    def current_step(self) -> str | None:
        """The name of the step running now, if any."""
        return self._stepper.current

    @property
    def guard(self) -> threading.RLock:
        """Held while the run's state changes (commits, effects' bookkeeping)."""
        return self.ledger.guard

    @property
    def driving(self) -> bool:
        """Whether this object holds the run (may commit to it)."""
        return self._lock.held

    def recorded_workdir(self) -> Path | None:
        """The run's recorded work folder, if it exists on this machine."""
        return self.state.recorded_workdir()

    def saved_values(self, step: str, wanted: list[str]) -> dict[str, Any]:
        """The values of `wanted` that step `step`'s record saved, loaded (raises when one
        cannot be, or is a pickle from a store this user does not trust)."""
        record = self.records.get(step)
        return {} if record is None else self._checker.load_outputs(record, only=wanted)

    def decided(self, key: str, default: Any = None) -> Any:
        """The value decided for `key`, or `default`. Read by a running step, the value
        is one of its inputs: revising the decision makes the step stale."""
        decision = self.decisions.get(key)
        active.read_decision(self, key, decision.value if decision is not None else None)
        return decision.value if decision is not None else default

    def answer(self, unknown_id: str, default: Any = None) -> Any:
        """The answer to question `unknown_id` (`U1`), or `default` while it is open.
        Read by a running step, the question is one of its inputs: the step rests on it
        while it is open (`finish` waits), and its answer makes the step run again."""
        question = self.unknowns.get(unknown_id)
        if question is None:
            raise InvalidInput(
                f"run {self.id!r} has no question {unknown_id!r}; its questions: "
                f"{names.listing(sorted(self.unknowns)) or 'none (ask one with %unknown)'}"
            )
        active.read_answer(self, unknown_id)
        return question.answer if question.state == "resolved" else default

    def readers(self, key: str) -> list[str]:
        """The steps whose records say they read decision `key` (revising it makes
        them stale)."""
        return dependencies.readers(self.state.records.values(), f"{dependencies.DECISION}{key}")

    def revising(self, key: str, value: str) -> tuple[str | None, list[str]]:
        """Decision `key`'s value now (None: not decided), and the steps that deciding
        it `value` makes run again, in plan order: those that read another value, and the steps
        recorded after the first of them, as the conservative rule runs them again (a
        cell that follows its recorded inputs only if it reads one that runs again)."""
        before = self.state.decisions.get(key)
        was = before.value if before is not None else None
        return was, self._runs_again(f"{dependencies.DECISION}{key}", str(value))

    def answering(self, unknown_id: str, text: str) -> list[str]:
        """The steps that answering question `unknown_id` with `text` makes run again, in
        plan order: those that read it (`stepstone.answer`, `--uses`) and saw another
        answer (none while it was open), and the steps after them as `revising` says."""
        return self._runs_again(f"{dependencies.UNKNOWN}{unknown_id}", text)

    def _runs_again(self, read: str, value: str) -> list[str]:
        state = self.state
        readers = {  # those that saw another value (a default before it was decided)
            name
            for name in dependencies.readers(state.records.values(), read)
            if (state.records[name].inputs or {}).get(read) != value
        }
        numbers = [state.numbers[name] for name in readers if name in state.numbers]
        if not numbers:
            return sorted(readers)
        follows = self._checker.following()
        again: list[str] = []
        for name in state.steps.names[min(numbers) - 1 :]:
            record = state.records.get(name)
            if record is None or record.status != "confirmed":
                continue  # it runs anyway
            uses_again = not state.steps_read(record.inputs).isdisjoint(again)
            if name in readers or name not in follows or uses_again:
                again.append(name)
        return again

    def preview_decision(
        self, key: str, value: str, why: str, *, revise: bool = False, line: bool = False
    ) -> questions.Preview:
        """What deciding `key`=`value` for `why` would do, recording nothing (`%decide
        --dry-run`, `stepstone decide --dry-run`): it raises what the decision would be
        refused with, as `Run.decide` would (`line`: from a notebook's `%decide` line),
        else says the value before, the steps that run again, the reason it would record
        anew, and the decision made outside that stands over the line."""
        value = str(value)
        if line:
            standing = questions.standing_over_line(self.decisions, key, value, why, revise=revise)
        else:
            questions.refuse_decision(self.decisions, key, value, why, revise=revise)
            standing = None
        was, again = self.revising(key, value)
        old = self.decisions.get(key)
        reason = why if questions.rewords(old, value, why, line=line) else None
        return questions.Preview(was, again, reason, standing)

    def identity_of(self, name: str) -> str:
        """Step `name`'s identity: its first name, kept across renames."""
        return self.state.identity_of(name)

    def effect_key(self, name: str, payload: str | None) -> str:
        """The idempotency key of effect `name` with payload fingerprint `payload`."""
        return self.state.effect_key(name, payload)

    def keys_before(self, identity: str, name: str) -> list[str]:
        """The keys effect `name` of the step keyed by `identity` had before 2026-12."""
        return self.state.keys_before(identity, name)

    def recorded_elsewhere(self, keys: list[str]) -> tuple[str, EffectRecord] | None:
        """The record of an effect (under any of `keys`) that says most of it among the
        other histories of the store (another run, a fork, the remote's history fetched
        here: `tells_more`), and the ref that holds it; None when none holds it."""
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
        found: dict[str, list[tuple[str, str | None]]] | None = getattr(
            self, "_lineage_names_read", None
        )
        if found is None:
            found = {}
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
            self._lineage_names_read = found
        return found

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

    def left_the_plan(self) -> set[str]:
        """The steps (by identity) that left the plan in its latest change."""
        return set(self.state.info.left)

    def asking(self) -> Asking | None:
        """The step asking for effects here: the one whose body (or a thread or task it
        started) runs in this context, else the step this run is running now."""
        found = active.asking_here(self)
        return found if found is not None else self._stepper.asking

    def identities(self) -> set[str]:
        """The names the plan's steps key their effects by."""
        return self.state.identities()

    def step_label(self, name: str) -> str:
        """`N name` for a step of the plan (as commit trailers write it), else `name`."""
        return self.state.step_label(name)

    def status(
        self,
        *,
        namespace: Mapping[str, Any] | None = None,
        progress: Callable[[int], object] | None = None,
        recheck: bool | None = None,
    ) -> RunStatus:
        """Verify every recorded step against the real state now and say what is next.
        Reading only: nothing is written to the work folder (a driver's `Run.status`
        puts back missing kept files first).

        `progress(1)` is called after each step, for long runs. `recheck` says whether
        `cmd:` and `call:` checks are run again: by default a driver does (it is about to
        skip steps on their word) and a read-only run does not (looking must not run
        code); the status notes the checks that were not re-run.
        """
        run_commands = self.driving if recheck is None else recheck
        return self._checker.status(
            namespace=namespace, progress=progress, run_commands=run_commands
        )
