"""Time travel from the command line: fork a run at a step, diff two runs, and the
store's history as a graph of its runs."""

from __future__ import annotations

import json

import click

from ..agent import actions
from ..store import GitStore
from .common import errors_as_exit_codes, json_option, main, repo_option


@main.command()
@click.argument("run")
@click.option("--at", "at", required=True, metavar="STEP", help="The step to fork after.")
@click.option("--as", "new", required=True, metavar="NEW", help="The new run's id.")
@repo_option
@json_option
@errors_as_exit_codes
def fork(run: str, at: str, new: str, repo: str | None, as_json: bool) -> None:
    """Make run NEW whose history is RUN's up to the commit that confirmed STEP (a Git
    branch point), to try an alternative without losing RUN; run it with --run NEW."""
    made = actions.fork(run, repo, at, new, via="cli")
    if as_json:
        click.echo(json.dumps(made, indent=2))
        return
    notebook = made["notebook"] or "NOTEBOOK.ipynb"
    click.echo(
        f"run {new}: forked from {run} at step {at} (commit {made['commit'][:10]}); "
        f"{len(made['steps'])} step(s) recorded; run it with `stepstone run {notebook} --run "
        f"{new}` (without --run, the notebook keeps driving {run})"
    )
    behind = [f"decision {k}" for k in made["left_behind"]["decisions"]]
    behind += [f"unknown {u}" for u in made["left_behind"]["unknowns"]]
    if behind:
        click.echo(
            f"  left behind: {'; '.join(behind)} (made after step {at}: the fork's run decides "
            f"and asks again)"
        )
    for effect in made["anew"]:
        click.echo(
            f"  note: effect {effect['name']} of step {effect['step']} ({effect['state']} in "
            f"{run}) is performed anew if {new} runs that step"
        )


@main.command()
@click.argument("run_a", metavar="RUN_A")
@click.argument("run_b", metavar="RUN_B")
@repo_option
@json_option
@errors_as_exit_codes
def diff(run_a: str, run_b: str, repo: str | None, as_json: bool) -> None:
    """The steps, decisions, evidence, outputs and answers RUN_A and RUN_B recorded
    differently. Exit 1 when they differ."""
    from ..present.render_steps import diff_lines

    found = actions.diff(run_a, run_b, repo)
    click.echo(json.dumps(found, indent=2) if as_json else diff_lines(found), nl=as_json)
    raise SystemExit(0 if found["same"] else 1)


def graph_of(store: GitStore) -> str:
    """`git log --graph` of every run's ref: where forks part from their runs."""
    from ..remote.git import git

    refs = [store.refs.ref(run) for run in store.refs.runs()]
    if not refs:
        return "no runs\n"
    return git(store, "log", "--graph", "--date=iso", "--format=%h %ad %s%d", *refs)
