"""Where a run stands: every step's state, decisions, unknowns, effects, the next action."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from .bulk import collector_paused
from .models import Decision, Unknown

if TYPE_CHECKING:
    from .index import EvidenceRow

StepState = Literal["verified", "stale", "failed", "pending"]
_SHOWN_EDGE = 2  # steps shown at each end of a long run of steps in one state


class StepStatus(NamedTuple):
    """One step of the plan as it stands now."""

    number: int
    name: str
    state: StepState
    reason: str = ""
    evidence: tuple[EvidenceRow, ...] = ()  # (check, kind, value, detail) of its record
    finished: str = ""  # when its record was written

    @property
    def evidence_text(self) -> str:
        """The step's evidence in one short line."""
        return evidence_text(self.evidence)


def evidence_text(evidence: Iterable[EvidenceRow]) -> str:
    """Evidence rows in one short line."""
    parts = []
    for check, kind, value, _ in evidence:
        if isinstance(value, str) and len(value) == 64:
            value = f"sha256 {value[:12]}"
        parts.append(f"{check} ({value})" if kind != "completed" else "completed")
    return "; ".join(parts)


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
    def next_action(self) -> str:
        """What to do next, in one sentence."""
        if self.unresolved_effects:
            key = self.unresolved_effects[0]["key"]
            return (
                f"settle the unresolved effect {key}: check the receiver, then `stepstone "
                f"resolve {key} --run {self.run} --happened` or `--not-happened`"
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
        if not self.steps:
            return "run the first step" + (
                " (the plan grows as steps are met)" if self.plan_mode == "incremental" else ""
            )
        if self.open_unknowns:
            first = self.open_unknowns[0].id
            return (
                f"all {len(self.steps)} steps verified; answer {len(self.open_unknowns)} open "
                f"unknown(s) (`%unknown --resolve {first} ANSWER`), then finish the run"
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
                {"id": u.id, "question": u.question, "state": u.state, "answer": u.answer}
                for u in self.unknowns
            ],
            "effects": list(self.effects),
            "notes": list(self.notes),
        }
        if steps:
            shape["steps"] = [
                {
                    "number": s.number,
                    "name": s.name,
                    "state": s.state,
                    "reason": s.reason,
                    "evidence": _evidence_json(s.evidence),
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
        parts = []
        last: tuple[object, object, object] = (None, None, None)
        ending = ""
        for number, name, state, reason, evidence, _ in self.steps:
            if state is not last[0] or reason is not last[1] or evidence is not last[2]:
                last = (state, reason, evidence)
                key = (state, reason, id(evidence))
                found = endings.get(key)
                if found is None:
                    found = endings[key] = (
                        f', "state": "{state}", "reason": {encode(reason)}, '
                        f'"evidence": {json.dumps(_evidence_json(evidence))}}}'
                    )
                ending = found
            parts.append(f'{{"number": {number}, "name": {encode(name)}{ending}')
        return "[" + ", ".join(parts) + "]"

    def json_text(self) -> str:
        """`to_json()` as JSON text (steps first), quick for a long run."""
        rest = json.dumps(self.to_json(steps=False))
        with collector_paused():
            return '{"steps": ' + self.steps_json() + ", " + rest[1:]

    def shown_steps(self, *, every: bool = False) -> list[StepStatus | str]:
        """The steps to show a person: with `every` all of them, else each run of more
        than five steps in the same state as its first two, a line saying how many
        are left out, and its last two (a 100,000-step run is a few lines)."""
        if every or len(self.steps) <= _SHOWN_EDGE * 2 + 1:
            return list(self.steps)
        shown: list[StepStatus | str] = []
        start = 0
        while start < len(self.steps):
            state = self.steps[start].state
            end = start
            while end < len(self.steps) and self.steps[end].state == state:
                end += 1
            group = self.steps[start:end]
            if len(group) <= _SHOWN_EDGE * 2 + 1:
                shown.extend(group)
            else:
                left_out = group[_SHOWN_EDGE:-_SHOWN_EDGE]
                shown.extend(group[:_SHOWN_EDGE])
                shown.append(
                    f"... {len(left_out):,} more {state} "
                    f"(steps {left_out[0].number:,}-{left_out[-1].number:,})"
                )
                shown.extend(group[-_SHOWN_EDGE:])
            start = end
        return shown

    def shown_effects(self, *, every: bool = False) -> tuple[list[dict[str, Any]], str]:
        """The effects to show a person, and a line counting the ones left out: with
        `every` all of them, else those not confirmed (up to five), then the rest as a
        count by state (a run may have sent thousands)."""
        if every or len(self.effects) <= _SHOWN_EDGE * 2 + 1:
            return list(self.effects), ""
        open_ = [e for e in self.effects if e["state"] != "confirmed"]
        shown = open_[: _SHOWN_EDGE * 2 + 1]
        left = [e for e in self.effects if e not in shown]
        counts: dict[str, int] = {}
        for e in left:
            counts[e["state"]] = counts.get(e["state"], 0) + 1
        said = ", ".join(f"{n:,} {state}" for state, n in counts.items())
        return shown, f"{'more ' if shown else ''}effects: {said} (--all lists each)"

    def footer_lines(self, *, every: bool = False) -> list[str]:
        """Decisions, open unknowns, effects, notes and the next action, a line each."""
        lines = [f"  decided {d.key}={d.value}  ({d.why})" for d in self.decisions]
        lines += [f"  unknown {u.id}: {u.question}" for u in self.open_unknowns]
        effects, rest = self.shown_effects(every=every)
        lines += [
            f"  effect {e['key']} ({e['step']}/{e['name']}): {e['state']}; next: {e['next_action']}"
            for e in effects
        ]
        if rest:
            lines.append(f"  {rest}")
        lines += [f"  note: {note}" for note in self.notes]
        lines.append(f"next: {self.next_action}")
        return lines

    def render_text(self, *, every: bool = False) -> str:
        """A plain-text status table for a terminal (long runs shortened, see
        `shown_steps`)."""
        lines = [f"run {self.run} ({self.plan_mode} plan)"]
        shown = self.shown_steps(every=every)
        steps = [s for s in shown if isinstance(s, StepStatus)]
        width = max((len(s.name) for s in steps), default=4)
        digits = max((len(str(s.number)) for s in steps), default=3)
        for s in shown:
            if isinstance(s, str):
                lines.append(f"  {s}")
                continue
            detail = s.evidence_text if s.state == "verified" else s.reason
            lines.append(
                f"  {s.number:>{digits}}  {s.name:<{width}}  {s.state:<8}  {detail}".rstrip()
            )
        return "\n".join(lines + self.footer_lines(every=every))

    def render_html(self) -> str:
        """An HTML status table for Jupyter (long runs shortened, see `shown_steps`)."""
        from html import escape

        rows = "".join(
            f"<tr><td>{s.number}</td><td>{escape(s.name)}</td><td>{s.state}</td>"
            f"<td>{escape(s.evidence_text if s.state == 'verified' else s.reason)}</td></tr>"
            if isinstance(s, StepStatus)
            else f'<tr><td colspan="4"><i>{escape(s)}</i></td></tr>'
            for s in self.shown_steps()
        )
        extra = (
            "".join(
                f"<li>decided <code>{escape(d.key)}={escape(d.value)}</code>: {escape(d.why)}</li>"
                for d in self.decisions
            )
            + "".join(
                f"<li>unknown {escape(u.id)}: {escape(u.question)}</li>" for u in self.open_unknowns
            )
            + "".join(
                f"<li>effect <code>{escape(e['key'])}</code>: {escape(e['state'])}</li>"
                for e in self.shown_effects()[0]
            )
            + (f"<li>{escape(self.shown_effects()[1])}</li>" if self.shown_effects()[1] else "")
            + "".join(f"<li>note: {escape(n)}</li>" for n in self.notes)
        )
        return (
            f"<div><b>run {escape(self.run)}</b> ({escape(self.plan_mode)} plan)"
            f"<table><tr><th>#</th><th>step</th><th>state</th><th>evidence</th></tr>{rows}"
            f"</table><ul>{extra}</ul><p>next: {escape(self.next_action)}</p></div>"
        )
