"""Re-checking a run's records against the world: each step's evidence, its saved
outputs, and the run's status (what is verified, stale, failed, pending)."""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..effects import effects
from ..effects.effectbook import MAYBE_HAPPENED
from ..errors import StepstoneError, StoreError
from ..model import names
from ..model.bulk import collector_paused
from ..model.models import Artifact, Evidence, PlannedStep, StepRecord
from ..rules import checks, dependencies
from ..rules.status import RunStatus, StepStatus
from ..rules.verdicts import Verdicts, plan_changed, step_states
from ..settings import Settings
from ..values import artifacts, bigvalues, trust
from . import copies, keeping
from .state import RunState

RETURN = "return"  # the output that holds a Python-API step's return value


class Checker:
    """Verifies the records of the run `state` holds; relative paths resolve in `workdir`."""

    def __init__(
        self,
        state: RunState,
        verdicts: Verdicts,
        settings: Settings,
        workdir: Path,
        notes: list[str],
    ) -> None:
        self.state = state
        self.verdicts = verdicts
        self.settings = settings
        self.workdir = workdir
        self.notes = notes
        self._not_rerun: list[str] = []
        self.withheld: dict[str, list[str]] = {}  # step -> saved names not loaded here
        self.driving: Callable[[], bool] = lambda: False  # set by the run that holds it

    def verify_step(
        self,
        planned: PlannedStep,
        record: StepRecord,
        namespace: Mapping[str, Any] | None,
        run_commands: bool = True,
        state_of: Callable[[str], str] | None = None,
    ) -> str | None:
        """Why `record` no longer stands for `planned` (every cause, `; `-separated), or
        None when it verifies. `state_of(name)` is an earlier step's state now (default:
        the verdicts')."""
        causes: list[str] = []
        changed = plan_changed(
            planned.checks, planned.source_hash, record.checks, record.source_hash
        )
        if changed is not None:
            causes.append(changed)
        if record.rerun is not None:
            causes.append(f"asked to run again: {record.rerun}")
        recorded = record.inputs or {}
        if any(d not in recorded for d in planned.inputs if d.startswith(("file:", "unknown:"))):
            causes.append("its declared inputs changed since it ran")
        withheld = [var for var, art in record.outputs.items() if not self.may_load(art)]
        causes += [self.untrusted(var) for var in withheld if var in (*planned.outputs, RETURN)]
        if withheld and not causes:
            self.withheld[planned.name] = withheld
        scope = namespace  # only `expr:` checks read it, and they read a copy
        unloaded = False
        if any(ev.kind == "expr" for ev in record.evidence):
            read = checks.names_read(ev.check for ev in record.evidence)
            if read is not None and "result" in read:
                read.add(RETURN)
            try:
                scope = check_scope(namespace, self.load_outputs(record, only=read))
            except StepstoneError as exc:
                causes.append(str(exc))
                unloaded = True  # its expr: checks cannot be evaluated without them
        for ev in record.evidence:
            if unloaded and ev.kind == "expr":
                continue
            verdict = checks.verify(
                ev,
                workdir=self.workdir,
                namespace=scope,
                run_commands=run_commands,
                timeout=self.settings.now().check_timeout,
            )
            if not verdict.checkable:
                self._not_rerun.append(f"{planned.name} ({ev.check})")
            if not verdict.ok and not self._put_back_on_resume(ev, record):
                causes.append(verdict.reason)
        if record.inputs:
            state_now = state_of or self.verdicts.state
            records = self.state.records
            changed_input = dependencies.changed_input(
                record.inputs,
                decision=self._decision,
                answer=lambda key: u.answer if (u := self.state.unknowns.get(key)) else None,
                workdir=self.workdir,
                upstream=lambda name, seen: (
                    state_now(now := self.state.now_named(name, seen)),
                    records.get(now),
                ),
                kept=lambda path, seen: (
                    not self.driving()
                    and keeping.kept_as_seen(self.state, path, self.workdir, seen)
                ),
                written=lambda path: written_after(self.state, path, planned.number),
                made=lambda: {p for p, w in records.table.writers().items() if w},
                cut_back=lambda path, seen, size: self._cut_back(planned.name, path, seen, size),
            )
            if changed_input is not None:
                causes.append(changed_input)
        return "; ".join(dict.fromkeys(causes)) or None

    def _decision(self, key: str) -> str | None:
        decision = self.state.decisions.get(key)
        return decision.value if decision is not None else None

    def status(
        self,
        *,
        namespace: Mapping[str, Any] | None,
        progress: Callable[[int], object] | None,
        run_commands: bool,
    ) -> RunStatus:
        """Verify every recorded step now (running `cmd:`/`call:` checks again only with
        `run_commands`) and say what is next; the verdicts keep each step's state."""
        self._not_rerun, self.withheld = [], {}
        state = self.state
        with collector_paused():
            follows = self.following()
            results, last_verified = step_states(
                state.steps,
                state.records.table,
                lambda number, so_far: self._recheck(number, so_far, namespace, run_commands),
                progress,
                follows,
            )
            results = self._interrupted(results)
            self.verdicts.decided(results, last_verified, follows)
            notes = list(self.notes)
            if self._not_rerun:
                notes.append(
                    f"{len(self._not_rerun)} cmd:/call: check(s) were not re-run, as reading "
                    f"a run runs no code: {names.listing(self._not_rerun, 5)} (`stepstone "
                    f"verify`, or --recheck, re-runs them)"
                )
            if self.withheld:
                notes.append(self._withheld_note())
            gone = copies.gone_original(state.store, state.id)
            if gone is not None:
                notes.append(gone)
            effect_records = state.effect_book.records.values()
            retention, at = self.settings.effect_retention, self.settings.clock()
            return RunStatus(
                run=state.id,
                plan_mode=state.info.plan_mode,
                steps=tuple(results),
                decisions=tuple(sorted(state.decisions.values(), key=lambda d: (d.time, d.key))),
                unknowns=tuple(sorted(state.unknowns.values(), key=lambda u: int(u.id[1:]))),
                effects=tuple(
                    effects.as_status(e, retention, at)
                    for e in sorted(effect_records, key=lambda e: (e.intent, e.key))
                ),
                finished=state.info.finished,
                notes=tuple(notes + state.corrupt),
                inputs=self._inputs(),
                resting=tuple(
                    (step, unknown)
                    for step, ids in state.records.table.resting_on().items()
                    for unknown in ids
                    if (item := state.unknowns.get(unknown)) is None or item.state == "open"
                ),
            )

    def following(self) -> set[str]:
        """The steps that follow their recorded inputs (`dependencies.following`), when
        the settings let cells do so (`follow_inputs`); else none."""
        if not self.settings.follow_inputs:
            return set()
        state = self.state
        cells = state.records.table.cells_with_inputs()
        if not cells:
            return set()
        records = state.records
        # only a cell's record can be known to `following`: the others are not read
        return dependencies.following(
            (planned.source_hash, records.get(planned.name) if planned.name in cells else None)
            for planned in state.steps
        )

    def _inputs(self) -> dict[str, dict[str, str | None]]:
        """What each step recorded it read, for the steps that recorded it (their records
        were read to re-check them, so this reads nothing more)."""
        table, records = self.state.records.table, self.state.records
        noted = {kind for kind, shape in enumerate(table.shapes) if shape[5] or shape[6]}
        found: dict[str, dict[str, str | None]] = {}
        if not noted:
            return found
        for name, at in table.at.items():
            if name is not None and table.kinds[at] in noted:
                record = records.get(name)
                if record is not None and record.inputs is not None:
                    found[name] = self.state.inputs_now(record.inputs)
        return found

    def _interrupted(self, results: list[StepStatus]) -> list[StepStatus]:
        """Pending steps that performed effects were interrupted partway: say so."""
        book = self.state.effect_book
        if not book.records:
            return results
        renamed = self.state.renamed()
        for number, status in enumerate(results):
            if status.state != "pending":
                continue
            done = book.of_step(renamed.get(status.name, status.name))
            if not done:
                continue
            counts = Counter[str](r.state for r in done)
            said = ", ".join(
                f"{counts[state]} effect(s) {state}" for state in MAYBE_HAPPENED if counts[state]
            )
            results[number] = status._replace(reason=f"interrupted partway; {said}")
        return results

    def _recheck(
        self,
        number: int,
        so_far: Sequence[StepStatus],
        namespace: Mapping[str, Any] | None,
        run_commands: bool,
    ) -> str | None:
        numbers = self.state.numbers
        planned = self.state.steps[number - 1]
        record = self.state.records.get(planned.name)
        if record is None:
            return "its record cannot be read"

        def state_of(name: str) -> str:
            earlier = numbers.get(name)
            if earlier is None or earlier > len(so_far):
                return "pending"
            return so_far[earlier - 1].state

        return self.verify_step(planned, record, namespace, run_commands, state_of)

    # -- saved outputs ----------------------------------------------------------

    def may_load(self, art: Artifact) -> bool:
        """Whether a saved value may be loaded here: not a pickle, or one this user wrote,
        or from a store this user trusts."""
        return (
            art.format not in artifacts.RUNS_CODE
            or trust.signed_here(art.sha256, art.mark)
            or trust.store_trusted(self.state.store.git_dir)
        )

    def _withheld_note(self) -> str:
        return withheld_note(self.withheld, self.state.store.path)

    def untrusted(self, var: str) -> str:
        """Why saved output `var` is not loaded here, and how to trust its store."""
        return (
            f"saved output {var!r} is a pickle written elsewhere, and loading a pickle runs "
            f"its code, so it is not loaded here and the step runs again. If you trust who "
            f"wrote this store, `stepstone trust --repo "
            f"{shlex.quote(str(self.state.store.path))}` (once) loads its values"
        )

    def load_outputs(
        self,
        record: StepRecord,
        only: Collection[str] | None = None,
        asked: Collection[str] | None = None,
    ) -> dict[str, Any]:
        """The values `record` saved (those named in `only`), loaded (raises when one
        cannot be). Given the names `asked` for (`--out`), a pickle of another name
        from a store this user does not trust is left out, not an error: the step
        stands, and the name is not given back (`withheld`)."""
        values: dict[str, Any] = {}
        for var, art in record.outputs.items():
            if only is not None and var not in only:
                continue
            if asked is not None and var not in (*asked, RETURN) and not self.may_load(art):
                continue
            if not self.may_load(art):
                raise StoreError(str(self.state.store.path), self.untrusted(var))
            try:
                values[var] = self._load(var, art)
            except StepstoneError:
                raise
            except Exception as exc:  # a pickle whose class is gone, a missing pyarrow...
                raise StepstoneError(
                    f"saved output {var!r} cannot be loaded here ({type(exc).__name__}: "
                    f"{exc}); the step runs again. A class its value needs must be defined "
                    f"before the value is loaded: in an earlier cell, not in the step's own"
                ) from exc
        return values

    def load_kernel(
        self, record: StepRecord, only: Collection[str] | None = None
    ) -> dict[str, Any]:
        """The kernel's part of `record` (`models.KERNEL_KEYS`; `only` those), loaded; a
        part this user may not load (a pickle from a store not trusted) is left out."""
        values: dict[str, Any] = {}
        for key, art in record.kernel.items():
            if (only is not None and key not in only) or not self.may_load(art):
                continue
            try:
                values[key] = self._load(key, art)
            except StepstoneError:
                raise
            except Exception as exc:
                raise StepstoneError(
                    f"what step {record.name!r} keeps for the kernel ({key}) cannot be loaded "
                    f"here ({type(exc).__name__}: {exc}); the step runs again"
                ) from exc
        return values

    def _cut_back(self, step: str, path: str, seen: str, size: int) -> bool:
        """Whether `path`, which `step` wrote, was only added to since, by a later step
        that did not finish (a finished one answers for its writes): a driver cuts it
        back to what `step` left, before that step runs again (`rows.csv` would hold
        its rows twice); a reader counts on the next run to."""
        if self.driving():
            if not keeping.cut_back(self.workdir / path, seen, size):
                return False
            note = (
                f"{path}: cut back to what step {step} left "
                f"(a step that did not finish added to it)"
            )
        elif dependencies.grown_from(self.workdir / path, seen, size):
            note = f"{path}: added to by a step that did not finish; the next run cuts it back"
        else:
            return False
        if note not in self.notes:
            self.notes.append(note)
        return True

    def _put_back_on_resume(self, ev: Evidence, record: StepRecord) -> bool:
        """Whether a reader's `keep:` check fails only because kept files are missing
        (a resume puts them back, so the step stands). A driver has put them back
        already: for it, a failing check is a failing check."""
        path = ev.check[len(keeping.KEEP) :].strip()
        if self.driving() or not ev.check.startswith(keeping.KEEP):
            return False
        if not keeping.restorable(record, path, self.workdir, ev.value):
            return False
        note = f"step {record.name}: {path} is missing; the next run puts back its kept copy"
        if note not in self.notes:
            self.notes.append(note)
        return True

    def _load(self, var: str, art: Artifact) -> Any:
        path = artifacts.path_for(art.sha256, art.format)
        value = _streamed(self.state, path, art)
        if value is not _NOT_STREAMED:
            return value
        data = self.state.blob(path)
        if data is None or len(data) != art.size or artifacts.sha256(data) != art.sha256:
            raise StepstoneError(
                f"saved output {var!r} is missing or does not match its record's size and sha256"
            )
        return bigvalues.decode(art.format, data)


def _streamed(state: RunState, path: str, art: Artifact) -> Any:
    """A big array or frame read straight from its stored blob, or `_NOT_STREAMED`."""
    if art.format not in bigvalues.FORMATS or art.size < bigvalues.THRESHOLD:
        return _NOT_STREAMED
    reader = state.store.open_blob(state.snap.tree, path) if state.snap.tree else None
    if reader is None:
        return _NOT_STREAMED
    with reader:
        if reader.size != art.size:
            raise StepstoneError(f"saved output at {path} is not the size its record says")
        return bigvalues.load(art.format, reader, art.size)


_NOT_STREAMED = object()


def check_scope(namespace: Mapping[str, Any] | None, values: Mapping[str, Any]) -> dict[str, Any]:
    """What `expr:` checks see: the namespace, the step's outputs, its return value as
    `result`."""
    scope = {**(namespace or {}), **values}
    if RETURN in values:
        scope["result"] = values[RETURN]
    return scope


def written_after(state: RunState, path: str, number: int) -> bool:
    """Whether the code of a step after step `number` wrote the file at `path`."""
    writers = state.records.table.writers().get(path, ())
    return any((state.numbers.get(name) or 0) > number for name in writers)


WITHHELD = "saved values that are pickles written by someone else are not given back here"


def withheld_note(withheld: Mapping[str, Sequence[str]], store: Path) -> str:
    """What status notes of the saved values (by step) not given back here."""
    said = [f"{step}: {', '.join(vars_)}" for step, vars_ in withheld.items()]
    return (
        f"{WITHHELD} ({names.listing(said, 5)}); a cell that reads one fails. If you trust "
        f"who wrote this store, `stepstone trust --repo {shlex.quote(str(store))}` (once) "
        f"loads them"
    )
