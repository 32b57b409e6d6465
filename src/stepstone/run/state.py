"""What a run holds, read from one of its commits: its head file, plan, step records,
decisions, unknowns and effects. Reading never changes anything; the `Ledger` is
the one writer and keeps this state in step with each commit it makes.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ..effects.effectbook import EffectBook
from ..effects.effectkeys import derive_key, key_before
from ..errors import RecordError, SchemaTooNew, StepstoneError
from ..model import models
from ..model.bulk import collector_paused
from ..model.message import CommitMessage
from ..model.models import (
    Decision,
    EffectRecord,
    Lineage,
    PlannedStep,
    RunInfo,
    StepRecord,
    Unknown,
    load,
    now,
)
from ..rules import dependencies
from ..rules.index import PlanExtra, PlanSteps, RecordBook, read_index
from ..store import GitStore, Snapshot
from .layout import RUN_INFO, plan_path, step_path

_LOADED: dict[tuple[type, bytes], models.Record] = {}  # records read, by their bytes
_LOADED_MOST = 12_000


class RunState:
    """A run as read from a commit (`snap`). A reader (`tolerant`) notes a corrupt
    record in `corrupt` and goes on; a driver stops at it."""

    def __init__(self, store: GitStore, run: str, *, tolerant: bool) -> None:
        self.store = store
        self.id = run
        self.tolerant = tolerant
        self.corrupt: list[str] = []
        self.info_changed = False  # the head file changed; the next commit writes it
        self._identities: set[str] | None = None
        self._earlier: dict[str, list[str]] | None = None  # earlier name -> steps now

    # -- reading ----------------------------------------------------------------

    def read(self, snap: Snapshot, *, cached: bool) -> None:
        """Load everything from `snap` (its indexed folders through the step index)."""
        self.snap = snap
        files = snap.files
        stamp = now()
        raw_info = files.get(RUN_INFO)
        info = self.load(RunInfo, RUN_INFO, raw_info) if raw_info is not None else None
        self.info = info or RunInfo(run=self.id, created=stamp, updated=stamp)
        groups: dict[str, dict[str, bytes]] = {}
        for path, data in files.items():
            groups.setdefault(path.split("/", 1)[0], {})[path] = data
        with collector_paused():
            index = read_index(self.store, self.id, snap, self.load_all, cached=cached)
        self.index_saved_at = snap.tree  # the tree the saved index describes
        self.index_trusted = index.complete  # the rows follow every commit of ours
        self.legacy_layout = index.legacy_layout
        self.records = RecordBook(index.records, self.read_record)
        self.decisions: dict[str, Decision] = {
            d.key: d for d in self.load_all(Decision, groups.get("decisions", {}))
        }
        self.unknowns: dict[str, Unknown] = {
            u.id: u for u in self.load_all(Unknown, groups.get("unknowns", {}))
        }
        self.effect_book = EffectBook(self.load_all(EffectRecord, groups.get("effects", {})))
        self._read_plan(index.plan, index.extras)
        self.seq = max(self.info.seq, CommitMessage.parse(snap.message).seq)

    def _read_plan(self, names: list[str | None], extras: dict[int, PlanExtra]) -> None:
        problems = []
        if None in names:
            missing = names.index(None) + 1
            problems.append((plan_path(missing), f"plan has no step {missing}"))
            kept = [n for n, name in enumerate(names, start=1) if name is not None]
            extras = {new: extras[old] for new, old in enumerate(kept, 1) if old in extras}
            names = [names[old - 1] for old in kept]
        self.set_steps(names, extras)  # type: ignore[arg-type]  # no None left
        if len(self.numbers) != len(names):
            problems.append(("plan/", "two plan steps share a name"))
        for path, problem in problems:
            self.problem(RecordError(self.where(path), problem))

    def problem(self, error: RecordError) -> None:
        """A driver stops at a corrupt record; a reader notes it and goes on."""
        if not self.tolerant:
            raise error
        self.corrupt.append(str(error))

    def where(self, path: str) -> str:
        """`path` named with the commit it was read from, for error messages."""
        commit = (self.snap.commit or "")[:10]
        return f"{path} in commit {commit} of {self.store.path}"

    def load(self, cls: type[models.R], path: str, data: bytes) -> models.R | None:
        """Load one record (None when it is corrupt and this is a reader). A record read
        before in this process, byte for byte, is the same (frozen) object: a long-lived
        reader opening the run anew after each commit validates only what changed."""
        kept = _LOADED.get((cls, data))
        if kept is not None:
            return kept  # type: ignore[return-value]
        try:
            found = load(cls, data, path, where=self.where)
        except SchemaTooNew:
            raise
        except RecordError as exc:
            self.problem(exc)
            return None
        if len(_LOADED) >= _LOADED_MOST:
            _LOADED.clear()
        _LOADED[(cls, data)] = found
        return found

    def load_all(self, cls: type[models.R], files: dict[str, bytes]) -> list[models.R]:
        """Load a folder's records in one pass; file by file when one of them is bad."""
        loaded = models.load_many(cls, list(files.values()))
        if loaded is not None:
            return loaded
        return [r for path, data in files.items() if (r := self.load(cls, path, data))]

    def read_record(self, name: str) -> StepRecord | None:
        """Step `name`'s record, read from the run's latest tree and validated."""
        path = step_path(name, legacy=self.legacy_layout)
        data = self.store.blob(self.snap.tree, path) if self.snap.tree else None
        return None if data is None else self.load(StepRecord, path, data)

    def blob(self, path: str) -> bytes | None:
        """A file of the run's latest tree, or None."""
        return self.store.blob(self.snap.tree, path) if self.snap.tree else None

    # -- the plan ---------------------------------------------------------------

    def set_steps(self, names: list[str], extras: dict[int, PlanExtra]) -> None:
        """Replace the plan's steps (names in order, and their extras by number)."""
        self._identities = self._earlier = None
        self.effect_book.plan_changed()
        self.steps = PlanSteps(names, extras)
        self.numbers = dict(zip(names, range(1, len(names) + 1), strict=True))

    def put_step(self, step: PlannedStep) -> None:
        """Add step `step` at the end of the plan, or replace the step of its number."""
        if step.number > len(self.steps):
            self.steps.append(step)
            if step.renamed_from:
                self._earlier = None
        else:
            before = self.steps[step.number - 1]
            if before.identity != step.identity:
                self._identities = None  # renamed: its old identity is no longer the plan's
            if (before.name, before.renamed_from) != (step.name, step.renamed_from):
                self._earlier = None
            if before.name != step.name:  # renamed in place
                self.numbers.pop(before.name, None)
            self.steps[step.number - 1] = step
        if self._identities is not None:
            self._identities.add(step.identity)
        self.numbers[step.name] = step.number

    @property
    def plan(self) -> models.Plan:
        """The committed plan."""
        return models.Plan(run=self.id, mode=self.info.plan_mode, steps=tuple(self.steps))

    def planned(self, name: str) -> PlannedStep | None:
        """Step `name` of the plan, or None."""
        number = self.numbers.get(name)
        return None if number is None else self.steps[number - 1]

    def identity_of(self, name: str) -> str:
        """The name step `name`'s effects are keyed by (its first, across renames)."""
        planned = self.planned(name)
        return planned.identity if planned is not None else name

    def renamed(self) -> dict[str, str]:
        """Name -> identity for the plan's steps whose effects are keyed by another name."""
        names, extras = self.steps.names, self.steps.extras
        return {names[number - 1]: was[0] for number, (*_, was) in extras.items() if was}

    def now_named(self, name: str, seen: str | None = None) -> str:
        """What the plan calls the step once named `name` (`name` itself if planned).
        When two steps answer to it (one renamed away from it, a new one that took it),
        the one whose results are `seen` (the fingerprint a reader recorded) is meant."""
        if self._earlier is None:
            names, self._earlier = self.steps.names, {}
            for number, (*_, was) in self.steps.extras.items():
                for earlier in dict.fromkeys(was):
                    self._earlier.setdefault(earlier, []).append(names[number - 1])
        found = [name] if name in self.numbers else []
        found += self._earlier.get(name, ())
        if len(found) > 1 and seen is not None:
            for candidate in found:
                record = self.records.get(candidate)
                if record is not None and dependencies.fingerprint(record) == seen:
                    return candidate
        return found[0] if found else name

    def inputs_now(self, inputs: dict[str, str | None]) -> dict[str, str | None]:
        """A record's inputs with each step it read named as the plan names it now."""
        step = dependencies.STEP
        if not any(key.startswith(step) for key in inputs):
            return inputs
        return {
            f"{step}{self.now_named(key[len(step) :], seen)}" if key.startswith(step) else key: seen
            for key, seen in inputs.items()
        }

    def steps_read(self, inputs: dict[str, str | None] | None) -> set[str]:
        """The steps a record's inputs say it used, as the plan names them now."""
        step = dependencies.STEP
        return {
            self.now_named(key[len(step) :], seen)
            for key, seen in (inputs or {}).items()
            if key.startswith(step)
        }

    def lineage_of(self, identity: str) -> tuple[str, str]:
        """(run, uid) that keyed the effects of the step keyed by `identity` before
        2026-12: this run's own, or for a fork's steps up to its fork point, the run they
        came from (`key_before`)."""
        for line in self.info.inherited:
            if identity in line.steps:
                return line.run, line.uid
        return self.id, self.info.uid

    def lineages_of(self, identities: Iterable[str]) -> tuple[Lineage, ...]:
        """The lineages that keyed the effects of the steps keyed by `identities` before
        2026-12, as a fork keeps them (`lineage_of`)."""
        lines: dict[tuple[str, str], list[str]] = {}
        for identity in sorted(identities):
            lines.setdefault(self.lineage_of(identity), []).append(identity)
        return tuple(Lineage(run=r, uid=u, steps=tuple(ids)) for (r, u), ids in lines.items())

    @property
    def lineage(self) -> str:
        """What this run's effect keys are made from: shared by the runs of its lineage
        (copies, forks, parameter sets of one notebook), another for any other run."""
        return lineage_of(self.info)

    def effect_key(self, name: str, payload: str | None) -> str:
        """The idempotency key of effect `name` with payload fingerprint `payload`."""
        return derive_key(self.lineage, name, payload)

    def keys_before(self, identity: str, name: str) -> list[str]:
        """The key an effect `name` of the step keyed by `identity` had before 2026-12."""
        run, uid = self.lineage_of(identity)
        return [key_before(run, identity, name, uid)]

    def identities(self) -> set[str]:
        """The names the plan's steps key their effects by."""
        if self._identities is None:
            renamed = self.renamed()
            self._identities = {renamed.get(name, name) for name in self.steps.names}
        return self._identities

    def step_label(self, name: str) -> str:
        """`N name` for a step of the plan (as commit trailers write it), else `name`."""
        number = self.numbers.get(name)
        if number is None:  # an effect's step, named by its identity
            step = next((s for s, identity in self.renamed().items() if identity == name), None)
            number = self.numbers.get(step) if step is not None else None
        return f"{number} {name}" if number is not None else name

    def apply(self, record: models.StepRecord | Decision | Unknown | EffectRecord) -> None:
        """Take in a record the ledger just committed."""
        if isinstance(record, models.StepRecord):
            self.records[record.name] = record
        elif isinstance(record, Decision):
            self.decisions[record.key] = record
        elif isinstance(record, Unknown):
            self.unknowns[record.id] = record
        else:
            self.effect_book.put(record)

    # -- the head file ----------------------------------------------------------

    def note_info(self, **changes: object) -> None:
        """Change the run's head file; it is written with the next commit."""
        if any(getattr(self.info, key) != value for key, value in changes.items()):
            self.info = self.info.model_copy(update=changes)
            self.info_changed = True

    def recorded_workdir(self) -> Path | None:
        """The run's recorded work folder, if it exists on this machine."""
        if not self.info.workdir:
            return None
        found = (self.store.path.parent / self.info.workdir).resolve()
        return found if found.is_dir() else None

    def relative_to_store(self, path: Path) -> str:
        """`path` relative to the store's folder, as the head file keeps it."""
        return Path(os.path.relpath(path.resolve(), self.store.path.parent.resolve())).as_posix()


def lineage_of(info: RunInfo) -> str:
    """The lineage a run's head file says its effects are keyed in (see `RunInfo.lineage`)."""
    if info.lineage:
        return info.lineage
    if info.inherited:  # a fork made before lineages: its source's
        first = info.inherited[0]
        return f"{first.run}:{first.uid}" if first.uid else first.run
    return f"{info.run}:{info.uid}" if info.uid else info.run


def head_info(store: GitStore, run: str) -> RunInfo | None:
    """A run's head file at its tip, or None when it has none or it cannot be read."""
    try:
        head = store.reader.head(run)
        data = store.blob(head.tree, RUN_INFO) if head.tree else None
        return load(RunInfo, data, RUN_INFO) if data is not None else None
    except StepstoneError:
        return None
