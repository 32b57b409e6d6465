"""A run's step index: its plan and step records reduced to plain rows.

Opening a run of 100,000 steps cannot afford a validated model per record, so
the plan entries and step records are kept as tuples: what status, resume and
the readers need, with the models built only for the steps that are reached.
The index is derived data. It is built from the records in the run's tree
(each one validated by its model), kept in `<git dir>/stepstone/cache/<run>.index`
with the tree id it describes, and brought up to date by a tree diff, which reads
only the records that changed. A missing, stale or damaged index only means it
is rebuilt; an index with a corrupt record in it is never saved.
"""

from __future__ import annotations

import marshal
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from .models import PlannedStep, StepRecord
from .store import GitStore, Snapshot, write_derived

FORMAT = 1  # bump when a row's shape changes: an index of another format is rebuilt

# (name, checks, inputs, outputs, source_hash)
PlanRow = tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...], "str | None"]
# (check, kind, value, detail)
EvidenceRow = tuple[str, str, Any, str]
# (status, seq, checks, source_hash, error, evidence, finished, world), where
# `world` says that some evidence must be re-checked against the world
RecordRow = tuple[
    str, int, tuple[str, ...], "str | None", "str | None", tuple[EvidenceRow, ...], str, bool
]

Loader = Callable[[type[Any], dict[str, bytes]], list[Any]]


def plan_row(step: PlannedStep) -> PlanRow:
    """The row of a plan entry."""
    return (step.name, step.checks, step.inputs, step.outputs, step.source_hash)


def evidence_rows(record: StepRecord) -> tuple[EvidenceRow, ...]:
    """A record's evidence as rows."""
    return tuple((e.check, e.kind, e.value, e.detail) for e in record.evidence)


def record_row(record: StepRecord) -> RecordRow:
    """The row of a step record."""
    return (
        record.status,
        record.seq,
        record.checks,
        record.source_hash,
        record.error,
        evidence_rows(record),
        record.finished,
        any(e.kind != "completed" for e in record.evidence),
    )


def planned_step(number: int, row: PlanRow) -> PlannedStep:
    """The plan entry `row` as a model again."""
    name, checks, inputs, outputs, source = row
    return PlannedStep(
        number=number, name=name, checks=checks, inputs=inputs, outputs=outputs, source_hash=source
    )


INDEXED = ("plan", "steps")  # the top folders whose records the index holds


def _in_index(top: str) -> bool:
    return top in INDEXED


@dataclass
class StepIndex:
    """The plan (by number) and the step records (by name) of one tree, as rows."""

    tree: str | None = None
    plan: dict[int, PlanRow] = field(default_factory=dict)
    records: dict[str, RecordRow] = field(default_factory=dict)
    legacy_layout: bool = False  # step records at steps/ab/<name>.json (session-1 runs)
    complete: bool = True  # every record in the tree is in it: none was corrupt

    def update(self, changed: dict[str, bytes], deleted: list[str], load: Loader) -> None:
        """Apply a tree diff: added or changed record files and removed paths. `load`
        validates a folder's records (and notes or raises on a corrupt one)."""
        for path in (*deleted, *changed):  # a changed record that is now corrupt is gone
            if path.startswith("plan/"):
                self.plan.pop(_plan_number(path), None)
            elif path.startswith("steps/"):
                self.records.pop(_step_name(path), None)
        plan_files = {p: d for p, d in changed.items() if p.startswith("plan/")}
        step_files = {p: d for p, d in changed.items() if p.startswith("steps/")}
        planned: list[PlannedStep] = load(PlannedStep, plan_files)
        records: list[StepRecord] = load(StepRecord, step_files)
        if len(planned) != len(plan_files) or len(records) != len(step_files):
            self.complete = False
        for step in planned:
            self.plan[step.number] = plan_row(step)
        for record in records:
            self.records[record.name] = record_row(record)
        _share_evidence(self.records)
        if step_files and not self.legacy_layout:
            self.legacy_layout = any(path.count("/") == 2 for path in step_files)

    def dumps(self) -> bytes:
        return marshal.dumps((FORMAT, self.tree, self.plan, self.records, self.legacy_layout))

    @classmethod
    def loads(cls, data: bytes) -> StepIndex:
        fmt, tree, plan, records, legacy = marshal.loads(data)
        if fmt != FORMAT or not isinstance(plan, dict) or not isinstance(records, dict):
            raise ValueError("an index of another format")
        return cls(tree, plan, records, bool(legacy))


def _share_evidence(records: dict[str, RecordRow]) -> None:
    """Make equal evidence one object (most steps have the same "completed" evidence):
    marshal then stores it once, and readers format it once."""
    shared: dict[tuple[EvidenceRow, ...], tuple[EvidenceRow, ...]] = {}
    for name, row in records.items():
        evidence = shared.setdefault(row[5], row[5])
        if evidence is not row[5]:
            records[name] = (*row[:5], evidence, *row[6:])


def _plan_number(path: str) -> int:
    stem = path.rsplit("/", 1)[1].removesuffix(".json")
    return int(stem) if stem.isdigit() else 0


def _step_name(path: str) -> str:
    return path.rsplit("/", 1)[1].removesuffix(".json")


def read_index(store: GitStore, run: str, commit: Snapshot, load: Loader) -> StepIndex:
    """The step index of `commit`'s tree (a run's latest), from the cached index when
    there is one, else built from the tree; saved for next time when it is complete."""
    tree = commit.tree
    if tree is None:
        return StepIndex()
    path = store.cache_path(run, "index")
    try:
        index = StepIndex.loads(path.read_bytes())
        changed, deleted = store.tree_changes(index.tree or "", tree, _in_index)
    except Exception:  # derived data: whatever is wrong with it only means a rebuild
        index = StepIndex()
        try:
            changed, deleted = store.tree_files(tree, _in_index), []
        except store.read_errors() as exc:
            raise store.damaged(run, commit.commit or "", exc) from exc
    if index.tree == tree:
        return index
    index.tree = tree
    index.update(changed, deleted, load)
    if index.complete:
        write_derived(path, index.dumps())
    return index


class PlanSteps(Sequence[PlannedStep]):
    """A run's plan as models, each built from its row when it is first asked for."""

    def __init__(self, rows: list[PlanRow]):
        self.rows = rows
        self._built: dict[int, PlannedStep] = {}

    def __len__(self) -> int:
        return len(self.rows)

    @overload
    def __getitem__(self, index: int) -> PlannedStep: ...

    @overload
    def __getitem__(self, index: slice) -> list[PlannedStep]: ...

    def __getitem__(self, index: int | slice) -> PlannedStep | list[PlannedStep]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self.rows)))]
        if index < 0:
            index += len(self.rows)
        step = self._built.get(index)
        if step is None:
            step = self._built[index] = planned_step(index + 1, self.rows[index])
        return step

    def __setitem__(self, index: int, step: PlannedStep) -> None:
        self.rows[index] = plan_row(step)
        self._built[index] = step

    def append(self, step: PlannedStep) -> None:
        self.rows.append(plan_row(step))
        self._built[len(self.rows) - 1] = step


class RecordBook(Mapping[str, StepRecord]):
    """A run's step records by name: rows for all of them, and each record validated
    from the store (by `read`) when it is first asked for."""

    def __init__(self, rows: dict[str, RecordRow], read: Callable[[str], StepRecord | None]):
        self.rows = rows
        self._read = read
        self._built: dict[str, StepRecord] = {}

    def __getitem__(self, name: str) -> StepRecord:
        record = self._built.get(name)
        if record is None:
            if name not in self.rows:
                raise KeyError(name)
            record = self._read(name)
            if record is None:
                raise KeyError(name)
            self._built[name] = record
        return record

    def __contains__(self, name: object) -> bool:
        return name in self.rows

    def __iter__(self) -> Iterator[str]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __setitem__(self, name: str, record: StepRecord) -> None:
        self.rows[name] = record_row(record)
        self._built[name] = record
