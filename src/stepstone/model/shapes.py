"""The documented shape of `stepstone status --json`, as models: `stepstone schema`
prints their JSON Schema, and the tests check real output against them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Shape(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EvidenceShape(_Shape):
    """One piece of a step's evidence, as recorded."""

    check: str = Field(description="the check as written (file:out.csv, expr:..., completed)")
    kind: str = Field(description="what the evidence is (file, sha256, expr, note, completed...)")
    value: Any = Field(description="what the check saw (a hash, a value, a note's text)")
    detail: str | None = Field(description="a short description for people")


class StepShape(_Shape):
    """One step of the plan, verified against the real world when the status was made."""

    number: int
    name: str
    state: Literal["verified", "stale", "failed", "pending"]
    reason: str = Field(
        description="why it is not verified: its own problem, or the chain that makes it "
        "stale ('it uses what step load made, and step load is stale'); empty when verified"
    )
    evidence: list[EvidenceShape]
    strength: Literal["strong", "weak"] | None = Field(
        description="strong: re-checkable evidence; weak: only a note or completion; "
        "null: no record"
    )
    inputs: dict[str, str | None] | None = Field(
        description="what the step read, with the value seen: decision:KEY (its value), "
        "unknown:ID (its answer), file:PATH (its sha256), step:NAME (that step's "
        "fingerprint); null when not recorded (the conservative rule applies)"
    )


class DecisionShape(_Shape):
    key: str
    value: str
    why: str


class UnknownShape(_Shape):
    id: str
    question: str
    state: Literal["open", "resolved"]
    answer: str | None


class EffectShape(_Shape):
    """An external write and what happens to it next."""

    key: str
    step: str
    name: str
    state: Literal["planned", "submitted", "confirmed", "unresolved"]
    intent: str
    attempts: int
    receipt: Any = None
    expires: str | None = Field(
        default=None, description="when a keyed receiver forgets the key (keyed effects)"
    )
    error: str | None = None
    next_action: str


class RestingShape(_Shape):
    step: str
    unknown: str


class StatusShape(_Shape):
    """`stepstone status --json`: a run's whole state and the next thing to do."""

    run: str
    plan_mode: Literal["explicit", "notebook", "incremental"]
    finished: str | None
    next_action: str
    decisions: list[DecisionShape]
    unknowns: list[UnknownShape]
    effects: list[EffectShape]
    notes: list[str]
    resting_on_open_unknowns: list[RestingShape] = Field(
        description="confirmed steps whose result rests on a question still open"
    )
    steps: list[StepShape]


def schemas() -> dict[str, Any]:
    """The JSON Schema of each documented command output, by the command."""
    return {"status --json": StatusShape.model_json_schema()}
