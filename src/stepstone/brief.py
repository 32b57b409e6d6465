"""A short Markdown hand-off brief: where a run stands, for a person or an agent."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .status import RunStatus, StepStatus

if TYPE_CHECKING:
    from .run import Run

_DETAILED_DONE = 3


def _ranges(steps: list[StepStatus]) -> str:
    """`1-4, 7` for the numbers of consecutive steps."""
    spans: list[list[int]] = []
    for step in steps:
        if spans and step.number == spans[-1][1] + 1:
            spans[-1][1] = step.number
        else:
            spans.append([step.number, step.number])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)


@dataclass(frozen=True)
class Context:
    """What a brief says about a run besides its status: its goal and how it is driven."""

    goal: str
    notebook: str  # relative to `workdir`
    program: str  # relative to `workdir`
    store: Path
    workdir: Path

    @classmethod
    def of(cls, run: Run) -> Context:
        """The context of an open run."""
        return cls(run.info.goal, run.info.notebook, run.info.program, run.store.path, run.workdir)


@dataclass(frozen=True)
class Command:
    """The command that continues a run: its words, and the folder to run it in."""

    argv: tuple[str, ...]
    cwd: Path

    @property
    def shell(self) -> str:
        """One line for a POSIX shell, every word quoted where it needs to be."""
        return f"cd {shlex.quote(str(self.cwd))} && {shlex.join(self.argv)}"


def command(status: RunStatus, where: Context) -> Command | None:
    """The command that continues the run, or None when only its own code can (a
    Python-API run whose script is not known, or a finished run). Paths are relative to
    the run's folder, so the command also works on a copy of the project."""
    if status.finished:
        return None
    if where.notebook:
        argv = ["stepstone", "run", where.notebook, "--run", status.run]
        if where.store.resolve() != (where.workdir / ".stepstone").resolve():
            argv += ["--repo", os.path.relpath(where.store.resolve(), where.workdir.resolve())]
        return Command(tuple(argv), where.workdir)
    if where.program:
        return Command(("python", *shlex.split(where.program)), where.workdir)
    return None


def _command_text(status: RunStatus, where: Context) -> str:
    found = command(status, where)
    if status.finished:
        return "The run is finished: `stepstone reopen --why REASON` opens it again."
    if found is None:
        return (
            f"Run again the code that drives it: it opens the run with "
            f"`stepstone.open_run({status.run!r})` and goes on from the first step not verified."
        )
    return f"In `{found.cwd}`:\n\n    {shlex.join(found.argv)}"


def to_json(status: RunStatus, where: Context) -> dict[str, Any]:
    """The brief's content as data (`stepstone brief --json`)."""
    found = command(status, where)
    return {
        "run": status.run,
        "goal": where.goal,
        "store": str(where.store),
        "workdir": str(where.workdir),
        "done": [
            {"number": s.number, "name": s.name, "evidence": s.evidence_text}
            for s in status.steps
            if s.state == "verified"
        ],
        "not_done": [
            {"number": s.number, "name": s.name, "state": s.state, "reason": s.reason}
            for s in status.steps
            if s.state != "verified"
        ],
        "decisions": [{"key": d.key, "value": d.value, "why": d.why} for d in status.decisions],
        "open_unknowns": [{"id": u.id, "question": u.question} for u in status.open_unknowns],
        "unresolved_effects": list(status.unresolved_effects),
        "next_action": status.next_action,
        "command": found.shell if found is not None else None,
        "next_command": (
            {"argv": list(found.argv), "cwd": str(found.cwd), "shell": found.shell}
            if found is not None
            else None
        ),
        "notes": list(status.notes),
    }


def render(status: RunStatus, where: Context) -> str:
    """The brief as Markdown: short enough to paste into a prompt."""
    goal, notebook, store = where.goal, where.notebook, where.store
    done = [s for s in status.steps if s.state == "verified"]
    pending = [s for s in status.steps if s.state == "pending"]
    other = [s for s in status.steps if s.state not in ("verified", "pending")]
    lines = [f"# Hand-off: run `{status.run}`", ""]
    lines.append(f"**Goal:** {goal or '(not recorded; the step names say what the run does)'}")
    source = (
        f"notebook `{notebook}`"
        if notebook
        else (f"script `{where.program}`" if where.program else f"{status.plan_mode} plan")
    )
    lines.append(f"**Store:** `{store}` · {source} · {len(status.steps)} steps")
    if status.finished:
        lines.append(f"**Finished:** {status.finished}")
    lines += ["", f"## Done ({len(done)} of {len(status.steps)} verified now)"]
    shown = done if len(done) <= _DETAILED_DONE + 1 else done[-_DETAILED_DONE:]
    if len(shown) < len(done):
        lines.append(f"- steps {_ranges(done[: -len(shown)])}: verified (`stepstone status`)")
    lines += [f"- {s.number} {s.name}: {s.evidence_text}" for s in shown]
    if not done:
        lines.append("- nothing yet")
    if other or pending:
        lines += ["", "## Not done"]
        lines += [f"- {s.number} {s.name}: **{s.state}**: {s.reason}" for s in other]
        if pending:
            lines.append(f"- steps {_ranges(pending)}: pending")
    if status.decisions:
        lines += ["", "## Decisions (settled: do not reopen)"]
        lines += [f"- `{d.key}` = `{d.value}`: {d.why}" for d in status.decisions]
    if status.open_unknowns:
        lines += ["", "## Open unknowns (not settled)"]
        lines += [f"- {u.id}: {u.question}" for u in status.open_unknowns]
    if status.unresolved_effects:
        lines += ["", "## Unresolved effects (never repeat them blindly)"]
        lines += [
            f"- `{e['key']}` ({e['step']}/{e['name']}), intent {e['intent']}: check the "
            f"receiver, then `stepstone resolve {e['key']} --run {status.run} --happened` or "
            f"`--not-happened`"
            for e in status.unresolved_effects
        ]
    if status.notes:
        lines += ["", "## Notes"] + [f"- {n}" for n in status.notes]
    lines += ["", "## Next", f"{status.next_action}.", "", _command_text(status, where)]
    return "\n".join(lines) + "\n"
