"""Every rendering of a run for people: its status as text, as HTML (what `%resume`
shows) and as a rich table (the CLI's), the final summary, the hand-off brief, and the
lines the magics and the command line print about steps, decisions, unknowns, runs and
commits.

The data comes from `status` (`RunStatus`), `brief` (`Context`, `command`) and the
records; nothing here reads a store or decides a step's state.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Iterator, Mapping
from html import escape
from typing import TYPE_CHECKING, Any

from ..model import events
from . import brief as briefing
from .render_cells import evidence_text

if TYPE_CHECKING:
    from ..model.models import Decision, DecisionChange, Unknown
    from ..rules.index import EvidenceRow
    from ..rules.status import RunStatus, StepStatus
    from .brief import Context

SHOWN_EDGE = 2  # steps shown at each end of a long run of steps in one state
_DETAILED_DONE = 3  # verified steps a brief lists one by one
_COLOUR = {"verified": "green", "stale": "yellow", "failed": "red", "pending": "dim"}


def _detail(step: StepStatus, status: RunStatus) -> str:
    """What a status table says of a step: its evidence when verified, else why not;
    and what it read, when its record says."""
    said = evidence_text(step.evidence) if step.state == "verified" else step.reason
    read = reads_text(status.inputs.get(step.name) or {})
    return f"{said} [reads {read}]" if read else said


def reads_text(inputs: Mapping[str, str | None]) -> str:
    """A step's recorded inputs in a few words: `decision threshold, clean.csv, step load`."""
    words: dict[str, None] = {}  # a file declared (file:) and traced (read:) is one read
    for key in inputs:
        kind, _, name = key.partition(":")
        if kind != "wrote":  # what it made, not what it read
            words[name if kind in ("file", "read") else f"{kind} {name}"] = None
    return ", ".join(words)


# -- the status -----------------------------------------------------------------


def shown_steps(status: RunStatus, *, every: bool = False) -> list[StepStatus | str]:
    """The steps to show a person: with `every` all of them, else each run of more
    than five steps in the same state as its first two, a line saying how many are
    left out, and its last two (a 100,000-step run is a few lines)."""
    steps = status.steps
    if every or len(steps) <= SHOWN_EDGE * 2 + 1:
        return list(steps)
    shown: list[StepStatus | str] = []
    start = 0
    while start < len(steps):
        state = steps[start].state
        end = start
        while end < len(steps) and steps[end].state == state:
            end += 1
        group = steps[start:end]
        if len(group) <= SHOWN_EDGE * 2 + 1:
            shown.extend(group)
        else:
            left_out = group[SHOWN_EDGE:-SHOWN_EDGE]
            shown.extend(group[:SHOWN_EDGE])
            shown.append(
                f"... {len(left_out):,} more {state} "
                f"(steps {left_out[0].number:,}-{left_out[-1].number:,})"
            )
            shown.extend(group[-SHOWN_EDGE:])
        start = end
    return shown


def shown_effects(status: RunStatus, *, every: bool = False) -> tuple[list[dict[str, Any]], str]:
    """The effects to show a person, and a line counting the ones left out: with
    `every` all of them, else those not confirmed (up to five), then the rest as a
    count by state (a run may have sent thousands)."""
    effects = status.effects
    if every or len(effects) <= SHOWN_EDGE * 2 + 1:
        return list(effects), ""
    open_ = [e for e in effects if e["state"] != "confirmed"]
    shown = open_[: SHOWN_EDGE * 2 + 1]
    left = [e for e in effects if e not in shown]
    counts: dict[str, int] = {}
    for e in left:
        counts[e["state"]] = counts.get(e["state"], 0) + 1
    said = ", ".join(f"{n:,} {state}" for state, n in counts.items())
    return shown, f"{'more ' if shown else ''}effects: {said} (--all lists each)"


def footer_lines(status: RunStatus, *, every: bool = False) -> list[str]:
    """Decisions, unknowns (open, and answered with their answer), effects, notes and
    the next action, a line each."""
    lines = [f"  decided {d.key}={d.value}  ({d.why})" for d in status.decisions]
    lines += [f"  {answered(u)}" for u in status.unknowns]
    lines += [f"  step {step} rests on open unknown {u}" for step, u in status.resting]
    effects, rest = shown_effects(status, every=every)
    lines += [
        f"  effect {e['key']} ({e['step']}/{e['name']}): {e['state']}{_doubt(e)}; "
        f"next: {e['next_action']}"
        for e in effects
    ]
    if rest:
        lines.append(f"  {rest}")
    lines += [f"  note: {note}" for note in status.notes]
    lines.append(f"next: {status.next_action}")
    return lines


def answered(item: Unknown) -> str:
    """An unknown in one line: `unknown U1: QUESTION` while open, `answered U1: QUESTION
    → ANSWER` once answered."""
    if item.state == "resolved":
        why = f"  ({item.why})" if item.why else ""
        return f"answered {item.id}: {item.question} → {item.answer}{why}"
    return f"unknown {item.id}: {item.question}"


def _doubt(effect: Mapping[str, Any]) -> str:
    """What a person needs of an effect in doubt: until when the receiver keeps its key,
    and why it is unresolved."""
    if effect["state"] not in ("submitted", "unresolved"):
        return ""
    text = f", key kept by the receiver until {effect['expires']}" if effect.get("expires") else ""
    if effect["state"] == "unresolved" and effect.get("error"):
        text += f" ({effect['error']})"
    return text


def status_text(status: RunStatus, *, every: bool = False) -> str:
    """A plain-text status table for a terminal (long runs shortened, see `shown_steps`)."""
    lines = [f"run {status.run} ({status.plan_mode} plan)"]
    shown = shown_steps(status, every=every)
    steps = [s for s in shown if not isinstance(s, str)]
    width = max((len(s.name) for s in steps), default=4)
    digits = max((len(str(s.number)) for s in steps), default=3)
    for s in shown:
        if isinstance(s, str):
            lines.append(f"  {s}")
            continue
        detail = _detail(s, status)
        lines.append(f"  {s.number:>{digits}}  {s.name:<{width}}  {s.state:<8}  {detail}".rstrip())
    return "\n".join(lines + footer_lines(status, every=every))


_LEFT = 'style="text-align: left"'


def status_html(status: RunStatus) -> str:
    """An HTML status table for Jupyter (long runs shortened, see `shown_steps`)."""
    td = f"<td {_LEFT}>"  # JupyterLab aligns table cells right
    rows = "".join(
        f'<tr><td colspan="4" {_LEFT}><i>{escape(s)}</i></td></tr>'
        if isinstance(s, str)
        else f"<tr>{td}{s.number}</td>{td}{escape(s.name)}</td>{td}{s.state}</td>"
        f"{td}{escape(_detail(s, status))}</td></tr>"
        for s in shown_steps(status)
    )
    head = "".join(f"<th {_LEFT}>{h}</th>" for h in ("#", "step", "state", "evidence"))
    effects, rest = shown_effects(status)
    extra = (
        "".join(
            f"<li>decided <code>{escape(d.key)}={escape(d.value)}</code>: {escape(d.why)}</li>"
            for d in status.decisions
        )
        + "".join(f"<li>{escape(answered(u))}</li>" for u in status.unknowns)
        + "".join(
            f"<li>effect <code>{escape(e['key'])}</code>: {escape(e['state'])}</li>"
            for e in effects
        )
        + (f"<li>{escape(rest)}</li>" if rest else "")
        + "".join(f"<li>note: {escape(n)}</li>" for n in status.notes)
    )
    return (
        f"<div><b>run {escape(status.run)}</b> ({escape(status.plan_mode)} plan)"
        f"<table><tr>{head}</tr>{rows}"
        f"</table><ul>{extra}</ul><p>next: {escape(status.next_action)}</p></div>"
    )


def status_bundle(status: RunStatus) -> dict[str, str]:
    """The status as a display bundle (mime type -> text) for a notebook: the HTML
    table, and the text table where HTML is not shown."""
    return {"text/plain": status_text(status), "text/html": status_html(status)}


def print_rich_status(status: RunStatus, *, every: bool = False) -> None:
    """Print the status as a coloured table on the terminal (with rich)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"run {status.run} ({status.plan_mode} plan)")
    for column in ("#", "step", "state", "evidence / reason"):
        table.add_column(column)
    for s in shown_steps(status, every=every):
        if isinstance(s, str):
            table.add_row("", f"[dim]{s}[/]", "", "")
            continue
        table.add_row(
            str(s.number), s.name, f"[{_COLOUR[s.state]}]{s.state}[/]", _detail(s, status)
        )
    console = Console()
    console.print(table)
    for line in footer_lines(status, every=every):
        console.print(line, markup=False, highlight=False)


def verify_lines(status: RunStatus) -> Iterator[str]:
    """A line per step saying whether its evidence holds now (`stepstone verify`)."""
    for s in status.steps:
        reason = s.reason
        if s.state == "verified" and s.strength == "weak":
            kinds = {kind for _, kind, _, _ in s.evidence}
            reason = (
                "weak evidence: a note, which cannot be re-checked"
                if "note" in kinds
                else "weak evidence: the code completed, nothing to verify"
            )
        yield f"{s.number:>4} {s.name}: {s.state}{' - ' + reason if reason else ''}"


# -- the summary ----------------------------------------------------------------


def summary(status: RunStatus) -> str:
    """The final Markdown summary of a run: every step with its evidence; each decision
    with its history (value, reason, who, when); unknowns with their answers and
    reasons; effects by state."""
    lines = [f"# Run {status.run}", ""]
    lines += ["| # | step | state | finished | evidence |", "| - | - | - | - | - |"]
    for step in status.steps:
        lines.append(
            f"| {step.number} | {step.name} | {step.state} | {step.finished} "
            f"| {evidence_text(step.evidence)} |"
        )
    if status.decisions:
        lines += ["", "## Decisions", ""]
        for d in status.decisions:
            changes: list[DecisionChange] = [*d.earlier, d.change()]
            told = f" (history: {' → '.join(c.value for c in changes)})" if d.earlier else ""
            lines.append(f"- **{d.key}** = `{d.value}`{told}")
            lines += [f"  - {_change(c)}" for c in changes]
    if status.unknowns:
        lines += ["", "## Unknowns", ""]
        for u in status.unknowns:
            answer = f" — answered: {u.answer}" if u.answer else " — still open"
            how = ", ".join(x for x in (u.who or "", u.resolved or "") if x)
            why = f" ({u.why})" if u.why else ""
            lines.append(f"- {u.id}: {u.question}{answer}{why}" + (f" [{how}]" if how else ""))
    if status.effects:
        lines += ["", "## Effects", ""]
        by_state: dict[str, list[str]] = {}
        for e in status.effects:
            by_state.setdefault(e["state"], []).append(f"{e['step']}/{e['name']}")
        for state, which in by_state.items():
            lines.append(f"- {len(which)} {state}: {', '.join(which)}")
    return "\n".join(lines) + "\n"


def _change(value: DecisionChange) -> str:
    """One value a decision had: `105`: why (decided in the notebook by Ann, when)."""
    where = f"by {value.by}" if value.by else "in the notebook"
    who = f" ({value.who})" if value.who else ""
    return f"`{value.value}`: {value.why} [{where}{who}, {value.time}]"


# -- the brief ------------------------------------------------------------------


def _ranges(steps: list[StepStatus]) -> str:
    """`1-4, 7` for the numbers of consecutive steps."""
    spans: list[list[int]] = []
    for step in steps:
        if spans and step.number == spans[-1][1] + 1:
            spans[-1][1] = step.number
        else:
            spans.append([step.number, step.number])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)


def _command_text(status: RunStatus, where: Context, *, tools: bool = False) -> str:
    if tools:  # for an agent with the MCP server's tools
        if status.finished:
            return "The run is finished: the tool `reopen(why=...)` opens it again."
        call = briefing.next_tool(status, where)
        if call is not None:
            given = ", ".join(f"{k}={v!r}" for k, v in call["arguments"].items())
            return f"Next tool: `{call['tool']}({given})`."
    found = briefing.command(status, where)
    if status.finished:
        return "The run is finished: `stepstone reopen --why REASON` opens it again."
    if found is None:
        return (
            f"Run again the code that drives it: it opens the run with "
            f"`stepstone.open_run({status.run!r})` and goes on from the first step not verified."
        )
    return f"In `{found.cwd}`:\n\n    {shlex.join(found.argv)}"


def brief(status: RunStatus, where: Context, *, tools: bool = False) -> str:
    """The hand-off brief as Markdown: short enough to paste into a prompt. With
    `tools`, it ends with the MCP tool call that goes on, not the shell command."""
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
    if where.task:
        lines.append(f"**Your task:** {where.task}")
    if status.finished:
        lines.append(f"**Finished:** {status.finished}")
    lines += ["", f"## Done ({len(done)} of {len(status.steps)} verified now)"]
    shown = done if len(done) <= _DETAILED_DONE + 1 else done[-_DETAILED_DONE:]
    if len(shown) < len(done):
        lines.append(f"- steps {_ranges(done[: -len(shown)])}: verified (`stepstone status`)")
    lines += [f"- {s.number} {s.name}: {evidence_text(s.evidence)}" for s in shown]
    if not done:
        lines.append("- nothing yet")
    if other or pending:
        lines += ["", "## Not done"]
        lines += [f"- {s.number} {s.name}: **{s.state}**: {s.reason}" for s in other]
        if pending:
            lines.append(f"- steps {_ranges(pending)}: pending")
    if status.decisions:
        how = (
            "the tool `decide(key=..., value=..., why=..., revise=True)`"
            if tools
            else "`stepstone decide KEY VALUE --revise --why REASON`"
        )
        lines += ["", f"## Decisions (each can be revised with {how})"]
        for d in status.decisions:
            again = where.revisions.get(d.key, [])
            runs = f"runs again: {', '.join(again)}" if again else "runs no recorded step again"
            lines.append(f"- `{d.key}` = `{d.value}`: {d.why}; revising it {runs}")
            if not tools:
                lines.append(f"  (`{shlex.join(briefing.revise_argv(d.key, status.run, where))}`)")
    if status.open_unknowns:
        lines += ["", "## Open unknowns (not settled)"]
        lines += [f"- {u.id}: {u.question}" for u in status.open_unknowns]
    settled = [u for u in status.unknowns if u.state == "resolved"]
    if settled:
        lines += ["", "## Answered unknowns (settled)"]
        lines += [
            f"- {u.id}: {u.question} → **{u.answer}**" + (f" ({u.why})" if u.why else "")
            for u in settled
        ]
    if status.resting:
        lines += ["", "## Results resting on open unknowns (they run again once answered)"]
        lines += [f"- step {step} rests on {u}" for step, u in status.resting]
    if status.unresolved_effects:
        lines += ["", "## Unresolved effects (never repeat them blindly)"]
        lines += [
            f"- `{e['key']}` ({e['step']}/{e['name']}), intent {e['intent']}{_doubt(e)}: "
            f"check the receiver, then `stepstone resolve {e['key']} --run {status.run} "
            f"--happened` or `--not-happened`"
            for e in status.unresolved_effects
        ]
    in_doubt = [e for e in status.effects if e["state"] == "submitted"]
    if in_doubt:
        lines += ["", "## Effects in doubt (sent, not confirmed)"]
        lines += [
            f"- `{e['key']}` ({e['step']}/{e['name']}), intent {e['intent']}{_doubt(e)}: "
            f"{e['next_action']}"
            for e in in_doubt
        ]
    if status.notes:
        lines += ["", "## Notes"] + [f"- {n}" for n in status.notes]
    asked = briefing.for_task(status, where)
    if asked:
        lines += ["", "## For your task"] + [f"- {line}" for line in asked]
    lines += [
        "",
        "## Next, as the run stands (a task you were given may ask for more: revise a "
        "decision, edit a cell)",
        f"{status.next_action}.",
        "",
        _command_text(status, where, tools=tools),
    ]
    return "\n".join(lines) + "\n"


def next_agent(status: RunStatus, where: Context, *, run: str, url: str) -> str:
    """What `stepstone handoff` prints after the brief: the commands that continue the
    run on the next agent's machine, where the store is cloned beside the notebook."""
    found = briefing.command(status, where)
    then = (
        shlex.join(["stepstone", "run", where.notebook, "--run", run])
        if where.notebook
        else (shlex.join(found.argv) if found is not None else "(run the code that drives it)")
    )
    return (
        "\n## For the next agent\n\n"
        f"    stepstone clone {shlex.quote(url)} .stepstone    # with a clone: stepstone pull\n"
        f"    {then}\n"
    )


# -- single lines: a step's outcome, a decision, an unknown, a run, a commit ----------


def step_outcome(number: int, name: str, outcome: str, evidence: Iterable[EvidenceRow]) -> str:
    """`step N name: OUTCOME (evidence)`, what `%%step` prints when a cell is skipped
    or confirmed."""
    return f"step {number} {name}: {outcome} ({evidence_text(evidence)})"


def giving_back(steps: Iterable[tuple[str, Iterable[str], Mapping[str, str]]]) -> str:
    """What `%resume` says verified steps give back to the kernel when their cells are
    skipped: their saved values, and what they cannot give back ("" when none saved)."""
    lines = []
    for name, saved, unsaved in steps:
        words = ", ".join(saved)
        if unsaved:
            lost = ", ".join(f"{n} ({kind})" for n, kind in unsaved.items())
            words = f"{words}; not {lost}" if words else f"not {lost}"
        if words:
            lines.append(f"  {name}: {words}")
    if not lines:
        return ""
    return "\n".join(["skipped cells give back (with their imports, defs and classes):", *lines])


def kernel_names(
    restored: Iterable[str], remade: Iterable[str], unsaved: Mapping[str, str], *, skipped: bool
) -> str:
    """What a skipped cell gave back to the kernel, or what a confirmed one could not
    save, in one line ("" when there is nothing to say)."""
    if not skipped:
        return events.unsaved_line(dict(unsaved))
    lost = ", ".join(f"{name} ({kind})" for name, kind in unsaved.items())
    parts = []
    if restored := ", ".join(restored):
        parts.append(f"restored {restored}")
    if remade := ", ".join(remade):
        parts.append(f"made again {remade}")
    if lost:
        parts.append(f"not restored {lost}")
    return f"  kernel: {'; '.join(parts)}" if parts else ""


def decision(item: Decision, *, was: str | None = None, readers: Iterable[str] = ()) -> str:
    """A decision recorded by `%decide`, in one line; revised just now from `was`, it
    names the steps that read the old value and so run again."""
    return decision_text(item.key, item.value, item.why, was, readers)


def decision_text(key: str, value: str, why: str, was: str | None, readers: Iterable[str]) -> str:
    """A decision of `key`=`value` recorded just now (by `%decide` or `stepstone
    decide`), over `was`, and the steps that run again for it, in one line."""
    again = ", ".join(readers)
    if was is None or was == value:
        said = f"decided {key}={value} ({why})"
        return f"{said}; runs again: {again}" if again else said
    return f"revised {key}: {was} → {value} ({why}); " + (
        f"runs again: {again}" if again else "no recorded step read it"
    )


def decision_standing(item: Decision, line_value: str) -> str:
    """What `%decide` says when a revision made outside the notebook stands over it."""
    return (
        f"{item.key}={item.value} stands: decided outside the notebook ({item.by}) over this "
        f"line's {line_value} ({item.why}); to change it here, give this line another value "
        f"(with --revise), or decide it again outside (`stepstone decide {item.key} VALUE "
        f"--revise --why ...`)"
    )


def decision_preview(
    key: str, was: str | None, value: str, readers: Iterable[str], new_reason: str | None = None
) -> str:
    """What `%decide ... --dry-run` says: which steps revising `key` would run again, or
    the `new_reason` that deciding the same value again would record."""
    again = ", ".join(readers)
    if was is None:
        runs = f"runs again: {again}" if again else "makes no step run again"
        return f"{key} is not decided yet: deciding {key}={value} {runs} (nothing recorded)"
    if was == value and not again:
        if new_reason is not None:
            return (
                f"{key} is already {value}: its reason would become {new_reason!r}, and no "
                "step runs again (nothing recorded)"
            )
        return f"{key} is already {value}: nothing changes"
    again = again or "no recorded step (none read it)"
    return f"revising {key}: {was} → {value} would run again: {again} (nothing recorded)"


def unknown(item: Unknown, *, resolved: bool = False) -> str:
    """An unknown as `%unknown` reports it: open, answered before, or just resolved."""
    if resolved:
        return f"unknown {item.id} resolved: {item.answer}"
    if item.state == "open":
        return f"unknown {item.id} is open: {item.question}"
    return f"unknown {item.id} was answered: {item.answer} (not asked again)"


def run_row(row: Mapping[str, Any]) -> str:
    """A run of the store in one line (`stepstone runs`)."""
    return (
        f"{row['run']:<24} {row['state']:<9} {row['confirmed']}/{row['steps']} steps  "
        f"last activity {row['last_activity']}"
    )


def log_line(entry: Mapping[str, Any]) -> str:
    """A commit of a run's history in one line (`stepstone log`)."""
    return f"{entry['commit'][:10]} {entry['time']} {entry['subject']}"
