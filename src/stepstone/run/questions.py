"""A run's decisions (a value with its reason, revised only on purpose) and unknowns
(open questions, closed with an answer)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import DecisionConflict, InvalidInput
from ..model import names
from ..model.models import Decision, Unknown, now
from ..rules import dependencies
from ..store.opening import who
from .ledger import Ledger
from .state import RunState


def refuse_decision(
    decisions: Mapping[str, Decision], key: str, value: str, why: str, *, revise: bool
) -> None:
    """Raise what deciding `key`=`value` would be refused with (a bad key, no reason,
    a change without `revise`); a preview says the same as the decision would."""
    names.step_name(key, "decision key")
    if not why.strip():
        raise InvalidInput(f"decision {key!r} needs a reason (--why REASON)")
    old = decisions.get(key)
    if old is not None and old.value != value and not revise:
        raise DecisionConflict(key, old.value, value, old.why)


def standing_over_line(
    decisions: Mapping[str, Decision], key: str, value: str, why: str, *, revise: bool
) -> Decision | None:
    """For a notebook's `%decide` line deciding `key`=`value`: raise what the line is
    refused with (a change without `revise` of what a line decided); return the decision
    made outside the notebook that stands over the line, or None (the line's value is or
    becomes the decision)."""
    refuse_decision(decisions, key, value, why, revise=True)
    old = decisions.get(key)
    if old is None or old.value == value:
        return None
    if old.by is not None and old.over in (None, value):
        return old
    if not revise:
        raise DecisionConflict(key, old.value, value, old.why)
    return None


def rewords(old: Decision | None, value: str, why: str, *, line: bool) -> bool:
    """Whether deciding `value` for `why` over `old` records only a new reason: the same
    value, other words, and not from a line over what was decided outside."""
    return (
        old is not None
        and old.value == value
        and old.why != why
        and not (line and old.by is not None)  # a line does not reword the outside's
    )


@dataclass(frozen=True)
class Preview:
    """What deciding a value would do, recorded nowhere (`--dry-run`)."""

    was: str | None
    """The value decided now (None: not decided yet)."""
    runs_again: list[str]
    """The steps that deciding it would make run again, in plan order."""
    new_reason: str | None
    """For the same value: the reason it would record anew (None: none)."""
    standing: Decision | None
    """For a notebook's line: the decision made outside that stands over it (None: the
    line's value is or becomes the decision)."""


def decide(
    ledger: Ledger, key: str, value: str, why: str, *, revise: bool = False, line: bool = False
) -> Decision:
    """Record a decision with its reason; a resumed run does not reopen it.

    A decision made or revised outside the notebook (`line=False`: the command line,
    the MCP server, the Python API) stands over the notebook's `%decide` line
    (`line=True`) while that line says what it said when it first met the decision:
    it is returned, not refused. An edited line with `--revise` is the notebook's own
    revision and wins."""
    state = ledger.state
    value = str(value)
    if line:
        standing = standing_over_line(state.decisions, key, value, why, revise=revise)
        if standing is not None and standing.over is None:  # met for the first time:
            return _commit(ledger, standing.model_copy(update={"over": value}))
        if standing is not None:  # noted what the line said
            return standing
    else:
        refuse_decision(state.decisions, key, value, why, revise=revise)
    old = state.decisions.get(key)
    outside = None if line else (ledger.settings.via or "python")
    if old is not None and old.value == value:
        if not rewords(old, value, why, line=line):
            return old
        # a new reason for the same value, kept by whoever gave it (from outside, it
        # stands over the line from now on, so the line's old words do not come back)
        reworded = old.model_copy(
            update={
                "why": why,
                "by": outside,
                "over": None if line else (old.over if old.by else old.value),
                "who": who(ledger.holder),
                "time": now(),
                "earlier": (*old.earlier, old.change()),
            }
        )
        return _commit(ledger, reworded)
    decision = Decision(
        key=key,
        value=value,
        why=why,
        time=now(),
        revised_from=old.value if old else None,
        by=outside,
        over=None if line or old is None else (old.over if old.by else old.value),
        who=who(ledger.holder),
        earlier=() if old is None else (*old.earlier, old.change()),
    )
    return _commit(ledger, decision)


def _commit(ledger: Ledger, decision: Decision) -> Decision:
    ledger.append(decision)
    return decision


def ask(ledger: Ledger, question: str) -> Unknown:
    """Record an open question. The same question is recorded once: asked again (a
    notebook run again), it is the unknown already recorded, open or answered."""
    state = ledger.state
    question = question.strip()
    if not question:
        raise InvalidInput("an unknown needs a question")
    for existing in state.unknowns.values():
        if existing.question == question:
            return existing
    item = Unknown(id=f"U{len(state.unknowns) + 1}", question=question, asked=now())
    ledger.append(item)
    return item


def answer(ledger: Ledger, unknown_id: str, text: str, why: str | None = None) -> Unknown:
    """Close an open unknown with its answer (and `why`: how the one who answers knows)."""
    state = ledger.state
    item = state.unknowns.get(unknown_id)
    if item is None:
        known = ", ".join(state.unknowns) or "none"
        raise InvalidInput(f"no unknown {unknown_id!r} in run {state.id!r} (unknowns: {known})")
    if item.state == "resolved" and item.answer == text:
        return item
    closed = item.model_copy(
        update={
            "state": "resolved",
            "answer": text,
            "resolved": now(),
            "why": why or None,
            "who": who(ledger.holder),
        }
    )
    ledger.append(closed)
    return closed


def known_questions(state: RunState, step: str, inputs: tuple[str, ...]) -> tuple[str, ...]:
    """A step's `inputs`, once each question it rests on (`--uses U1`) is one the run has:
    a misspelled id would rest on a question nobody can answer, and the answer to the one
    meant would run nothing again."""
    missing = [
        item[len(dependencies.UNKNOWN) :]
        for item in inputs
        if item.startswith(dependencies.UNKNOWN)
        and item[len(dependencies.UNKNOWN) :] not in state.unknowns
    ]
    if missing:
        asked = names.listing(sorted(state.unknowns)) or "none yet"
        raise InvalidInput(
            f"step {step!r} rests on question {missing[0]} (--uses {missing[0]}), which run "
            f"{state.id!r} does not have (its questions: {asked}). Correct the id, or ask the "
            f"question first (%unknown QUESTION, or `stepstone ask QUESTION`) in a cell "
            f"before the step; nothing was recorded"
        )
    return inputs
