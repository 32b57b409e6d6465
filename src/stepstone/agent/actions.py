"""What an agent does to a run from outside the notebook, each as one call that
returns the JSON `stepstone <command> --json` prints and the MCP server's tool of the
same name returns (its shape is in `model/shapes.py`, printed by `stepstone schema`).
Reading runs no notebook code; each change is one commit whose `Stepstone-Via` trailer
says how it came (`cli`, `mcp`).

Every action takes the run (None: the store's only run), the store (None:
`STEPSTONE_REPO`, else `.stepstone` here) and `home`: the folder a run's relative paths
resolve in when the folder it recorded is not on this machine (a store received by
`git clone --bare` beside its notebook; default: the current folder).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..errors import InvalidInput
from ..model import message, names
from ..model.models import Decision, Record
from ..notebook import notebook_plan
from ..rules import dependencies
from ..rules.status import RunStatus
from ..run import Run, open_run
from ..settings import Settings


def reader(
    run: str | None, repo: str | None, *, cached: bool = True, home: str | None = None
) -> Run:
    """The run, opened to read (no lock, no lease, nothing created); its relative paths
    resolve in the folder it recorded, else in `home` (a server's folder), else here."""
    return open_run(run, repo=repo, drive=False, create=False, cached=cached, home=home)


_diverging: ContextVar[bool] = ContextVar("diverging", default=False)


@contextmanager
def diverging(on: bool = True) -> Iterator[None]:
    """The changes made meanwhile drive a copy of a store as a new lineage when it cannot
    take turns with its copies (`--diverge`: its original is gone, or they went apart)."""
    token = _diverging.set(on)
    try:
        yield
    finally:
        _diverging.reset(token)


def driver(run: str | None, repo: str | None, via: str, *, home: str | None = None) -> Run:
    """The run, held as its driver for one change; its commits say `Stepstone-Via: via`
    (within `diverging`, a copy that went apart is driven as a new lineage)."""
    settings = Settings.from_env(via=via)
    return open_run(
        run, repo=repo, create=False, settings=settings, home=home, diverge=_diverging.get()
    )


def _data(record: Record, run: str) -> dict[str, Any]:
    return {"run": run, **_without_versions(record.model_dump(mode="json"))}


def _without_versions(data: Any) -> Any:
    """A record's JSON without the `schema_version` of it and of the records inside it
    (a resolution in an effect's): what a file needs, not what a command prints."""
    if isinstance(data, dict):
        return {k: _without_versions(v) for k, v in data.items() if k != "schema_version"}
    if isinstance(data, list):
        return [_without_versions(item) for item in data]
    return data


def seen(view: Run, *, recheck: bool = False) -> RunStatus:
    """The run's status as the next run of its notebook will see it: its edited steps
    stale, its added and moved cells noted (as `%resume` says)."""
    return notebook_plan.seeing_the_notebook(view, view.status(recheck=recheck))


# -- reading --------------------------------------------------------------------


def status(
    run: str | None, repo: str | None, *, recheck: bool = False, home: str | None = None
) -> dict[str, Any]:
    """Steps, evidence, decisions, unknowns, effects and the next action."""
    return status_of(reader(run, repo, home=home), recheck=recheck)


def status_of(view: Run, *, recheck: bool = False) -> dict[str, Any]:
    """`status` of an open run."""
    found: dict[str, Any] = json.loads(seen(view, recheck=recheck).json_text())
    return found


def brief(run: str | None, repo: str | None, *, home: str | None = None) -> dict[str, Any]:
    """The hand-off brief's content: goal, state, next command and tool, open questions."""
    return brief_of(reader(run, repo, home=home))


def brief_of(view: Run, task: str = "") -> dict[str, Any]:
    """`brief` of an open run (for a reader asked to do `task`)."""
    from ..present import brief as briefing

    return briefing.to_json(seen(view), briefing.Context.of(view, task))


def brief_text(
    run: str | None,
    repo: str | None,
    *,
    home: str | None = None,
    tools: bool = False,
    task: str = "",
) -> str:
    """The hand-off brief in Markdown (with `tools`: ending with the MCP tool to call;
    with `task`: what the run offers for it)."""
    return brief_text_of(reader(run, repo, home=home), tools=tools, task=task)


def brief_text_of(view: Run, *, tools: bool = False, task: str = "") -> str:
    """`brief_text` of an open run."""
    from ..present import brief as briefing
    from ..present import render

    return render.brief(seen(view), briefing.Context.of(view, task), tools=tools)


def summary_text(run: str | None, repo: str | None, *, home: str | None = None) -> str:
    """The run's summary in Markdown: the one `finish` committed, or, before the run is
    finished, the one it would write now."""
    return summary_text_of(reader(run, repo, home=home))


def summary_text_of(view: Run) -> str:
    """`summary_text` of an open run."""
    from ..present import render
    from ..run.layout import SUMMARY

    if view.info.finished:
        done = view.state.blob(SUMMARY)
        if done is not None:
            return done.decode()
    return render.summary(seen(view))


def report_html(run: str | None, repo: str | None, *, home: str | None = None) -> str:
    """The run's report: one self-contained HTML page."""
    from ..present.report.page import html_report

    return html_report(reader(run, repo, home=home))


def log(
    run: str | None, repo: str | None, step: str | None = None, *, home: str | None = None
) -> list[dict[str, Any]]:
    """The run's commits, newest first, with their status, step and evidence trailers."""
    return log_of(reader(run, repo, home=home), step)


def log_of(view: Run, step: str | None = None) -> list[dict[str, Any]]:
    """`log` of an open run."""
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
                "why": next(iter(commit.trailers.get(message.WHY) or []), None),
                "by": commit.author.partition(" <")[0],
            }
        )
    return entries


def verify(
    run: str | None, repo: str | None, *, recheck: bool = True, home: str | None = None
) -> dict[str, Any]:
    """Every recorded step's evidence checked again now, every record read from Git."""
    return verify_of(reader(run, repo, cached=False, home=home), recheck=recheck)


def verify_of(view: Run, *, recheck: bool = True) -> dict[str, Any]:
    """`verify` of a run opened past the read caches (`cached=False`)."""
    state = seen(view, recheck=recheck)
    ok = not any(s.state in ("stale", "failed") for s in state.steps)
    return {"run": state.run, "ok": ok, "steps": json.loads(state.steps_json())}


def show(
    run: str | None, repo: str | None, step: str, *, home: str | None = None
) -> dict[str, Any]:
    """A step's record, evidence, inputs, outputs described, commit and effects."""
    return show_of(reader(run, repo, home=home), step)


def show_of(view: Run, step: str) -> dict[str, Any]:
    """`show` of an open run."""
    from ..run import showing

    return showing.show(view, step)


def outputs(
    run: str | None, repo: str | None, step: str, *, home: str | None = None
) -> list[dict[str, Any]]:
    """The values a step saved, described without loading them."""
    return outputs_of(reader(run, repo, home=home), step)


def outputs_of(view: Run, step: str) -> list[dict[str, Any]]:
    """`outputs` of an open run."""
    from ..run import showing

    return showing.outputs(view, step)


def get_output(
    run: str | None,
    repo: str | None,
    step: str,
    name: str,
    to: str | None = None,
    *,
    home: str | None = None,
) -> dict[str, Any]:
    """Write output `name` of `step` in its stored format (checked against its sha256)
    to `to`, by default `NAME.<format>` in `home` (else the current folder), which must
    not exist."""
    import os

    from ..run import showing
    from ..store import durable

    view = reader(run, repo, home=home)
    art, chunks = showing.output_bytes(view, step, name)
    target = Path(to) if to else Path(showing.file_name(name, art))
    if home is not None and not target.is_absolute():
        target = Path(home) / target
    if to is None and target.exists():
        raise InvalidInput(f"{target} exists: name the file to write (-o FILE, MCP: to)")
    durable.write_chunks(target, chunks)
    os.chmod(target, 0o644)
    return {
        "run": view.id,
        "step": step,
        "name": name,
        "file": str(target.absolute()),
        "format": art.format,
        "size": art.size,
    }


def diff(run_a: str, run_b: str, repo: str | None, *, home: str | None = None) -> dict[str, Any]:
    """What two runs recorded differently."""
    from ..run.forking import diff as differ

    return differ(reader(run_a, repo, home=home), reader(run_b, repo, home=home))


def runs(repo: str | None, *, home: str | None = None) -> list[dict[str, Any]]:
    """The runs in the store: active or finished, steps confirmed, last activity."""
    from ..store import GitStore

    store = GitStore(repo, create=False)
    return [run_row(reader(name, repo, home=home)) for name in store.refs.runs()]


def run_row(view: Run) -> dict[str, Any]:
    """One run's row of `runs`."""
    table = view.records.table
    confirmed = sum(1 for step in view.steps.names if table.status_of(step) == "confirmed")
    last = next(view.store.history(view.id), None)
    return {
        "run": view.id,
        "state": "finished" if view.info.finished else "active",
        "steps": len(view.steps),
        "confirmed": confirmed,
        "last_activity": (
            datetime.fromtimestamp(last.time, timezone.utc).isoformat(timespec="seconds")
            if last is not None
            else view.info.updated
        ),
    }


@functools.cache
def schema() -> dict[str, Any]:
    """The JSON Schema of every record file and of every command's `--json` output
    (made once a process: the models do not change)."""
    from ..model.events import event_schema
    from ..model.models import json_schemas
    from ..model.shapes import schemas

    return {**json_schemas(), **schemas(), "Event": event_schema()}


# -- the notebook ------------------------------------------------------------------


def notebook_of(view: Run | None, notebook: str | None, home: str | None) -> Path:
    """The notebook an action is about: `notebook` (relative to `home`, else here), else
    the run's own; refused with the notebooks there when neither names one."""
    base = Path(home) if home is not None else Path.cwd()
    if notebook:
        path = Path(notebook)
        return path if path.is_absolute() else base / path
    if view is not None and view.info.notebook:
        path = view.workdir / view.info.notebook
        if path.is_file():
            return path
        beside = base / Path(view.info.notebook).name
        if beside.is_file():  # the run's folder is not on this machine: here
            return beside
        raise InvalidInput(
            f"the notebook of run {view.id!r}, {path}, is not there: name it (notebook=PATH)"
        )
    found = sorted(p.name for p in base.glob("*.ipynb") if not p.name.endswith(".out.ipynb"))
    if len(found) == 1 and view is None:
        return base / found[0]
    said = "its runs record none" if view is None else f"run {view.id!r} records none"
    raise InvalidInput(
        f"which notebook? {said}; name it (notebook=PATH; here: {names.listing(found) or 'none'})"
    )


def maybe_reader(run: str | None, repo: str | None, home: str | None) -> Run | None:
    """The run to read, or None when no run is named and the store has none yet (or
    there is no store)."""
    from ..errors import StoreError
    from ..store import GitStore

    if run is None:
        try:
            if not GitStore(repo, create=False).refs.runs():
                return None
        except StoreError:
            return None
    return reader(run, repo, home=home)


def cells(
    run: str | None, repo: str | None, notebook: str | None = None, *, home: str | None = None
) -> dict[str, Any]:
    """The cells of the run's notebook (or `notebook`), each with the step it is and
    that step's state now."""
    return cells_of(maybe_reader(run, repo, home), notebook, home)


def cells_of(
    view: Run | None,
    notebook: str | None,
    home: str | None,
    *,
    status: RunStatus | None = None,
) -> dict[str, Any]:
    """`cells` of an open run (None: the folder has no run yet); `status`: the run's
    status as `seen` read it already (else read here)."""
    from ..notebook import editing

    path = notebook_of(view, notebook, home)
    every = bool(view is not None and view.info.cells)
    states: dict[str, tuple[str, str]] = {}
    if view is not None:
        states = {s.name: (s.state, s.reason) for s in (status or seen(view)).steps}
    found = editing.cells(path, every=every)
    for cell in found:
        state = states.get(cell["step"]) if cell["step"] else None
        cell["state"] = state[0] if state else ("pending" if cell["step"] else None)
        cell["reason"] = state[1] if state else ""
    return {"run": view.id if view is not None else None, "notebook": str(path), "cells": found}


def edit_step(
    run: str | None,
    repo: str | None,
    source: str,
    *,
    step: str | None = None,
    after: str | None = None,
    notebook: str | None = None,
    home: str | None = None,
) -> dict[str, Any]:
    """Replace step `step`'s cell source, or insert a step cell after step `after`, in
    the run's notebook (or `notebook`): written in one rename once it is still a valid
    notebook whose plan reads; says what the next run of the notebook runs again."""
    from ..notebook import editing

    view, path, every = _to_edit(run, repo, notebook, home)
    done = editing.edit(path, source, step=step, after=after, every=every)
    return _edited(view, repo, home, path, done)


def edit_cell(
    run: str | None,
    repo: str | None,
    source: str,
    *,
    cell: int,
    insert: bool = False,
    notebook: str | None = None,
    home: str | None = None,
) -> dict[str, Any]:
    """Replace the source of the notebook's cell number `cell` (from 1, as `show_cells`
    numbers them: any cell, a plain cell, a `%decide` line, a step) with `source`, or
    with `insert` add a code cell of `source` after it (0: at the top); written as
    `edit_step` writes, with its refusals; says what the next run runs again."""
    from ..notebook import editing

    view, path, every = _to_edit(run, repo, notebook, home)
    done = editing.edit_cell(path, source, cell=cell, insert=insert, every=every)
    return _edited(view, repo, home, path, done)


def _to_edit(
    run: str | None, repo: str | None, notebook: str | None, home: str | None
) -> tuple[Run | None, Path, bool]:
    """The run an edit is about (None: no run yet), its notebook, and whether every code
    cell of it is a step; refused on a finished run."""
    view = maybe_reader(run, repo, home)
    if view is not None and view.info.finished:
        raise InvalidInput(
            f"run {view.id!r} is finished: reopen it first (reopen, `stepstone reopen --why "
            f"REASON`), then edit its notebook"
        )
    return view, notebook_of(view, notebook, home), bool(view is not None and view.info.cells)


def _edited(
    view: Run | None, repo: str | None, home: str | None, path: Path, done: dict[str, Any]
) -> dict[str, Any]:
    """An edit's result: what was done, how the notebook differs from the run's plan
    now, and what its next run runs again."""
    again: list[str] = []
    changes: list[str] = []
    if view is not None:
        view = reader(view.id, repo, home=home)
        state = seen(view)
        again = [s.name for s in state.steps if s.state != "verified"]
        again += [name for name in state.added_cells if name not in again]
        changes = notebook_plan.notebook_changes(view)
    return {
        "run": view.id if view is not None else None,
        "notebook": str(path),
        **done,
        "changes": changes,
        "runs_again": again,
    }


def run_command(
    run: str | None,
    repo: str | None,
    notebook: str | None,
    parameters: Mapping[str, Any] | None,
    cells: bool | None,
    timeout: int | None,
    *,
    home: str | None = None,
) -> tuple[list[str], Path]:
    """The `stepstone run` command line that runs the run's notebook (or `notebook`)
    with papermill's `parameters`, and the notebook; refused before anything starts
    when there is no notebook to run."""
    import sys

    view = maybe_reader(run, repo, home)
    path = notebook_of(view, notebook, home)
    if not path.is_file():
        raise InvalidInput(f"no notebook at {path}")
    argv = [sys.executable, "-m", "stepstone", "run", str(path)]
    if run is not None:
        argv += ["--run", run]
    if repo is not None and Path(repo).absolute() != path.parent.absolute() / ".stepstone":
        argv += ["--repo", str(repo)]
    if parameters:
        argv += ["-y", json.dumps(dict(parameters))]  # JSON is YAML: papermill's -y
    if cells is not None:
        argv.append("--cells" if cells else "--no-cells")
    if timeout is not None:
        argv += ["--timeout", str(timeout)]
    return argv, path


# -- recording --------------------------------------------------------------------


def _unread(kind: str, key: str, how: str) -> str:
    return (
        f"no step has read {kind}{key} yet, so it reaches no result: a step reads it with "
        f"{how} in its cell, and runs again when it changes"
    )


def answer(
    run: str | None,
    repo: str | None,
    unknown: str,
    text: str,
    why: str = "",
    *,
    revise: bool = False,
    via: str,
    home: str | None = None,
) -> dict[str, Any]:
    """Close an open unknown with its answer; the `%unknown` line asking it is then
    not asked again. Another answer to an answered unknown needs `revise`, as another
    value of a decision does. `runs_again`: the steps that read it (`stepstone.answer`,
    `--uses`) and run again for the answer; `note` says when no step reads it."""
    if not text.strip():
        raise InvalidInput(
            f"the answer to {unknown} is empty: give its text (an answer closes the question "
            f"for every step that reads it)"
        )
    with driver(run, repo, via, home=home) as held:
        old = held.unknowns.get(unknown)
        if old is not None and old.state == "resolved" and old.answer != text and not revise:
            said = f" ({old.why})" if old.why else ""
            raise InvalidInput(
                f"unknown {unknown} is already answered: {old.answer!r}{said}. To change "
                f"the answer, pass --revise: the steps that rest on it run again"
            )
        again = held.answering(unknown, text) if old is not None else []
        read = dependencies.readers(held.records.values(), f"{dependencies.UNKNOWN}{unknown}")
        done = _data(held.resolve_unknown(unknown, text, why or None), held.id)
        note = None
        if not read:
            how = f'`stepstone.answer("{unknown}", default)` (or `%%step NAME --uses {unknown}`)'
            note = _unread("", unknown, how)
        return {**done, "runs_again": again, "note": note}


def ask(
    run: str | None, repo: str | None, question: str, *, via: str, home: str | None = None
) -> dict[str, Any]:
    """Record an open question (asked again, it is the one already recorded)."""
    with driver(run, repo, via, home=home) as held:
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
    home: str | None = None,
) -> dict[str, Any]:
    """Decide `key`; a revision stands over the notebook's unchanged `%decide` line.
    `was` is the value before, `runs_again` the steps that read it and run again
    (`note` says when no step reads it); `dry_run` records nothing and says what would
    run again, and as `new_reason` the reason it would record for the same value (None
    when it would record none)."""
    if dry_run:
        view = reader(run, repo, home=home)
        _refuse_revising_nothing(view.decisions, key, revise)  # in the order deciding does
        preview = view.preview_decision(key, value, why, revise=revise)
        return {
            "run": view.id,
            "key": key,
            "value": str(value),
            "was": preview.was,
            "runs_again": preview.runs_again,
            "new_reason": preview.new_reason,
            "note": _decision_note(view, key),
        }
    with driver(run, repo, via, home=home) as held:
        _refuse_revising_nothing(held.decisions, key, revise)
        was, readers = held.revising(key, value)
        made = held.decide(key, value, why, revise=revise)
        note = _decision_note(held, key)
        line = _rewrite_line(held, made, home) if was is not None and was != made.value else None
        return {
            **_data(made, held.id),
            "was": was,
            "runs_again": readers,
            "note": note,
            "notebook_line": line,
        }


def _rewrite_line(view: Run, made: Decision, home: str | None) -> str | None:
    """Make the run's notebook say what was just decided outside it: its `%decide` lines
    of the key revise it to the new value. What was done, in words; None when the run
    has no notebook, no line decides the key, or the run is a fork or a run with
    parameters (the notebook says what its own run decided; another run's decision
    stands over its line)."""
    from ..notebook import editing

    if not view.info.notebook or view.info.forked_from or view.info.parameters:
        return None  # the notebook is its own run's: another run's stands over its line
    try:
        path = notebook_of(view, None, home)
        cells = editing.revise_decision(
            path, made.key, made.value, made.why, every=bool(view.info.cells)
        )
    except (InvalidInput, OSError) as exc:
        return f"the notebook's %decide line of {made.key} still says the old value: {exc}"
    if not cells:
        return None
    where = ", ".join(str(c) for c in cells)
    return f"{path.name} cell {where} now says %decide {made.key}={made.value} --revise"


def _decision_note(view: Run, key: str) -> str | None:
    if view.readers(key):
        return None
    return _unread("decision ", key, f'`stepstone.decided("{key}")`')


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
    home: str | None = None,
) -> dict[str, Any]:
    """Settle an effect whose outcome was unknown."""
    with driver(run, repo, via, home=home) as held:
        return _data(held.resolve_effect(key, happened=happened, receipt=receipt, why=why), held.id)


def rerun(
    run: str | None,
    repo: str | None,
    step: str,
    why: str,
    *,
    downstream: bool = False,
    via: str,
    home: str | None = None,
) -> dict[str, Any]:
    """Mark a step (and, with `downstream`, what depends on it) to run again."""
    with driver(run, repo, via, home=home) as held:
        marked = held.rerun(step, why, downstream=downstream)
        return {"run": held.id, "step": step, "why": why, "marked": marked}


def fork(run: str, repo: str | None, at: str, new: str, *, via: str) -> dict[str, Any]:
    """A new run whose history is `run`'s up to step `at` (a Git branch point)."""
    from ..run.forking import fork as forking
    from ..store import GitStore

    store = GitStore(repo, create=False)
    return forking(store, run, at, new, settings=Settings.from_env(via=via))


def finish(
    run: str | None, repo: str | None, *, force: bool = False, via: str, home: str | None = None
) -> dict[str, Any]:
    """Finish the run: its summary committed (`summary.md` in the store) and written to
    `<run>.summary.md` in its work folder, the run tagged `stepstone/<run>`. Refused
    while its notebook has steps edited or added since they ran, unless `force`."""
    with driver(run, repo, via, home=home) as held:
        if not force:
            notebook_plan.refuse_to_leave_out(held)
        text = held.finish(force=force)
        return {
            "run": held.id,
            "finished": held.info.finished,
            "file": str(held.summary_file),
            "tag": f"stepstone/{held.id}",
            "summary": text,
        }


def reopen(
    run: str | None, repo: str | None, why: str, *, via: str, home: str | None = None
) -> dict[str, Any]:
    """Reopen a finished run so that it can change again (the reason is recorded)."""
    with driver(run, repo, via, home=home) as held:
        was = held.info.finished
        held.reopen(why)
        return {"run": held.id, "reopened": was is not None, "why": why}
