"""Time travel: a new run whose history is another's up to one of its steps (`fork`),
and what two runs recorded differently (`diff`).

A fork is a Git branch point: the new run's ref starts at the commit that confirmed
the step, and its first commit renames the run there, so `git log --graph` shows where
the two lines part. The fork is a run of its own with a new id, in its source's lineage:
an effect is its name and payload in the lineage, so one that either run performed is
never sent again by the other, whichever step asks for it (an effect whose payload the
fork changes is another effect, and is sent).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from typing import Any

from ..errors import InvalidInput
from ..model import message, names
from ..model.models import StepRecord
from ..settings import Settings
from ..store import GitStore
from .opening import open_run
from .showing import recording_commit
from .view import RunView


def fork(
    store: GitStore, run: str, at: str, new: str, *, settings: Settings | None = None
) -> dict[str, Any]:
    """Make run `new` from `run`'s history up to the commit that confirmed step `at`."""
    names.run_id(new)
    if store.refs.tip(new) is not None:
        raise InvalidInput(f"run {new!r} exists in {store.path}: choose another id with --as")
    source = open_run(run, repo=store.path, drive=False, create=False)
    record = source.records.get(at)
    if at not in source.steps.names:
        known = names.listing(source.steps.names)
        raise InvalidInput(f"run {run!r} has no step {at!r} (steps: {known})")
    if record is None or record.status != "confirmed":
        raise InvalidInput(
            f"step {at!r} of run {run!r} is not confirmed: fork at a step that is (see "
            f"`stepstone status --run {run}`)"
        )
    commit = recording_commit(source, record)
    if commit is None:
        raise InvalidInput(f"the commit that confirmed step {at!r} is not in run {run!r}")
    branch = commit["id"]
    before = {  # effects are keyed by a step's first name, kept across renames
        source.identity_of(name) for name in source.steps.names[: source.steps.names.index(at) + 1]
    }
    store.move_run(new, branch, None)
    origin = f"{run}@{branch}"
    with open_run(new, repo=store.path, create=False, settings=settings) as forked:
        # the history they share keeps its effects: those of the steps up to the fork point,
        # and those the branch point's commit records of later steps (run before `at` was
        # confirmed again), as that commit keyed them
        before |= set(forked.effect_book.steps())
        forked.state.note_info(
            run=new,
            uid=secrets.token_hex(8),
            forked_from=origin,
            finished=None,
            inherited=source.state.lineages_of(before),
            lineage=source.state.lineage,
        )
        forked.ledger.commit(
            {},
            f"fork of {run} at step {at}",
            [(message.STATUS, "forked"), (message.FROM, origin)],
            info_changed=True,
        )
        steps = [s for s in forked.steps.names if forked.records.get(s) is not None]
        behind = {
            "decisions": [k for k in source.decisions if k not in forked.decisions],
            "unknowns": [u for u in source.unknowns if u not in forked.unknowns],
        }
        notebook = forked.info.notebook
    store.refs.point_head_at(run)  # like `git branch`, not `git checkout -b`: the run stays current
    anew: list[dict[str, str]] = []  # one lineage: nothing the source sent is sent anew
    return {
        "run": new,
        "from": run,
        "at": at,
        "commit": branch,
        "steps": steps,
        "left_behind": behind,
        "anew": anew,
        "notebook": notebook,
    }


def diff(a: RunView, b: RunView) -> dict[str, Any]:
    """What runs `a` and `b` recorded differently: steps (status, evidence, outputs),
    decisions and unknowns' answers."""
    steps = []
    for name_a, name_b in _paired(a, b):
        left = _side(a.records.get(name_a)) if name_a is not None else None
        right = _side(b.records.get(name_b)) if name_b is not None else None
        differs = _differs(left, right)
        if name_a is not None and name_b is not None and name_a != name_b:
            differs.insert(0, f"renamed {name_a} / {name_b}")
        if differs:
            step = name_b if name_b is not None else name_a
            steps.append({"step": step, "a": left, "b": right, "differs": differs})
    decisions = [
        {"key": key, "a": _value(a.decisions.get(key)), "b": _value(b.decisions.get(key))}
        for key in sorted({*a.decisions, *b.decisions})
        if _value(a.decisions.get(key)) != _value(b.decisions.get(key))
    ]
    answers_a, answers_b = _answers(a.unknowns.values()), _answers(b.unknowns.values())
    unknowns = [
        {"question": q, "a": answers_a.get(q, "-"), "b": answers_b.get(q, "-")}
        for q in sorted({*answers_a, *answers_b})
        if answers_a.get(q, "-") != answers_b.get(q, "-")
    ]
    same = not (steps or decisions or unknowns)
    return {
        "a": a.id,
        "b": b.id,
        "same": same,
        "steps": steps,
        "decisions": decisions,
        "unknowns": unknowns,
    }


def _paired(a: RunView, b: RunView) -> list[tuple[str | None, str | None]]:
    """The steps of `a` and `b` side by side, matched by identity: a step renamed in
    one run is paired with its earlier name in the other; a step in one run only (a new
    step that took a renamed one's name among them) is paired with None."""
    in_b = {b.state.identity_of(name): name for name in b.steps.names}
    pairs: list[tuple[str | None, str | None]] = []
    for name in a.steps.names:
        pairs.append((name, in_b.pop(a.state.identity_of(name), None)))
    pairs += [(None, name) for name in in_b.values()]
    return pairs


def _side(record: StepRecord | None) -> dict[str, Any] | None:
    if record is None:
        return None
    return {
        "status": record.status,
        "attempt": record.attempt,
        "evidence": {e.check: e.value for e in record.evidence},
        "outputs": {var: art.sha256 for var, art in sorted(record.outputs.items())},
        "error": record.error,
    }


def _differs(left: dict[str, Any] | None, right: dict[str, Any] | None) -> list[str]:
    if left is None or right is None:
        return [] if left is right else ["recorded in one run only"]
    found = []
    if left["status"] != right["status"]:
        found.append(f"status {left['status']} / {right['status']}")
    for check in sorted({*left["evidence"], *right["evidence"]}):
        if left["evidence"].get(check) != right["evidence"].get(check):
            found.append(f"evidence {check}")
    for var in sorted({*left["outputs"], *right["outputs"]}):
        if left["outputs"].get(var) != right["outputs"].get(var):
            found.append(f"output {var}")
    return found


def _value(decision: Any) -> str:
    return "-" if decision is None else str(decision.value)


def _answers(unknowns: Iterable[Any]) -> dict[str, str]:
    return {u.question: (u.answer if u.state == "resolved" else "open") for u in unknowns}
