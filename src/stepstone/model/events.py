"""The events of a run as it is driven: typed, defined once, written as JSON Lines (one
object a line, with a `type` field) by the kernel that drives the run and read by the
`stepstone run` that started it, by `stepstone run --events FILE`, by the MCP `run`
tool and by the progress display. `stepstone schema` prints their JSON Schema
(`Event`). Nothing reads English text, nothing infers an outcome from Git.

    RunOpened     a kernel opened the run (its id and store, its steps)
    StepStarted   a step began: it is skipped on its evidence, or its cell runs
    StepEnded     how it ended: done, skipped or failed, and why it ran or failed
    EffectEnded   an effect of a step: sent, replayed, taken from another run, refused
    Refused       the run was refused before or between its steps (its error's name)
    RunEnded      the notebook's execution ended: ok, failed, interrupted, died
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from .models import now


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    time: str = Field(default_factory=now, description="when, ISO 8601 UTC")


class RunOpened(_Event):
    """A kernel opened the run it drives (`%resume`)."""

    type: Literal["run_opened"] = "run_opened"
    run: str
    store: str
    steps: int = Field(description="how many steps the plan has")
    cells: bool = Field(description="every code cell is a step (--cells)")
    notes: list[str] = Field(
        default_factory=list,
        description="what opening it said: history taken in from a copy or the remote, a "
        "new lineage (--diverge) and the effects it sends anew",
    )


class StepStarted(_Event):
    """A step began: skipped on its evidence (`skip`), or its cell runs."""

    type: Literal["step_started"] = "step_started"
    number: int
    name: str
    skip: bool
    reason: str = Field(description="why it runs: not run yet, its input changed...")


class StepEnded(_Event):
    """How a step ended."""

    type: Literal["step_ended"] = "step_ended"
    number: int
    name: str
    outcome: Literal["done", "skipped", "failed"]
    reasons: list[str] = Field(
        default_factory=list, description="why it ran again (done) or what it raised (failed)"
    )
    said: list[str] = Field(default_factory=list, description="what its effects said")
    unsaved: dict[str, str] = Field(
        default_factory=dict,
        description="the names it bound that will not survive a resume, with their kinds",
    )


def unsaved_line(unsaved: dict[str, str]) -> str:
    """What a confirmed step could not save, in one line ("" when it saved all)."""
    lost = ", ".join(f"{name} ({kind})" for name, kind in unsaved.items())
    return (
        f"  will not survive a resume: {lost} - re-create it in the step that uses it"
        if lost
        else ""
    )


class EffectEnded(_Event):
    """An effect a step asked for: sent now, replayed from this run's record, taken from
    another run of its lineage, or refused before anything was sent."""

    type: Literal["effect_ended"] = "effect_ended"
    step: str
    name: str
    key: str | None = None
    outcome: Literal["sent", "replayed", "taken", "refused", "unresolved", "failed"]
    detail: str = ""


class Refused(_Event):
    """The run was refused (before a step, or by a magic): its error's class and text."""

    type: Literal["refused"] = "refused"
    error: str = Field(description="the error's class: RunLocked, LeaseHeld, Diverged...")
    message: str


class RunEnded(_Event):
    """The notebook's execution ended (written by `stepstone run`): ok (every step
    confirmed, or nothing to confirm), not done (a step or an effect is left), failed (a
    cell raised), refused, interrupted, died (the kernel), exited (`sys.exit(0)`); the
    exit code `stepstone run` exits with."""

    type: Literal["run_ended"] = "run_ended"
    outcome: Literal["ok", "not done", "failed", "refused", "interrupted", "died", "exited"]
    message: str
    run: str | None = None
    exit_code: int


Event = Annotated[
    RunOpened | StepStarted | StepEnded | EffectEnded | Refused | RunEnded,
    Field(discriminator="type"),
]
_EVENT: TypeAdapter[Any] = TypeAdapter(Event)


def event_schema() -> dict[str, Any]:
    """The JSON Schema of one event (a line of an events file)."""
    return _EVENT.json_schema()


def line(event: BaseModel) -> str:
    """One event as its line of JSON (no newline)."""
    return json.dumps(event.model_dump(mode="json"), separators=(",", ":"))


def parse(text: str) -> Any:
    """One event from its line; ValueError when it is not one."""
    try:
        return _EVENT.validate_json(text)
    except ValidationError as exc:
        raise ValueError(f"not a stepstone event: {text[:200]!r}") from exc


def append(path: str | Path, events: Iterable[BaseModel]) -> None:
    """Append `events` to the JSON Lines file at `path` (each line written whole)."""
    data = "".join(line(e) + "\n" for e in events).encode()
    with open(path, "ab") as out:
        out.write(data)


class Tail:
    """Reads the events appended to a file since the last read (a line only once it is
    whole); lines that are not events are skipped."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._offset = 0
        self._rest = b""

    def __iter__(self) -> Iterator[Any]:
        return iter(self.read())

    def read(self) -> list[Any]:
        """The events appended since the last read."""
        try:
            with open(self.path, "rb") as found:
                found.seek(self._offset)
                data = found.read()
        except OSError:
            return []
        self._offset += len(data)
        data, self._rest = self._rest + data, b""
        *whole, self._rest = data.split(b"\n")
        events = []
        for raw in whole:
            if raw.strip():
                try:
                    events.append(parse(raw.decode()))
                except (ValueError, UnicodeDecodeError):
                    continue
        return events
