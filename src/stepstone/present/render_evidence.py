"""A step's evidence in one short line, as every rendering for people shows it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..rules.index import EvidenceRow


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
