"""The report's pieces about each step: a card with its state, evidence, what it read
and its saved outputs (described without running code, by `run.showing`), and the small
helpers every section uses to show what records say, escaped."""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING, Any

from ...errors import StepstoneError
from .history import Attempt, History, seconds
from .timeline import clock, duration

if TYPE_CHECKING:
    from ...model.models import StepRecord
    from ...rules.status import RunStatus, StepStatus
    from ...run.view import RunView

_SHA = 64
_EARLIER = 5  # earlier attempts that failed or were interrupted, listed on a card
ORDER = ["verified", "stale", "failed", "pending"]
STATE_WORDS = {"verified": "verified", "stale": "stale", "failed": "failed", "pending": "not run"}


def e(value: object) -> str:
    """`value` as HTML text (quotes escaped too: safe in an attribute)."""
    return escape(str(value), quote=True)


def when(stamp: str | None) -> str:
    """A record's time as `2026-12-02 18:17:33 UTC`."""
    t = seconds(stamp)
    return clock(t, day=True) + " UTC" if t is not None else (stamp or "")


def strength_badge(step: StepStatus) -> str:
    """A `weak` badge for a step whose evidence nothing can re-check."""
    return '<span class="badge weak">weak</span>' if step.strength == "weak" else ""


def value_html(value: object) -> str:
    """A recorded value, short: a sha256 as its first 12 digits, long text cut."""
    text = "" if value is None else str(value)
    if len(text) == _SHA and all(c in "0123456789abcdef" for c in text):
        return f'<code title="{e(text)}">sha256 {e(text[:12])}</code>'
    if len(text) > 160:
        return f'<code title="{e(text[:2000])}">{e(text[:160])}…</code>'
    return f"<code>{e(text)}</code>"


# -- each step: evidence, inputs, outputs ---------------------------------------------


def steps_html(
    view: RunView, status: RunStatus, history: History, rows: list[tuple[int, str, str, str]]
) -> str:
    """A card for each step of `rows` that has a record (those without are named)."""
    wanted = {name for _, name, _, _ in rows}
    cards = []
    not_run = []
    for step in status.steps:
        if step.name not in wanted:
            continue
        record = view.records.get(step.name)
        if record is None:
            not_run.append(f"{step.number} {step.name}")
            continue
        cards.append(_card(view, step, record, history.attempts_of(step.name)))
    said = ""
    if not_run:
        said += f'<p class="quiet">Not run yet: {e(", ".join(not_run))}.</p>'
    if len(wanted) < len(status.steps):
        said += f'<p class="quiet">Only the {len(wanted)} steps of the timeline are shown.</p>'
    if not cards:
        return said or '<p class="quiet">No step has a record yet.</p>'
    return f'<div class="cards">{"".join(cards)}</div>{said}'


def _card(view: RunView, step: StepStatus, record: StepRecord, attempts: list[Attempt]) -> str:
    parts = [
        f'<h3 id="step-{step.number}">{step.number} {e(step.name)}'
        f'<span class="badge {step.state}">{e(STATE_WORDS[step.state])}</span>'
        f"{strength_badge(step)}</h3>"
    ]
    took = _took(record.started, record.finished)
    parts.append(
        f'<div class="quiet">attempt {record.attempt} {e(record.status)} '
        f"{e(when(record.finished))}{e(took)}</div>"
    )
    if step.state != "verified" and step.reason:
        parts.append(f'<div class="why"><b>{e(step.state)}:</b> {e(step.reason)}</div>')
    if record.rerun:
        parts.append(f"<div>re-run asked: {e(record.rerun)}</div>")
    if record.error:
        parts.append(f'<div class="label">error</div><pre>{e(record.error[-2000:])}</pre>')
    parts.append(_earlier(attempts, record))
    if record.evidence:
        rows = "".join(
            f"<tr><td><code>{e(ev.check)}</code></td><td>{e(ev.kind)}</td>"
            f"<td>{value_html(ev.value)}</td><td>{e(ev.detail)}</td></tr>"
            for ev in record.evidence
        )
        parts.append(
            '<div class="label">evidence</div><table><tr><th>check</th><th>kind</th>'
            f"<th>observed</th><th>detail</th></tr>{rows}</table>"
        )
    if record.inputs:
        read = "".join(
            f"<li><code>{e(k)}</code>{' = ' + value_html(v) if v is not None else ''}</li>"
            for k, v in record.inputs.items()
        )
        parts.append(f'<div class="label">read</div><ul>{read}</ul>')
    parts.append(_outputs(view, step.name, record))
    return f'<div class="card {step.state}">{"".join(parts)}</div>'


def _earlier(attempts: list[Attempt], record: StepRecord) -> str:
    """The attempts before the one its record is of that failed or were interrupted."""
    bad = [a for a in attempts if a.status != "confirmed" and a.number != record.attempt]
    if not bad:
        return ""
    items = "".join(
        f'<li><span class="{"bad" if a.status == "failed" else "warn"}">'
        f"{e(f'attempt {a.number} ' if a.number else '')}{e(a.status)}</span> "
        f"{e(clock(a.started, day=True))}: {e(a.said)}</li>"
        for a in bad[-_EARLIER:]
    )
    more = f"<li>… and {len(bad) - _EARLIER} before</li>" if len(bad) > _EARLIER else ""
    return f'<div class="label">earlier attempts</div><ul>{more}{items}</ul>'


def _took(started: str, finished: str) -> str:
    a, b = seconds(started), seconds(finished)
    return f" (took {duration(b - a)})" if a is not None and b is not None and b >= a else ""


def _outputs(view: RunView, name: str, record: StepRecord) -> str:
    from ...run import showing

    try:
        listed = showing.outputs(view, name)
    except (StepstoneError, ValueError, OSError) as exc:
        return f'<div class="label">saved outputs</div><p class="bad">{e(exc)}</p>'
    parts = []
    if listed:
        rows = "".join(
            f"<tr><td><code>{e(o['name'])}</code></td><td>{e(o['format'])}</td>"
            f'<td class="num">{e(_size(o["size"]))}</td><td>{e(_shape(o))}</td></tr>'
            for o in listed
        )
        parts.append(
            '<div class="label">saved outputs</div><table><tr><th>name</th><th>format</th>'
            f'<th class="num">size</th><th>type</th></tr>{rows}</table>'
        )
    if record.kept:
        kept = "".join(
            f"<li><code>{e(path)}</code> ({e(_size(art.size))})</li>"
            for path, art in sorted(record.kept.items())
        )
        parts.append(f'<div class="label">files kept in the store</div><ul>{kept}</ul>')
    if record.unsaved:
        lost = ", ".join(f"{n} ({kind})" for n, kind in record.unsaved.items())
        parts.append(f'<div class="quiet">not saved (will not survive a resume): {e(lost)}</div>')
    if not parts:
        return '<div class="label">saved outputs</div><div class="quiet">none</div>'
    return "".join(parts)


def _size(n: object) -> str:
    """A size in bytes as people read it: `1 byte`, `131 bytes`, `2.4 MB`."""
    if not isinstance(n, int):
        return str(n)
    if n < 1024:
        return "1 byte" if n == 1 else f"{n} bytes"
    size = n / 1024
    for unit in ("KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            break
        size /= 1024
    return f"{size:.1f} {unit}"


def _shape(output: dict[str, Any]) -> str:
    what = str(output.get("type", ""))
    if output.get("shape") is not None:
        what += " " + "×".join(str(n) for n in output["shape"])
    if output.get("dtype"):
        what += f" {output['dtype']}"
    if output.get("value") is not None:
        what += f" = {output['value']}"
    return what
