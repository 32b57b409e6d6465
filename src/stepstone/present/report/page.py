"""`stepstone report`: one self-contained HTML page about a run, for a person in a
browser: the plan and each step's state now, a timeline of the attempts, the evidence
and saved outputs of each step, decisions, unknowns, effects and the Git commits.

Everything taken from the records is escaped (records are untrusted input); the page
loads nothing (inline CSS, no script, a Content-Security-Policy that forbids loading).
Reading runs no code: `cmd:` and `call:` checks are not re-run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from ...model import message
from .. import render
from ..render_cells import evidence_text
from .history import History, read_commits, read_history
from .steps import ORDER, STATE_WORDS, e, steps_html, strength_badge, value_html, when
from .style import CSS
from .timeline import clock, timeline_html

if TYPE_CHECKING:
    from ...rules.status import RunStatus, StepStatus
    from ...run.view import RunView
    from ...store.objects import CommitInfo

COMMITS_SHOWN = 200  # newest commits listed
PLAN_ROWS = 300  # a longer plan shows runs of steps in one state as their ends
TIMELINE_ROWS = 60  # steps drawn on the timeline and described one by one
EFFECTS_SHOWN = 200
_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
    "base-uri 'none'; form-action 'none'"
)


def html_report(view: RunView) -> str:
    """The report of the run `view` reads, as one HTML page."""
    status = view.status()
    commits, complete = read_commits(view)
    rows = _timeline_rows(view, status, commits)
    history = read_history(view, commits, complete, {name for _, name, _, _ in rows})
    sections = [
        ("plan", "Plan", _plan(status, history)),
        ("timeline", "Timeline", _timeline(status, history, rows)),
        ("steps", "Evidence and outputs", steps_html(view, status, history, rows)),
        ("decisions", "Decisions", _decisions(status, history)),
        ("unknowns", "Unknowns", _unknowns(status)),
        ("effects", "Effects", _effects(view, status)),
        ("commits", "Git commits", _commits(view, commits)),
    ]
    nav = "".join(f'<a href="#{key}">{title}</a>' for key, title, _ in sections)
    body = "".join(
        f'<section id="{key}"><h2>{title}</h2>{html}</section>' for key, title, html in sections
    )
    made = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>stepstone report: {e(view.id)}</title><style>{CSS}</style></head><body>"
        f'<header class="top"><div class="inner">{_head(view, status)}<nav>{nav}</nav>'
        f"</div></header><main>{body}"
        f"<footer>Made by <code>stepstone report</code> at {made} from the run's store; "
        "reading it ran no code (<code>cmd:</code> and <code>call:</code> checks were not "
        "re-run: <code>stepstone verify</code> re-runs them).</footer></main></body></html>\n"
    )


# -- the head ---------------------------------------------------------------------


def _head(view: RunView, status: RunStatus) -> str:
    info = view.info
    goal = f'<p class="goal">{e(info.goal)}</p>' if info.goal else ""
    facts = [
        ("plan", f"{status.plan_mode}, {len(status.steps):,} steps"),
        ("notebook", info.notebook),
        ("script", info.program),
        ("store", str(view.store.path)),
        ("work folder", str(view.workdir)),
        ("created", when(info.created)),
        ("commits", f"{view.seq:,}"),
        ("finished", when(info.finished) if info.finished else ""),
    ]
    meta = "".join(f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in facts if v)
    counts: dict[str, int] = {}
    for step in status.steps:
        counts[step.state] = counts.get(step.state, 0) + 1
    chips = "".join(
        f'<span class="badge {state}">{n:,} {STATE_WORDS[state]}</span>'
        for state, n in sorted(counts.items(), key=lambda kv: ORDER.index(kv[0]))
    )
    open_unknowns = len(status.open_unknowns)
    if open_unknowns:
        chips += f'<span class="badge open">{open_unknowns} open unknown(s)</span>'
    if status.unresolved_effects:
        chips += f'<span class="badge unresolved">{len(status.unresolved_effects)} '
        chips += "unresolved effect(s)</span>"
    notes = "".join(f"<li>{e(n)}</li>" for n in status.notes)
    return (
        f'<h1>Run {e(view.id)}</h1>{goal}<dl class="meta">{meta}</dl>'
        f'<div class="chips">{chips}</div>'
        f'<div class="next"><b>Next:</b> {e(status.next_action)}</div>'
        + (f'<ul class="quiet">{notes}</ul>' if notes else "")
    )


# -- the plan ---------------------------------------------------------------------


def _plan(status: RunStatus, history: History) -> str:
    if not status.steps:
        return '<p class="quiet">The plan has no steps yet.</p>'
    shown: Sequence[StepStatus | str] = (
        render.shown_steps(status) if len(status.steps) > PLAN_ROWS else status.steps
    )
    rows = []
    for step in shown:
        if isinstance(step, str):
            rows.append(f'<tr><td colspan="6" class="quiet"><i>{e(step)}</i></td></tr>')
            continue
        rows.append(
            f'<tr class="{step.state}"><td class="num">{step.number}</td>'
            f'<td><a href="#step-{step.number}">{e(step.name)}</a></td>'
            f'<td><span class="badge {step.state}">{e(STATE_WORDS[step.state])}</span>'
            f"{strength_badge(step)}</td>"
            f'<td class="why">{_why(step, status)}</td>'
            f"<td>{_attempts(history, step.name)}</td>"
            f'<td class="when">{e(when(step.finished))}</td></tr>'
        )
    return (
        "<table><tr><th class=num>#</th><th>step</th><th>state now</th>"
        "<th>why / evidence</th><th>attempts</th><th>last record</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def _why(step: StepStatus, status: RunStatus) -> str:
    said = evidence_text(step.evidence) if step.state == "verified" else step.reason
    if step.state == "pending" and not said:
        said = "not run yet"
    read = render.reads_text(status.inputs.get(step.name) or {})
    return e(said) + (f'<div class="quiet">reads {e(read)}</div>' if read else "")


def _attempts(history: History, name: str) -> str:
    mine = history.attempts_of(name)
    if not mine:
        return ""
    parts = [f"{len(mine)}"]
    failed = sum(a.status == "failed" for a in mine)
    broken = sum(a.status == "interrupted" for a in mine)
    if failed:
        parts.append(f'<span class="bad">{failed} failed</span>')
    if broken:
        parts.append(f'<span class="warn">{broken} interrupted</span>')
    return " · ".join(parts)


# -- the timeline -----------------------------------------------------------------


def _timeline_rows(
    view: RunView, status: RunStatus, commits: list[CommitInfo]
) -> list[tuple[int, str, str, str]]:
    """The steps the timeline draws: all of a short plan; of a long one, those not
    verified, then those of the newest step records, up to `TIMELINE_ROWS`."""
    steps = status.steps
    if len(steps) <= TIMELINE_ROWS:
        return [(s.number, s.name, s.state, s.reason) for s in steps]
    by_name = {s.name: s for s in steps}
    chosen: dict[str, StepStatus] = {}
    for s in steps:
        if s.state != "verified" and (s.state != "pending" or s.finished):
            chosen.setdefault(s.name, s)
        if len(chosen) >= TIMELINE_ROWS // 2:
            break
    for commit in commits:
        if len(chosen) >= TIMELINE_ROWS:
            break
        label = (commit.trailers.get(message.STEP) or [""])[0]
        name = label.partition(" ")[2]
        if name in by_name:
            chosen.setdefault(name, by_name[name])
    picked = sorted(chosen.values(), key=lambda s: s.number)
    return [(s.number, s.name, s.state, s.reason) for s in picked]


def _timeline(status: RunStatus, history: History, rows: list[tuple[int, str, str, str]]) -> str:
    left_out = ""
    if len(rows) < len(status.steps):
        left_out = (
            f"{len(rows)} of {len(status.steps):,} steps drawn: those not verified and "
            f"those recorded last."
        )
    if not history.complete:
        left_out += (
            f" Drawn from the newest {len(history.commits):,} commits; earlier attempts "
            f"are not shown."
        )
    partial = len(rows) < len(status.steps)
    return timeline_html(history, rows, partial=partial, left_out=left_out.strip())


# -- decisions, unknowns, effects ---------------------------------------------------


def _decisions(status: RunStatus, history: History) -> str:
    if not status.decisions:
        return '<p class="quiet">No decision recorded.</p>'
    rows = []
    for d in status.decisions:
        earlier = [r for r in history.revisions.get(d.key, [])[:-1] if r.value != d.value]
        revised = "".join(
            f'<div><span class="revised">{e(r.value)}</span> '
            f'<span class="quiet">({e(r.why)}; {e(when(r.time))})</span></div>'
            for r in earlier
        )
        if not earlier and d.revised_from is not None:
            revised = f'<div><span class="revised">{e(d.revised_from)}</span></div>'
        over = (
            '<div class="quiet">revised outside the notebook, over its <code>%decide</code> '
            f"line's {e(d.over)}</div>"
            if d.over
            else ""
        )
        rows.append(
            f"<tr><td><code>{e(d.key)}</code></td><td><code>{e(d.value)}</code>{over}</td>"
            f"<td>{e(d.why)}</td><td>{revised}</td>"
            f'<td class="when">{e(when(d.time))}</td></tr>'
        )
    return (
        "<table><tr><th>key</th><th>value</th><th>why</th><th>revised from</th>"
        f"<th>when</th></tr>{''.join(rows)}</table>"
    )


def _unknowns(status: RunStatus) -> str:
    if not status.unknowns:
        return '<p class="quiet">No unknown recorded.</p>'
    rows = []
    for u in status.unknowns:
        state = "answered" if u.state == "resolved" else "open"
        answer = e(u.answer) if u.answer is not None else '<span class="quiet">—</span>'
        if u.why:
            answer += f'<div class="quiet">{e(u.why)}</div>'
        rows.append(
            f"<tr><td>{e(u.id)}</td><td>{e(u.question)}</td>"
            f'<td><span class="badge {state}">{state}</span></td><td>{answer}</td>'
            f'<td class="when">{e(when(u.asked))}</td>'
            f'<td class="when">{e(when(u.resolved))}</td></tr>'
        )
    resting = "".join(f"<li>step {e(s)} rests on {e(u)}</li>" for s, u in status.resting)
    return (
        "<table><tr><th>id</th><th>question</th><th>state</th><th>answer</th>"
        f"<th>asked</th><th>answered</th></tr>{''.join(rows)}</table>"
        + (f'<ul class="quiet">{resting}</ul>' if resting else "")
    )


def _effects(view: RunView, status: RunStatus) -> str:
    effects = list(status.effects)
    if not effects:
        return '<p class="quiet">No effect recorded.</p>'
    note = ""
    if len(effects) > EFFECTS_SHOWN:
        unsettled = [x for x in effects if x["state"] != "confirmed"]
        settled = [x for x in effects if x["state"] == "confirmed"]
        shown = (unsettled + settled[-EFFECTS_SHOWN:])[:EFFECTS_SHOWN]
        note = (
            f'<p class="quiet">{len(shown)} of {len(effects):,} effects shown: those not '
            f"confirmed, then the last confirmed (<code>stepstone status --all</code> lists "
            f"each).</p>"
        )
        effects = shown
    rows = []
    for x in effects:
        record = view.effects.get(x["key"])
        receipt = "" if x.get("receipt") is None else json.dumps(x["receipt"], default=str)
        extra = ""
        if x.get("error"):
            extra += f'<div class="bad">{e(x["error"])}</div>'
        if record is not None and record.resolution is not None:
            how = "happened" if record.resolution.happened else "did not happen"
            extra += (
                f'<div class="quiet">resolved: {how} ({e(record.resolution.by)}'
                f"{'; ' + e(record.resolution.why) if record.resolution.why else ''})</div>"
            )
        rows.append(
            f'<tr class="{e(x["state"])}"><td><code>{e(x["key"])}</code></td>'
            f"<td>{e(x['step'])} / {e(x['name'])}</td>"
            f'<td><span class="badge {e(x["state"])}">{e(x["state"])}</span>{extra}</td>'
            f"<td>{e(record.receiver if record else '')}</td>"
            f'<td class="num">{e(x.get("attempts", ""))}</td>'
            f"<td>{value_html(receipt) if receipt else ''}</td>"
            f"<td>{e(x.get('next_action', ''))}</td></tr>"
        )
    return (
        note + "<table><tr><th>key</th><th>step / effect</th><th>state</th><th>receiver</th>"
        '<th class="num">attempts</th><th>receipt</th><th>next</th></tr>'
        + "".join(rows)
        + "</table>"
    )


# -- the commits ------------------------------------------------------------------


def _commits(view: RunView, commits: Sequence[CommitInfo]) -> str:
    shown = commits[:COMMITS_SHOWN]
    if not shown:
        return '<p class="quiet">No commit.</p>'
    rows = "".join(
        f'<tr><td><code title="{e(c.id)}">{e(c.id[:10])}</code></td>'
        f'<td class="when">{e(clock(c.time, day=True))}</td>'
        f"<td>{_status_badge(c)}</td><td>{e(c.subject)}</td>"
        f'<td class="quiet">{e(_by(c))}</td></tr>'
        for c in shown
    )
    note = ""
    total = max(view.seq, len(shown))
    if total > len(shown):
        note = (
            f'<p class="quiet">The newest {len(shown)} of {total:,} commits; '
            f"<code>stepstone log</code> or <code>git -C {e(view.store.path)} log</code> "
            "lists them all.</p>"
        )
    return (
        note + "<table><tr><th>commit</th><th>time (UTC)</th><th>what</th><th>subject</th>"
        f"<th>by</th></tr>{rows}</table>"
    )


def _status_badge(commit: CommitInfo) -> str:
    status = (commit.trailers.get(message.STATUS) or [""])[0]
    return f'<span class="badge {e(status)}">{e(status)}</span>' if status else ""


def _by(commit: CommitInfo) -> str:
    holder = (commit.trailers.get(message.HOLDER) or [""])[0]
    via = (commit.trailers.get(message.VIA) or [""])[0]
    return f"{holder} (via {via})" if via else holder
