"""What an agent does to a run from outside the notebook, each as one call that
returns the JSON `stepstone <command> --json` prints and the MCP server's tool of the
same name returns. Reading runs no notebook code; each change is one commit whose
`Stepstone-Via` trailer says how it came (`cli`, `mcp`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from ..errors import InvalidInput
from ..model import message, names
from ..model.models import Decision, Record
from ..notebook import notebook_plan
from ..run import Run, open_run
from ..settings import Settings


def reader(run: str | None, repo: str | None, *, cached: bool = True) -> Run:
    """The run, opened to read (no lock, no lease, nothing created)."""
    return open_run(run, repo=repo, drive=False, create=False, cached=cached)


def driver(run: str | None, repo: str | None, via: str) -> Run:
    """The run, held as its driver for one change; its commits say `Stepstone-Via: via`."""
    return open_run(run, repo=repo, create=False, settings=Settings.from_env(via=via))


def _data(record: Record, run: str) -> dict[str, Any]:
    return {"run": run, **record.model_dump(mode="json", exclude={"schema_version"})}


# -- reading --------------------------------------------------------------------


def status(run: str | None, repo: str | None, *, recheck: bool = False) -> dict[str, Any]:
    """Steps, evidence, decisions, unknowns, effects and the next action."""
    view = reader(run, repo)
    state = notebook_plan.seeing_the_notebook(view, view.status(recheck=recheck))
    found: dict[str, Any] = json.loads(state.json_text())
    return found


def brief(run: str | None, repo: str | None) -> dict[str, Any]:
    """The hand-off brief's content: goal, state, next command, open questions."""
    from ..present import brief as briefing

    view = reader(run, repo)
    state = notebook_plan.seeing_the_notebook(view, view.status(recheck=False))
    return briefing.to_json(state, briefing.Context.of(view))


def brief_text(run: str | None, repo: str | None) -> str:
    """The hand-off brief in Markdown."""
    from ..present import brief as briefing
    from ..present import render

    view = reader(run, repo)
    state = notebook_plan.seeing_the_notebook(view, view.status(recheck=False))
    return render.brief(state, briefing.Context.of(view))


def log(run: str | None, repo: str | None, step: str | None = None) -> list[dict[str, Any]]:
    """The run's commits, newest first, with their status, step and evidence trailers."""
    view = reader(run, repo)
    if step is not None:
        step = view.state.now_named(step)  # a step's earlier name finds it too
    if step is not None and step not in view.steps.names:
        known = names.listing(view.steps.names)
        raise InvalidInput(f"run {view.id!r} has no step {step!r} (steps: {known})")
    from ..present.report.history import steps_named

    commits = list(view.store.history(view.id))
    # a renamed step's commits under its earlier names too, not those of a step that
    # took one of its earlier names after it
    steps = steps_named(view, commits) if step is not None else {}
    entries = []
    for commit in commits:
        named = (commit.trailers.get(message.STEP) or [""])[0]
        if step is not None and steps.get(commit.id) != step:
            continue
        when = datetime.fromtimestamp(commit.time, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        entries.append(
            {
                "commit": commit.id,
                "time": when,
                "subject": commit.subject,
                "status": (commit.trailers.get(message.STATUS) or [""])[0],
                "step": named,
                "evidence": commit.trailers.get(message.EVIDENCE, []),
                "via": (commit.trailers.get(message.VIA) or [""])[0],
            }
        )
    return entries


def verify(run: str | None, repo: str | None, *, recheck: bool = True) -> dict[str, Any]:
    """Every recorded step's evidence checked again now, every record read from Git."""
    view = reader(run, repo, cached=False)
    state = notebook_plan.seeing_the_notebook(view, view.status(recheck=recheck))
    ok = not any(s.state in ("stale", "failed") for s in state.steps)
    return {"run": state.run, "ok": ok, "steps": json.loads(state.steps_json())}


def show(run: str | None, repo: str | None, step: str) -> dict[str, Any]:
    """A step's record, evidence, inputs, outputs described, commit and effects."""
    from ..run import showing

    return showing.show(reader(run, repo), step)


def outputs(run: str | None, repo: str | None, step: str) -> list[dict[str, Any]]:
    """The values a step saved, described without loading them."""
    from ..run import showing

    return showing.outputs(reader(run, repo), step)


def get_output(
    run: str | None, repo: str | None, step: str, name: str, to: str | None = None
) -> dict[str, Any]:
    """Write output `name` of `step` in its stored format (checked against its sha256)
    to `to`, by default `NAME.<format>` in the current folder, which must not exist."""
    import os
    from pathlib import Path

    from ..run import showing
    from ..store import atomic

    view = reader(run, repo)
    art, chunks = showing.output_bytes(view, step, name)
    target = Path(to) if to else Path(showing.file_name(name, art))
    if to is None and target.exists():
        raise InvalidInput(f"{target} exists: name the file to write (-o FILE, MCP: to)")
    atomic.write_chunks(target, chunks)
    os.chmod(target, 0o644)
    return {
        "run": view.id,
        "step": step,
        "name": name,
        "file": str(target.absolute()),
        "format": art.format,
        "size": art.size,
    }


def diff(run_a: str, run_b: str, repo: str | None) -> dict[str, Any]:
    """What two runs recorded differently."""
    from ..run.forking import diff as differ

    return differ(reader(run_a, repo), reader(run_b, repo))


# -- recording --------------------------------------------------------------------


def answer(
    run: str | None,
    repo: str | None,
    unknown: str,
    text: str,
    why: str = "",
    *,
    revise: bool = False,
    via: str,
) -> dict[str, Any]:
    """Close an open unknown with its answer; the `%unknown` line asking it is then
    not asked again. Another answer to an answered unknown needs `revise`, as another
    value of a decision does."""
    with driver(run, repo, via) as held:
        old = held.unknowns.get(unknown)
        if old is not None and old.state == "resolved" and old.answer != text and not revise:
            said = f" ({old.why})" if old.why else ""
            raise InvalidInput(
                f"unknown {unknown} is already answered: {old.answer!r}{said}. To change "
                f"the answer, pass revise=True (--revise): the steps that rest on it run again"
            )
        return _data(held.resolve_unknown(unknown, text, why or None), held.id)


def ask(run: str | None, repo: str | None, question: str, *, via: str) -> dict[str, Any]:
    """Record an open question (asked again, it is the one already recorded)."""
    with driver(run, repo, via) as held:
        return _data(held.unknown(question), held.id)


def decide(
    run: str | None,
    repo: str | None,
    key: str,
    value: str,
    why: str,
    *,
    revise: bool = False,
    dry_run: bool = False,
    via: str,
) -> dict[str, Any]:
    """Decide `key`; a revision stands over the notebook's unchanged `%decide` line.
    `was` is the value before, `runs_again` the steps that read it and run again;
    `dry_run` records nothing and says what would run again, and as `new_reason` the
    reason it would record for the same value (None when it would record none)."""
    if dry_run:
        view = reader(run, repo)
        _refuse_revising_nothing(view.decisions, key, revise)  # in the order deciding does
        seen = view.preview_decision(key, value, why, revise=revise)
        return {
            "run": view.id,
            "key": key,
            "value": str(value),
            "was": seen.was,
            "runs_again": seen.runs_again,
            "new_reason": seen.new_reason,
        }
    with driver(run, repo, via) as held:
        _refuse_revising_nothing(held.decisions, key, revise)
        was, readers = held.revising(key, value)
        made = held.decide(key, value, why, revise=revise)
        return {**_data(made, held.id), "was": was, "runs_again": readers}


def _refuse_revising_nothing(decisions: Mapping[str, Decision], key: str, revise: bool) -> None:
    """A typed key that `revise`s no decision is misspelled most likely (a notebook's
    line or a script may keep `revise` on a new run: they are not asked)."""
    if revise and key not in decisions:
        raise InvalidInput(
            f"no decision {key!r} to revise (decisions: {names.listing(sorted(decisions))}); "
            "to decide it for the first time, drop --revise"
        )


def resolve(
    run: str | None,
    repo: str | None,
    key: str,
    *,
    happened: bool,
    receipt: Any = None,
    why: str = "",
    via: str,
) -> dict[str, Any]:
    """Settle an effect whose outcome was unknown."""
    with driver(run, repo, via) as held:
        return _data(held.resolve_effect(key, happened=happened, receipt=receipt, why=why), held.id)


def rerun(
    run: str | None, repo: str | None, step: str, why: str, *, downstream: bool = False, via: str
) -> dict[str, Any]:
    """Mark a step (and, with `downstream`, what depends on it) to run again."""
    with driver(run, repo, via) as held:
        marked = held.rerun(step, why, downstream=downstream)
        return {"run": held.id, "step": step, "why": why, "marked": marked}


def fork(run: str, repo: str | None, at: str, new: str, *, via: str) -> dict[str, Any]:
    """A new run whose history is `run`'s up to step `at` (a Git branch point)."""
    from ..run.forking import fork as forking
    from ..store import GitStore

    store = GitStore(repo, create=False)
    return forking(store, run, at, new, settings=Settings.from_env(via=via))
