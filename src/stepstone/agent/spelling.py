"""Hints spelled for the surface that asked. stepstone's messages name what to do as the
command line and the magics spell it (`--revise`, `stepstone finish`); the MCP server
gives the same hints as tool calls and arguments (`revise=true`, `finish`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

_Rule = tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]

_RULES: list[_Rule] = [
    (
        re.compile(r"`stepstone resolve (\S+) --run (\S+) --happened` or `--not-happened`"),
        r"`resolve(key='\1', run='\2', happened=true)` or `happened=false`",
    ),
    (
        re.compile(r"`stepstone resolve (\S+) --happened` or `--not-happened`"),
        r"`resolve(key='\1', happened=true)` or `happened=false`",
    ),
    (
        re.compile(
            r"\(`stepstone answer (\S+) ANSWER`, or `%unknown --resolve \S+ ANSWER` in the "
            r"notebook\), then finish the run"
        ),
        r"(`answer(unknown='\1', answer=...)`), then finish the run (`finish`)",
    ),
    (re.compile(r"`stepstone answer (\S+) ANSWER[^`]*`"), r"`answer(unknown='\1', answer=...)`"),
    (re.compile(r"\(%finish or stepstone finish\)"), "(`finish`)"),
    (
        re.compile(r"`stepstone decide (\S+) VALUE --revise --why [A-Z.]+[^`]*`"),
        r"`decide(key='\1', value=..., why=..., revise=true)`",
    ),
    (
        re.compile(r"`stepstone (rerun|finish|reopen|status|verify|brief|run|handoff)\b[^`]*`"),
        r"`\1`",
    ),
    (re.compile(r"pick one with --run ID"), "pick one with the `run` argument"),
    (re.compile(r"\(--run ID, or STEPSTONE_RUN\)"), "(the `run` argument)"),
    (re.compile(r"--why REASON"), "why=..."),
    (re.compile(r"--(revise|force|downstream|diverge)\b"), r"\1=true"),
    (re.compile(r"--dry-run\b"), "dry_run=true"),
]


def for_tools(text: str) -> str:
    """`text` with the command line's spellings of what to do given as MCP tool calls."""
    for pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)
    return text


def status_for_tools(data: dict[str, Any]) -> dict[str, Any]:
    """A `status` or `brief` result with its next actions (and a brief's lines for a
    task) spelled for tools."""
    if isinstance(data.get("next_action"), str):
        data["next_action"] = for_tools(data["next_action"])
    if "for_task" in data:
        data["for_task"] = [for_tools(line) for line in data["for_task"]]
    for key in ("effects", "unresolved_effects"):
        for effect in data.get(key) or []:
            if isinstance(effect.get("next_action"), str):
                effect["next_action"] = for_tools(effect["next_action"])
    return data
