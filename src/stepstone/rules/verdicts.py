"""Each planned step's state now, from the step index: verified, stale, failed, pending.

A step is verified while its record is confirmed, its checks and source are
those planned, it was recorded after every step before it (an earlier step
redone makes the later ones stale) and its evidence re-checks against the
world; the first step that is not verified makes every recorded step after it
stale. With `stepstone.followInputs` on, a cell that follows its recorded inputs
(`dependencies.following`) is the exception: only a change to those inputs makes
it stale, and it stays verified when an earlier step it does not read is redone.
Steps with nothing to re-check (only "completed" evidence) are decided from the
index alone, the leading run of them in one pass. A stale step's reason names every
cause: each of its own (evidence that fails, an edit, an input that changed) and the
earlier step it runs again after.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from itertools import repeat

from ..errors import StepOrderError
from .index import NO_EXTRA, EvidenceRow, PlanSteps, RecordTable, plain_prefix
from .status import StepState, StepStatus


def runs_after(name: str) -> str:
    """Why a step recorded after step `name` is stale: `name` runs again."""
    return f"it runs again after step {name}"


def plan_changed(
    planned_checks: Sequence[str],
    planned_source: str | None,
    recorded_checks: Sequence[str],
    recorded_source: str | None,
) -> str | None:
    """Why a record no longer stands for its planned step (checks or source edited), or
    None. A step planned or recorded without a source hash is not compared by source."""
    if tuple(planned_checks) != tuple(recorded_checks):
        return "its checks changed since it ran"
    if planned_source and recorded_source and planned_source != recorded_source:
        return "its source changed since it ran"
    return None


class Verdicts:
    """The state of each step of a run as this process knows it: decided by
    `step_states` when the run is read, then moved by what the driver does (a step
    confirmed, failed, or found stale when it was about to be skipped)."""

    def __init__(self) -> None:
        self.states: dict[str, StepState] = {}
        self.reasons: dict[str, str] = {}
        self.last_verified = 0  # no step after this number is verified, but those that
        self.follows: set[str] = set()  # follow their recorded inputs, re-checked at begin

    @property
    def known(self) -> bool:
        """Whether the states were decided since the plan last changed."""
        return bool(self.states)

    def forget(self) -> None:
        """The plan changed: decide every state again before the next step."""
        self.states.clear()

    def decided(self, results: list[StepStatus], last_verified: int, follows: set[str]) -> None:
        """Keep the states of a full read (`step_states`); `follows`: the steps that
        follow their recorded inputs."""
        self.states = {s.name: s.state for s in results}
        self.reasons = {s.name: s.reason for s in results if s.reason}
        self.last_verified = last_verified
        self.follows = follows

    def state(self, name: str) -> StepState:
        """Step `name`'s state (`pending` when it has none)."""
        return self.states.get(name, "pending")

    def check_order(self, run: str, steps: PlanSteps, number: int, *, force: bool) -> None:
        """Refuse step `number` while the step before it is not verified (unless `force`)."""
        if number == 1 or force:
            return
        before = steps.names[number - 2]
        if self.states.get(before) != "verified":
            raise StepOrderError(run, steps.names[number - 1], before)

    def stale_from(self, names: Sequence[str], number: int, reason: str) -> None:
        """Step `number` is stale for `reason`, and every verified step after it runs
        again after it."""
        name = names[number - 1]
        for index in range(number - 1, min(self.last_verified, len(names))):
            later = names[index]
            if later != name and later in self.follows:
                continue  # re-checked against its inputs when it is about to be skipped
            if self.states.get(later) == "verified":
                self.states[later] = "stale"
                self.reasons[later] = reason if later == name else runs_after(name)
        self.last_verified = min(self.last_verified, number - 1)

    def verified(self, name: str) -> None:
        """Step `name` was re-checked just now and verifies."""
        self.states[name] = "verified"
        self.reasons.pop(name, None)

    def confirmed(self, names: Sequence[str], number: int) -> None:
        """Step `number` was confirmed just now: later steps run again after it (those
        that follow their inputs, if they read what it made)."""
        self.stale_from(names, number, "")
        name = names[number - 1]
        self.states[name] = "verified"
        self.reasons[name] = ""
        self.last_verified = max(self.last_verified, number)

    def failed(self, names: Sequence[str], number: int, error: str) -> None:
        """Step `number` failed just now with `error`."""
        self.stale_from(names, number, "failed")
        name = names[number - 1]
        self.states[name] = "failed"
        self.reasons[name] = error


def step_states(
    steps: PlanSteps,
    table: RecordTable,
    recheck: Callable[[int, Sequence[StepStatus]], str | None],
    progress: Callable[[int], object] | None = None,
    follows: Container[str] = frozenset(),
) -> tuple[list[StepStatus], int]:
    """Every planned step's status, and the number of the last step of the verified
    run that starts the plan (0 when the first step is not verified). `recheck(n,
    results)` re-checks step n's evidence and inputs against the world (`results`: the
    states of the steps before it): why it fails, or None.
    `progress(1)` is called after each step (every step then takes the long path).
    `follows`: the steps that follow their recorded inputs (`dependencies.following`).
    """
    results: list[StepStatus] = []
    last_verified = 0
    blocked: str | None = None
    latest_pred_seq = 0
    at, seqs, kinds, shapes, finished_at = (
        table.at,
        table.seqs,
        table.kinds,
        table.shapes,
        table.finished,
    )
    extras = steps.extras
    make = tuple.__new__  # a StepStatus without NamedTuple's slower constructor
    no_evidence: tuple[EvidenceRow, ...] = ()
    # The common step of a long run: confirmed, planned without checks or source,
    # its evidence only "completed". Nothing to re-check, so the leading ones are
    # made in one pass (`plain_prefix`) and later ones take a short path.
    plain = table.plain_kinds()
    names = steps.names
    start = 0
    if progress is None:
        slots, leading = plain_prefix(names, extras, table)
        start = len(slots)
        results.extend(
            map(
                make,
                repeat(StepStatus),
                zip(
                    range(1, start + 1),
                    names[:start],
                    repeat("verified"),
                    repeat(""),
                    map([s[4] for s in shapes].__getitem__, leading),
                    map(finished_at.__getitem__, slots),
                ),
            )
        )
        latest_pred_seq = seqs[slots[-1]] if slots else 0
    else:
        plain = [False] * len(shapes)
    append = results.append
    for number, name in enumerate(names[start:], start=start + 1):
        slot = at.get(name)
        if slot is not None and blocked is None and number not in extras:
            kind = kinds[slot]
            if plain[kind] and seqs[slot] >= latest_pred_seq:
                latest_pred_seq = seqs[slot]
                evidence, finished = shapes[kind][4], finished_at[slot]
                append(make(StepStatus, (number, name, "verified", "", evidence, finished)))
                continue
        planned_checks, _, _, planned_source, _ = extras.get(number, NO_EXTRA)
        state: StepState
        reason = ""
        evidence = no_evidence
        finished = ""
        if slot is None:
            state = "pending"
        else:
            status, recorded_checks, source, error, evidence, world, _, _, _ = shapes[kinds[slot]]
            seq = seqs[slot]
            finished = finished_at[slot]
            if status == "failed":
                state, reason = "failed", error or "failed"
            elif name in follows:  # its recorded inputs say what it depends on
                problem = recheck(number, results)
                state, reason = ("stale", problem) if problem else ("verified", "")
            elif blocked is not None or seq < latest_pred_seq:
                # it runs again after an earlier step; its own causes are named too
                own = None
                if world or plan_changed(planned_checks, planned_source, recorded_checks, source):
                    own = recheck(number, results)
                chain = (
                    runs_after(blocked)
                    if blocked is not None
                    else "an earlier step was redone after it"
                )
                if own and blocked is not None and f"step {blocked} is " in own:
                    chain = ""  # its own causes say so already
                state, reason = "stale", "; ".join(c for c in (own, chain) if c)
            elif (
                not world
                and plan_changed(planned_checks, planned_source, recorded_checks, source) is None
            ):
                state = "verified"  # nothing to re-check against the world
            else:
                problem = recheck(number, results)
                state, reason = ("stale", problem) if problem else ("verified", "")
            if seq > latest_pred_seq:
                latest_pred_seq = seq
        if state != "verified" and blocked is None:
            blocked = name
            last_verified = number - 1
        append(make(StepStatus, (number, name, state, reason, evidence, finished)))
        if progress is not None:
            progress(1)
    if blocked is None:
        last_verified = len(results)
    return results, last_verified
