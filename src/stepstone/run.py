"""A run: its plan, its step records, decisions and unknowns, driven by one process.

Opening a run reads its latest commit (never a work tree), verifies the recorded
evidence against the real state and says what to do next. Each completed step
is one commit; a step is skipped only while its evidence still verifies.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import shlex
import sys
import threading
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import artifacts, checks, effects, models, names, trust
from .bulk import collector_paused
from .effectbook import MAYBE_HAPPENED, EffectBook, state_rank
from .errors import (
    CheckFailed,
    DecisionConflict,
    Diverged,
    InvalidInput,
    PlanError,
    RecordError,
    RunFinished,
    RunNotFound,
    SchemaTooNew,
    StepOrderError,
    StepstoneError,
    StepstoneWarning,
    StoreError,
)
from .index import (
    INDEXED,
    NO_EXTRA,
    PlanExtra,
    PlanRow,
    PlanSteps,
    RecordBook,
    StepIndex,
    plan_extra,
    plan_row,
    read_index,
    save_index,
)
from .lock import RunLock
from .models import (
    Decision,
    EffectRecord,
    PlannedStep,
    RunInfo,
    StepRecord,
    Unknown,
    dump,
    load,
    now,
)
from .redaction import error_text, redact
from .status import RunStatus, StepState, StepStatus
from .store import (
    DEFAULT_STORE,
    READ_ERRORS,
    GitStore,
    holder_identity,
    parse_trailers,
    resolve_store_path,
)
from .verdicts import step_states

if TYPE_CHECKING:
    from .remote import BackgroundPusher, LeaseKeeper

_active: Run | None = None
OFFLINE_ENV = "STEPSTONE_OFFLINE"  # "1": write effects without the lease of a remote
_stepping: ContextVar[Run | None] = ContextVar("stepstone_stepping", default=None)
_SAVE_INDEX_EVERY = 10_000  # commits between saves of the step index by a driver
RETURN = "return"  # the output that holds a Python-API step's return value


def active_run() -> Run:
    """The run whose step is running in this context, else the run this process drives
    now (opened last and not closed)."""
    stepping = _stepping.get()
    if stepping is not None:
        return stepping
    if _active is None:
        raise StepstoneError(
            "no run is open in this process: call stepstone.open_run(...) or run %resume first"
        )
    return _active


def run_lock(store: GitStore, run: str, holder: str) -> RunLock:
    """The lock that lets one process at a time drive `run` in `store`."""
    return RunLock(store.git_dir / "stepstone" / "locks" / f"{run}.lock", run, holder)


@contextmanager
def holding(store: GitStore, run: str) -> Iterator[None]:
    """Hold `run` (as its driver would) without opening it: for moving its ref."""
    lock = run_lock(store, names.run_id(run), holder_identity())
    lock.acquire()
    try:
        store.clear_stale_ref_locks(run)
        yield
    finally:
        lock.release()


def plan_path(number: int) -> str:
    """Where the plan entry of step `number` lives in a run's tree."""
    key = f"{number:08d}"
    return f"plan/{key[:4]}/{key[4:6]}/{key}.json"


def step_path(name: str, *, legacy: bool = False) -> str:
    """Where the record of step `name` lives: `steps/a/b/c/<name>.json` by the sha1 of
    the name, three levels of 16 folders. A commit rewrites every tree on the path, so
    small trees keep a step's commit small (at 100,000 steps about 80 entries in all,
    where 256 folders of 390 records each were about 650). Runs begun with that older
    layout (`steps/ab/<name>.json`, `legacy`) keep it."""
    digest = hashlib.sha1(name.encode()).hexdigest()
    if legacy:
        return f"steps/{digest[:2]}/{name}.json"
    return f"steps/{digest[0]}/{digest[1]}/{digest[2]}/{name}.json"


def source_hash(source: str) -> str:
    """The hash of a step's source, used to notice an edited cell."""
    return hashlib.sha256(source.strip().encode()).hexdigest()


@dataclass
class StepStart:
    """The outcome of `Run.begin`: skip the step (with restored values) or run it."""

    planned: PlannedStep
    skip: bool
    reason: str
    record: StepRecord | None = None
    values: dict[str, Any] = field(default_factory=dict)
    started: str = field(default_factory=now)
    check_specs: tuple[checks.CheckSpec, ...] = ()


@dataclass(frozen=True)
class StepResult:
    """What `Run.step` did: ran or skipped the step, and the step's return value."""

    name: str
    skipped: bool
    value: Any
    record: StepRecord


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


class Run:
    """One run in a store. Open it with `open_run`; close it (or use `with`) when done."""

    def __init__(
        self,
        store: GitStore,
        run_id: str,
        *,
        workdir: Path | None,
        drive: bool = True,
        create: bool = True,
        steal: str | None = None,
        cached: bool = True,
        at: str | None = None,
    ) -> None:
        self.store = store
        self.id = names.run_id(run_id)
        self._asked_workdir = workdir
        self.workdir = workdir or Path.cwd()
        self.holder = holder_identity()
        self.notes: list[str] = []
        self._lock = run_lock(store, self.id, self.holder)
        self._commits_since_save = 0
        self._state: dict[str, StepState] = {}
        self._last_verified = 0  # no step after this number is verified
        self._current_step: str | None = None
        # One step at a time, begun and ended by one thread; commits are serialised, so
        # a step's effects may be performed from several threads at once.
        self._guard = threading.RLock()
        self._claim: tuple[int, str] | None = None  # (thread, step) of the step under way
        self._stepped: set[str] = set()  # steps `step` completed or skipped in this process
        self._lease: LeaseKeeper | None = None
        self._remote = False
        self._pusher: BackgroundPusher | None = None
        self._tolerant = not drive
        self.corrupt: list[str] = []
        self._reasons: dict[str, str] = {}
        self._run_commands = drive
        self._not_rerun: list[str] = []
        self._info_changed = False
        if drive:
            self._lock.acquire()
        try:
            if drive:
                self._recover_locks()
                self._join_remote(steal)
            self._cached = cached
            self._snap = store.read(self.id, skip=("artifacts", *INDEXED), cached=cached, at=at)
            if self._snap.commit is None:
                traces = store.traces(self.id)
                if traces:  # never start afresh a run whose history is damaged or hidden
                    raise StoreError(
                        str(store.path),
                        f"run {self.id!r} has history here ({'; '.join(traces)}) but no "
                        f"readable ref, so it is not started afresh. `stepstone repair --run "
                        f"{self.id}` points it at its newest readable commit",
                    )
                if not (drive and create):
                    raise RunNotFound(self.id, str(store.path), store.runs())
            self._parse()
            lost = (
                rolled_back_effects(store, self._snap.commit) if drive and self._snap.commit else []
            )
            if lost:
                raise StoreError(
                    str(store.path),
                    f"the tip of run {self.id!r} was made by hand and sets back effect records "
                    f"({'; '.join(lost[:3])}), so their effects would be performed again. "
                    f"`stepstone repair --run {self.id}` moves the run back to its newest "
                    f"commit made by stepstone",
                )
            self._settle_workdir()
            if drive and self._snap.commit is None:
                self._note_info(uid=secrets.token_hex(8))
                self._commit({}, f"run {self.id}: created", ["Stepstone-Status: created"])
            if drive:
                store.point_head_at(self.id)
        except BaseException:
            self._let_go()
            raise

    # -- loading ----------------------------------------------------------------

    def _recover_locks(self) -> None:
        for lock in self.store.clear_stale_ref_locks(self.id):
            self.notes.append(f"removed a stale lock {lock.name} left by a killed process")

    def _where(self, path: str) -> str:
        commit = (self._snap.commit or "")[:10]
        return f"{path} in commit {commit} of {self.store.path}"

    def _load(self, cls: type[models.R], path: str, data: bytes) -> models.R | None:
        """Load one record; a reader notes a corrupt one and goes on, a driver stops."""
        try:
            return load(cls, data, path, where=self._where)
        except SchemaTooNew:
            raise
        except RecordError as exc:
            if not self._tolerant:
                raise
            self.corrupt.append(str(exc))
            return None

    def _load_all(self, cls: type[models.R], files: dict[str, bytes]) -> list[models.R]:
        """Load a folder's records in one pass; file by file when one of them is bad."""
        loaded = models.load_many(cls, list(files.values()))
        if loaded is not None:
            return loaded
        return [r for path, data in files.items() if (r := self._load(cls, path, data))]

    def _parse(self) -> None:
        files = self._snap.files
        stamp = now()
        raw_info = files.get("run.json")
        info = self._load(RunInfo, "run.json", raw_info) if raw_info is not None else None
        self.info = info or RunInfo(run=self.id, created=stamp, updated=stamp)
        groups: dict[str, dict[str, bytes]] = {}
        for path, data in files.items():
            groups.setdefault(path.split("/", 1)[0], {})[path] = data
        with collector_paused():
            index = read_index(self.store, self.id, self._snap, self._load_all, cached=self._cached)
        self._index_saved_at = self._snap.tree  # the tree the saved index describes
        self._index_trusted = index.complete  # the rows follow every commit of ours
        self._legacy_layout = index.legacy_layout
        self.records = RecordBook(index.records, self._read_record)
        self.decisions: dict[str, Decision] = {
            d.key: d for d in self._load_all(Decision, groups.get("decisions", {}))
        }
        self.unknowns: dict[str, Unknown] = {
            u.id: u for u in self._load_all(Unknown, groups.get("unknowns", {}))
        }
        self.effect_book = EffectBook(self._load_all(EffectRecord, groups.get("effects", {})))
        names, extras = index.plan, index.extras
        problems = []
        if None in names:
            missing = names.index(None) + 1
            problems.append((plan_path(missing), f"plan has no step {missing}"))
            kept = [n for n, name in enumerate(names, start=1) if name is not None]
            extras = {new: extras[old] for new, old in enumerate(kept, 1) if old in extras}
            names = [names[old - 1] for old in kept]
        self._set_steps(names, extras)  # type: ignore[arg-type]  # no None left
        if len(self._numbers) != len(names):
            problems.append(("plan/", "two plan steps share a name"))
        for path, problem in problems:
            if not self._tolerant:
                raise RecordError(self._where(path), problem)
            self.corrupt.append(str(RecordError(self._where(path), problem)))
        tip_seq = parse_trailers(self._snap.message).get("Stepstone-Seq", ["0"])[0]
        self.seq = max(self.info.seq, int(tip_seq) if tip_seq.isdigit() else 0)

    def _settle_workdir(self) -> None:
        """Where relative paths resolve: the folder asked for, else the one recorded (if
        it exists here), else the current folder. A driver records the folder it was
        asked to work in, or the one it works in when none was recorded yet."""
        recorded = self.previous_workdir = self.recorded_workdir()
        if self._asked_workdir is None and recorded is not None:
            self.workdir = recorded
        if self.driving and (self._asked_workdir is not None or not self.info.workdir):
            self._note_info(workdir=self._relative_to_store(self.workdir))
            program = _driver_program()
            if program is not None and not self.info.notebook:
                script = Path(os.path.relpath(program, self.workdir)).as_posix()
                self._note_info(program=shlex.join([script, *sys.argv[1:]]))

    def recorded_workdir(self) -> Path | None:
        """The run's recorded work folder, if it exists on this machine."""
        if not self.info.workdir:
            return None
        found = (self.store.path.parent / self.info.workdir).resolve()
        return found if found.is_dir() else None

    def _relative_to_store(self, path: Path) -> str:
        return Path(os.path.relpath(path.resolve(), self.store.path.parent.resolve())).as_posix()

    def _note_info(self, **changes: str) -> None:
        """Change the run's head file; it is written with the next commit."""
        if any(getattr(self.info, key) != value for key, value in changes.items()):
            self.info = self.info.model_copy(update=changes)
            self._info_changed = True

    def _read_record(self, name: str) -> StepRecord | None:
        """Step `name`'s record, read from the run's latest tree and validated."""
        path = step_path(name, legacy=self._legacy_layout)
        data = self.store.blob(self._snap.tree, path) if self._snap.tree else None
        return None if data is None else self._load(StepRecord, path, data)

    def _save_index(self) -> None:
        """Save the step index of the latest commit, so that the next open need not read
        the records committed since the last save (after a kill: at most the last
        `_SAVE_INDEX_EVERY` commits' worth). Between steps, the rows match the commit."""
        self._commits_since_save = 0
        if not self._index_trusted or self._snap.tree in (None, self._index_saved_at):
            return
        save_index(
            self.store,
            self.id,
            StepIndex(
                self._snap.tree,
                list[str | None](self.steps.names),
                self.steps.extras,
                self.records.table,
                self._legacy_layout,
            ),
        )
        self._index_saved_at = self._snap.tree

    def _set_steps(self, names: list[str], extras: dict[int, PlanExtra]) -> None:
        self._identities: set[str] | None = None
        self.effect_book.plan_changed()
        self.steps = PlanSteps(names, extras)
        self._numbers = dict(zip(names, range(1, len(names) + 1), strict=True))

    # -- committing -------------------------------------------------------------

    def _commit(
        self,
        writes: dict[str, bytes | None],
        subject: str,
        trailers: list[str],
        *,
        info_changed: bool = False,
        indexed: bool = False,
        finishing: bool = False,
    ) -> None:
        """Commit `writes`; `indexed` says the caller keeps the step index's rows in
        step with what they write to the plan and the step records. A finished run
        takes no commit but its finishing and reopening ones."""
        if self.info.finished and not finishing:
            raise RunFinished(self.id, self.info.finished)
        if self._lease is not None:
            self._lease.check()  # a driver whose lease was taken records nothing more
        with self._guard:
            if not indexed and any(path.split("/", 1)[0] in INDEXED for path in writes):
                self._index_trusted = False
            # The sequence number travels in the commit message, so a step's commit
            # rewrites only its own record, not run.json.
            self.seq += 1
            if info_changed or self._info_changed or self._snap.commit is None:
                self.info = self.info.model_copy(update={"seq": self.seq, "updated": now()})
                writes = {"run.json": dump(self.info), **writes}
                self._info_changed = False
            lines = [
                f"Stepstone-Run: {self.id}",
                *trailers,
                f"Stepstone-Seq: {self.seq}",
                f"Stepstone-Holder: {self.holder}",
            ]
            message = f"{subject}\n\n" + "\n".join(_one_line(line) for line in lines) + "\n"
            try:
                self._snap = self.store.commit(
                    self.id, self._snap, writes, message, author=self.holder
                )
            except BaseException:
                self._index_trusted = False  # the rows may have moved ahead of the store
                raise
            self._commits_since_save += 1
            self._after_commit()

    def _join_remote(self, steal: str | None) -> None:
        """With a remote: take the run's lease there, then bring in the remote's newer
        history of the run before anything runs (a copy that diverged is not driven).
        An unreachable remote is warned about: this copy may be behind."""
        from . import remote

        self._remote = remote.remote_name(self.store) is not None
        if not self._remote:
            return
        keeper = remote.LeaseKeeper(self.store, self.id, self.holder)
        try:
            keeper.take(steal=steal)
        except remote.GitFailed as exc:
            message = (
                f"the remote of run {self.id!r} cannot be reached ({exc.problem}): driving "
                f"this copy without its lease. Steps go on; an effect's write waits until the "
                f"lease can be taken (or {OFFLINE_ENV}=1 writes without it, at the risk of "
                f"repeating what another copy did)"
            )
            self.notes.append(message)
            warnings.warn(message, StepstoneWarning, stacklevel=4)
        else:
            self._lease = keeper
            brought = remote.pull(self.store, self.id).state
            if brought in ("fast-forwarded", "created"):
                self.notes.append(f"brought in the remote's newer history of the run ({brought})")
        if self.store.autopush:
            self._pusher = remote.BackgroundPusher(self.store, self.id, self._lease)

    def fence(self) -> None:
        """Before an effect's write: with a lease, push the run (its intent included) with
        the lease, atomically; raises `LeaseLost` when another agent took the run. A run
        opened while its remote could not be reached takes the lease now, or refuses the
        write (unless `STEPSTONE_OFFLINE=1`)."""
        if self._lease is None and self._remote and os.environ.get(OFFLINE_ENV) != "1":
            self._lease = self._late_lease()
        if self._lease is not None:
            with self._guard:
                self._lease.fence(self._snap.commit)

    def _late_lease(self) -> LeaseKeeper:
        from . import remote

        keeper = remote.LeaseKeeper(self.store, self.id, self.holder)
        try:
            keeper.take()
            theirs = remote.remote_tip(self.store, self.id)
        except remote.GitFailed as exc:
            raise StoreError(
                str(self.store.path),
                f"the remote of run {self.id!r} cannot be reached ({exc.problem}), so this "
                f"copy cannot take the run's lease before writing an effect; nothing was "
                f"sent. Retry when the remote can be reached, or set {OFFLINE_ENV}=1 to write "
                f"without the lease (another copy that drove the run may then be repeated)",
            ) from exc
        if theirs is not None and not self.store.descends(self._snap.commit, theirs):
            with contextlib.suppress(StepstoneError):
                keeper.release()
            raise Diverged(
                self.id,
                "the remote has history of this run that this copy, opened offline, does not; "
                "nothing was sent. Close the run and open it again to bring that history in "
                "(`stepstone pull` shows both)",
            )
        return keeper

    def _let_go(self) -> None:
        """Stop the pusher, hand the lease back, release the lock (each even if one fails)."""
        pusher, self._pusher = self._pusher, None
        lease, self._lease = self._lease, None
        try:
            if pusher is not None:
                pusher.close()
        finally:
            try:
                if lease is not None and lease.lost is None:
                    lease.release()
            except StepstoneError as exc:
                self.notes.append(f"could not release the lease (it expires by itself): {exc}")
            finally:
                self._lock.release()

    def _after_commit(self) -> None:
        if self._lease is not None:
            try:
                self._lease.renew_if_due()
            except StepstoneError as exc:
                self.notes.append(f"could not renew the lease: {exc}")
        if self._pusher is not None:
            self._pusher.poke()

    def commit_record(self, path: str, data: bytes, subject: str, trailers: list[str]) -> None:
        """Commit one record file of this run as it is (a hand edit, a tool's repair)."""
        self._require_lock()
        self._commit({path: data}, subject, trailers)

    def commit_effect(
        self, record: EffectRecord, path: str, data: bytes, subject: str, trailers: list[str]
    ) -> None:
        """Commit an effect's record (used by effects) and keep it as the effect's state."""
        self._require_lock()
        with self._guard:
            self._commit({path: data}, subject, trailers)
            self.effect_book.put(record)

    @property
    def effects(self) -> dict[str, EffectRecord]:
        """The run's effect records by key."""
        return self.effect_book.records

    def step_label(self, name: str) -> str:
        """`N name` for a step of the plan (as commit trailers write it), else `name`."""
        number = self._numbers.get(name)
        if number is None:  # an effect's step, named by its identity
            step = next((s for s, identity in self._renamed().items() if identity == name), None)
            number = self._numbers.get(step) if step is not None else None
        return f"{number} {name}" if number is not None else name

    @property
    def current_step(self) -> str | None:
        """The name of the step running now, if any."""
        return self._current_step

    @property
    def guard(self) -> threading.RLock:
        """Held while the run's state changes (commits, effects' bookkeeping)."""
        return self._guard

    @contextmanager
    def running(self, start: StepStart) -> Iterator[None]:
        """Mark `start`'s step as the one running (effects belong to it)."""
        previous = self._current_step
        self._current_step = start.planned.name
        token = _stepping.set(self)
        try:
            yield
        finally:
            _stepping.reset(token)
            self._current_step = previous

    def _take_step(self, name: str) -> None:
        """Claim the run for step `name` on this thread; refuse a nested or concurrent step."""
        me = threading.get_ident()
        if self._claim is not None:
            thread, running = self._claim
            if thread == me:
                raise StepstoneError(
                    f"step {name!r} was started inside step {running!r}: steps do not nest. "
                    f"Call {name!r}'s code as a plain function inside {running!r}, or run it "
                    f"as its own step after {running!r} ends; the plan was not changed"
                )
            raise StepstoneError(
                f"step {name!r} was started from another thread while step {running!r} runs: "
                f"a run drives one step at a time. Run the steps one after another, or give "
                f"each thread a run of its own (effects inside one step may use threads)"
            )
        self._claim = (me, name)

    def _end_step(self, name: str) -> None:
        if self._claim is not None and self._claim[1] == name:
            self._claim = None

    def _require_lock(self) -> None:
        if not self._lock.held:
            raise StepstoneError(
                f"run {self.id!r} was opened read-only or is closed; open it with "
                f"stepstone.open_run({self.id!r}) to drive it"
            )

    # -- the plan ---------------------------------------------------------------

    @property
    def plan(self) -> models.Plan:
        """The committed plan."""
        return models.Plan(run=self.id, mode=self.info.plan_mode, steps=tuple(self.steps))

    def set_plan(
        self,
        steps: Sequence[PlannedStep | Mapping[str, Any] | str],
        *,
        mode: models.PlanMode = "explicit",
        goal: str | None = None,
        notebook: str | None = None,
    ) -> list[str]:
        """Commit a plan (names, mappings or `PlannedStep`s, in order); return what changed."""
        self._require_lock()
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
                raise PlanError(f"plan step {number}: {_one_line(str(exc))}") from exc
            names.step_name(step.name)
            for spec in step.checks:
                checks.parse(spec)
            new.append(step)
        counts = Counter(s.name for s in new)
        if len(counts) != len(new):
            dupes = sorted(name for name, count in counts.items() if count > 1)
            raise PlanError(f"duplicate step names in the plan: {names.listing(dupes)}")
        new = self._carry_renames(new)
        old_rows = [self.steps.row(i) for i in range(len(self.steps))]
        new_rows = [plan_row(s) for s in new]
        changes = _plan_changes(old_rows, new_rows)
        info_changed = (
            mode != self.info.plan_mode
            or (goal is not None and goal != self.info.goal)
            or (notebook is not None and notebook != self.info.notebook)
        )
        if not changes and not info_changed:
            return []
        writes: dict[str, bytes | None] = {}
        for step, row in zip(new, new_rows, strict=True):
            if step.number > len(old_rows) or old_rows[step.number - 1] != row:
                writes[plan_path(step.number)] = dump(step)
        for number in range(len(new) + 1, len(old_rows) + 1):
            writes[plan_path(number)] = None
        self.info = self.info.model_copy(
            update={
                "plan_mode": mode,
                "goal": goal if goal is not None else self.info.goal,
                "notebook": notebook if notebook is not None else self.info.notebook,
            }
        )
        self._set_steps(
            [s.name for s in new],
            {s.number: plan_extra(s) for s in new if plan_extra(s) != NO_EXTRA},
        )
        self._commit(
            writes,
            f"plan: {len(new)} steps" + (f" ({'; '.join(changes)})" if changes else ""),
            ["Stepstone-Status: planned", f"Stepstone-Plan: {mode}, {len(new)} steps"],
            info_changed=True,
            indexed=True,
        )
        self._state.clear()
        return changes

    def _carry_renames(self, new: list[PlannedStep]) -> list[PlannedStep]:
        """`new` with each step's earlier names: kept from the plan for a step it has,
        set by `--was OLD`, or found for a new step whose source is that of a step that
        left the plan or whose own source changed (a clear rename, also when a new step
        took the old name). A renamed step's effects keep their keys, so what it already
        sent is never sent again; a step that takes a name another step's effects are
        keyed by gets keys of its own."""
        new_sources = {step.name: step.source_hash for step in new}
        by_source: dict[str, list[PlannedStep]] = {}
        for number, extra in self.steps.extras.items():
            name = self.steps.names[number - 1]
            if extra[3] and new_sources.get(name) != extra[3]:  # gone, or its source changed
                by_source.setdefault(extra[3], []).append(self.steps[number - 1])
        carried = []
        for step in new:
            before: PlannedStep | None = None
            declared = step.renamed_from[-1] if step.renamed_from else None
            planned = self._planned(step.name)
            if planned is not None and (
                declared is None or planned.renamed_from[-1:] == (declared,)
            ):
                renamed_from = planned.renamed_from
            elif declared is not None:
                before = self._planned(declared)  # --was, new or added to a step the plan has
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
        return self._own_identities(carried)

    def _own_identities(self, steps: list[PlannedStep]) -> list[PlannedStep]:
        """Give a step whose name another (renamed) step's effects are keyed by an
        identity of its own, `NAME@2` and so on, never used by the plan or an effect."""
        renamed = {step.identity for step in steps if step.renamed_from}
        clashing = [s for s in steps if not s.renamed_from and s.name in renamed]
        if not clashing:
            return steps
        taken = renamed | {s.identity for s in steps}
        fresh = {step.name: self._fresh_identity(step.name, taken) for step in clashing}
        return [
            step.model_copy(update={"renamed_from": (fresh[step.name],)})
            if step.name in fresh
            else step
            for step in steps
        ]

    def _fresh_identity(self, name: str, taken: set[str]) -> str:
        """`NAME@k` for the smallest k from 2 that no step of `taken`, the plan or an
        effect record uses; added to `taken`."""
        used = taken | self.identities() | set(self.effect_book.steps())
        k = 2
        while f"{name}@{k}" in used:
            k += 1
        taken.add(f"{name}@{k}")
        return f"{name}@{k}"

    def identity_of(self, name: str) -> str:
        """The name step `name`'s effects are keyed by (its first, across renames)."""
        planned = self._planned(name)
        return planned.identity if planned is not None else name

    def _renamed(self) -> dict[str, str]:
        """Name -> identity for the plan's steps whose effects are keyed by another name."""
        names, extras = self.steps.names, self.steps.extras
        return {names[number - 1]: extra[4][0] for number, extra in extras.items() if extra[4]}

    def identities(self) -> set[str]:
        """The names the plan's steps key their effects by."""
        if self._identities is None:
            renamed = self._renamed()
            self._identities = {renamed.get(name, name) for name in self.steps.names}
        return self._identities

    def _planned(self, name: str) -> PlannedStep | None:
        number = self._numbers.get(name)
        return None if number is None else self.steps[number - 1]

    def _ensure_planned(
        self,
        name: str,
        specs: tuple[str, ...],
        inputs: tuple[str, ...],
        outputs: tuple[str, ...],
        source: str | None,
        was: str | None = None,
    ) -> PlannedStep:
        existing = self._planned(name)
        if existing is None and self.info.plan_mode == "explicit":
            listing = names.listing(self.steps.names)
            raise PlanError(
                f"step {name!r} is not in the plan of run {self.id!r} (steps: {listing}); "
                f"add it to the plan, or use a new run"
            )
        number = existing.number if existing else len(self.steps) + 1
        renamed_from: tuple[str, ...] = ()
        if existing is not None:
            # what the caller leaves out, the plan supplies
            specs = specs or existing.checks
            inputs = inputs or existing.inputs
            outputs = outputs or existing.outputs
            source = source or existing.source_hash
            renamed_from = existing.renamed_from
        elif was is not None:
            before = self._planned(was)
            renamed_from = (*before.renamed_from, was) if before is not None else (was,)
        elif name in self.identities():  # a renamed step's effects are keyed by this name
            renamed_from = (self._fresh_identity(name, set()),)
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
        if existing is None:
            subject = f"plan: add step {number} {name}"
        else:
            subject = f"plan: update step {number} {name}"
            self.notes.append(f"step {number} {name} changed since it was planned")
        if existing is None:
            self.steps.append(wanted)
        else:
            self.steps[number - 1] = wanted
        if self._identities is not None:
            self._identities.add(wanted.identity)
        self._numbers[name] = number
        self._commit(
            {plan_path(number): dump(wanted)},
            subject,
            ["Stepstone-Status: planned", f"Stepstone-Step: {number} {name}"],
            indexed=True,
        )
        return wanted

    # -- verification -----------------------------------------------------------

    def _verify_step(
        self,
        planned: PlannedStep,
        record: StepRecord,
        namespace: Mapping[str, Any] | None,
        run_commands: bool = True,
    ) -> str | None:
        """Why `record` no longer stands for `planned`, or None when it verifies."""
        if tuple(planned.checks) != tuple(record.checks):
            return "its checks changed since it ran"
        if planned.source_hash and record.source_hash and planned.source_hash != record.source_hash:
            return "its source changed since it ran"
        for var, art in record.outputs.items():
            if not self._may_load(art):
                return self._untrusted(var)
        scope = dict(namespace or {})
        if any(ev.kind == "expr" for ev in record.evidence):
            try:
                scope = _check_scope(namespace, self._load_outputs(record))
            except StepstoneError as exc:
                return str(exc)
        for ev in record.evidence:
            verdict = checks.verify(
                ev, workdir=self.workdir, namespace=scope, run_commands=run_commands
            )
            if not verdict.checkable:
                self._not_rerun.append(f"{planned.name} ({ev.check})")
            if not verdict.ok:
                return verdict.reason
        return None

    def status(
        self,
        *,
        namespace: Mapping[str, Any] | None = None,
        progress: Callable[[int], object] | None = None,
        recheck: bool | None = None,
    ) -> RunStatus:
        """Verify every recorded step against the real state now and say what is next.

        `progress(1)` is called after each step, for long runs. `recheck` says whether
        `cmd:` and `call:` checks are run again: by default a driver does (it is about to
        skip steps on their word) and a read-only run does not (looking must not run
        code); the status notes the checks that were not re-run.
        """
        self._run_commands = self.driving if recheck is None else recheck
        self._not_rerun = []
        with collector_paused():
            return self._status(namespace, progress)

    def _status(
        self,
        namespace: Mapping[str, Any] | None,
        progress: Callable[[int], object] | None,
    ) -> RunStatus:
        results, self._last_verified = step_states(
            self.steps,
            self.records.table,
            lambda number: self._recheck(number, namespace),
            progress,
        )
        results = self._interrupted(results)
        self._state = {s.name: s.state for s in results}
        self._reasons = {s.name: s.reason for s in results if s.reason}
        notes = list(self.notes)
        if self._not_rerun:
            notes.append(
                f"{len(self._not_rerun)} cmd:/call: check(s) were not re-run, as reading a "
                f"run runs no code: {names.listing(self._not_rerun, 5)} (`stepstone verify`, "
                f"or --recheck, re-runs them)"
            )
        return RunStatus(
            run=self.id,
            plan_mode=self.info.plan_mode,
            steps=tuple(results),
            decisions=tuple(sorted(self.decisions.values(), key=lambda d: (d.time, d.key))),
            unknowns=tuple(sorted(self.unknowns.values(), key=lambda u: int(u.id[1:]))),
            effects=tuple(
                effects.as_status(e)
                for e in sorted(self.effects.values(), key=lambda e: (e.intent, e.key))
            ),
            finished=self.info.finished,
            notes=tuple(notes + self.corrupt),
        )

    def _interrupted(self, results: list[StepStatus]) -> list[StepStatus]:
        """Pending steps that performed effects were interrupted partway: say so."""
        if not self.effects:
            return results
        renamed = self._renamed()
        for number, status in enumerate(results):
            if status.state != "pending":
                continue
            done = self.effect_book.of_step(renamed.get(status.name, status.name))
            if not done:
                continue
            counts = Counter[str](r.state for r in done)
            said = ", ".join(
                f"{counts[state]} effect(s) {state}" for state in MAYBE_HAPPENED if counts[state]
            )
            results[number] = status._replace(reason=f"interrupted partway; {said}")
        return results

    def _recheck(self, number: int, namespace: Mapping[str, Any] | None) -> str | None:
        """Why step `number` no longer verifies against the world, or None."""
        planned = self.steps[number - 1]
        record = self.records.get(planned.name)
        if record is None:
            return "its record cannot be read"
        return self._verify_step(planned, record, namespace, self._run_commands)

    # -- steps ------------------------------------------------------------------

    def begin(
        self,
        name: str,
        *,
        checks: Iterable[checks.CheckLike] = (),
        inputs: Iterable[str] = (),
        outputs: Iterable[str] = (),
        source: str | None = None,
        force: bool = False,
        namespace: Mapping[str, Any] | None = None,
        was: str | None = None,
    ) -> StepStart:
        """Decide whether step `name` is skipped (evidence verifies) or must run.

        Unless it is skipped, the step holds the run until `confirm` or `fail`.
        """
        self._require_lock()
        names.step_name(name)
        with self._guard:
            self._take_step(name)
            try:
                start = self._begin(name, checks, inputs, outputs, source, force, namespace, was)
            except BaseException:
                self._end_step(name)
                raise
            if start.skip:
                self._end_step(name)
            elif self.info.finished:
                self._end_step(name)
                raise RunFinished(self.id, self.info.finished)
            return start

    def _begin(
        self,
        name: str,
        checks: Iterable[checks.CheckLike],
        inputs: Iterable[str],
        outputs: Iterable[str],
        source: str | None,
        force: bool,
        namespace: Mapping[str, Any] | None,
        was: str | None,
    ) -> StepStart:
        if self._commits_since_save >= _SAVE_INDEX_EVERY:
            self._save_index()
        specs = tuple(_parse_all(checks))
        out_names = tuple(outputs)
        for var in out_names:
            if not var.isidentifier():
                raise InvalidInput(f"--out {var!r} is not a Python variable name")
        planned = self._ensure_planned(
            name,
            tuple(s.text for s in specs),
            tuple(inputs),
            out_names,
            source_hash(source) if source is not None else None,
            was,
        )
        specs = tuple(_parse_all(planned.checks))
        self.effect_book.step_begun(planned.identity)
        if not self._state:
            self.status(namespace=namespace)
        self._check_order(planned, force)
        record = self.records.get(name)
        state = self._state.get(name, "pending")
        if record is not None and state == "verified":
            problem = self._verify_step(planned, record, namespace)  # runs every check
            if problem is None:
                try:
                    values = self._load_outputs(record)
                except StepstoneError as exc:
                    problem = f"its saved outputs cannot be restored ({exc})"
                else:
                    if set(out_names) <= set(values) or not out_names:
                        return StepStart(
                            planned, True, "verified", record, values, check_specs=specs
                        )
                    problem = "it has outputs that were not saved"
            self._mark_stale(planned, problem)
        reason = self._reasons.get(name) or ("not run yet" if record is None else state)
        return StepStart(planned, False, reason, record, check_specs=specs)

    def _check_order(self, planned: PlannedStep, force: bool) -> None:
        if planned.number == 1 or force:
            return
        before = self.steps[planned.number - 2]
        if self._state.get(before.name) != "verified":
            raise StepOrderError(self.id, planned.name, before.name)

    def _mark_stale(self, planned: PlannedStep, reason: str) -> None:
        """Mark `planned` and every verified step after it stale (it runs again)."""
        names = self.steps.names
        for index in range(planned.number - 1, min(self._last_verified, len(names))):
            name = names[index]
            if self._state.get(name) == "verified":
                self._state[name] = "stale"
                self._reasons[name] = (
                    reason if name == planned.name else f"it runs again after step {planned.name}"
                )
        self._last_verified = min(self._last_verified, planned.number - 1)

    def confirm(
        self,
        start: StepStart,
        *,
        values: Mapping[str, Any] | None = None,
        facts: Mapping[str, Any] | None = None,
        namespace: Mapping[str, Any] | None = None,
    ) -> StepRecord:
        """Run the step's checks, then commit its record with evidence and saved outputs.

        A check that does not pass records the step as failed and raises `CheckFailed`.
        """
        self._require_lock()
        try:
            with self._guard:
                return self._confirm(start, values, facts, namespace)
        finally:
            self._end_step(start.planned.name)

    def _confirm(
        self,
        start: StepStart,
        values: Mapping[str, Any] | None,
        facts: Mapping[str, Any] | None,
        namespace: Mapping[str, Any] | None,
    ) -> StepRecord:
        planned = start.planned
        values = dict(values or {})
        missing = [var for var in planned.outputs if var not in values]
        if missing:
            problem = f"--out {', '.join(missing)} not defined by step {planned.name!r}"
            self._fail(start, problem)
            raise InvalidInput(problem + "; define it in the step or drop --out")
        scope = _check_scope(namespace, values)
        evidence: list[models.Evidence] = []
        for spec in start.check_specs:
            try:
                evidence.append(checks.run(spec, workdir=self.workdir, namespace=scope))
            except checks.CheckNotPassed as exc:
                self._fail(start, f"check {spec.text} did not pass: {exc}")
                raise CheckFailed(planned.name, spec.text, str(exc)) from None
        if not evidence:
            evidence.append(models.Evidence(check="completed", kind="completed", value=True))
        writes: dict[str, bytes | None] = {}
        saved: dict[str, models.Artifact] = {}
        for var, value in values.items():
            try:
                fmt, data = artifacts.encode(var, value)
            except InvalidInput as exc:
                self._fail(start, str(exc))
                raise
            digest = artifacts.sha256(data)
            writes[artifacts.path_for(digest, fmt)] = data
            mark = trust.sign(digest) if fmt == "pickle" else None
            saved[var] = models.Artifact(sha256=digest, format=fmt, size=len(data), mark=mark)
        record = self._record(start, "confirmed", evidence=evidence, outputs=saved, facts=facts)
        writes[step_path(planned.name, legacy=self._legacy_layout)] = dump(record)
        trailers = [
            f"Stepstone-Step: {planned.number} {planned.name}",
            "Stepstone-Status: confirmed",
            *(f"Stepstone-Evidence: {_evidence_line(ev)}" for ev in evidence),
        ]
        self._commit(
            writes, f"step {planned.number} {planned.name}: confirmed", trailers, indexed=True
        )
        self.records[planned.name] = record
        self._mark_stale(planned, "")
        self._state[planned.name] = "verified"
        self._reasons[planned.name] = ""
        self._last_verified = max(self._last_verified, planned.number)
        return record

    def fail(self, start: StepStart, error: BaseException | str) -> StepRecord:
        """Commit the step as failed (not confirmed); later steps will run again."""
        self._require_lock()
        try:
            with self._guard:
                return self._fail(start, error)
        finally:
            self._end_step(start.planned.name)

    def _fail(self, start: StepStart, error: BaseException | str) -> StepRecord:
        planned = start.planned
        text = error_text(error) if isinstance(error, BaseException) else str(redact(error))
        record = self._record(start, "failed", error=text)
        self._commit(
            {step_path(planned.name, legacy=self._legacy_layout): dump(record)},
            f"step {planned.number} {planned.name}: failed",
            [
                f"Stepstone-Step: {planned.number} {planned.name}",
                "Stepstone-Status: failed",
                f"Stepstone-Error: {text.splitlines()[-1][:200] if text else 'failed'}",
            ],
            indexed=True,
        )
        self.records[planned.name] = record
        self._mark_stale(planned, "failed")
        self._state[planned.name] = "failed"
        self._reasons[planned.name] = text
        return record

    def _record(self, start: StepStart, status: models.StepStatus, **fields: Any) -> StepRecord:
        previous = start.record
        fields = {k: v for k, v in fields.items() if v is not None}
        return StepRecord(
            number=start.planned.number,
            name=start.planned.name,
            status=status,
            attempt=(previous.attempt + 1) if previous else 1,
            started=start.started,
            finished=now(),
            seq=self.seq + 1,
            checks=start.planned.checks,
            source_hash=start.planned.source_hash,
            holder=self.holder,
            **fields,
        )

    def _may_load(self, art: models.Artifact) -> bool:
        """Whether a saved value may be loaded here: not a pickle, or one this user wrote,
        or from a store this user trusts."""
        return (
            art.format != "pickle"
            or trust.signed_here(art.sha256, art.mark)
            or trust.store_trusted(self.store.git_dir)
        )

    def _untrusted(self, var: str) -> str:
        return (
            f"saved output {var!r} is a pickle written elsewhere, and loading a pickle runs "
            f"its code, so it is not loaded here and the step runs again. If you trust who "
            f"wrote this store, `stepstone trust --repo {shlex.quote(str(self.store.path))}` "
            f"(once) loads its values"
        )

    def _load_outputs(self, record: StepRecord) -> dict[str, Any]:
        values: dict[str, Any] = {}
        tree = self._snap.tree
        for var, art in record.outputs.items():
            data = (
                self.store.blob(tree, artifacts.path_for(art.sha256, art.format)) if tree else None
            )
            if data is None or artifacts.sha256(data) != art.sha256:
                raise StepstoneError(
                    f"saved output {var!r} is missing or does not match its sha256"
                )
            if not self._may_load(art):
                raise StoreError(str(self.store.path), self._untrusted(var))
            try:
                values[var] = artifacts.decode(art.format, data)
            except Exception as exc:  # a pickle whose class is gone, a missing pyarrow...
                raise StepstoneError(
                    f"saved output {var!r} cannot be loaded here ({type(exc).__name__}: "
                    f"{exc}); the step runs again. A class defined in the step's own cell "
                    f"is not there when the step is skipped: define it in a cell before"
                ) from exc
        return values

    def step(
        self,
        name: str,
        fn: Callable[[], Any],
        *,
        checks: Iterable[checks.CheckLike] = (),
        inputs: Iterable[str] = (),
        force: bool = False,
        was: str | None = None,
    ) -> StepResult:
        """Run `fn` as step `name`, or skip it while its evidence verifies.

        `fn`'s return value is saved and returned again when the step is skipped;
        `expr:` checks name it `result`. `was` is the step's earlier name, when it was
        renamed: its effects keep their keys and are not performed again. A name is
        run once per process: a second `step` with it is an error, not a silent skip.
        """
        if name in self._stepped:
            raise InvalidInput(
                f"step {name!r} was already run by this process: a step name stands for one "
                f"piece of work, so a second run.step({name!r}, ...) would skip or repeat "
                f"it. Give each call its own name, for example f'{name}-{{item}}'"
            )
        start = self.begin(name, checks=checks, inputs=inputs, force=force, was=was)
        if start.skip and start.record is not None:
            self._stepped.add(name)
            return StepResult(name, True, start.values.get(RETURN), start.record)
        try:
            with self.running(start):
                value = fn()
        except BaseException as exc:
            self.fail(start, exc)
            raise
        record = self.confirm(start, values={RETURN: value} if value is not None else None)
        self._stepped.add(name)
        return StepResult(name, False, value, record)

    # -- decisions and unknowns -------------------------------------------------

    def decide(self, key: str, value: str, why: str, *, revise: bool = False) -> Decision:
        """Record a decision with its reason; a resumed run does not reopen it."""
        self._require_lock()
        names.step_name(key, "decision key")
        value = str(value)
        if not why.strip():
            raise InvalidInput(f"decision {key!r} needs a reason (--why REASON)")
        old = self.decisions.get(key)
        if old is not None and old.value == value:
            return old
        if old is not None and not revise:
            raise DecisionConflict(key, old.value, value, old.why)
        decision = Decision(
            key=key, value=value, why=why, time=now(), revised_from=old.value if old else None
        )
        self._commit(
            {f"decisions/{key}.json": dump(decision)},
            f"decide {key}={_one_line(value)[:60]}",
            ["Stepstone-Status: decided", f"Stepstone-Decision: {key}"],
        )
        self.decisions[key] = decision
        return decision

    def decided(self, key: str, default: Any = None) -> Any:
        """The value decided for `key`, or `default`."""
        decision = self.decisions.get(key)
        return decision.value if decision is not None else default

    def unknown(self, question: str) -> Unknown:
        """Record an open question. The same question is recorded once: asked again (a
        notebook run again), it is the unknown already recorded, open or answered."""
        self._require_lock()
        question = question.strip()
        if not question:
            raise InvalidInput("an unknown needs a question")
        for existing in self.unknowns.values():
            if existing.question == question:
                return existing
        item = Unknown(id=f"U{len(self.unknowns) + 1}", question=question, asked=now())
        self._commit(
            {f"unknowns/{item.id}.json": dump(item)},
            f"unknown {item.id}: {_one_line(question)[:60]}",
            ["Stepstone-Status: unknown", f"Stepstone-Unknown: {item.id}"],
        )
        self.unknowns[item.id] = item
        return item

    def resolve_unknown(self, unknown_id: str, answer: str) -> Unknown:
        """Close an open unknown with its answer."""
        self._require_lock()
        item = self.unknowns.get(unknown_id)
        if item is None:
            known = ", ".join(self.unknowns) or "none"
            raise InvalidInput(f"no unknown {unknown_id!r} in run {self.id!r} (unknowns: {known})")
        if item.state == "resolved" and item.answer == answer:
            return item
        closed = item.model_copy(update={"state": "resolved", "answer": answer, "resolved": now()})
        self._commit(
            {f"unknowns/{item.id}.json": dump(closed)},
            f"resolve {item.id}: {_one_line(answer)[:60]}",
            ["Stepstone-Status: resolved", f"Stepstone-Unknown: {item.id}"],
        )
        self.unknowns[item.id] = closed
        return closed

    # -- effects ----------------------------------------------------------------

    def effect(
        self,
        name: str,
        do: Callable[[str], Any],
        *,
        keyed: bool = False,
        lookup: Callable[[str], Any] | None = None,
        payload: Any = None,
        was: str | None = None,
        new: bool = False,
        timeout: float | None = None,
    ) -> Any:
        """Perform an external write of the running step at most once (see `stepstone.effect`)."""
        self._require_lock()
        return effects.perform(
            self,
            name,
            do,
            keyed=keyed,
            lookup=lookup,
            payload=payload,
            was=was,
            new=new,
            timeout=timeout,
        )

    def resolve_effect(
        self, key: str, *, happened: bool, receipt: Any = None, why: str = ""
    ) -> EffectRecord:
        """Settle an unresolved effect: it happened (with its receipt) or it did not."""
        self._require_lock()
        return effects.resolve(self, key, happened=happened, receipt=receipt, why=why)

    # -- finishing --------------------------------------------------------------

    def finish(self, *, force: bool = False) -> str:
        """Write `summary.md` from the records, commit it and tag the run `stepstone/<id>`.

        Refuses while a step is not verified, an unknown is open or an effect is
        unresolved, unless `force`.
        """
        from . import summary

        self._require_lock()
        if self.info.finished:  # again: the summary as it was, and the tag if a kill lost it
            if self._snap.commit and not self.store.tagged(self.id):
                self.store.tag(self.id, self._snap.commit)
            done = self.store.blob(self._snap.tree, "summary.md") if self._snap.tree else None
            return done.decode() if done is not None else ""
        status = self.status()
        blockers = [
            f"step {s.number} {s.name} is {s.state}" for s in status.steps if s.state != "verified"
        ]
        blockers += [f"unknown {u.id} is open: {u.question}" for u in status.open_unknowns]
        blockers += [f"effect {e['key']} is unresolved" for e in status.unresolved_effects]
        if blockers and not force:
            raise StepstoneError(
                f"run {self.id!r} cannot finish yet: "
                + "; ".join(blockers)
                + ". Settle these, or finish anyway with force=True (--force)"
            )
        text = summary.render(status)
        self.info = self.info.model_copy(update={"finished": now()})
        self._commit(
            {"summary.md": text.encode()},
            f"finish: {len(status.steps)} steps",
            ["Stepstone-Status: finished"],
            info_changed=True,
            finishing=True,
        )
        if self._snap.commit:
            self.store.tag(self.id, self._snap.commit)
        return text

    def reopen(self, why: str) -> None:
        """Reopen a finished run so that it can change again, recording why (its archive
        tag stays on the finished commit)."""
        self._require_lock()
        if not why.strip():
            raise InvalidInput(f"reopening run {self.id!r} needs a reason (--why REASON)")
        if not self.info.finished:
            return
        self.info = self.info.model_copy(update={"finished": None})
        self._commit(
            {"summary.md": None},
            f"reopen: {_one_line(why)[:60]}",
            ["Stepstone-Status: reopened", f"Stepstone-Why: {why}"],
            info_changed=True,
            finishing=True,
        )

    # -- lifetime ---------------------------------------------------------------

    @property
    def driving(self) -> bool:
        """Whether this object holds the run (may commit to it)."""
        return self._lock.held

    def close(self) -> None:
        """Let go of the run so another process can drive it."""
        global _active
        if self._lock.held:
            self._save_index()
            self.store.collect_garbage_in_background()
        self._let_go()
        if _active is self:
            _active = None

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _refuse_a_second_store(run: str | None) -> None:
    """A script run from another folder would make a new `.stepstone` there and redo its
    run: refuse when the script's own folder holds a store with that run."""
    here = resolve_store_path(None)
    program = _driver_program()
    if here.exists() or program is None or run is None:
        return
    home = program.parent / DEFAULT_STORE
    if home.resolve() == here.resolve() or not home.is_dir():
        return
    try:
        there = GitStore(home, create=False).runs()
    except StepstoneError:
        return
    if run in there:
        raise InvalidInput(
            f"run {run!r} lives in {home}, beside {program.name}, and this folder has no "
            f"store: run the script from {program.parent} (or pass repo={str(home)!r}) "
            f"to go on with it, instead of starting it again in a new store here"
        )


def _driver_program() -> Path | None:
    """The script this process runs (`python etl.py`), when it is the user's own: not a
    tool installed with Python (a kernel launcher, pytest)."""
    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if script is None or script.suffix != ".py" or not script.is_file():
        return None
    script = script.resolve()
    installed = {"site-packages", "dist-packages"}
    prefixes = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}
    if installed & set(script.parts) or any(script.is_relative_to(p) for p in prefixes):
        return None
    return script


def _check_scope(namespace: Mapping[str, Any] | None, values: Mapping[str, Any]) -> dict[str, Any]:
    """What `expr:` checks see: the namespace, the step's outputs, its return value as
    `result`."""
    scope = {**(namespace or {}), **values}
    if RETURN in values:
        scope["result"] = values[RETURN]
    return scope


def _parse_all(specs: Iterable[checks.CheckLike]) -> list[checks.CheckSpec]:
    if isinstance(specs, str):
        specs = [specs]
    return [checks.parse(spec) for spec in specs]


def _evidence_line(ev: models.Evidence) -> str:
    if ev.kind == "completed":
        return "completed"
    value = f"sha256={ev.value}" if ev.kind in ("file", "sha256") else f"{ev.value}"
    return f"{ev.check} {value}"


def _plan_changes(old: Sequence[PlanRow], new: Sequence[PlanRow]) -> list[str]:
    before = {row[0]: (number, row) for number, row in enumerate(old, start=1)}
    after = {row[0]: (number, row) for number, row in enumerate(new, start=1)}
    renamed = {
        row[5][-1]: name
        for name, (_, row) in after.items()
        if name not in before and row[5] and row[5][-1] in before
    }
    changes = [f"renamed {old_name} -> {name}" for old_name, name in renamed.items()]
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


def open_run(
    run: str | None = None,
    *,
    repo: str | os.PathLike[str] | None = None,
    workdir: str | os.PathLike[str] | None = None,
    drive: bool = True,
    create: bool = True,
    steal: str | None = None,
    cached: bool = True,
) -> Run:
    """Open a run (creating it and its store if new) and hold it as its only driver.

    `run` defaults to `STEPSTONE_RUN`, then to the store's only run; `repo` to
    `STEPSTONE_REPO`, then `.stepstone` in the current folder. With
    `drive=False` the run is opened read-only and no lock is taken. When the
    store has a remote, driving also takes the run's lease there; `steal`
    (a reason) takes a live lease from another agent and records that it did.
    `cached=False` reads every record from Git instead of through the read caches
    (derived data under `<git dir>/stepstone/cache`), as `stepstone verify` does.
    `workdir` is where the run's relative paths (`file:` checks, commands)
    resolve; by default the folder the run recorded (kept relative to the store's
    folder, so a copied project keeps it), else the current folder. A driver
    records the folder it works in.
    """
    global _active
    if drive and create and repo is None:
        _refuse_a_second_store(run)
    store = GitStore(repo, create=create and drive)
    run_id = store.pick_run(run)
    opened = Run(
        store,
        run_id,
        workdir=Path(workdir).absolute() if workdir is not None else None,
        drive=drive,
        create=create,
        steal=steal,
        cached=cached,
    )
    if drive:
        _active = opened
    return opened


def problems_at(store: GitStore, run: str, commit: str) -> list[str]:
    """What a driver would refuse in `run`'s commit `commit`: its corrupt records and plan,
    effect records a commit made by hand rolled back (none when the commit is sound);
    `stepstone repair` moves a run to a sound one."""
    try:
        reader = Run(store, run, workdir=None, drive=False, create=False, cached=False, at=commit)
    except StepstoneError as exc:
        return [str(exc)]
    return list(reader.corrupt) + rolled_back_effects(store, commit)


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


def decided(key: str, default: Any = None) -> Any:
    """The value decided for `key` in the run this process drives, or `default`."""
    return active_run().decided(key, default)
