"""Where a run stands: every step's state, decisions, unknowns, effects, the next action.

The data and its JSON shape; `render` shows it to people (text, HTML, rich), and
nothing here renders."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from ..model.bulk import collector_paused
from ..model.models import Decision, Unknown
from .checks import strength

if TYPE_CHECKING:
    from .index import EvidenceRow

StepState = Literal["verified", "stale", "failed", "pending"]


class StepStatus(NamedTuple):
    """One step of the plan as it stands now."""

    number: int
    name: str
    state: StepState
    reason: str = ""
    evidence: tuple[EvidenceRow, ...] = ()  # (check, kind, value, detail) of its record
    finished: str = ""  # when its record was written

    @property
    def strength(self) -> str | None:
        """`strong` (re-checkable evidence), `weak` (only a note, or the code completed)
        or None (no record)."""
        return strength(kind for _, kind, _, _ in self.evidence)


def _evidence_json(evidence: tuple[EvidenceRow, ...]) -> list[dict[str, Any]]:
    return [
        {"check": check, "kind": kind, "value": value, "detail": detail}
        for check, kind, value, detail in evidence
    ]


@dataclass(frozen=True)
class RunStatus:
    """A run's whole state, verified against the real world when it was made."""

    run: str
    plan_mode: str
    steps: tuple[StepStatus, ...]
    decisions: tuple[Decision, ...]
    unknowns: tuple[Unknown, ...]
    effects: tuple[dict[str, Any], ...] = ()
    finished: str | None = None
    notes: tuple[str, ...] = field(default=())
    added_cells: tuple[str, ...] = ()  # steps of the run's notebook its plan does not have yet
    resting: tuple[tuple[str, str], ...] = ()  # (step, unknown): results on open questions
    inputs: Mapping[str, Mapping[str, str | None]] = field(default_factory=dict)  # by step

    @property
    def next_step(self) -> StepStatus | None:
        """The first step that is not verified, if any."""
        return next((s for s in self.steps if s.state != "verified"), None)

    @property
    def open_unknowns(self) -> tuple[Unknown, ...]:
        """The unknowns not yet resolved."""
        return tuple(u for u in self.unknowns if u.state == "open")

    @property
    def unresolved_effects(self) -> tuple[dict[str, Any], ...]:
        """Effects whose outcome is unknown."""
        return tuple(e for e in self.effects if e.get("state") == "unresolved")

    @property
    def to_settle(self) -> tuple[dict[str, Any], ...]:
        """Effects only a person can settle: unresolved ones, and those sent blind whose
        outcome is in doubt (the next run stops at them without sending)."""
        return tuple(
            e
            for e in self.effects
            if e.get("state") == "unresolved"
            or (e.get("state") == "submitted" and str(e.get("next_action")).startswith("in doubt"))
        )

    @property
    def next_action(self) -> str:
        """What to do next, in one sentence."""
        if self.to_settle:
            effect = self.to_settle[0]
            key = effect["key"]
            said = "unresolved" if effect["state"] == "unresolved" else "in doubt"
            return (
                f"settle the {said} effect {key} ({effect['step']}/{effect['name']}): check the "
                f"receiver, then `stepstone resolve {key} --run {self.run} --happened` or "
                f"`--not-happened`"
            )
        step = self.next_step
        if step is not None:
            why = {
                "pending": step.reason or "not run yet",
                "failed": f"failed last time: {step.reason}",
                "stale": step.reason,
            }[step.state]
            return f"run step {step.number} {step.name} ({why})"
        if self.finished:
            return "nothing: the run is finished"
        if self.added_cells:
            return (
                f"run the notebook again: its step(s) {', '.join(self.added_cells)} were added "
                f"since its plan was committed"
            )
        if not self.steps:
            return "run the first step" + (
                " (the plan grows as steps are met)" if self.plan_mode == "incremental" else ""
            )
        if self.open_unknowns:
            first = self.open_unknowns[0].id
            return (
                f"all {len(self.steps)} steps verified; answer {len(self.open_unknowns)} open "
                f"unknown(s) (`stepstone answer {first} ANSWER`, or `%unknown --resolve {first} "
                f"ANSWER` in the notebook), then finish the run"
            )
        if self.plan_mode == "incremental":
            return (
                f"all {len(self.steps)} steps so far verified; the plan grows as the code that "
                f"drives the run meets new steps: run it again to go on, or finish the run "
                f"when it is done"
            )
        return f"all {len(self.steps)} steps verified: finish the run (%finish or stepstone finish)"

    def to_json(self, *, steps: bool = True) -> dict[str, Any]:
        """The documented `status --json` shape (`steps=False` leaves the steps out)."""
        shape: dict[str, Any] = {
            "run": self.run,
            "plan_mode": self.plan_mode,
            "finished": self.finished,
            "next_action": self.next_action,
            "decisions": [{"key": d.key, "value": d.value, "why": d.why} for d in self.decisions],
            "unknowns": [
                {
                    "id": u.id,
                    "question": u.question,
                    "state": u.state,
                    "answer": u.answer,
                    "why": u.why,
                }
                for u in self.unknowns
            ],
            "effects": list(self.effects),
            "notes": list(self.notes),
            "resting_on_open_unknowns": [{"step": s, "unknown": u} for s, u in self.resting],
        }
        if steps:
            shape["steps"] = [
                {
                    "number": s.number,
                    "name": s.name,
                    "state": s.state,
                    "reason": s.reason,
                    "evidence": _evidence_json(s.evidence),
                    "strength": s.strength,
                    "inputs": self.inputs.get(s.name),
                }
                for s in self.steps
            ]
        return shape

    def steps_json(self) -> str:
        """The `steps` of `to_json()` as JSON text, made without a dict per step (a run
        may have 100,000 steps); `json.loads` of it equals `to_json()["steps"]`."""
        encode = json.encoder.encode_basestring_ascii
        # most steps end alike ("verified", no reason, the same evidence object)
        endings: dict[tuple[str, str, int], str] = {}
        inputs = self.inputs
        parts = []
        last: tuple[object, object, object] = (None, None, None)
        ending = ""
        for number, name, state, reason, evidence, _ in self.steps:
            if state is not last[0] or reason is not last[1] or evidence is not last[2]:
                last = (state, reason, evidence)
                key = (state, reason, id(evidence))
                found = endings.get(key)
                if found is None:
                    weight = strength(kind for _, kind, _, _ in evidence)
                    found = endings[key] = (
                        f', "state": "{state}", "reason": {encode(reason)}, '
                        f'"evidence": {json.dumps(_evidence_json(evidence))}, '
                        f'"strength": {json.dumps(weight)}, "inputs": '
                    )
                ending = found
            read = inputs.get(name)
            parts.append(
                f'{{"number": {number}, "name": {encode(name)}{ending}'
                f"{'null' if read is None else json.dumps(read)}}}"
            )
        return "[" + ", ".join(parts) + "]"

    def json_text(self) -> str:
        """`to_json()` as JSON text (steps first), quick for a long run."""
        rest = json.dumps(self.to_json(steps=False))
        with collector_paused():
            return '{"steps": ' + self.steps_json() + ", " + rest[1:]
