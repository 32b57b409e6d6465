"""A short Markdown hand-off brief: where a run stands, for a person or an agent."""

from __future__ import annotations

from typing import Any

from .status import RunStatus, StepStatus

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


def command(status: RunStatus, *, notebook: str, store: str) -> str:
    """The exact command that continues the run."""
    if notebook:
        return f"stepstone run {notebook} --run {status.run} --repo {store}"
    return f"%resume --run {status.run} --repo {store}  (or stepstone.open_run({status.run!r}))"


def to_json(status: RunStatus, *, goal: str, notebook: str, store: str) -> dict[str, Any]:
    """The brief's content as data (`stepstone brief --json`)."""
    return {
        "run": status.run,
        "goal": goal,
        "store": store,
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
        "command": command(status, notebook=notebook, store=store),
        "notes": list(status.notes),
    }


def render(status: RunStatus, *, goal: str, notebook: str, store: str) -> str:
    """The brief as Markdown: short enough to paste into a prompt."""
    done = [s for s in status.steps if s.state == "verified"]
    pending = [s for s in status.steps if s.state == "pending"]
    other = [s for s in status.steps if s.state not in ("verified", "pending")]
    lines = [f"# Hand-off: run `{status.run}`", ""]
    lines.append(f"**Goal:** {goal or '(not recorded; the step names say what the run does)'}")
    source = f"notebook `{notebook}`" if notebook else f"{status.plan_mode} plan"
    lines.append(f"**Store:** `{store}` · {source} · {len(status.steps)} steps")
    if status.finished:
        lines.append(f"**Finished:** {status.finished}")
    lines += ["", f"## Done ({len(done)} of {len(status.steps)} verified now)"]
    if len(done) > _DETAILED_DONE:
        lines.append(f"- steps {_ranges(done[:-_DETAILED_DONE])}: verified (`stepstone status`)")
    lines += [f"- {s.number} {s.name}: {s.evidence_text}" for s in done[-_DETAILED_DONE:]]
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
            f"receiver, then `stepstone resolve {e['key']} --happened` or `--not-happened`"
            for e in status.unresolved_effects
        ]
    if status.notes:
        lines += ["", "## Notes"] + [f"- {n}" for n in status.notes]
    lines += ["", "## Next", f"{status.next_action}.", ""]
    lines.append(f"`{command(status, notebook=notebook, store=store)}`")
    return "\n".join(lines) + "\n"
