"""The records a run is made of, as pydantic models stored as human-readable JSON."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal, TypeAlias, TypeVar

import pydantic_core
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from ..errors import RecordError, SchemaTooNew

SCHEMA_VERSION = 7  # the newest this version reads
# fields added since schema 1, with the schema that added them: left out while empty, so
# that a record that does not use them stays readable by earlier versions; one that uses
# them says that schema, which an earlier version refuses with "upgrade" rather than
# misreading
_ADDED = {
    "StepRecord": {"unsaved": 2, "kept": 2, "wrote": 4, "kernel": 5},
    "Decision": {"by": 2, "over": 2, "who": 6, "earlier": 6},
    "Unknown": {"why": 2, "who": 6},
    "RunInfo": {
        "forked_from": 2,
        "parameters": 2,
        "inherited": 3,
        "cells": 4,
        "lineage": 5,
        "left": 5,
        "shared": 5,
    },
    "EffectRecord": {"basis": 5, "settled": 7},
}

PlanMode = Literal["explicit", "notebook", "incremental"]
RecordStatus = Literal["confirmed", "failed"]  # a step record's outcome
EvidenceKind = Literal["file", "sha256", "cmd", "expr", "call", "note", "completed"]


def now() -> str:
    """The current time as an ISO 8601 UTC string with milliseconds."""
    return stamp(datetime.now(timezone.utc))


def stamp(moment: datetime) -> str:
    """A timezone-aware time as an ISO 8601 UTC string with milliseconds."""
    utc = moment.astimezone(timezone.utc)
    return utc.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Record(BaseModel):
    """Base of every stored file: strict fields and a schema version."""

    # built on first use: a reader of a run needs only some of the record types
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    schema_version: int = 1


class Lineage(Record):
    """Steps whose effects are keyed by another run's lineage: a fork's steps up to its
    fork point keep the keys of the run (`run`, made with `uid`) they came from."""

    run: str
    uid: str = ""
    steps: tuple[str, ...]  # by identity (a step's first name)


class RunInfo(Record):
    """The small head file of a run (`run.json`), rewritten by every commit."""

    run: str
    created: str
    updated: str
    plan_mode: PlanMode = "incremental"
    goal: str = ""
    notebook: str = ""  # the notebook that drives the run, relative to `workdir`
    workdir: str = ""  # where its relative paths resolve, relative to the store's folder
    program: str = ""  # the command line of a Python-API run's script, relative to `workdir`
    uid: str = ""  # made at creation: a new run of the same id keys its effects anew
    forked_from: str = ""  # RUN@COMMIT: the run and commit this one was forked from
    parameters: str = ""  # the canonical JSON of the parameters it was made with
    inherited: tuple[Lineage, ...] = ()  # a fork's steps that keep their source's keys
    cells: bool = False  # every code cell of its notebook is a step (`stepstone run --cells`)
    lineage: str = ""  # what its effects' keys are made from: shared by its copies, forks
    # and parameter sets ("": its uid, or for a run made before lineages, its id)
    left: tuple[str, ...] = ()  # the steps (by identity) that left the plan in its last change
    shared: bool = False  # it travels through a remote, and its drivers take turns by the
    # lease there: a store that has it (a plain `git clone` included) takes the lease
    seq: int = 0
    finished: str | None = None


class PlannedStep(Record):
    """One numbered step of the plan with its checks and declared inputs and outputs."""

    number: int = Field(ge=1)
    name: str
    checks: tuple[str, ...] = ()
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    source_hash: str | None = None
    renamed_from: tuple[str, ...] = ()  # the names it had before, oldest first

    @property
    def identity(self) -> str:
        """The name its effects are keyed by: its first name, kept across renames."""
        return self.renamed_from[0] if self.renamed_from else self.name


class Evidence(Record):
    """What a completion check observed, re-checkable later by `verify`."""

    check: str
    kind: EvidenceKind
    value: str | int | bool | None = None
    detail: str = ""


class Artifact(Record):
    """A saved output value: content-addressed in the store, verified by sha256."""

    sha256: str
    format: str
    size: int
    mark: str | None = None  # for a pickle: who wrote it (see `trust`)


# What a kernel keeps of a step cell for itself, beside the step's values: the outputs
# its code displayed (shown again when it is skipped), the process state it set, the
# names that share objects, whether it called sys.exit(0). Records made before 2026-12
# kept them among the outputs, named `__displayed__`... (`kernel_part`).
KERNEL_KEYS = ("displayed", "process", "shared", "exited", "result")
_KERNEL_BEFORE = {f"__{key}__": key for key in KERNEL_KEYS}


def kernel_part(outputs: dict[str, Artifact]) -> tuple[dict[str, Artifact], dict[str, Artifact]]:
    """(the user's outputs, the kernel's) of outputs recorded as records before 2026-12
    kept them, the kernel's under `__displayed__`, `__process__`..."""
    if not any(name in _KERNEL_BEFORE for name in outputs):
        return outputs, {}
    users = {n: a for n, a in outputs.items() if n not in _KERNEL_BEFORE}
    kernels = {_KERNEL_BEFORE[n]: a for n, a in outputs.items() if n in _KERNEL_BEFORE}
    return users, kernels


class StepRecord(Record):
    """The progress record of one step: status, evidence and what the next step needs."""

    @model_validator(mode="after")
    def _kernel_apart(self) -> StepRecord:
        """A record made before 2026-12 kept the kernel's part among its outputs."""
        users, kernels = kernel_part(self.outputs)
        if kernels:
            object.__setattr__(self, "outputs", users)
            object.__setattr__(self, "kernel", {**kernels, **self.kernel})
        return self

    number: int
    name: str
    status: RecordStatus
    attempt: int = 1
    started: str
    finished: str
    seq: int
    evidence: tuple[Evidence, ...] = ()
    facts: dict[str, Any] = Field(default_factory=dict)
    outputs: dict[str, Artifact] = Field(default_factory=dict)
    unsaved: dict[str, str] = Field(default_factory=dict)  # bound names not saved: their types
    kept: dict[str, Artifact] = Field(default_factory=dict)  # files of keep: checks, by path
    checks: tuple[str, ...] = ()
    source_hash: str | None = None
    error: str | None = None
    holder: str = ""
    inputs: dict[str, str | None] | None = None  # what it read, with the value seen
    reads: tuple[str, ...] = ()  # the kernel names its cell may read
    binds: tuple[str, ...] = ()  # the kernel names its cell binds
    wrote: tuple[str, ...] = ()  # the files in the work folder its code opened for writing
    kernel: dict[str, Artifact] = Field(default_factory=dict)  # what a kernel keeps for
    # itself beside the step's values (`KERNEL_KEYS`): never a value of the user's
    rerun: str | None = None  # why a person asked it to run again (`stepstone rerun`)
    reran_for: str | None = None  # the last such reason, after which it ran


class DecisionChange(BaseModel):
    """A value a decision had before it was revised (or reworded): what, why, when, how
    it came and who gave it (a part of its decision's record)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    value: str
    why: str
    time: str
    by: str | None = None
    who: str | None = None


class Decision(Record):
    """A decision with its reason, so that a resumed run does not reopen it."""

    key: str
    value: str
    why: str
    time: str
    revised_from: str | None = None
    by: str | None = None  # made outside the notebook (cli, mcp, python); None: a %decide line
    over: str | None = None  # the value of the `%decide` line it stands over (made outside)
    who: str | None = None  # the person or agent who decided it (`people.who`)
    earlier: tuple[DecisionChange, ...] = ()  # what it was before, oldest first

    def change(self) -> DecisionChange:
        """This decision as an earlier value of the one that revises it."""
        return DecisionChange(
            value=self.value, why=self.why, time=self.time, by=self.by, who=self.who
        )


class Unknown(Record):
    """An open question, recorded so it is not mistaken for a settled one."""

    id: str
    question: str
    state: Literal["open", "resolved"] = "open"
    asked: str
    answer: str | None = None
    resolved: str | None = None
    why: str | None = None  # how the one who answered knows
    who: str | None = None  # who answered (`people.who`)


class Resolution(Record):
    """How a person or agent settled an effect whose outcome was unknown."""

    happened: bool
    by: str
    time: str
    why: str = ""


class EffectRecord(Record):
    """An external write: its key, state, payload fingerprint and receipt. The effect is
    its name and payload within the run's lineage; `step` (the identity of the step that
    asked for it) and `basis` say where and on what it was asked."""

    key: str
    step: str
    name: str
    state: Literal["planned", "submitted", "confirmed", "unresolved"]
    receiver: Literal["keyed", "lookup", "blind"] = "blind"
    payload_sha256: str | None = None
    intent: str
    retention: float | None = None  # seconds a keyed receiver keeps the key (None: unknown)
    attempts: int = 1
    error: str | None = None
    receipt: Any = None
    confirmed: str | None = None
    resolution: Resolution | None = None
    basis: str | None = None  # what the asking step had read (None: made before bases)
    # the intent in doubt a person's resolution settled: that very intent, wherever it was
    # carried (a fork, a sibling run), is settled whatever the clocks that dated them said
    settled: str | None = None


class Plan(BaseModel):
    """A run's plan: its head file and its numbered steps, in order."""

    model_config = ConfigDict(frozen=True)
    run: str
    mode: PlanMode
    steps: tuple[PlannedStep, ...] = ()

    def number_of(self, name: str) -> int | None:
        """The step number of `name`, or None when the plan does not have it."""
        for step in self.steps:
            if step.name == name:
                return step.number
        return None


R = TypeVar("R", bound=Record)


def dump(record: Record) -> bytes:
    """Serialise a record as stable, human-readable JSON."""
    data = record.model_dump(mode="json")
    for name, schema in _ADDED.get(type(record).__name__, {}).items():
        if data.get(name):
            data["schema_version"] = max(schema, data["schema_version"])
        else:
            data.pop(name, None)
    return pydantic_core.to_json(_keys_sorted(data), indent=2) + b"\n"


def _keys_sorted(value: Any) -> Any:
    """`value` with every mapping's keys in order, so that a record dumps the same way
    whatever order its fields were set in (pydantic's serialiser is 10x faster than
    `json.dumps` with an indent, which takes Python's slow path)."""
    if isinstance(value, dict):
        return {key: _keys_sorted(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_keys_sorted(item) for item in value]
    return value


def load(cls: type[R], data: bytes, path: str, *, where: Callable[[str], str] | None = None) -> R:
    """Parse and validate a stored record, naming where it is (`where(path)`) in any error."""
    try:
        fast = cls.model_validate_json(data)
    except ValidationError:
        pass  # the slow path below says what is wrong, or that the schema is newer
    else:
        if fast.schema_version > SCHEMA_VERSION:
            raise SchemaTooNew(where(path) if where else path, fast.schema_version, SCHEMA_VERSION)
        return fast
    return _load_slowly(cls, data, where(path) if where else path)


_adapters: dict[type[Record], TypeAdapter[Any]] = {}


def load_many(cls: type[R], documents: list[bytes]) -> list[R] | None:
    """Validate many stored records in one pass, or None when any of them is not valid.

    The caller then loads them one by one, so that the bad one is named.
    """
    if not documents:
        return []
    adapter = _adapters.get(cls)
    if adapter is None:
        adapter = _adapters[cls] = TypeAdapter(list[cls])  # type: ignore[valid-type]
    try:
        records: list[R] = adapter.validate_json(b"[" + b",".join(documents) + b"]")
    except ValidationError:
        return None
    if len(records) != len(documents) or any(r.schema_version > SCHEMA_VERSION for r in records):
        return None
    return records


def _load_slowly(cls: type[R], data: bytes, where: str) -> R:
    try:
        raw = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RecordError(where, f"not valid JSON ({exc})") from exc
    if not isinstance(raw, dict):
        raise RecordError(where, "expected a JSON object")
    version = raw.get("schema_version")
    if isinstance(version, int) and version > SCHEMA_VERSION:
        raise SchemaTooNew(where, version, SCHEMA_VERSION)
    try:
        return cls.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(root)'}: {err['msg']}"
            for err in exc.errors()[:5]
        )
        raise RecordError(where, problems) from exc


def json_schemas() -> dict[str, Any]:
    """JSON Schema of every stored file type, generated from the models."""
    return {
        cls.__name__: cls.model_json_schema()
        for cls in (RunInfo, PlannedStep, StepRecord, Decision, Unknown, EffectRecord)
    }


# -- what a step is asked to be --------------------------------------------------------
# Its name and options, as a `%%step` line gives them (`cellargs.parse_step_line`), a
# `# step:` line in `--cells` mode, or `Run.step` and `Run.stepping` in Python: the one
# spelling of a step's options that the step protocol (`run/stepping.py`) takes.

Check: TypeAlias = "str | Callable[[], Any]"  # as written (`file:out.csv`), or a function


@dataclass(frozen=True)
class StepSpec:
    """A step as asked for: its name, checks, declared inputs (`file:PATH`, `unknown:U1`)
    and saved outputs (`--out` names); `force` runs it although the step before it is
    not verified; `was` is its earlier name (renamed); `rerun` a reason to run it again,
    once; `source` the code of its cell, when it is one (its edits are noticed)."""

    name: str
    checks: tuple[Check, ...] = ()
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    force: bool = False
    was: str | None = None
    rerun: str | None = None
    source: str | None = None


@dataclass
class Asking:
    """The step that asks for effects in a context (a step's body, the threads and tasks
    it starts): its name, its identity (its first name), how to tell what it has read so
    far (`basis`, computed when a new effect needs it), and whether it has ended (an
    effect asked after that, from a thread that outlived it, is refused)."""

    step: str
    identity: str
    basis: Callable[[], str]
    ended: bool = False
    said: list[str] = field(default_factory=list)  # what the step's card says of effects
    told: list[Any] = field(default_factory=list)  # its effects' `EffectEnded` events
