"""What every `Run` answers, read-only: what the run holds and its status now."""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from ..effects.effectbook import EffectBook
from ..errors import InvalidInput
from ..model import models, names
from ..model.models import Decision, EffectRecord, RunInfo, StepRecord, Unknown
from ..rules import dependencies
from ..rules.index import PlanSteps, RecordBook
from ..rules.status import RunStatus
from ..settings import Settings
from ..store import GitStore
from ..store.lock import RunLock
from . import active, questions
from .checking import Checker
from .ledger import Ledger
from .state import RunState
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
    lock: RunLock
    _checker: Checker
    stepper: Stepper

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

    def kernel_part(
        self, record: StepRecord, only: Collection[str] | None = None
    ) -> dict[str, Any]:
        """What `record` keeps for the kernel (what it displayed, the process state it
        set), loaded (`only` those parts); a part this user may not load is left out."""
        return self._checker.load_kernel(record, only)

    @property
    def begun(self) -> bool:
        """Whether a step of its plan has a record (then its parameters are its own)."""
        return any(self.state.records.get(name) for name in self.state.steps.names)

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
        return self.stepper.current

    @property
    def guard(self) -> threading.RLock:
        """Held while the run's state changes (commits, effects' bookkeeping)."""
        return self.ledger.guard

    @property
    def driving(self) -> bool:
        """Whether this object holds the run (may commit to it)."""
        return self.lock.held

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
