"""A run's step index: its plan and step records reduced to columns of plain values.

Opening a run of 100,000 steps cannot afford a validated model per record, so
the plan and the step records are kept as lists of names, numbers and shared
tuples: what status, resume and the readers need, with the models built only
for the steps that are reached. The index is derived data. It is built from
the records in the run's tree (each one validated by its model), kept in
`<git dir>/stepstone/cache/<run>.index` (marshal: lists of strings and numbers
load ten times faster than a tuple per record) with the tree id it describes,
and brought up to date by a tree diff, which reads only the records that
changed. A missing, stale or damaged index only means it is rebuilt; an index
with a corrupt record in it is never saved.
"""

from __future__ import annotations

import marshal
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from ..model.models import PlannedStep, StepRecord
from ..store import CACHE_AFTER, GitStore, Snapshot
from ..values import trust
from . import dependencies

FORMAT = 6  # bump when the layout changes: an index of another format is rebuilt
INDEXED = ("plan", "steps")  # the top folders whose records the index holds

# (check, kind, value, detail)
EvidenceRow = tuple[str, str, Any, str]
# a plan entry besides its name: (checks, inputs, outputs, source_hash, renamed_from)
PlanExtra = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], "str | None", tuple[str, ...]]
NO_EXTRA: PlanExtra = ((), (), (), None, ())
# (name, checks, inputs, outputs, source_hash, renamed_from)
PlanRow = tuple[
    str, tuple[str, ...], tuple[str, ...], tuple[str, ...], "str | None", tuple[str, ...]
]
# what many step records share: (status, checks, source_hash, error, evidence, world,
# follows, rests_on, wrote), where `world` says that the record must be re-checked against the world
# (evidence or inputs to re-check, or a pickled output this user did not write: it may
# not load here), `follows` that it is a cell's record with inputs (one that may follow
# its inputs, see `dependencies.following`), `rests_on` the unknowns it rests on, and
# `wrote` the files its code opened for writing
Shape = tuple[
    str,
    tuple[str, ...],
    "str | None",
    "str | None",
    tuple[EvidenceRow, ...],
    bool,
    bool,
    tuple[str, ...],
    tuple[str, ...],
]

Loader = Callable[[type[Any], dict[str, bytes]], list[Any]]


def evidence_rows(record: StepRecord) -> tuple[EvidenceRow, ...]:
    """A record's evidence as rows."""
    return tuple((e.check, e.kind, e.value, e.detail) for e in record.evidence)


def plan_extra(step: PlannedStep) -> PlanExtra:
    """What a plan entry holds besides its number and name."""
    return (step.checks, step.inputs, step.outputs, step.source_hash, step.renamed_from)


def plan_row(step: PlannedStep) -> PlanRow:
    """A plan entry without its number."""
    return (step.name, *plan_extra(step))


class RecordTable:
    """Step records as columns (name, seq, finished time, shape) plus the table of
    distinct shapes; a removed record leaves an empty slot until the next save."""

    def __init__(
        self,
        names: list[str | None] | None = None,
        seqs: list[int] | None = None,
        finished: list[str] | None = None,
        kinds: list[int] | None = None,
        shapes: list[Shape] | None = None,
    ):
        self.names: list[str | None] = names if names is not None else []
        self.seqs = seqs if seqs is not None else []
        self.finished = finished if finished is not None else []
        self.kinds = kinds if kinds is not None else []  # index into `shapes`
        self.shapes = shapes if shapes is not None else []
        if not len(self.names) == len(self.seqs) == len(self.finished) == len(self.kinds):
            raise ValueError("columns of different lengths")
        self._shape_ids = {shape: i for i, shape in enumerate(self.shapes)}
        self._checked_files: set[str] = set()
        self._checked_upto = 0  # shapes before it are in `_checked_files`
        self._writers: dict[str, set[str]] | None = None  # built on first use
        self._shared: set[str] = set()  # the paths of `_writers` with more than one writer
        self.at: dict[str | None, int] = dict(zip(self.names, range(len(self.names)), strict=True))
        self.at.pop(None, None)

    def put(self, record: StepRecord) -> None:
        """Add or replace `record`'s row."""
        evidence = evidence_rows(record)
        shape: Shape = (
            record.status,
            record.checks,
            record.source_hash,
            record.error,
            evidence,
            any(kind != "completed" for _, kind, _, _ in evidence)
            or bool(record.inputs)
            or record.rerun is not None
            or any(
                art.format == "pickle" and not trust.signed_here(art.sha256, art.mark)
                for art in (*record.outputs.values(), *record.kernel.values())
            ),
            record.inputs is not None and record.source_hash is not None,
            dependencies.rests_on(record.inputs),
            record.wrote,
        )
        kind = self._shape_ids.get(shape)
        if kind is None:
            kind = self._shape_ids[shape] = len(self.shapes)
            self.shapes.append(shape)
        self._wrote(record.name, record.wrote)
        at = self.at.get(record.name)
        if at is None:
            self.at[record.name] = len(self.names)
            self.names.append(record.name)
            self.seqs.append(record.seq)
            self.finished.append(record.finished)
            self.kinds.append(kind)
        else:
            self.seqs[at] = record.seq
            self.finished[at] = record.finished
            self.kinds[at] = kind

    def discard(self, name: str) -> None:
        self._wrote(name, ())
        at = self.at.pop(name, None)
        if at is not None:
            self.names[at] = None

    def writers(self) -> dict[str, set[str]]:
        """The steps whose code wrote each file (`StepRecord.wrote`), by path: built once,
        then kept up to date as records are put."""
        if self._writers is None:
            self._writers = {}
            for name, at in self.at.items():
                if name is not None:
                    for path in self.shapes[self.kinds[at]][8]:
                        self._writers.setdefault(path, set()).add(name)
            self._shared = {p for p, w in self._writers.items() if len(w) > 1}
        return self._writers

    def shared_writes(self) -> set[str]:
        """The files more than one step wrote (a header, then rows appended)."""
        self.writers()
        return self._shared

    def _wrote(self, name: str, wrote: tuple[str, ...]) -> None:
        """`name`'s record now says it wrote `wrote`."""
        if self._writers is None:
            return
        at = self.at.get(name)
        before = self.shapes[self.kinds[at]][8] if at is not None else ()
        for path in set(before) - set(wrote):
            self._writers.get(path, set()).discard(name)
            if len(self._writers.get(path, ())) < 2:
                self._shared.discard(path)
        for path in wrote:
            self._writers.setdefault(path, set()).add(name)
            if len(self._writers[path]) > 1:
                self._shared.add(path)

    def plain_kinds(self) -> list[bool]:
        """For each shape: confirmed, recorded without checks, its evidence only
        "completed" (nothing in the world to re-check)."""
        return [s[0] == "confirmed" and not s[1] and not s[5] for s in self.shapes]

    def checked_files(self) -> set[str]:
        """The paths the `file:` (or `keep:`) checks of any shape name: read from the
        shapes added since the last call only (a cell's shape is its own, so there are
        as many as records)."""
        for shape in self.shapes[self._checked_upto :]:
            self._checked_files.update(filter(None, map(dependencies.checked_file, shape[1])))
        self._checked_upto = len(self.shapes)
        return self._checked_files

    def cells_with_inputs(self) -> set[str]:
        """The steps whose records are a cell's and say what it read: the only ones
        that may follow their inputs (`dependencies.following`)."""
        follows = {kind for kind, shape in enumerate(self.shapes) if shape[6]}
        if not follows:
            return set()
        return {
            name for name, at in self.at.items() if name is not None and self.kinds[at] in follows
        }

    def resting_on(self) -> dict[str, tuple[str, ...]]:
        """The steps whose results rest on unknowns, with those unknowns' ids."""
        rest = {kind: shape[7] for kind, shape in enumerate(self.shapes) if shape[7]}
        if not rest:
            return {}
        return {
            name: rest[self.kinds[at]]
            for name, at in self.at.items()
            if name is not None and self.kinds[at] in rest
        }

    def status_of(self, name: str) -> str | None:
        """The status of `name`'s record, or None when it has none."""
        at = self.at.get(name)
        return None if at is None else self.shapes[self.kinds[at]][0]

    def __len__(self) -> int:
        return len(self.at)

    def __contains__(self, name: object) -> bool:
        return name in self.at

    def __iter__(self) -> Iterator[str]:
        return (name for name in self.at if name is not None)

    def columns(self) -> tuple[list[str | None], list[int], list[str], list[int], list[Shape]]:
        """The columns without empty slots, and only the shapes still in use."""
        live = sorted(self.at.values())
        used = sorted({self.kinds[at] for at in live})
        renumber = {old: new for new, old in enumerate(used)}
        return (
            [self.names[at] for at in live],
            [self.seqs[at] for at in live],
            [self.finished[at] for at in live],
            [renumber[self.kinds[at]] for at in live],
            [self.shapes[k] for k in used],
        )


@dataclass
class StepIndex:
    """The plan (names by number, and what else the non-default entries hold) and the
    step records of one tree."""

    tree: str | None = None
    plan: list[str | None] = field(default_factory=list)  # by number - 1; None: missing
    extras: dict[int, PlanExtra] = field(default_factory=dict)  # by number
    records: RecordTable = field(default_factory=RecordTable)
    legacy_layout: bool = False  # step records at steps/ab/<name>.json (first layout, still read)
    complete: bool = True  # every record in the tree is in it: none was corrupt

    def update(self, changed: dict[str, bytes], deleted: list[str], load: Loader) -> None:
        """Apply a tree diff: added or changed record files and removed paths. `load`
        validates a folder's records (and notes or raises on a corrupt one)."""
        for path in (*deleted, *changed):  # a changed record that is now corrupt is gone
            if path.startswith("plan/"):
                self._set_planned(_plan_number(path), None)
            elif path.startswith("steps/"):
                self.records.discard(_step_name(path))
        plan_files = {p: d for p, d in changed.items() if p.startswith("plan/")}
        step_files = {p: d for p, d in changed.items() if p.startswith("steps/")}
        planned: list[PlannedStep] = load(PlannedStep, plan_files)
        records: list[StepRecord] = load(StepRecord, step_files)
        if len(planned) != len(plan_files) or len(records) != len(step_files):
            self.complete = False
        for step in planned:
            self._set_planned(step.number, step)
        while self.plan and self.plan[-1] is None:
            self.plan.pop()
        for record in records:
            self.records.put(record)
        if step_files and not self.legacy_layout:
            self.legacy_layout = any(path.count("/") == 2 for path in step_files)

    def _set_planned(self, number: int, step: PlannedStep | None) -> None:
        if number < 1:
            return
        if step is None:
            if number <= len(self.plan):
                self.plan[number - 1] = None
            self.extras.pop(number, None)
            return
        self.plan.extend([None] * (number - len(self.plan)))
        self.plan[number - 1] = step.name
        extra = plan_extra(step)
        if extra != NO_EXTRA:
            self.extras[number] = extra
        else:
            self.extras.pop(number, None)

    def dumps(self) -> bytes:
        names = {name: name for name in self.plan}  # one string for a name in both
        columns = self.records.columns()
        shared = [names.get(name, name) for name in columns[0]]
        return marshal.dumps(
            (
                (FORMAT, trust.user_tag()),
                self.tree,
                self.plan,
                self.extras,
                shared,
                *columns[1:],
                self.legacy_layout,
            )
        )

    @classmethod
    def loads(cls, data: bytes) -> StepIndex:
        fmt, tree, plan, extras, *columns, legacy = marshal.loads(data)
        if fmt != (FORMAT, trust.user_tag()):  # the rows say which pickles are one's own
            raise ValueError("an index of another format, or of another user")
        if not isinstance(plan, list) or not isinstance(extras, dict):
            raise ValueError("an index of another format")
        return cls(tree, plan, extras, RecordTable(*columns), bool(legacy))


def plain_prefix(
    names: list[str], extras: dict[int, PlanExtra], table: RecordTable
) -> tuple[list[int], list[int]]:
    """The record slots and shapes of the leading plan steps that are plain: planned
    without checks or source, recorded as confirmed without checks and with only
    "completed" evidence, each recorded after the one before it (seq not falling).
    Such steps are verified with nothing to re-check; the lists are made with `map`,
    not a Python loop, as a long run is mostly such steps."""
    limit = min(min(extras, default=len(names) + 1) - 1, len(names))
    found = list(map(table.at.get, names[:limit]))
    slots: list[int] = found[: found.index(None)] if None in found else found  # type: ignore[assignment]
    plain = table.plain_kinds()
    kinds = list(map(table.kinds.__getitem__, slots))
    fits = list(map(plain.__getitem__, kinds))
    count = fits.index(False) if False in fits else len(fits)
    seqs = list(map(table.seqs.__getitem__, slots[:count]))
    rising = list(map(operator.le, seqs, seqs[1:]))
    if False in rising:
        count = rising.index(False) + 1
    return slots[:count], kinds[:count]


def _plan_number(path: str) -> int:
    stem = path.rsplit("/", 1)[1].removesuffix(".json")
    return int(stem) if stem.isdigit() else 0


def _step_name(path: str) -> str:
    return path.rsplit("/", 1)[1].removesuffix(".json")


def _in_index(top: str) -> bool:
    return top in INDEXED


def read_index(
    store: GitStore, run: str, commit: Snapshot, load: Loader, *, cached: bool = True
) -> StepIndex:
    """The step index of `commit`'s tree (a run's latest): from the saved index when
    there is one (and `cached`), else built from the tree by reading every record;
    saved for next time when it is complete and large enough to be worth it."""
    tree = commit.tree
    if tree is None:
        return StepIndex()
    found = store.catch_up(run, "index", commit, _in_index, _decode, cached=cached)
    index = found.kept if found.kept is not None else StepIndex()
    if index.tree == tree:
        return index
    index.tree = tree
    index.update(found.changed, found.deleted, load)
    if index.complete:
        save_index(store, run, index)
    return index


def _decode(data: bytes) -> tuple[str, StepIndex]:
    index = StepIndex.loads(data)
    return index.tree or "", index


def save_index(store: GitStore, run: str, index: StepIndex) -> None:
    """Keep `index` (complete, and describing `index.tree`) for the next open. A small
    run is not worth it: reading all its records also finds a damaged one at once."""
    if len(index.plan) + len(index.records) >= CACHE_AFTER:
        store.derived.save(run, "index", index.dumps())


class PlanSteps(Sequence[PlannedStep]):
    """A run's plan as models, each built when it is first asked for from its name
    and (for the entries that have checks, inputs, outputs or a source) its extra."""

    def __init__(self, names: list[str], extras: dict[int, PlanExtra]):
        self.names = names
        self.extras = extras
        self._built: dict[int, PlannedStep] = {}

    def __len__(self) -> int:
        return len(self.names)

    @overload
    def __getitem__(self, index: int) -> PlannedStep: ...

    @overload
    def __getitem__(self, index: slice) -> list[PlannedStep]: ...

    def __getitem__(self, index: int | slice) -> PlannedStep | list[PlannedStep]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self.names)))]
        if index < 0:
            index += len(self.names)
        step = self._built.get(index)
        if step is None:
            checks, inputs, outputs, source, renamed_from = self.extras.get(index + 1, NO_EXTRA)
            step = self._built[index] = PlannedStep(
                number=index + 1,
                name=self.names[index],
                checks=checks,
                inputs=inputs,
                outputs=outputs,
                source_hash=source,
                renamed_from=renamed_from,
            )
        return step

    def row(self, index: int) -> PlanRow:
        """Entry `index` (from 0) without its number."""
        return (self.names[index], *self.extras.get(index + 1, NO_EXTRA))

    def __setitem__(self, index: int, step: PlannedStep) -> None:
        self.names[index] = step.name
        extra = plan_extra(step)
        if extra != NO_EXTRA:
            self.extras[index + 1] = extra
        else:
            self.extras.pop(index + 1, None)
        self._built[index] = step

    def append(self, step: PlannedStep) -> None:
        self.names.append(step.name)
        self[len(self.names) - 1] = step


class RecordBook(Mapping[str, StepRecord]):
    """A run's step records by name: the table of rows for all of them, and each record
    validated from the store (by `read`) when it is first asked for."""

    def __init__(self, table: RecordTable, read: Callable[[str], StepRecord | None]):
        self.table = table
        self._read = read
        self._built: dict[str, StepRecord] = {}

    def __getitem__(self, name: str) -> StepRecord:
        record = self._built.get(name)
        if record is None:
            if name not in self.table:
                raise KeyError(name)
            record = self._read(name)
            if record is None:
                raise KeyError(name)
            self._built[name] = record
        return record

    def __contains__(self, name: object) -> bool:
        return name in self.table

    def __iter__(self) -> Iterator[str]:
        return iter(self.table)

    def __len__(self) -> int:
        return len(self.table)

    def __setitem__(self, name: str, record: StepRecord) -> None:
        self.table.put(record)
        self._built[name] = record

    def __delitem__(self, name: str) -> None:
        self.table.discard(name)
        self._built.pop(name, None)
