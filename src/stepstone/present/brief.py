"""A hand-off brief's content: where a run stands, for a person or an agent.

What the brief says, as data (its context, the command that continues the run, the
`--json` shape); `render.brief` writes it as Markdown."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .render_cells import evidence_text

if TYPE_CHECKING:
    from ..rules.status import RunStatus
    from ..run import Run


@dataclass(frozen=True)
class Context:
    """What a brief says about a run besides its status: its goal and how it is driven."""

    goal: str
    notebook: str  # relative to `workdir`
    program: str  # relative to `workdir`
    store: Path
    workdir: Path
    revisions: Mapping[str, list[str]] = field(default_factory=dict)
    """By decision: the steps that revising it (to any other value) runs again."""
    task: str = ""
    """What the reader of the brief was asked to do (a colleague's request), if said."""

    @classmethod
    def of(cls, run: Run, task: str = "") -> Context:
        """The context of an open run (for a reader asked to do `task`)."""
        other = "\0another value"  # no step read it: every reader runs again
        revisions = {key: run.revising(key, other)[1] for key in run.decisions}
        return cls(
            run.info.goal,
            run.info.notebook,
            run.info.program,
            run.store.path,
            run.workdir,
            revisions,
            task.strip(),
        )

    @property
    def repo_args(self) -> list[str]:
        """`--repo PATH` when the store is not the folder's default one."""
        if self.store.resolve() == (self.workdir / ".stepstone").resolve():
            return []
        return ["--repo", os.path.relpath(self.store.resolve(), self.workdir.resolve())]


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
    repo = where.repo_args
    grows = status.plan_mode == "incremental"  # its program may add steps: run it again
    if not grows and (next_tool(status, where) or {}).get("tool") == "finish":
        return Command(("stepstone", "finish", "--run", status.run, *repo), where.workdir)
    if where.notebook:
        argv = ["stepstone", "run", where.notebook, "--run", status.run, *repo]
        return Command(tuple(argv), where.workdir)
    if where.program:
        return Command(("python", *shlex.split(where.program)), where.workdir)
    return None


def next_tool(status: RunStatus, where: Context) -> dict[str, Any] | None:
    """The MCP tool call that continues the run, as `{"tool": NAME, "arguments": {...}}`
    (the arguments the server cannot know, an answer or whether an effect happened,
    are left to the caller), or None when nothing is left to do or only the run's own
    Python code can go on (what `command` is for a shell)."""
    run = {"run": status.run}
    drives = bool(where.notebook)  # the `run` tool runs notebooks only
    if status.finished:
        return None
    if status.to_settle:
        return {"tool": "resolve", "arguments": {"key": status.to_settle[0]["key"], **run}}
    if status.next_step is not None or status.added_cells or not status.steps:
        return {"tool": "run", "arguments": run} if drives else None
    if status.open_unknowns:
        return {"tool": "answer", "arguments": {"unknown": status.open_unknowns[0].id, **run}}
    if status.plan_mode == "incremental" and drives:
        return {"tool": "run", "arguments": run}
    return {"tool": "finish", "arguments": run}


def revise_argv(key: str, run: str, where: Context) -> list[str]:
    """The command that revises decision `key` (VALUE and REASON to fill in)."""
    return ["stepstone", "decide", key, "VALUE", "--revise", "--why", "REASON", "--run", run,
            *where.repo_args]  # fmt: skip


def revise_tool(key: str, run: str) -> dict[str, Any]:
    """The MCP tool call that revises decision `key` (value and why to add)."""
    return {"tool": "decide", "arguments": {"key": key, "revise": True, "run": run}}


def for_task(status: RunStatus, where: Context) -> list[str]:
    """What the run offers for the reader's task: each decision and open question the
    task names, with the command that changes it and what that runs again; then the
    rest of the path (run the notebook, finish, hand back). Empty without a task."""
    if not where.task:
        return []
    words = {w.lower() for w in re.findall(r"[\w.-]+", where.task)}
    lines = []
    for d in status.decisions:
        if d.key.lower() in words:
            again = ", ".join(where.revisions.get(d.key, [])) or "no recorded step"
            lines.append(
                f"revise `{d.key}` (now `{d.value}`): "
                f"`{shlex.join(revise_argv(d.key, status.run, where))}`; runs again: {again}"
            )
    for u in status.unknowns:
        if u.id.lower() in words:
            again = " --revise" if u.state == "resolved" else ""
            lines.append(
                f"answer `{u.id}` ({u.question}): `stepstone answer {u.id} ANSWER --why "
                f"REASON --run {status.run}{again}`"
            )
    path = ["stepstone", "run", where.notebook] if where.notebook else None
    then = f"`{shlex.join(path)}`, " if path else ""
    first = "then " if lines else ("settle the effects above, then " if status.to_settle else "")
    lines.append(
        f"{first}{then}`stepstone finish --run {status.run}`, and `stepstone handoff --run "
        f"{status.run}` to hand it back"
    )
    return lines


def to_json(status: RunStatus, where: Context) -> dict[str, Any]:
    """The brief's content as data (`stepstone brief --json`)."""
    found = command(status, where)
    return {
        "run": status.run,
        "goal": where.goal,
        "store": str(where.store),
        "workdir": str(where.workdir),
        "done": [
            {"number": s.number, "name": s.name, "evidence": evidence_text(s.evidence)}
            for s in status.steps
            if s.state == "verified"
        ],
        "not_done": [
            {"number": s.number, "name": s.name, "state": s.state, "reason": s.reason}
            for s in status.steps
            if s.state != "verified"
        ],
        "decisions": [
            {
                "key": d.key,
                "value": d.value,
                "why": d.why,
                "runs_again": list(where.revisions.get(d.key, [])),
                "revise": {
                    "argv": revise_argv(d.key, status.run, where),
                    "tool": revise_tool(d.key, status.run),
                },
            }
            for d in status.decisions
        ],
        "open_unknowns": [{"id": u.id, "question": u.question} for u in status.open_unknowns],
        "answered_unknowns": [
            {"id": u.id, "question": u.question, "answer": u.answer, "why": u.why}
            for u in status.unknowns
            if u.state == "resolved"
        ],
        "unresolved_effects": list(status.unresolved_effects),
        "next_action": status.next_action,
        "command": found.shell if found is not None else None,
        "next_command": (
            {"argv": list(found.argv), "cwd": str(found.cwd), "shell": found.shell}
            if found is not None
            else None
        ),
        "next_tool": next_tool(status, where),
        "notes": list(status.notes),
        "task": where.task or None,
        "for_task": for_task(status, where),
    }
