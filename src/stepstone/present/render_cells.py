"""What a `%%step` cell shows of its outcome, as one display bundle: text in a terminal
(and in the stream a script reads), a small HTML card in Jupyter. Skipped with the
evidence that verified and what came back, ran and confirmed, ran again and why, or
failed. Kept in the executed notebook `stepstone run` writes. And a step's evidence in
one short line, as every rendering for people shows it."""

from __future__ import annotations

import html
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..rules.index import EvidenceRow

_LOOK = {  # outcome -> (mark, colour, background)
    "skipped": ("✓", "#1a7f37", "#eef8f0"),
    "confirmed": ("✓", "#1a7f37", "#eef8f0"),
    "again": ("↻", "#9a6700", "#fff8e5"),
    "failed": ("✗", "#cf222e", "#ffeef0"),
}


@dataclass
class CellOutcome:
    """One step cell's outcome, as the magic saw it."""

    number: int
    name: str
    outcome: str  # skipped, confirmed, again (confirmed after it was stale), failed
    evidence: tuple[EvidenceRow, ...] = ()
    why: str = ""  # why it ran again, or what failed
    kernel: str = ""  # what came back to the kernel, or what will not survive
    notes: list[str] = field(default_factory=list)

    @property
    def headline(self) -> str:
        said = {
            "skipped": "skipped, verified",
            "confirmed": "confirmed",
            "again": "confirmed",
            "failed": "failed",
        }[self.outcome]
        shown = evidence_text(self.evidence)
        return f"step {self.number} {self.name}: {said}" + (f" ({shown})" if shown else "")


def bundle(cell: CellOutcome) -> dict[str, str]:
    """The cell's outcome as `text/plain` and `text/html`."""
    return {"text/plain": plain(cell), "text/html": card(cell)}


def plain(cell: CellOutcome) -> str:
    """The outcome as text: its headline, then why it ran again (or failed) and what
    came back to the kernel, a line each."""
    lines = [cell.headline]
    if cell.outcome == "again" and cell.why:
        lines.append(f"  ran again: {cell.why}")
    if cell.outcome == "failed" and cell.why:
        lines.append(f"  {cell.why} (recorded; fix it and run the cell again)")
    if cell.kernel:
        lines.append(cell.kernel)
    lines += [f"  note: {note}" for note in cell.notes]
    return "\n".join(lines)


def card(cell: CellOutcome) -> str:
    """The outcome as a small HTML card: a coloured mark and title, then a line each
    for the evidence, why it ran again, and what came back."""
    mark, colour, background = _LOOK[cell.outcome]
    title = {
        "skipped": "skipped — evidence verified",
        "confirmed": "ran — confirmed",
        "again": "ran again — confirmed",
        "failed": "failed",
    }[cell.outcome]
    rows = [
        f'<div style="font-weight:600;color:{colour}">{mark} step {cell.number} '
        f"<code>{_e(cell.name)}</code>: {title}</div>"
    ]
    if cell.why:
        label = "why it ran again" if cell.outcome == "again" else "error"
        rows.append(_row(label, _e(cell.why)))
    for check, _kind, value, detail in cell.evidence:
        shown = detail or (f"sha256 {value[:12]}" if _is_digest(value) else str(value))
        rows.append(_row("evidence", f"<code>{_e(check)}</code> {_e(shown)}"))
    if cell.kernel:
        rows.append(_row("kernel", _e(cell.kernel.strip().removeprefix("kernel: "))))
    rows += [_row("note", _e(note)) for note in cell.notes]
    return (
        f'<div class="stepstone-outcome stepstone-{cell.outcome}" style="font-family:'
        f"system-ui,sans-serif;font-size:12.5px;line-height:1.45;border-left:4px solid "
        f'{colour};background:{background};padding:4px 10px;margin:2px 0">'
        + "".join(rows)
        + "</div>"
    )


def _row(label: str, content: str) -> str:
    return f'<div><span style="color:#57606a">{label}:</span> {content}</div>'


def _is_digest(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64


def _e(text: object) -> str:
    return html.escape(str(text))


def of(
    number: int,
    name: str,
    outcome: str,
    evidence: Iterable[EvidenceRow] = (),
    *,
    why: str = "",
    kernel: str = "",
) -> CellOutcome:
    """A `CellOutcome` (evidence as a tuple)."""
    return CellOutcome(number, name, outcome, tuple(evidence), why=why, kernel=kernel)


def running(number: int, name: str) -> dict[str, str]:
    """The card of a step cell whose code runs now (in Jupyter, updated when it ends)."""
    text = f"step {number} {name}: running"
    html_text = (
        '<div class="stepstone-outcome stepstone-running" style="font-family:system-ui,'
        "sans-serif;font-size:12.5px;border-left:4px solid #8c959f;padding:4px 10px;"
        f'margin:2px 0;color:#57606a">… step {number} <code>{_e(name)}</code>: running</div>'
    )
    return {"text/plain": text, "text/html": html_text}


def evidence_text(evidence: Iterable[EvidenceRow]) -> str:
    """Evidence rows in one short line."""
    parts = []
    for check, kind, value, _ in evidence:
        if kind == "completed":
            parts.append("completed, nothing to verify (weak)")
        elif kind == "note":
            parts.append(f"note (weak): {first_line(str(value))}")
        else:
            if isinstance(value, str) and len(value) == 64:
                value = f"sha256 {value[:12]}"
            parts.append(f"{check} ({value})")
    return "; ".join(parts)


def first_line(text: str, limit: int = 72) -> str:
    """The first line of `text`, at most `limit` characters, with … when cut."""
    stripped = text.strip()
    line = stripped.splitlines()[0] if stripped else ""
    return line[:limit] + ("…" if len(line) > limit or line != stripped else "")
