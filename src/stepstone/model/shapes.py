"""The documented shapes of every command's `--json` output and of every MCP tool's
result, as models: `stepstone schema` prints their JSON Schema, the MCP server declares
each tool's `outputSchema` from them (and validates its `structuredContent` against
them), and the tests check real output against them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, TypeAdapter


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
    why: str | None = Field(default=None, description="how the one who answered knows")


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


class LeftOutShape(_Shape):
    """The steps an MCP answer about a long run left out (`every=true` lists them)."""

    count: int
    by_state: dict[str, int]
    how: str


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
    left_out: LeftOutShape | None = Field(
        default=None, description="MCP, a long run: the steps not listed (every=true lists them)"
    )


class VerifyShape(_Shape):
    """`stepstone verify --json`: every recorded step's evidence checked again now."""

    run: str
    ok: bool = Field(description="no step is stale or failed")
    steps: list[StepShape]
    left_out: LeftOutShape | None = Field(
        default=None, description="MCP, a long run: the steps not listed (every=true lists them)"
    )


class CommandShape(_Shape):
    """A command for a shell: its words, the folder to run it in, one quoted line."""

    argv: list[str]
    cwd: str
    shell: str


class ToolCallShape(_Shape):
    """An MCP tool call: the tool and the arguments the server knows (an answer, or
    whether an effect happened, is the caller's to add)."""

    tool: str
    arguments: dict[str, Any]


class DoneStepShape(_Shape):
    number: int
    name: str
    evidence: str


class NotDoneStepShape(_Shape):
    number: int
    name: str
    state: Literal["stale", "failed", "pending"]
    reason: str


class OpenUnknownShape(_Shape):
    id: str
    question: str


class AnsweredUnknownShape(_Shape):
    id: str
    question: str
    answer: str | None
    why: str | None = Field(default=None, description="how the one who answered knows")


class RevisingShape(_Shape):
    """How to revise a decision: the command (VALUE and REASON to fill in), the tool call
    (value and why to add)."""

    argv: list[str]
    tool: ToolCallShape


class BriefDecisionShape(DecisionShape):
    runs_again: list[str] = Field(
        description="the steps that revising it (to any other value) runs again, in plan order"
    )
    revise: RevisingShape


class BriefShape(_Shape):
    """`stepstone brief --json`: what a fresh agent needs to go on."""

    run: str
    goal: str
    store: str
    workdir: str
    done: list[DoneStepShape]
    not_done: list[NotDoneStepShape]
    decisions: list[BriefDecisionShape]
    open_unknowns: list[OpenUnknownShape]
    answered_unknowns: list[AnsweredUnknownShape]
    unresolved_effects: list[EffectShape]
    next_action: str
    command: str | None = Field(description="the shell line that goes on (next_command.shell)")
    next_command: CommandShape | None = Field(
        description="the command that goes on; null: only the run's own code can, or it is finished"
    )
    next_tool: ToolCallShape | None = Field(
        description="the MCP tool call that goes on; null: nothing is left, or only the "
        "run's own Python code can go on"
    )
    notes: list[str]
    task: str | None = Field(default=None, description="the task the brief was asked for")
    for_task: list[str] = Field(
        default_factory=list,
        description="what the run offers for the task: the commands that revise what it names",
    )
    left_out: LeftOutShape | None = Field(
        default=None, description="MCP, a long run: the steps not listed (every=true lists them)"
    )


class LogEntryShape(_Shape):
    """One commit of a run, read from its trailers (`stepstone log --json`)."""

    commit: str
    time: str
    subject: str
    status: str
    step: str = Field(description="`N name`, or empty for a commit about no step")
    evidence: list[str]
    via: str = Field(
        description="how it came: cli, mcp (a command's one change); cli run, mcp run, "
        "python run, notebook (a driver); empty: the Python API"
    )
    why: str | None = Field(
        default=None, description="the reason given (a decision, an answer, a rerun, a reopen)"
    )
    by: str = Field(default="", description="who made the commit, as Git names its author")


class RecordedEvidenceShape(_Shape):
    check: str
    kind: str
    value: str | int | bool | None
    detail: str


class OutputShape(_Shape):
    """A saved value described without loading code (`stepstone outputs --json`)."""

    name: str
    format: str
    size: int
    sha256: str
    file: str = Field(description="the file `get` writes by default")
    get: str = Field(description="how to write it out: a command, or the MCP tool call")
    load: str = Field(description="how to load the written file in Python")
    type: str
    shape: list[int] | None = None
    dtype: str | None = None
    columns: list[str] | None = None
    value: Any = Field(default=None, description="a small value, as it is")
    loaded: bool | None = None


class RecordSummaryShape(_Shape):
    status: Literal["confirmed", "failed"]
    attempt: int
    started: str
    finished: str
    error: str | None
    holder: str
    rerun: str | None


class CommitShape(_Shape):
    id: str
    time: int
    subject: str


class StepEffectShape(_Shape):
    key: str
    name: str
    state: Literal["planned", "submitted", "confirmed", "unresolved"]
    receipt: Any


class ShowShape(_Shape):
    """`stepstone show STEP --json`: one step, everything recorded about it."""

    run: str
    step: str
    number: int
    state: Literal["verified", "stale", "failed", "pending"]
    reason: str
    record: RecordSummaryShape | None
    evidence: list[RecordedEvidenceShape] = []
    inputs: dict[str, str | None] | None = None
    reads: list[str] = []
    binds: list[str] = []
    outputs: list[OutputShape]
    unsaved: dict[str, str] = {}
    kept: dict[str, str] = {}
    commit: CommitShape | None
    effects: list[StepEffectShape]


class GotOutputShape(_Shape):
    """`stepstone outputs STEP --get NAME --json`: where a saved value was written."""

    run: str
    step: str
    name: str
    file: str
    format: str
    size: int


class UnknownRecordShape(_Shape):
    """An unknown as recorded (`stepstone ask --json`)."""

    run: str
    id: str
    question: str
    state: Literal["open", "resolved"]
    asked: str
    answer: str | None
    resolved: str | None
    why: str | None
    who: str | None = None


class AnswerShape(UnknownRecordShape):
    """`stepstone answer --json`: the answered unknown and what it reaches."""

    runs_again: list[str] = Field(
        description="the steps that read the answer (stepstone.answer, --uses) and run again "
        "at the next run, in plan order"
    )
    note: str | None = Field(description="when no step reads it: how a step reads it")


class DecisionChangeShape(_Shape):
    """A value a decision had before it was revised."""

    value: str
    why: str
    time: str
    by: str | None = None
    who: str | None = None


class DecideShape(_Shape):
    """`stepstone decide --json`: the decision made (or, with --dry-run, what it would do)."""

    run: str
    key: str
    value: str
    why: str | None = None
    time: str | None = None
    revised_from: str | None = None
    by: str | None = None
    over: str | None = None
    who: str | None = Field(default=None, description="who decided it, as Git names people")
    earlier: list[DecisionChangeShape] = Field(
        default_factory=list, description="the values it had before, oldest first"
    )
    was: str | None = Field(description="the value before (null: not decided)")
    runs_again: list[str] = Field(description="the steps that read it and run again")
    new_reason: str | None = Field(default=None, description="--dry-run: the reason it records")
    note: str | None = Field(description="when no step reads it: how a step reads it")
    notebook_line: str | None = Field(
        default=None,
        description="the notebook's %decide line rewritten to the new value (null: none)",
    )


class ResolutionShape(_Shape):
    happened: bool
    by: str
    time: str
    why: str


class ResolvedEffectShape(_Shape):
    """`stepstone resolve --json`: the effect's record, settled."""

    run: str
    key: str
    step: str
    name: str
    state: Literal["planned", "submitted", "confirmed", "unresolved"]
    receiver: Literal["keyed", "lookup", "blind"]
    payload_sha256: str | None
    intent: str
    retention: float | None
    attempts: int
    error: str | None
    receipt: Any
    confirmed: str | None
    resolution: ResolutionShape | None
    basis: str | None = Field(default=None, description="what the asking step had read")
    settled: str | None = Field(
        default=None, description="the intent in doubt a person's resolution settled"
    )


class RerunShape(_Shape):
    """`stepstone rerun --json`: the steps marked to run again."""

    run: str
    step: str
    why: str
    marked: list[str]


class LeftBehindShape(_Shape):
    decisions: list[str]
    unknowns: list[str]


class AnewShape(_Shape):
    step: str
    name: str
    state: Literal["planned", "submitted", "confirmed", "unresolved"]


class ForkShape(_Shape):
    """`stepstone fork --json`: the new run and what it did not take along."""

    run: str
    from_: str = Field(alias="from")
    at: str
    commit: str
    steps: list[str]
    left_behind: LeftBehindShape
    anew: list[AnewShape] = Field(description="effects the original performed after the fork")
    notebook: str


class SideShape(_Shape):
    status: Literal["confirmed", "failed"]
    attempt: int
    evidence: dict[str, Any]
    outputs: dict[str, str]
    error: str | None


class StepDiffShape(_Shape):
    step: str
    a: SideShape | None
    b: SideShape | None
    differs: list[str]


class ValueDiffShape(_Shape):
    key: str
    a: str
    b: str


class AnswerDiffShape(_Shape):
    question: str
    a: str
    b: str


class DiffShape(_Shape):
    """`stepstone diff A B --json`: what two runs recorded differently."""

    a: str
    b: str
    same: bool
    steps: list[StepDiffShape]
    decisions: list[ValueDiffShape]
    unknowns: list[AnswerDiffShape]


class RunRowShape(_Shape):
    """One run of the store (`stepstone runs --json`)."""

    run: str
    state: Literal["active", "finished"]
    steps: int
    confirmed: int
    last_activity: str | None


class FinishShape(_Shape):
    """`stepstone finish --json`: the finished run and its summary."""

    run: str
    finished: str | None
    file: str = Field(description="where the summary was written: <run>.summary.md")
    tag: str
    summary: str = Field(description="the summary, Markdown (summary.md in the store too)")


class ReopenShape(_Shape):
    """`stepstone reopen --json`."""

    run: str
    reopened: bool = Field(description="false: it was not finished")
    why: str


class CellShape(_Shape):
    index: int = Field(description="the cell's number in the notebook, from 1")
    id: str | None
    type: Literal["code", "markdown", "raw"]
    step: str | None = Field(description="the step it is; null: a plain cell")
    source: str
    state: Literal["verified", "stale", "failed", "pending"] | None
    reason: str


class CellsShape(_Shape):
    """The MCP tool `show_cells`: the notebook's cells and their steps' states."""

    run: str | None
    notebook: str
    cells: list[CellShape]


class EditShape(_Shape):
    """The MCP tool `edit_step`: what the edit did and what the next run runs again."""

    run: str | None
    notebook: str
    action: Literal["replaced", "inserted", "unchanged"]
    step: str
    index: int = Field(description="the edited or inserted cell's number, from 1")
    changes: list[str] = Field(description="how the notebook differs from the run's plan now")
    runs_again: list[str] = Field(description="the steps the next run runs (or runs again)")


class CellEditShape(_Shape):
    """The MCP tool `edit_cell`: what the edit did and what the next run runs again."""

    run: str | None
    notebook: str
    action: Literal["replaced", "inserted", "unchanged"]
    step: str | None = Field(description="the step the cell is (null: not a step)")
    index: int = Field(description="the edited or inserted cell's number, from 1")
    changes: list[str] = Field(description="how the notebook differs from the run's plan now")
    runs_again: list[str] = Field(description="the steps the next run runs (or runs again)")


class PushShape(_Shape):
    """`stepstone push --json`: the run's tip as pushed, and where."""

    run: str
    tip: str
    remote: str = Field(description="the remote's URL, without credentials")


class PullShape(_Shape):
    """`stepstone pull --json`: what the remote's history did to the run here."""

    run: str
    state: str = Field(description="up to date, fast-forwarded, pushed ahead, diverged...")
    preserved: str | None = Field(description="the ref keeping the other history (diverged)")
    carried: int = Field(description="effects the other history performed, carried over")


class CloneShape(_Shape):
    """`stepstone clone --json`: the store made, and its runs."""

    store: str
    remote: str = Field(description="the URL cloned, without credentials")
    runs: list[str]


class HandoffShape(_Shape):
    """`stepstone handoff --json`: the run pushed and let go, and what the next agent needs."""

    run: str
    tip: str
    remote: str
    brief: str = Field(description="the hand-off brief (Markdown)")
    next_agent: str = Field(description="the commands that continue the run elsewhere")
    note: str | None = Field(
        default=None, description="what else to hand over (a notebook changed since its commit)"
    )


class StepOutcomeShape(_Shape):
    number: int
    of: int
    name: str
    outcome: Literal["done", "skipped", "failed"]


class RanShape(_Shape):
    """The MCP tool `run`: what `stepstone run` did, and the run's status after it."""

    run: str | None
    notebook: str
    executed: str = Field(description="the executed notebook (NAME.out.ipynb)")
    exit_code: int = Field(description="stepstone run's: 0 done, 1 not done, 130 interrupted")
    outcome: Literal["done", "not done", "failed", "interrupted"]
    message: str
    steps: list[StepOutcomeShape] = Field(description="each step's outcome, in the order met")
    said: list[str] = Field(description="every line stepstone run printed")
    status: StatusShape | None


class ReportShape(_Shape):
    """The MCP tool `report`: the HTML page, as a resource to read."""

    run: str
    uri: str
    mime_type: str
    size: int


class Schemas(RootModel[dict[str, dict[str, Any]]]):
    """`stepstone schema`: a JSON Schema by record file and by command output."""


def listed(item: type[BaseModel]) -> Any:
    """The MCP result of a tool that returns a list: `{"result": [...]}`."""
    from pydantic import create_model

    return create_model(f"{item.__name__}List", result=(list[item], ...))  # type: ignore[valid-type]


LogShape = listed(LogEntryShape)
OutputsShape = listed(OutputShape)
RunsShape = listed(RunRowShape)

COMMANDS: dict[str, Any] = {
    "status --json": StatusShape,
    "brief --json": BriefShape,
    "log --json": list[LogEntryShape],
    "show --json": ShowShape,
    "outputs --json": list[OutputShape],
    "outputs --get --json": GotOutputShape,
    "verify --json": VerifyShape,
    "runs --json": list[RunRowShape],
    "answer --json": AnswerShape,
    "ask --json": UnknownRecordShape,
    "decide --json": DecideShape,
    "resolve --json": ResolvedEffectShape,
    "rerun --json": RerunShape,
    "fork --json": ForkShape,
    "diff --json": DiffShape,
    "finish --json": FinishShape,
    "reopen --json": ReopenShape,
    "push --json": PushShape,
    "pull --json": PullShape,
    "clone --json": CloneShape,
    "handoff --json": HandoffShape,
}
"""Each command's `--json` output, by the command."""

TOOLS: dict[str, Any] = {
    "status": StatusShape,
    "brief": BriefShape,
    "log": LogShape,
    "show": ShowShape,
    "outputs": OutputsShape,
    "get_output": GotOutputShape,
    "verify": VerifyShape,
    "runs": RunsShape,
    "schema": Schemas,
    "answer": AnswerShape,
    "ask": UnknownRecordShape,
    "decide": DecideShape,
    "resolve": ResolvedEffectShape,
    "rerun": RerunShape,
    "fork": ForkShape,
    "diff": DiffShape,
    "finish": FinishShape,
    "reopen": ReopenShape,
    "run": RanShape,
    "report": ReportShape,
    "show_cells": CellsShape,
    "edit_step": EditShape,
    "edit_cell": CellEditShape,
    "push": PushShape,
    "pull": PullShape,
    "clone": CloneShape,
    "handoff": HandoffShape,
}
"""Each MCP tool's result (`structuredContent`): a command's shape, a list wrapped as
`{"result": [...]}`; `run`, `report`, `show_cells`, `edit_step` and `edit_cell` are the
server's own."""


def schemas() -> dict[str, Any]:
    """The JSON Schema of each documented output: by the command (`status --json`), and
    of the MCP tools that no command has (`mcp run`...)."""
    found = {name: TypeAdapter(shape).json_schema() for name, shape in COMMANDS.items()}
    for tool in ("run", "report", "show_cells", "edit_step", "edit_cell"):
        found[f"mcp {tool}"] = TypeAdapter(TOOLS[tool]).json_schema()
    return found
