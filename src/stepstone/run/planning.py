"""A run's plan: committed whole (`set_plan`) or grown a step at a time, with each
step's earlier names carried across renames so that its effects keep their keys."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import PlanError
from ..model import message, models, names
from ..model.message import one_line
from ..model.models import PlannedStep, StepRecord, dump
from ..rules import checks
from ..rules.index import NO_EXTRA, PlanRow, plan_extra, plan_row
from ..rules.verdicts import Verdicts
from .layout import keeping_context, plan_path, step_path
from .ledger import Ledger
from .state import RunState


class Planner:
    """Changes the plan of the run `ledger` writes."""

    def __init__(self, ledger: Ledger, verdicts: Verdicts, notes: list[str]) -> None:
        self.ledger = ledger
        self.state = ledger.state
        self.verdicts = verdicts
        self.notes = notes

    def set_plan(
        self,
        steps: Sequence[PlannedStep | Mapping[str, Any] | str],
        *,
        mode: models.PlanMode = "explicit",
        goal: str | None = None,
        notebook: str | None = None,
        cells: bool | None = None,
    ) -> list[str]:
        """Commit a plan (names, mappings or `PlannedStep`s, in order); return what changed.
        `cells`: the notebook's every code cell is a step (None: as the run has it)."""
        state = self.state
        new = carry_renames(state, _validated(steps))
        old_rows = [state.steps.row(i) for i in range(len(state.steps))]
        new_rows = [plan_row(s) for s in new]
        changes = plan_changes(old_rows, new_rows)
        info_changed = (
            mode != state.info.plan_mode
            or (goal is not None and goal != state.info.goal)
            or (notebook is not None and notebook != state.info.notebook)
            or (cells is not None and cells != state.info.cells)
        )
        if not changes and not info_changed:
            return []
        before = state.identities()
        moved = self._moved_records(new, new)
        writes: dict[str, bytes | None] = {}
        self._apply_moves(moved, writes)
        for step, row in zip(new, new_rows, strict=True):
            if step.number > len(old_rows) or old_rows[step.number - 1] != row:
                writes[plan_path(step.number)] = dump(step)
        for number in range(len(new) + 1, len(old_rows) + 1):
            writes[plan_path(number)] = None
        state.info = state.info.model_copy(
            update={
                "plan_mode": mode,
                "goal": goal if goal is not None else state.info.goal,
                "notebook": notebook if notebook is not None else state.info.notebook,
                "cells": cells if cells is not None else state.info.cells,
                # the steps that left in this change: their effects may be asked for by
                # steps that came in it, renamed with them (effects.perform)
                "left": tuple(sorted(before - {s.identity for s in new}))
                if changes
                else state.info.left,
            }
        )
        state.set_steps(
            [s.name for s in new],
            {s.number: plan_extra(s) for s in new if plan_extra(s) != NO_EXTRA},
        )
        self.ledger.commit(
            writes,
            f"plan: {len(new)} steps" + (f" ({'; '.join(changes)})" if changes else ""),
            [(message.STATUS, "planned"), (message.PLAN, f"{mode}, {len(new)} steps")],
            info_changed=True,
            indexed=True,
            verbatim=True,  # the records of renamed steps move with the plan
        )
        self._moved(moved)
        self.verdicts.forget()
        return changes

    def _moved_records(
        self, renamed: Sequence[PlannedStep], plan: Sequence[PlannedStep]
    ) -> list[tuple[str, StepRecord]]:
        """The records of the `renamed` steps of `plan`, under their new names (with
        their old names): a step renamed is the same work, so its record, evidence and
        saved values go with it and it is not run again for a new name (its source
        still counts). A step that keeps its old name keeps its record; a record left
        by a step that is no longer planned gives way."""
        state = self.state
        records, planned_before = state.records, set(state.steps.names)
        identity = {step.name: step.identity for step in plan}
        candidates = []
        for step in renamed:
            old = step.renamed_from[-1] if step.renamed_from else None
            if old is None or old == step.name or old not in records:
                continue
            if identity.get(old) == step.identity:  # the old step is still in the plan
                continue
            candidates.append((old, step))
        leaving = {old for old, _ in candidates}  # a chain in one change: b->c, a->b
        return [
            (old, records[old].model_copy(update={"name": step.name, "number": step.number}))
            for old, step in candidates
            if step.name not in records or step.name in leaving or step.name not in planned_before
        ]

    def _apply_moves(
        self, moved: list[tuple[str, StepRecord]], writes: dict[str, bytes | None]
    ) -> None:
        """Add the moves' deletions, then their records, to `writes` (a chain deletes a
        path it also writes)."""
        legacy = self.state.legacy_layout
        for old_name, _ in moved:
            writes[step_path(old_name, legacy=legacy)] = None
        for _, record in moved:
            writes[step_path(record.name, legacy=legacy)] = dump(record)

    def _moved(self, moved: list[tuple[str, StepRecord]]) -> None:
        """Keep the committed moves in the run's records."""
        records = self.state.records
        for old_name, _ in moved:
            if old_name in records:
                del records[old_name]
        for _, record in moved:
            records[record.name] = record

    def ensure_planned(
        self,
        name: str,
        specs: tuple[str, ...],
        inputs: tuple[str, ...],
        outputs: tuple[str, ...],
        source: str | None,
        was: str | None = None,
    ) -> PlannedStep:
        """Step `name` as planned, added to an incremental plan or updated with what the
        caller says now (what it leaves out, the plan supplies)."""
        state = self.state
        existing = state.planned(name)
        if existing is None and state.info.plan_mode == "explicit":
            listing = names.listing(state.steps.names)
            raise PlanError(
                f"step {name!r} is not in the plan of run {state.id!r} (steps: {listing}); "
                f"add it to the plan, or use a new run"
            )
        number = existing.number if existing else len(state.steps) + 1
        renamed_from: tuple[str, ...] = ()
        in_place = False  # renames a step planned under `was`, which leaves the plan
        if existing is not None:
            specs = specs or existing.checks
            inputs = inputs or existing.inputs
            outputs = outputs or existing.outputs
            source = keeping_context(source, existing.source_hash) if source else None
            source = source or existing.source_hash
            renamed_from = existing.renamed_from
            if was is not None and self._renamed_in_a_plan(existing, was):  # plan says NAME
                renamed_from = (was,)
        elif was is not None:
            before = state.planned(was)
            renamed_from = (*before.renamed_from, was) if before is not None else (was,)
            if before is not None:  # an incremental plan: the step keeps its place
                number, in_place = before.number, True
        elif name in state.identities():  # a renamed step's effects are keyed by this name
            renamed_from = (_fresh_identity(state, name, set()),)
        wanted = PlannedStep(
            number=number,
            name=name,
            checks=specs,
            inputs=inputs,
            outputs=outputs,
            source_hash=source,
            renamed_from=renamed_from,
        )
        if existing == wanted:
            return existing
        state.put_step(wanted)
        renaming = in_place or (existing is not None and renamed_from != existing.renamed_from)
        if name not in state.records and not renaming:
            # a step that has not run commits nothing yet: its entry (new, or filled in
            # from a plan that named it) rides in the step's first commit (its record, or
            # its effects' intent), so a step costs one commit, planned or not
            if existing is not None:
                self.notes.append(f"step {number} {name} changed since it was planned")
            self.ledger.pending[plan_path(number)] = dump(wanted)
            return wanted
        moved = self._moved_records([wanted], list(state.steps)) if renaming else []
        writes: dict[str, bytes | None] = {plan_path(number): dump(wanted)}
        self._apply_moves(moved, writes)
        if moved or in_place:
            subject = f"plan: renamed {moved[0][0] if moved else was} -> {name}"
        elif existing is None:
            subject = f"plan: add step {number} {name}"
        else:
            subject = f"plan: update step {number} {name}"
            self.notes.append(f"step {number} {name} changed since it was planned")
        self.ledger.commit(
            writes,
            subject,
            [(message.STATUS, "planned"), (message.STEP, f"{number} {name}")],
            indexed=True,
            verbatim=True,  # the record of a renamed step moves with it
        )
        self._moved(moved)
        if moved:
            self.verdicts.forget()  # the step is verified under its new name now
        return wanted

    def _renamed_in_a_plan(self, existing: PlannedStep, was: str) -> bool:
        """Whether `run.step(NAME, ..., was=OLD)` renames `existing`, planned as NAME by a
        plan given with the new name: OLD is no longer planned, and NAME has neither
        earlier names, nor a confirmed record (a failed one: the attempt that was told to
        say --was), nor effects of its own that a new key would strand."""
        state = self.state
        record = state.records.get(existing.name)
        return (
            was != existing.name
            and not existing.renamed_from
            and state.planned(was) is None
            and (record is None or record.status != "confirmed")
            and not state.effect_book.of_step(existing.name)
        )


def _validated(steps: Sequence[PlannedStep | Mapping[str, Any] | str]) -> list[PlannedStep]:
    new: list[PlannedStep] = []
    for number, raw in enumerate(steps, start=1):
        fields: dict[str, Any] = (
            {"name": raw}
            if isinstance(raw, str)
            else dict(raw.model_dump() if isinstance(raw, PlannedStep) else raw)
        )
        fields["number"] = number
        fields.pop("schema_version", None)
        try:
            step = PlannedStep.model_validate(fields)
        except Exception as exc:
            raise PlanError(f"plan step {number}: {one_line(str(exc))}") from exc
        names.step_name(step.name)
        for spec in step.checks:
            checks.parse(spec)
        new.append(step)
    counts = Counter(s.name for s in new)
    if len(counts) != len(new):
        dupes = sorted(name for name, count in counts.items() if count > 1)
        raise PlanError(f"duplicate step names in the plan: {names.listing(dupes)}")
    return new


def changes_from(state: RunState, carried: list[PlannedStep]) -> list[str]:
    """What committing `carried` (steps with their earlier names: `carry_renames`) as
    the plan would change (`renamed a -> b`, ...)."""
    old = [state.steps.row(i) for i in range(len(state.steps))]
    return plan_changes(old, [plan_row(step) for step in carried])


def carry_renames(state: RunState, new: list[PlannedStep]) -> list[PlannedStep]:
    """`new` with each step's earlier names: kept from the plan for a step it has,
    set by `--was OLD`, or found for a new step whose source is that of a step that
    left the plan or whose own source changed (a clear rename, also when a new step
    took the old name). A renamed step's effects keep their keys, so what it already
    sent is never sent again; a step that takes a name another step's effects are
    keyed by gets keys of its own."""
    new_sources = {step.name: step.source_hash for step in new}
    by_source: dict[str, list[PlannedStep]] = {}
    for number, (_checks, _inputs, _outputs, source, _was) in state.steps.extras.items():
        name = state.steps.names[number - 1]
        if source and new_sources.get(name) != source:  # gone, or its source changed
            by_source.setdefault(source, []).append(state.steps[number - 1])
    carried = []
    for step in new:
        before: PlannedStep | None = None
        declared = step.renamed_from[-1] if step.renamed_from else None
        planned = state.planned(step.name)
        if planned is not None and (declared is None or planned.renamed_from[-1:] == (declared,)):
            renamed_from = planned.renamed_from
        elif declared is not None:
            before = state.planned(declared)  # --was, new or added to a step the plan has
            renamed_from = (declared,)
        else:
            twins = by_source.get(step.source_hash or "", [])
            before = twins[0] if len(twins) == 1 else None
            renamed_from = ()
        if before is not None:
            renamed_from = (*before.renamed_from, before.name)
        if renamed_from != step.renamed_from:
            step = step.model_copy(update={"renamed_from": renamed_from})
        carried.append(step)
    return _own_identities(state, carried)


def _own_identities(state: RunState, steps: list[PlannedStep]) -> list[PlannedStep]:
    """Give a step whose name another (renamed) step's effects are keyed by an
    identity of its own, `NAME@2` and so on, never used by the plan or an effect."""
    renamed = {step.identity for step in steps if step.renamed_from}
    clashing = [s for s in steps if not s.renamed_from and s.name in renamed]
    if not clashing:
        return steps
    taken = renamed | {s.identity for s in steps}
    fresh = {step.name: _fresh_identity(state, step.name, taken) for step in clashing}
    return [
        step.model_copy(update={"renamed_from": (fresh[step.name],)})
        if step.name in fresh
        else step
        for step in steps
    ]


def _fresh_identity(state: RunState, name: str, taken: set[str]) -> str:
    """`NAME@k` for the smallest k from 2 that no step of `taken`, the plan or an
    effect record uses; added to `taken`."""
    used = taken | state.identities() | set(state.effect_book.steps())
    k = 2
    while f"{name}@{k}" in used:
        k += 1
    taken.add(f"{name}@{k}")
    return f"{name}@{k}"


def plan_changes(old: Sequence[PlanRow], new: Sequence[PlanRow]) -> list[str]:
    """What changed between two plans, as `renamed a -> b`, `added c`, `moved d 2->3`..."""
    before = {row[0]: (number, row) for number, row in enumerate(old, start=1)}
    after = {row[0]: (number, row) for number, row in enumerate(new, start=1)}
    was = {name: row[-1] for name, (_, row) in after.items()}  # each step's earlier names
    renamed = {
        was[name][-1]: name
        for name in after
        if name not in before and was[name] and was[name][-1] in before
    }
    changes = [f"renamed {old_name} -> {name}" for old_name, name in renamed.items()]
    changes += [  # renamed and edited too: its checks or source differ
        f"changed {name}"
        for old_name, name in renamed.items()
        if before[old_name][1][1:5] != after[name][1][1:5]
    ]
    changes += [f"added {n}" for n in after if n not in before and n not in renamed.values()]
    changes += [f"removed {n}" for n in before if n not in after and n not in renamed]
    for name, (number, row) in after.items():
        prior = before.get(name)
        if prior is None:
            continue
        if prior[0] != number:
            changes.append(f"moved {name} {prior[0]}->{number}")
        elif prior[1] != row:
            changes.append(f"changed {name}")
    return changes
