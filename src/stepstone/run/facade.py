"""`Run`: one run of a store, as its driver or a reader sees it.

A small facade over the parts that each own one idea: the `RunState` read from the
run's latest commit, the `Ledger` (the one writer), the `Planner`, the `Checker`
(evidence and status), the `Stepper` (the step protocol), the `RemoteLink` (lease and
pusher), decisions and unknowns, finishing.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import timedelta
from pathlib import Path
from typing import Any

from ..effects import effects
from ..errors import InvalidInput, RunNotFound, StepstoneError
from ..model import message, models, names
from ..model.models import Decision, EffectRecord, PlannedStep, StepRecord, StepSpec, Unknown
from ..rules import checks
from ..rules.index import INDEXED
from ..rules.status import RunStatus
from ..rules.verdicts import Verdicts
from ..settings import Settings
from ..store import GitStore, holder_identity
from ..store.durable import write_atomic
from . import active, copies, finishing, keeping, questions, rerunning
from .checking import RETURN, Checker
from .copies import run_lock
from .effectsession import session_of
from .history import refuse_rolled_back_effects, refuse_to_start_afresh
from .ledger import Ledger, Trailers
from .link import RemoteLink
from .planning import Planner
from .program import settle_workdir
from .state import RunState
from .stepping import Attempt, Stepper, StepResult, StepStart
from .view import RunView


class Run(RunView):
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
        settings: Settings | None = None,
        diverge: bool = False,
        home: Path | None = None,
        remote: bool = True,
    ) -> None:
        self.store = store
        self.id = names.run_id(run_id)
        self.settings = settings if settings is not None else store.settings
        self.holder = holder_identity(self.settings)
        self.notes: list[str] = []
        self.lock = lock = run_lock(store, self.id, self.holder)
        self.state = RunState(store, self.id, tolerant=not drive)
        self.ledger = Ledger(self.state, self.holder, self.settings)
        self.ledger.before.append(lock.require)  # first: a closed run commits nothing
        self.link = RemoteLink(self.ledger, self.notes)
        verdicts = Verdicts()
        self._planner = Planner(self.ledger, verdicts, self.notes)
        self._checker = Checker(self.state, verdicts, self.settings, Path.cwd(), self.notes)
        self._checker.driving = lambda: self.lock.held
        self.stepper = Stepper(self.ledger, self._planner, self._checker, verdicts)
        self._stepped: set[str] = set()  # steps `step` completed or skipped in this process
        if drive:
            self.lock.acquire()
        try:
            self.notes.extend(store.clear_leftovers(self.id, locks=drive))
            if drive:
                if diverge:
                    copies.refuse_needless_diverge(store, self.id, lock)
                else:
                    self.notes += copies.take_turns(store, self.id, lock)
                if remote:
                    self.link.join(steal)
            self._open(workdir, drive=drive, create=create, cached=cached, at=at, home=home)
            if drive and self.link.lease is not None and not self.state.info.shared:
                self._share()
            if drive and diverge:
                self.notes += copies.diverge(self.state, self.ledger, lock)
        except BaseException:
            self._let_go()
            raise

    def _open(
        self,
        workdir: Path | None,
        *,
        drive: bool,
        create: bool,
        cached: bool,
        at: str | None,
        home: Path | None = None,
    ) -> None:
        store = self.store
        snap = store.reader.read(self.id, skip=("artifacts", *INDEXED), cached=cached, at=at)
        if snap.commit is None:
            refuse_to_start_afresh(store, self.id)
            if not (drive and create):
                raise RunNotFound(self.id, str(store.path), store.refs.runs())
        self.state.read(snap, cached=cached)
        if drive and snap.commit:
            refuse_rolled_back_effects(store, self.id, snap.commit)
        self.previous_workdir, self._checker.workdir = settle_workdir(
            self.state, workdir, driving=self.driving, home=home
        )
        if drive and snap.commit is None:
            self.state.note_info(uid=secrets.token_hex(8))
            self.ledger.commit({}, f"run {self.id}: created", [(message.STATUS, "created")])
        if drive:
            store.refs.point_head_at(self.id)

    def share(self) -> None:
        """Record that the run travels through a remote, if it does not say so yet."""
        self._require_lock()
        if not self.state.info.shared:
            self._share()

    def _share(self) -> None:
        """Record in the run that it travels through a remote whose lease its drivers take
        turns by: a store that gets it by any means (a plain `git clone` of the remote)
        takes the lease too (`RemoteLink.join`)."""
        self.state.note_info(shared=True)
        self.ledger.commit(
            {},
            f"run {self.id}: shared through its remote; its drivers take turns by the lease",
            [(message.STATUS, "shared")],
            info_changed=True,
        )

    # -- changing it (a driver only) --------------------------------------------

    def status(
        self,
        *,
        namespace: Mapping[str, Any] | None = None,
        progress: Callable[[int], object] | None = None,
        recheck: bool | None = None,
    ) -> RunStatus:
        """The status (`RunView.status`); a driver first puts back the files its steps
        kept that are missing from the work folder, as a resume does, so that a later
        step's inputs are there (a reader writes nothing: its status counts such a step
        as standing, with a note that the next run puts them back)."""
        if self.driving:
            keeping.restore_missing(self.state, self._checker.workdir, self._checker.notes)
        return super().status(namespace=namespace, progress=progress, recheck=recheck)

    def _require_lock(self) -> None:
        self.lock.require()

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
        `cells`: every code cell of the notebook is a step (None: as the run has it)."""
        self._require_lock()
        return self._planner.set_plan(steps, mode=mode, goal=goal, notebook=notebook, cells=cells)

    def join_lineage(self, notebook: Path) -> str | None:
        """Put this run, new and named as `stepstone run` names `notebook`'s runs, in the
        lineage of the notebook's other runs (its parameter sets); a note, or None."""
        self._require_lock()
        stem = names.from_filename(notebook.stem)
        return copies.join_siblings(self.state, self.ledger, notebook, stem)

    def stepping(
        self,
        step: str | StepSpec,
        *,
        checks: Iterable[checks.CheckLike] = (),
        inputs: Iterable[str] = (),
        outputs: Iterable[str] = (),
        source: str | None = None,
        force: bool = False,
        namespace: Mapping[str, Any] | None = None,
        was: str | None = None,
    ) -> AbstractContextManager[Attempt]:
        """The step protocol, as a context manager: `with run.stepping(name) as attempt:`
        skipped while its evidence verifies (`attempt.skipped`, `attempt.values`
        restored); else the body runs and the step is confirmed with what it kept
        (`attempt.keep({...})`) and its checks, or failed with what the body raised.
        `step` is a name with these options, or a `StepSpec` that has them; `namespace`
        is what `expr:` checks see; `was` the step's earlier name."""
        self._require_lock()
        spec = (
            step
            if isinstance(step, StepSpec)
            else StepSpec(
                step,
                tuple(checks) if not isinstance(checks, str) else (checks,),
                tuple(inputs),
                tuple(outputs),
                force,
                was,
                None,
                source,
            )
        )
        return self.stepper.stepping(self, spec, namespace)

    def begin(
        self,
        step: str | StepSpec,
        *,
        force: bool = False,
        namespace: Mapping[str, Any] | None = None,
    ) -> StepStart:
        """Decide whether step `step` (a name, or a `StepSpec`) is skipped (evidence
        verifies) or must run; unless it is skipped, the step holds the run until
        `confirm` or `fail` (`stepping` does all three)."""
        self._require_lock()
        spec = step if isinstance(step, StepSpec) else StepSpec(step, force=force)
        return self.stepper.begin(spec, namespace)

    def confirm(
        self,
        start: StepStart,
        *,
        values: Mapping[str, Any] | None = None,
        facts: Mapping[str, Any] | None = None,
        namespace: Mapping[str, Any] | None = None,
    ) -> StepRecord:
        """Run the step's checks, then commit its record with evidence and saved outputs;
        a check that does not pass records the step as failed and raises `CheckFailed`."""
        self._require_lock()
        return self.stepper.confirm(start, values=values, facts=facts, namespace=namespace)

    def fail(self, start: StepStart, error: BaseException | str) -> StepRecord:
        """Commit the step as failed (not confirmed); later steps will run again."""
        self._require_lock()
        return self.stepper.fail(start, error)

    def record_interrupted(
        self, name: str, why: str, started: str | None = None
    ) -> StepRecord | None:
        """Record that step `name`'s attempt ended with the process that made it (a
        kernel killed mid-step): a failed attempt, so that status, the log and the
        report say so; None when the run has no such step."""
        self._require_lock()
        return self.stepper.interrupted(name, why, started)

    def running(self, start: StepStart) -> AbstractContextManager[None]:
        """Mark `start`'s step as the one running (effects belong to it)."""
        return self.stepper.running(self, start)

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
        value = None
        spec = StepSpec(
            name,
            tuple(checks) if not isinstance(checks, str) else (checks,),
            tuple(inputs),
            force=force,
            was=was,
        )
        with self.stepping(spec) as attempt:
            if attempt.skipped:
                value = attempt.values.get(RETURN)
            else:
                value = fn()
                attempt.keep({RETURN: value} if value is not None else {})
        self._stepped.add(name)
        assert attempt.record is not None
        return StepResult(name, attempt.skipped, value, attempt.record)

    def decide(
        self, key: str, value: str, why: str, *, revise: bool = False, line: bool = False
    ) -> Decision:
        """Record a decision with its reason; a resumed run does not reopen it. A
        revision stands over the notebook's unchanged `%decide` line (`line=True`)."""
        self._require_lock()
        return questions.decide(self.ledger, key, value, why, revise=revise, line=line)

    def unknown(self, question: str) -> Unknown:
        """Record an open question (asked again, it is the unknown already recorded)."""
        self._require_lock()
        return questions.ask(self.ledger, question)

    def resolve_unknown(self, unknown_id: str, answer: str, why: str | None = None) -> Unknown:
        """Close an open unknown with its answer (and how the one who answers knows)."""
        self._require_lock()
        return questions.answer(self.ledger, unknown_id, answer, why)

    def rerun(
        self, name: str, why: str, *, downstream: bool = False, once: bool = False
    ) -> list[str]:
        """Mark step `name` (and, with `downstream`, what depends on it) to run again,
        recording `why`; the steps marked. Their confirmed effects are not repeated.
        With `once`, a step that already ran again for `why` is not marked."""
        self._require_lock()
        return rerunning.rerun(
            self.ledger, self.stepper.verdicts, name, why, downstream=downstream, once=once
        )

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
        retention: timedelta | float | None = None,
    ) -> Any:
        """Perform an external write of the running step at most once (see `stepstone.effect`)."""
        options = dict(keyed=keyed, lookup=lookup, payload=payload, was=was, new=new)
        session = session_of(self)
        return effects.perform(session, name, do, timeout=timeout, retention=retention, **options)

    def resolve_effect(
        self, key: str, *, happened: bool, receipt: Any = None, why: str = ""
    ) -> EffectRecord:
        """Settle an unresolved effect: it happened (with its receipt) or it did not."""
        self._require_lock()
        return effects.resolve(session_of(self), key, happened=happened, receipt=receipt, why=why)

    def commit_record(self, path: str, data: bytes, subject: str, trailers: Trailers) -> None:
        """Commit one record file of this run as it is (a hand edit, a tool's repair)."""
        self.ledger.commit({path: data}, subject, trailers, verbatim=True)

    @property
    def summary_file(self) -> Path:
        """Where `finish` writes the run's summary: `<run>.summary.md` in its work folder."""
        return self.workdir / f"{self.id}.summary.md"

    def finish(self, *, force: bool = False) -> str:
        """Write `summary.md` from the records, commit it and tag the run `stepstone/<id>`;
        write it to `summary_file` too. The summary.

        Refuses while a step is not verified, an unknown is open or an effect is
        unresolved, unless `force`.
        """
        self._require_lock()
        status = None if self.info.finished else self.status()
        text = finishing.finish(self.ledger, status, force=force)
        if text:
            try:
                write_atomic(self.summary_file, text.encode())
            except OSError as exc:
                raise StepstoneError(
                    f"run {self.id} is finished (its summary is committed and tagged "
                    f"stepstone/{self.id}), but {self.summary_file} could not be written "
                    f"({exc.strerror or exc}): make the folder writable and finish again "
                    f"to write it"
                ) from exc
        return text

    def reopen(self, why: str) -> None:
        """Reopen a finished run so that it can change again, recording why (its archive
        tag stays on the finished commit)."""
        self._require_lock()
        finishing.reopen(self.ledger, why)

    # -- lifetime ---------------------------------------------------------------

    def _let_go(self) -> None:
        try:
            self.link.let_go()
        finally:
            self.lock.release()

    def close(self) -> None:
        """Let go of the run so another process can drive it."""
        if self.lock.held:
            self.ledger.save_index()
            self.store.upkeep.collect_garbage_in_background()
        self._let_go()
        active.let_go(self)

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
