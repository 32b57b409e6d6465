"""What the JupyterLab extension shows of a notebook's run, and the actions its panel
takes: read from the store through the same calls as `stepstone status`, `log` and the
MCP tools (`agent/actions.py`), so that every state, reason and refusal is theirs.
Reading runs none of the notebook's code and unpickles nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..agent import actions
from ..errors import InvalidInput, StepstoneError
from ..notebook import live
from ..present.report.history import read_commits, read_history
from ..run import Run
from ..run.state import head_info
from ..store import DEFAULT_STORE, GitStore

VIA = "jupyterlab"
TIMELINE = 50  # the newest commits the panel lists
IN_DOUBT = ("unresolved", "submitted")  # effects listed first: someone may have to settle them


def store_of(notebook: Path) -> Path:
    """The store beside the notebook, as `stepstone run NOTEBOOK` makes it."""
    return notebook.parent / DEFAULT_STORE


def run_of(notebook: Path) -> str | None:
    """The notebook's own run in the store beside it (not a fork, not a run with
    parameters: the run `stepstone run NOTEBOOK` drives), None when it has none yet."""
    try:
        store = GitStore(store_of(notebook), create=False)
        runs = store.refs.runs()
    except StepstoneError:
        return None
    own = []
    for run in runs:
        info = head_info(store, run)
        if (
            info is not None
            and Path(info.notebook or "").name == notebook.name
            and not (info.forked_from or info.parameters)
        ):
            own.append(run)
    if len(own) == 1:
        return own[0]
    return notebook.stem if notebook.stem in runs else None


def shown(notebook: Path) -> dict[str, Any]:
    """The notebook's run as the extension draws it: each cell with its step and state
    (`verified`, `stale`, `failed`, `pending`; `running` and `skipped` while a
    `stepstone run` of it goes on), the status, each decision with its history, the
    unknowns, the effects (unresolved first) and the newest commits."""
    if not notebook.is_file():
        raise InvalidInput(f"no notebook at {notebook}")
    run = run_of(notebook)
    view = actions.reader(run, str(store_of(notebook)), home=str(notebook.parent)) if run else None
    seen = actions.seen(view) if view is not None else None  # read once, for both
    cells = actions.cells_of(view, str(notebook), str(notebook.parent), status=seen)["cells"]
    now, skipped = live.running(notebook)
    status = json.loads(seen.json_text()) if seen is not None else None
    evidence = {s["name"]: s["evidence"] for s in status["steps"]} if status else {}
    for cell in cells:
        if cell["step"] is None:
            continue
        if cell["step"] == now:
            cell["state"], cell["reason"] = "running", "running now (stepstone run)"
        elif cell["step"] in skipped and cell["state"] == "verified":
            cell["state"] = "skipped"
            cell["reason"] = "skipped: its evidence verified (this run)"
        elif cell["state"] == "verified" and not cell["reason"]:
            cell["reason"] = _evidence(evidence.get(cell["step"], []))
    said: dict[str, Any] = {
        "notebook": str(notebook),
        "run": run,
        "running": now,
        "cells": [{k: c[k] for k in ("index", "id", "step", "state", "reason")} for c in cells],
    }
    if view is None or status is None:
        return {
            **said,
            "status": None,
            "next_action": "not run yet: run the notebook (stepstone run, or %resume in it)",
            "decisions": [],
            "unknowns": [],
            "effects": [],
            "timeline": [],
        }
    return {
        **said,
        "status": status,
        "next_action": status["next_action"],
        "finished": status["finished"],
        "decisions": _decisions(view, status),
        "unknowns": status["unknowns"],
        "effects": sorted(status["effects"], key=lambda e: e.get("state") not in IN_DOUBT),
        "timeline": actions.log_of(view)[:TIMELINE],
    }


def _evidence(evidence: list[dict[str, Any]]) -> str:
    """A verified step's evidence in a line, as `stepstone status` lists it."""
    said = [f"{e['check']} ({e['detail']})" if e.get("detail") else e["check"] for e in evidence]
    return "evidence: " + "; ".join(said) if said else "completed"


def _decisions(view: Run, status: dict[str, Any]) -> list[dict[str, Any]]:
    commits, complete = read_commits(view)
    history = read_history(view, commits, complete, wanted=())
    return [
        {
            **d,
            "history": [
                {"value": r.value, "why": r.why, "time": r.time, "via": r.via}
                for r in history.revisions.get(d["key"], [])
            ],
        }
        for d in status["decisions"]
    ]


def act(notebook: Path, action: str, given: dict[str, Any]) -> dict[str, Any]:
    """One action of the panel on the notebook's run, as the CLI's and MCP's: `answer`
    (unknown, text, why, revise), `rerun` (step, why, downstream), `decide` (key, value,
    why, revise) or `finish` (force). Raises their refusals."""
    run = run_of(notebook)
    if run is None:
        raise InvalidInput(f"{notebook.name} has no run yet: run it first")
    where: dict[str, Any] = {
        "repo": str(store_of(notebook)),
        "home": str(notebook.parent),
        "via": VIA,
    }

    def text(key: str, default: str = "") -> str:
        return str(given.get(key) or default)

    if action == "answer":
        return actions.answer(
            run, unknown=text("unknown"), text=text("text"), why=text("why"),
            revise=bool(given.get("revise")), **where,
        )  # fmt: skip
    if action == "rerun":
        return actions.rerun(
            run, step=text("step"), why=text("why", "asked in JupyterLab"),
            downstream=bool(given.get("downstream", True)), **where,
        )  # fmt: skip
    if action == "decide":
        return actions.decide(
            run, key=text("key"), value=text("value"), why=text("why"),
            revise=bool(given.get("revise", True)), **where,
        )  # fmt: skip
    if action == "finish":
        return actions.finish(run, force=bool(given.get("force")), **where)
    raise InvalidInput(f"no action {action!r}: answer, rerun, decide or finish")
