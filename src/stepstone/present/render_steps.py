"""Text for people of one step (`stepstone show`), its outputs (`stepstone outputs`)
and two runs compared (`stepstone diff`), from the JSON those commands print."""

from __future__ import annotations

import builtins
import json
from collections.abc import Iterable, Mapping
from typing import Any


def shown_step(shown: Mapping[str, Any]) -> str:
    """`stepstone show STEP` as lines."""
    lines = [
        f"step {shown['number']} {shown['step']} of run {shown['run']}: {shown['state']}"
        + (f" ({shown['reason']})" if shown.get("reason") else "")
    ]
    record = shown.get("record")
    if record is None:
        effects = shown.get("effects") or []
        if not effects:
            return lines[0] + "\n  no record: it has not run\n"
        lines.append("  no record: it was interrupted partway, after asking for effects")
        for effect in effects:
            lines.append(f"  effect {effect['name']} ({effect['key']}): {effect['state']}")
        return "\n".join(lines) + "\n"
    lines.append(
        f"  {record['status']}, attempt {record['attempt']}, {record['started']} → "
        f"{record['finished']} by {record['holder']}"
    )
    if record.get("error"):
        lines.append(f"  error: {record['error']}")
    for ev in shown["evidence"]:
        lines.append(f"  evidence {ev['check']}: {ev['detail'] or ev['value']}")
    for name, value in sorted((shown.get("inputs") or {}).items()):
        lines.append(f"  read {name}" + (f" = {_short(value)}" if value is not None else ""))
    read = [name for name in shown["reads"] if not hasattr(builtins, name)]
    if read:
        lines.append(f"  kernel names read: {', '.join(read)}")
    lines += [f"  {line}" for line in output_lines(shown["outputs"]).splitlines()]
    for path in shown["kept"]:
        lines.append(f"  keeps {path}")
    for effect in shown["effects"]:
        lines.append(f"  effect {effect['name']} ({effect['key']}): {effect['state']}")
    commit = shown.get("commit")
    if commit:
        lines.append(f"  recorded by commit {commit['id'][:10]}: {commit['subject']}")
    return "\n".join(lines) + "\n"


def output_lines(rows: Iterable[Mapping[str, Any]]) -> str:
    """Saved outputs, one per line, then how to get one."""
    rows = list(rows)
    if not rows:
        return "no saved outputs"
    lines = []
    for row in rows:
        shape = "×".join(str(n) for n in row.get("shape", [])) or "-"
        extra = f" {row['dtype']}" if "dtype" in row else ""
        value = ""
        if "value" in row:
            shown = row["value"]
            value = f" = {json.dumps(shown) if row['format'] == 'json' else shown}"
        lines.append(
            f"output {row['name']}: {row.get('type', '?')} {shape}{extra}, "
            f"{row['format']} {row['size']} bytes{value}"
        )
    lines.append(f"get one: {rows[0]['get']}")
    return "\n".join(lines)


def diff_lines(diff: Mapping[str, Any]) -> str:
    """`stepstone diff A B` as lines: what differs, by section."""
    a, b = diff["a"], diff["b"]
    lines = [f"runs {a} and {b}: " + ("the same" if diff["same"] else "differ")]
    for row in diff["steps"]:
        lines.append(f"  step {row['step']}: {a} {_side(row['a'])} | {b} {_side(row['b'])}")
        for what in row["differs"]:
            lines.append(f"    differs: {what}")
    for row in diff["decisions"]:
        lines.append(f"  decision {row['key']}: {a} {row['a']} | {b} {row['b']}")
    for row in diff["unknowns"]:
        lines.append(f"  unknown {row['question']!r}: {a} {row['a']} | {b} {row['b']}")
    return "\n".join(lines) + "\n"


def _side(side: Mapping[str, Any] | None) -> str:
    return "-" if side is None else f"{side['status']} (attempt {side['attempt']})"


def _short(value: object) -> str:
    text = str(value)
    return text if len(text) <= 16 else text[:12] + "…"
