"""The final summary of a run, written from its records."""

from __future__ import annotations

from .status import RunStatus


def render(status: RunStatus) -> str:
    """A Markdown summary: every step with its evidence, decisions with reasons, unknowns."""
    lines = [f"# Run {status.run}", ""]
    lines += ["| # | step | state | finished | evidence |", "| - | - | - | - | - |"]
    for step in status.steps:
        lines.append(
            f"| {step.number} | {step.name} | {step.state} | {step.finished} "
            f"| {step.evidence_text} |"
        )
    if status.decisions:
        lines += ["", "## Decisions", ""]
        lines += [f"- **{d.key}** = `{d.value}`: {d.why}" for d in status.decisions]
    if status.unknowns:
        lines += ["", "## Unknowns", ""]
        for u in status.unknowns:
            answer = f" — answered: {u.answer}" if u.answer else " — still open"
            lines.append(f"- {u.id}: {u.question}{answer}")
    return "\n".join(lines) + "\n"
