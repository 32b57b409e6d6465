"""The report's timeline: each step's attempts as horizontal bars on a time axis
(confirmed, failed, interrupted), the run's other events as ticks, in plain HTML and
CSS (no script). Long idle stretches (a run resumed hours later) are drawn narrow, as
a break of the axis, so that steps of seconds stay visible beside them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from html import escape

from .history import Attempt, Event, History

MIN_BREAK = 60.0  # seconds: an idle stretch shorter than this is never broken
MAX_BREAKS = 12
_NICE = (
    *(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5),
    *(1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800),
    *(3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800),
)
_TICK_EVERY = 11.0  # percent of the track between axis labels, at least


@dataclass
class Axis:
    """Time -> position (percent of the track): linear pieces joined by breaks."""

    pieces: list[tuple[float, float, float, float]] = field(default_factory=list)
    breaks: list[tuple[float, float, float, float]] = field(default_factory=list)

    def x(self, t: float) -> float:
        """Where time `t` is drawn, in percent of the track."""
        for t0, t1, x0, x1 in sorted(self.pieces + self.breaks):
            if t <= t1:
                if t <= t0 or t1 <= t0:
                    return x0
                return x0 + (x1 - x0) * (t - t0) / (t1 - t0)
        return 100.0


def axis(spans: Sequence[tuple[float, float]]) -> Axis:
    """An axis over `spans` (start, end in seconds), idle stretches much longer than
    the busy time around them drawn as breaks."""
    lo = min(s for s, _ in spans)
    hi = max(max(s, e) for s, e in spans)
    span = max(hi - lo, 0.001)
    join = max(MIN_BREAK, 0.05 * span)
    clusters: list[list[float]] = []
    for start, end in sorted((s, max(s, e)) for s, e in spans):
        if clusters and start <= clusters[-1][1] + join:
            clusters[-1][1] = max(clusters[-1][1], end)
        else:
            clusters.append([start, end])
    gaps = [(clusters[i][1], clusters[i + 1][0]) for i in range(len(clusters) - 1)]
    long = [(a, b) for a, b in gaps if b - a > MIN_BREAK]
    active = span - sum(b - a for a, b in long)
    broken = sorted(g for g in long if g[1] - g[0] > 0.2 * max(active, 0.001))
    broken = sorted(sorted(broken, key=lambda g: g[0] - g[1])[:MAX_BREAKS])
    width = min(4.0, 30.0 / len(broken)) if broken else 0.0
    # the linear pieces: between the breaks, each given at least a little room
    bounds = [lo, *(t for gap in broken for t in gap), hi]
    pieces = [(bounds[i], bounds[i + 1]) for i in range(0, len(bounds), 2)]
    linear = sum(b - a for a, b in pieces) or 0.001
    weights = [max(b - a, 0.02 * linear) for a, b in pieces]
    room = 100.0 - width * len(broken)
    found = Axis()
    x = 0.0
    for index, ((a, b), weight) in enumerate(zip(pieces, weights, strict=True)):
        w = room * weight / sum(weights)
        found.pieces.append((a, b, x, x + w))
        x += w
        if index < len(broken):
            found.breaks.append((broken[index][0], broken[index][1], x, x + width))
            x += width
    return found


def clock(t: float, step: float = 1.0, *, day: bool = False) -> str:
    """`t` as a UTC time of day (`18:17:33`, with decimals when `step` is under a
    second; with the date when `day`)."""
    when = datetime.fromtimestamp(t, timezone.utc)
    text = when.strftime("%Y-%m-%d %H:%M:%S" if day else "%H:%M:%S")
    decimals = 0 if step >= 1 else 1 if step >= 0.1 else 2 if step >= 0.01 else 3
    if decimals:
        text += f"{when.microsecond / 1e6:.{decimals}f}"[1:]
    return text


def duration(seconds: float) -> str:
    """A duration in a few characters: `12 ms`, `4.21 s`, `3 min 05 s`, `2 h 10 min`."""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    if seconds < 86400 * 2:
        return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"
    return f"{seconds / 86400:.1f} days"


def _ticks(found: Axis) -> list[tuple[float, str]]:
    """Labelled ticks: (position, text), a few per linear piece; a tick on another day
    than the first says its date."""
    ticks: list[tuple[float, str]] = []
    first = _day(found.pieces[0][0]) if found.pieces else ""
    for t0, t1, x0, x1 in found.pieces:
        count = max((x1 - x0) / _TICK_EVERY, 1.0)
        step = next((n for n in _NICE if n >= (t1 - t0) / count), _NICE[-1])
        t = (t0 // step) * step
        while t <= t1 + 1e-9:
            if t >= t0 - 1e-9:
                x = found.x(t)
                if not ticks or x - ticks[-1][0] >= _TICK_EVERY * 0.8:
                    day = _day(t)
                    text = clock(t, step)
                    ticks.append((x, text if day == first else f"{day[5:]} {text}"))
            t += step
    return ticks


def _day(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d")


def _bar(found: Axis, attempt: Attempt, stale: str) -> str:
    left = found.x(attempt.started)
    width = max(found.x(attempt.finished) - left, 0.0)
    took = attempt.finished - attempt.started
    kind = attempt.status
    if attempt.status == "interrupted":
        title = f"interrupted after {clock(attempt.started, 0.001)}: {attempt.said}"
    else:
        number = f"attempt {attempt.number} " if attempt.number else ""
        title = (
            f"{number}{attempt.status}: {clock(attempt.started, 0.001)} to "
            f"{clock(attempt.finished, 0.001)} ({duration(took)})"
        )
        if attempt.said:
            title += f"; {attempt.said}"
        if stale:
            kind, title = "stale", f"{title}; stale now: {stale}"
    if attempt.holder:
        title += f" [{attempt.holder}]"
    return (
        f'<div class="bar {kind}" style="left:{left:.3f}%;width:{width:.3f}%" '
        f'title="{escape(title)}"></div>'
    )


def _breaks(found: Axis) -> str:
    return "".join(
        f'<div class="gap" style="left:{x0:.3f}%;width:{x1 - x0:.3f}%" '
        f'title="idle {escape(duration(t1 - t0))}"></div>'
        for t0, t1, x0, x1 in found.breaks
    )


def _row(label: str, state: str, track: str, right: str, *, extra: str = "") -> str:
    return (
        f'<div class="tl-row {state}{extra}"><div class="tl-label">{label}</div>'
        f'<div class="tl-track">{track}</div><div class="tl-side">{right}</div></div>'
    )


def timeline_html(
    history: History,
    rows: Sequence[tuple[int, str, str, str]],
    *,
    partial: bool = False,
    left_out: str = "",
) -> str:
    """The timeline section's body: `rows` are (number, name, state now, reason) of the
    steps drawn, in plan order; when they are not all the plan's steps (`partial`), only
    the events among their attempts are drawn; `left_out` says which steps were not."""
    wanted = {name for _, name, _, _ in rows}
    attempts = [a for a in history.attempts if a.step in wanted]
    if not attempts:
        return '<p class="quiet">No step has run yet: nothing to draw.</p>'
    events: list[Event] = history.events
    if partial:  # only the events among the attempts drawn
        lo, hi = min(a.started for a in attempts), max(a.finished for a in attempts)
        events = [e for e in events if lo <= e.time <= hi]
    spans = [(a.started, a.finished) for a in attempts] + [(e.time, e.time) for e in events]
    found = axis(spans)
    breaks = _breaks(found)
    ticks = _ticks(found)
    grid = "".join(f'<div class="tick" style="left:{x:.3f}%"></div>' for x, _ in ticks)
    labels = "".join(
        f'<span class="tick-label{" start" if x < 4 else " end" if x > 96 else ""}" '
        f'style="left:{x:.3f}%">{escape(text)}</span>'
        for x, text in ticks
    ) + "".join(
        f'<span class="gap-label" style="left:{(x0 + x1) / 2:.3f}%">'
        f"{escape(duration(t1 - t0))} idle</span>"
        for t0, t1, x0, x1 in found.breaks
    )
    out = [_row("", "axis", labels, "", extra=" tl-axis")]
    for number, name, state, reason in rows:
        mine = [a for a in attempts if a.step == name]
        last_confirmed = max(
            (i for i, a in enumerate(mine) if a.status == "confirmed"), default=None
        )
        bars = "".join(
            _bar(found, a, reason if state == "stale" and i == last_confirmed else "")
            for i, a in enumerate(mine)
        )
        label = (
            f'<span class="num">{number}</span> <span class="name">{escape(name)}</span>'
            f'<span class="badge {state}">{escape(state)}</span>'
        )
        out.append(_row(label, state, grid + breaks + bars, _side(mine)))
    if events:
        ticks_html = "".join(
            f'<div class="event" style="left:{found.x(e.time):.3f}%" '
            f'title="{escape(clock(e.time, day=True))} {escape(e.kind)}: {escape(e.text)}">'
            f"</div>"
            for e in events
        )
        out.append(
            _row(
                '<span class="name">run events</span>',
                "events",
                grid + breaks + ticks_html,
                f"{len(events)} event(s)",
            )
        )
    legend = (
        '<div class="legend"><span><i class="sw confirmed"></i>confirmed</span>'
        '<span><i class="sw failed"></i>failed</span>'
        '<span><i class="sw interrupted"></i>interrupted (no record)</span>'
        '<span><i class="sw stale"></i>confirmed, stale now</span>'
        '<span><i class="sw event"></i>decision, question, re-run, finish</span>'
        + ('<span><i class="sw gap"></i>idle time, drawn narrow</span>' if found.breaks else "")
        + "</div>"
    )
    note = f'<p class="quiet">{escape(left_out)}</p>' if left_out else ""
    return (
        f'{legend}<div class="timeline">{"".join(out)}</div>'
        f'<p class="quiet">Times in UTC, from {_day(found.pieces[0][0])}. Hover a bar for its '
        f"times, attempt and error.</p>{note}"
    )


def _side(attempts: list[Attempt]) -> str:
    """What the right column says of a step's attempts: the last one's duration and
    how many failed or were interrupted."""
    if not attempts:
        return '<span class="quiet">not run</span>'
    timed = [a for a in attempts if a.status != "interrupted"]
    said = duration(timed[-1].finished - timed[-1].started) if timed else ""
    failed = sum(a.status == "failed" for a in attempts)
    broken = sum(a.status == "interrupted" for a in attempts)
    extra = []
    if failed:
        extra.append(f'<span class="bad">{failed} failed</span>')
    if broken:
        extra.append(f'<span class="warn">{broken} interrupted</span>')
    return escape(said) + (" · " + " · ".join(extra) if extra else "")
