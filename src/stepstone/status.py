"""Where a run stands: every step's state, decisions, unknowns, effects, the next action."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .models import Decision, StepRecord, Unknown

StepState = Literal["verified", "stale", "failed", "pending"]


@dataclass(frozen=True)
class StepStatus:
    """One step of the plan as it stands now."""

    number: int
    name: str
    state: StepState
    reason: str = ""
    record: StepRecord | None = None

    @property
    def evidence(self) -> str:
        """The step's evidence in one short line."""
        if self.record is None:
            return ""
        parts = []
        for ev in self.record.evidence:
            value = ev.value
            if isinstance(value, str) and len(value) == 64:
                value = f"sha256 {value[:12]}"
            parts.append(f"{ev.check} ({value})" if ev.kind != "completed" else "completed")
        return "; ".join(parts)


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
                f"settle the unresolved effect {key}: `stepstone resolve {key} --happened` "
                f"or `--not-happened`"
            )
        step = self.next_step
        if step is not None:
            why = {
                "pending": "not run yet",
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
            return (
                f"all {len(self.steps)} steps verified; resolve {len(self.open_unknowns)} open "
                f"unknown(s), then finish the run"
            )
        return f"all {len(self.steps)} steps verified: finish the run (%finish or stepstone finish)"

    def to_json(self) -> dict[str, Any]:
        """The documented `status --json` shape."""
        return {
            "run": self.run,
            "plan_mode": self.plan_mode,
            "finished": self.finished,
            "next_action": self.next_action,
            "steps": [
                {
                    "number": s.number,
                    "name": s.name,
                    "state": s.state,
                    "reason": s.reason,
                    "evidence": [
                        {"check": ev.check, "kind": ev.kind, "value": ev.value, "detail": ev.detail}
                        for ev in s.record.evidence
                    ]
                    if s.record
                    else [],
                }
                for s in self.steps
            ],
            "decisions": [{"key": d.key, "value": d.value, "why": d.why} for d in self.decisions],
            "unknowns": [
                {"id": u.id, "question": u.question, "state": u.state, "answer": u.answer}
                for u in self.unknowns
            ],
            "effects": list(self.effects),
            "notes": list(self.notes),
        }

    def render_text(self) -> str:
        """A plain-text status table for a terminal."""
        lines = [f"run {self.run} ({self.plan_mode} plan)"]
        width = max((len(s.name) for s in self.steps), default=4)
        for s in self.steps:
            detail = s.evidence if s.state == "verified" else s.reason
            lines.append(f"  {s.number:>3}  {s.name:<{width}}  {s.state:<8}  {detail}".rstrip())
        for d in self.decisions:
            lines.append(f"  decided {d.key}={d.value}  ({d.why})")
        for u in self.open_unknowns:
            lines.append(f"  unknown {u.id}: {u.question}")
        for e in self.effects:
            lines.append(
                f"  effect {e['key']} ({e['step']}/{e['name']}): {e['state']}; "
                f"next: {e['next_action']}"
            )
        lines.extend(f"  note: {note}" for note in self.notes)
        lines.append(f"next: {self.next_action}")
        return "\n".join(lines)

    def render_html(self) -> str:
        """An HTML status table for Jupyter."""
        from html import escape

        rows = "".join(
            f"<tr><td>{s.number}</td><td>{escape(s.name)}</td><td>{s.state}</td>"
            f"<td>{escape(s.evidence if s.state == 'verified' else s.reason)}</td></tr>"
            for s in self.steps
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
                for e in self.effects
            )
            + "".join(f"<li>note: {escape(n)}</li>" for n in self.notes)
        )
        return (
            f"<div><b>run {escape(self.run)}</b> ({escape(self.plan_mode)} plan)"
            f"<table><tr><th>#</th><th>step</th><th>state</th><th>evidence</th></tr>{rows}"
            f"</table><ul>{extra}</ul><p>next: {escape(self.next_action)}</p></div>"
        )
