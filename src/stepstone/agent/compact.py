"""Answers sized for an agent's context. A run of 1,000 steps makes a `status` of a
quarter of a megabyte, which an agent reads as tokens and its MCP client validates
node by node; what it acts on is the steps that are not verified. So the MCP server's
reading tools give, unless asked for `every` step, the steps that are not verified
(the first `NOT_DONE` of them) and the last `DONE` verified ones, and say in
`left_out` how many of each state were left out and how to see them all. The command
line's `--json` prints every step, as before."""

from __future__ import annotations

from collections import Counter
from typing import Any

DONE = 3  # verified steps kept (the last ones: where the run got to)
NOT_DONE = 20  # steps not verified kept (the first ones: what runs next)
SHORT = DONE + NOT_DONE  # a run of at most this many steps is shown whole
LOG = 100  # commits `log` gives unless asked for more


def _left_out(dropped: list[dict[str, Any]], tool: str) -> dict[str, Any] | None:
    if not dropped:
        return None
    return {
        "count": len(dropped),
        "by_state": dict(Counter(s.get("state", "verified") for s in dropped)),
        "how": f"{tool}(every=true) lists every step",
    }


def steps(data: dict[str, Any], tool: str, *, every: bool) -> dict[str, Any]:
    """A `status` or `verify` answer with its steps cut to what an agent acts on."""
    listed = data.get("steps") or []
    if every or len(listed) <= SHORT:
        return data
    done = [s for s in listed if s["state"] == "verified"]
    other = [s for s in listed if s["state"] != "verified"]
    kept = {id(s) for s in (*done[-DONE:], *other[:NOT_DONE])}
    shown = [s for s in listed if id(s) in kept]
    return {
        **data,
        "steps": shown,
        "left_out": _left_out([s for s in listed if id(s) not in kept], tool),
    }


def brief(data: dict[str, Any], *, every: bool) -> dict[str, Any]:
    """A `brief` answer with its `done` and `not_done` lists cut likewise."""
    done, other = data.get("done") or [], data.get("not_done") or []
    if every or len(done) + len(other) <= SHORT:
        return data
    dropped = [{"state": "verified"} for _ in done[:-DONE]] + other[NOT_DONE:]
    return {
        **data,
        "done": done[-DONE:],
        "not_done": other[:NOT_DONE],
        "left_out": _left_out(dropped, "brief"),
    }


def log(entries: list[dict[str, Any]], limit: int | None) -> list[dict[str, Any]]:
    """The newest `limit` entries of a `log` answer (None or 0: all of them)."""
    return entries if not limit else entries[:limit]
