"""The one step protocol: begin (skip while the evidence verifies, else run), then
confirm with evidence and saved outputs, or fail. `Run.step`, `%%step` and any other
front-end go through `Stepper.stepping`."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..effects.redaction import error_text, redact
from ..errors import CheckFailed, InvalidInput, RunFinished, StepstoneError
from ..model import models, names
from ..model.models import Asking, PlannedStep, StepRecord, StepSpec, now
from ..rules import checks, dependencies
from ..rules.verdicts import Verdicts
from . import folderwatch, keeping, questions
from .active import Trace, stepping_in
from .checking import RETURN, Checker, check_scope
from .filetrace import unwatched
from .inputs import recorded_inputs
from .layout import source_hash
from .ledger import Ledger
from .planning import Planner
from .saving import saved_for_kernel, saved_outputs
from .state import RunState


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
    source: str | None = None  # the cell's code, when the step is a cell
    plain: frozenset[str] = frozenset()  # names it reads that plain cells make anew
    check_writes: bool = False  # the files its code wrote are its evidence (`--cells`)
    kernel: dict[str, Any] = field(default_factory=dict)  # the kernel's part, restored
    trace: Trace = field(default_factory=Trace)  # what the step wrote and read as it ran
    said: list[str] = field(default_factory=list)  # what its effects said (taken from others)
    told: list[Any] = field(default_factory=list)  # how each of its effects ended (events)


@dataclass
class Attempt:
    """One pass through a step: skipped (`values` restored, `record` the one that
    verified) or run (`keep` the outputs to save; `record` is set once confirmed)."""

    start: StepStart
    namespace: Mapping[str, Any] | None = None
    kept: dict[str, Any] = field(default_factory=dict)
    offered: dict[str, Any] = field(default_factory=dict)
    touched: dict[str, Any] = field(default_factory=dict)
    facts: Mapping[str, Any] | None = None
    kernel: dict[str, Any] = field(default_factory=dict)

    @property
    def skipped(self) -> bool:
        """Whether the step is skipped (its evidence verified)."""
        return self.start.skip

    @property
    def values(self) -> dict[str, Any]:
        """The outputs restored for a skipped step."""
        return self.start.values

    @property
    def record(self) -> StepRecord | None:
        """The step's record: the verified one when skipped, the new one once confirmed."""
        return self.start.record

    def keep(self, values: Mapping[str, Any]) -> None:
        """Save `values` (name -> value) as the step's outputs when it is confirmed."""
        self.kept.update(values)

    def offer(self, values: Mapping[str, Any]) -> None:
        """Save what of `values` can be saved; the record names the rest (`unsaved`)."""
        self.offered.update(values)

    def keep_for_kernel(self, values: Mapping[str, Any]) -> None:
        """Save `values` as the kernel's part of the record (`models.KERNEL_KEYS`: what
        it shows again and sets again when the step is skipped), never as its values."""
        self.kernel.update(values)

    def offer_changed(self, values: Mapping[str, Any]) -> None:
        """Save those of `values` that differ from what an earlier step saved under their
        names (values the step may have changed in place)."""
        self.touched.update(values)


class Stepper:
    """Begins, confirms and fails the steps of the run `ledger` writes, one at a time."""

    def __init__(
        self, ledger: Ledger, planner: Planner, checker: Checker, verdicts: Verdicts
    ) -> None:
        self.ledger = ledger
        self.state = ledger.state
        self.planner = planner
        self.checker = checker
        self.verdicts = verdicts
        self.current: str | None = None  # the step running now
        self.asking: Asking | None = None  # ... as it asks for effects
        self._claim: tuple[int, str] | None = None  # (thread, step) of the step under way

    @contextmanager
    def stepping(
        self, run: Any, spec: StepSpec, namespace: Mapping[str, Any] | None = None
    ) -> Iterator[Attempt]:
        """Begin step `spec` of `run`; run the body unless `attempt.skipped`, then
        confirm the step with what the body kept (or fail it with what it raised)."""
        start = self.begin(spec, namespace)
        attempt = Attempt(start, namespace)
        if start.skip:
            yield attempt
            return
        try:
            with self.running(run, start):
                yield attempt
        except BaseException as exc:
            self.fail(start, exc)
            raise
        start.record = self.confirm(
            start,
            values=attempt.kept,
            facts=attempt.facts,
            namespace=attempt.namespace,
            offered=attempt.offered,
            touched=attempt.touched,
            kernel=attempt.kernel,
        )

    @contextmanager
    def running(self, run: Any, start: StepStart) -> Iterator[None]:
        """Mark `start`'s step as the one running (effects belong to it, and to it only
        while it runs: see `active.stepping_in`)."""
        planned, state, workdir = start.planned, self.state, self.checker.workdir
        asking = Asking(
            planned.name,
            planned.identity,
            lambda: basis(state, planned, start.trace, workdir),
        )
        previous, self.current = (self.current, self.asking), planned.name
        self.asking = asking
        try:
            with stepping_in(run, start.trace, asking, folderwatch.watch_of(workdir)):
                yield
        finally:
            start.said, start.told = asking.said, asking.told
            self.checker.notes.extend(asking.said)  # the run's notes, for the Python API
            self.current, self.asking = previous

    def _take(self, name: str) -> None:
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

    def _end(self, name: str) -> None:
        if self._claim is not None and self._claim[1] == name:
            self._claim = None

    # -- begin ------------------------------------------------------------------

    def begin(self, spec: StepSpec, namespace: Mapping[str, Any] | None) -> StepStart:
        """Decide whether step `spec` is skipped (evidence verifies) or must run. Unless
        it is skipped, the step holds the run until `confirm` or `fail`."""
        name = names.step_name(spec.name)
        with self.ledger.guard:
            self._take(name)
            try:
                start = self._begin(spec, namespace)
            except BaseException:
                self._end(name)
                raise
            if start.skip:
                self._end(name)
            elif self.state.info.finished:
                self._end(name)
                raise RunFinished(self.state.id, self.state.info.finished)
            return start

    def _begin(self, spec: StepSpec, namespace: Mapping[str, Any] | None) -> StepStart:
        name, source = spec.name, spec.source
        self.ledger.save_index_if_due()
        inputs = questions.known_questions(self.state, name, spec.inputs)
        specs = tuple(_parse_all(spec.checks))
        out_names = _out_names(spec.outputs)
        planned = self.planner.ensure_planned(
            name,
            tuple(s.text for s in specs),
            inputs,
            out_names,
            source_hash(source) if source is not None else None,
            spec.was,
        )
        specs = tuple(_parse_all(planned.checks))
        self.state.effect_book.step_begun(planned.identity)
        if not self.verdicts.known:
            keeping.restore_missing(self.state, self.checker.workdir, self.checker.notes)
            self.checker.status(namespace=namespace, progress=None, run_commands=True)
        self.verdicts.check_order(self.state.id, self.state.steps, planned.number, force=spec.force)
        record = self.state.records.get(name)
        state = self.verdicts.state(name)
        # following its inputs, it may be stale only as a step it reads was (rerun, same)
        again = state == "stale" and name in self.verdicts.follows
        if record is not None and (state == "verified" or again):
            keeping.restore_missing(self.state, self.checker.workdir, self.checker.notes, record)
            before = _state_before(self.state, self.verdicts, planned.number)
            problem = self.checker.verify_step(planned, record, namespace, state_of=before)
            if problem is None:
                try:
                    values = self.checker.load_outputs(record, asked=planned.outputs)
                    kernel = self.checker.load_kernel(record)
                except StepstoneError as exc:
                    problem = f"its saved outputs cannot be restored ({exc})"
                else:
                    if set(out_names) <= set(values) or not out_names:
                        self.verdicts.verified(name)
                        return StepStart(
                            planned,
                            True,
                            "verified",
                            record,
                            values,
                            check_specs=specs,
                            kernel=kernel,
                        )
                    problem = "it has outputs that were not saved"
            self.verdicts.stale_from(self.state.steps.names, planned.number, problem)
        reason = self.verdicts.reasons.get(name) or ("not run yet" if record is None else state)
        keeping.cut_back_before(
            self.state,
            self.checker.workdir,
            self.checker.notes,
            planned.number,
            lambda step: self.verdicts.state(step) == "verified",
        )
        return StepStart(planned, False, reason, record, check_specs=specs, source=source)

    # -- confirm or fail --------------------------------------------------------

    def confirm(
        self,
        start: StepStart,
        *,
        values: Mapping[str, Any] | None = None,
        facts: Mapping[str, Any] | None = None,
        namespace: Mapping[str, Any] | None = None,
        offered: Mapping[str, Any] | None = None,
        touched: Mapping[str, Any] | None = None,
        kernel: Mapping[str, Any] | None = None,
    ) -> StepRecord:
        """Run the step's checks, then commit its record with evidence and saved outputs.
        A check that does not pass records the step as failed and raises `CheckFailed`."""
        try:
            with self.ledger.guard:
                return self._confirm(
                    start,
                    dict(values or {}),
                    facts,
                    namespace,
                    offered or {},
                    touched or {},
                    kernel or {},
                )
        finally:
            self._end(start.planned.name)

    def _confirm(
        self,
        start: StepStart,
        values: dict[str, Any],
        facts: Mapping[str, Any] | None,
        namespace: Mapping[str, Any] | None,
        offered: Mapping[str, Any],
        touched: Mapping[str, Any],
        kernel: Mapping[str, Any],
    ) -> StepRecord:
        planned = start.planned
        missing = [var for var in planned.outputs if var not in values]
        if missing:
            problem = f"--out {', '.join(missing)} not defined by step {planned.name!r}"
            self._fail(start, problem)
            raise InvalidInput(problem + "; define it in the step or drop --out")
        scope = _expr_scope(start, namespace, values)
        evidence: list[models.Evidence] = []
        timeout = self.ledger.settings.now().check_timeout
        for spec in start.check_specs:
            try:
                evidence.append(
                    _note(start, values)
                    if spec.kind == checks.NOTE
                    else checks.run(
                        spec, workdir=self.checker.workdir, namespace=scope, timeout=timeout
                    )
                )
            except checks.CheckNotPassed as exc:
                self._fail(start, f"check {spec.text} did not pass: {exc}")
                raise CheckFailed(planned.name, spec.text, str(exc)) from None
        evidence = evidence or [models.Evidence(check="completed", kind="completed", value=True)]
        try:
            writes, saved, unsaved = saved_outputs(
                values, offered, touched, self.state, planned.number
            )
            kept_for_kernel = saved_for_kernel(kernel, writes, self.state)
            kept_writes, kept = keeping.keep(planned.checks, self.checker.workdir, self.state)
        except InvalidInput as exc:
            self._fail(start, str(exc))
            raise
        writes.update(kept_writes)
        inputs, reads, binds, wrote = recorded_inputs(self.state, start, self.checker.workdir)
        record = self._record(
            start,
            "confirmed",
            evidence=evidence,
            outputs=saved,
            facts=facts,
            inputs=inputs,
            reads=reads,
            binds=binds,
            wrote=wrote or None,
            unsaved=unsaved or None,
            kept=kept or None,
            kernel=kept_for_kernel or None,
        )
        self.ledger.append(record, attached=writes)
        self.verdicts.confirmed(self.state.steps.names, planned.number)
        if record.source_hash is not None:  # a cell: which cells follow their inputs now
            self.verdicts.follows = self.checker.following()
        return record

    def fail(self, start: StepStart, error: BaseException | str) -> StepRecord:
        """Commit the step as failed (not confirmed); later steps will run again."""
        try:
            with self.ledger.guard:
                return self._fail(start, error)
        finally:
            self._end(start.planned.name)

    def _fail(self, start: StepStart, error: BaseException | str) -> StepRecord:
        planned = start.planned
        text = error_text(error) if isinstance(error, BaseException) else str(redact(error))
        record = self._record(start, "failed", error=text)
        self.ledger.append(record)
        self.verdicts.failed(self.state.steps.names, planned.number, text)
        return record

    def interrupted(self, name: str, why: str, started: str | None = None) -> StepRecord | None:
        """Commit the attempt of step `name` that another process was making, and that
        ended with it (a kernel killed mid-step), as failed for `why`; None when the run
        has no such step."""
        if name not in self.state.steps.names:
            return None
        planned = self.state.steps[self.state.steps.names.index(name)]
        with self.ledger.guard:
            self._take(name)
            try:
                start = StepStart(planned, False, "interrupted", self.state.records.get(name))
                if started is not None:
                    start.started = started
                return self._fail(start, why)
            finally:
                self._end(name)

    def _record(self, start: StepStart, status: models.RecordStatus, **fields: Any) -> StepRecord:
        previous = start.record
        fields = {k: v for k, v in fields.items() if v is not None}
        return StepRecord(
            number=start.planned.number,
            name=start.planned.name,
            status=status,
            attempt=(previous.attempt + 1) if previous else 1,
            started=start.started,
            finished=now(),
            seq=self.state.seq + 1,
            checks=start.planned.checks,
            source_hash=start.planned.source_hash,
            holder=self.ledger.holder,
            reran_for=previous and (previous.rerun or previous.reran_for),
            **fields,
        )


def _expr_scope(
    start: StepStart, namespace: Mapping[str, Any] | None, values: Mapping[str, Any]
) -> dict[str, Any] | None:
    """What the step's `expr:` checks see; None when it has none (a kernel's namespace
    grows with every cell IPython runs, `_i1`, `_i2`...: it is copied only when read)."""
    if not any(spec.kind == "expr" for spec in start.check_specs):
        return None
    return check_scope(namespace, values)


def _out_names(outputs: Iterable[str]) -> tuple[str, ...]:
    out_names = tuple(outputs)
    for var in out_names:
        if not var.isidentifier():
            raise InvalidInput(f"--out {var!r} is not a Python variable name")
    return out_names


def _state_before(state: RunState, verdicts: Verdicts, number: int) -> Callable[[str], str]:
    """A step's state as step `number` sees it: a step planned at or after it is
    pending (it has not run yet in this pass through the plan)."""
    numbers = state.numbers

    def state_of(name: str) -> str:
        found = numbers.get(name)
        return verdicts.state(name) if found is not None and found < number else "pending"

    return state_of


def _note(start: StepStart, values: Mapping[str, Any]) -> models.Evidence:
    """The note the step wrote (or the text its function returned), as evidence."""
    returned = values.get(RETURN)
    text = "\n\n".join(start.trace.notes) or (returned if isinstance(returned, str) else "")
    if not text.strip():
        raise checks.CheckNotPassed("it wrote no note: call stepstone.note(text) in it")
    text = redact(text.strip())
    return models.Evidence(
        check=checks.NOTE, kind="note", value=text, detail=f"a note, {len(text)} characters"
    )


def _parse_all(specs: Iterable[checks.CheckLike]) -> list[checks.CheckSpec]:
    if isinstance(specs, str):
        specs = [specs]
    return [checks.parse(spec) for spec in specs]


@dataclass(frozen=True)
class StepResult:
    """What `Run.step` did: ran or skipped the step, and the step's return value."""

    name: str
    skipped: bool
    value: Any
    record: StepRecord


# -- what a step was given: an effect's basis ----------------------------------------
# What a step was given: the digest that tells a retry on the same inputs from a run
# on changed ones, for the effects it asks for.
#
# A step's `given` is a digest of its code (its record's source hash), the inputs its
# record says it read (decisions, answers, files, the steps that made them; not the files
# it wrote) and the `given` of the step before it in the plan, so that a change anywhere
# upstream changes every `given` after it, as the conservative rule re-runs every step
# after it. It is made from the records, step by step, and kept for the records it was
# made from.
#
# An effect's record keeps its `basis`: the same digest taken when it was asked for, of
# what the step had read so far. Two attempts of a step with the same basis asked on the
# same inputs: they ask for the same effects in the same order, so a new name or payload
# then is made from a clock or a random number, and is refused (docs/effects.md). A
# basis that differs (a revised decision, a changed file, an edited cell, a step before
# it that ran on other inputs) may ask for new effects.


def given_before(state: RunState, number: int) -> str:
    """The `given` of the step before step `number` in the plan ("" for the first)."""
    names, records = state.steps.names, state.records
    chain: list[StepRecord | None] = []
    at = min(number - 1, len(names))
    while at > 0:  # back to the first step whose `given` is known
        record = records.get(names[at - 1])
        if record is None or _known.get(_memo(record)) is not None:
            break
        chain.append(record)
        at -= 1
    before = ""
    if at > 0:
        found = records.get(names[at - 1])
        before = _known.get(_memo(found), "") if found is not None else ""
    for record in reversed(chain):
        assert record is not None
        before = _given(before, record)
    return before


_known: dict[tuple[str, int, str, str | None], str] = {}  # a record (`_memo`) -> its given


def _memo(record: StepRecord) -> tuple[str, int, str, str | None]:
    return (record.name, record.seq, record.finished, record.source_hash)


def _given(before: str, record: StepRecord) -> str:
    read = {k: v for k, v in (record.inputs or {}).items() if not k.startswith(dependencies.WROTE)}
    found = _digest(before, record.source_hash, read)
    if len(_known) > 100_000:
        _known.clear()
    _known[_memo(record)] = found
    return found


def basis(state: RunState, planned: PlannedStep, trace: Trace, workdir: Path) -> str:
    """What step `planned` has read so far in this attempt (`trace`), as a digest: the
    files it read are those of the work folder (`workdir`), as its record keeps them."""
    read: dict[str, str | None] = {
        f"{dependencies.DECISION}{key}": value for key, value in trace.decisions.items()
    }
    for unknown in trace.unknowns:
        question = state.unknowns.get(unknown)
        read[f"{dependencies.UNKNOWN}{unknown}"] = question.answer if question else None
    if trace.files.read:
        root = os.path.realpath(workdir)
        files, _ = trace.files.relative(root, skip=unwatched(state.store.path))
        for path in files:
            read[f"{dependencies.READ}{path}"] = _file_digest(os.path.join(root, path))
    return _digest(given_before(state, planned.number), planned.source_hash, read)


def _digest(before: str, source: str | None, read: Mapping[str, str | None]) -> str:
    text = json.dumps([before, source or "", sorted(read.items())], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


_digests: dict[tuple[str, int, int], str | None] = {}  # (path, size, mtime) -> sha256


def _file_digest(path: str) -> str | None:
    """A file's sha256 (None when it is gone), read once while it stays unchanged."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    key = (path, stat.st_size, stat.st_mtime_ns)
    if key not in _digests:
        if len(_digests) > 4096:
            _digests.clear()
        _digests[key] = dependencies.file_digest(Path(path))
    return _digests[key]
