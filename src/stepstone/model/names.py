"""Validation of the names that become paths and refs: run ids, step names, keys."""

from __future__ import annotations

import re

from ..errors import InvalidInput

_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+=@-]{0,119}")


def run_id(value: str) -> str:
    """Return `value` if it can name a run (a Git ref component), else raise."""
    if (
        not isinstance(value, str)
        or not _RUN_ID.fullmatch(value)
        or ".." in value
        or value.endswith((".", ".lock"))
    ):
        raise InvalidInput(
            f"invalid run id {value!r}: use 1-100 letters, digits, '.', '_' or '-', "
            f"starting with a letter or digit (for example quickstart-2026)"
        )
    return value


def step_name(value: str, what: str = "step name") -> str:
    """Return `value` if it can name a step, a decision or an unknown, else raise."""
    if (
        not isinstance(value, str)
        or not _NAME.fullmatch(value)
        or ".." in value
        or value.endswith((".", ".lock"))
    ):
        raise InvalidInput(
            f"invalid {what} {value!r}: use 1-120 letters, digits or . _ : + = @ -, "
            f"starting with a letter or digit (for example fetch-prices)"
        )
    return value


def from_filename(stem: str) -> str:
    """Turn a notebook file name (without suffix) into a valid run id."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-._")[:100] or "run"
    cleaned = cleaned.replace("..", ".")
    return run_id(cleaned)


def listing(names: list[str], limit: int = 12) -> str:
    """`names` joined for an error message, the first `limit` of them when there are more."""
    if not names:
        return "none"
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown} and {len(names) - limit:,} more"


def distance(a: str, b: str) -> int:
    """The edits (insert, delete, replace, swap two neighbours) that turn `a` into `b`."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        row = [i]
        for j, y in enumerate(b, 1):
            cost = min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + (x != y))
            if i > 1 and j > 1 and x == b[j - 2] and a[i - 2] == y:
                cost = min(cost, previous2[j - 2] + 1)
            row.append(cost)
        previous2, previous = previous, row
    return previous[-1]


def misspelled(wanted: str, known: list[str]) -> str | None:
    """The name of `known` that `wanted` looks like a typo of (two edits at most, fewer
    than half its letters), or None."""
    close = [(distance(wanted, name), name) for name in known if name != wanted]
    close = [(d, name) for d, name in close if d <= 2 and 2 * d < len(name)]
    return min(close)[1] if close else None
