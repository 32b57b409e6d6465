"""The commands that run, read, repair and move a run."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from ..errors import NothingToRepair, StoreError
from ..notebook import notebook_plan
from ..present import render
from ..run import holding, problems_at
from ..store import DEFAULT_STORE, GitStore
from .common import (
    diverge_option,
    echo_result,
    errors_as_exit_codes,
    json_option,
    main,
    open_driver,
    open_reader,
    recheck_option,
    repo_option,
    run_option,
)


@main.command()
@run_option
@repo_option
@json_option
@click.option("--all", "every", is_flag=True, help="List every step (long runs are shortened).")
@recheck_option
@errors_as_exit_codes
def status(run_id: str | None, repo: str | None, as_json: bool, every: bool, recheck: bool) -> None:
    """Steps, evidence, decisions, unknowns, effects and the next action."""
    reader = open_reader(run_id, repo)
    state = notebook_plan.seeing_the_notebook(reader, reader.status(recheck=recheck))
    if as_json:
        click.echo(state.json_text())
    elif sys.stdout.isatty():
        render.print_rich_status(state, every=every)
    else:
        click.echo(render.status_text(state, every=every))
    if state.unresolved_effects or reader.corrupt:
        sys.exit(1)


@main.command()
@run_option
@repo_option
@json_option
@click.option(
    "--replay",
    is_flag=True,
    help="Also run the notebook fresh in a scratch folder and compare what it displays and "
    "writes with the records (a reproduction certificate, recorded in the run).",
)
@errors_as_exit_codes
def verify(run_id: str | None, repo: str | None, as_json: bool, replay: bool) -> None:
    """Re-check every recorded step's evidence against the real state now (every record
    is read from Git, not through the read caches); with --replay, also re-run the
    notebook fresh and compare."""
    reader = open_reader(run_id, repo, cached=False)
    if reader.corrupt:
        raise StoreError(
            str(reader.store.path),
            f"run {reader.id!r} is damaged: {'; '.join(reader.corrupt[:3])}. A driver refuses "
            f"it; `stepstone repair --run {reader.id}` moves it back to its newest sound commit",
        )
    if sys.stderr.isatty() and len(reader.steps) > 20:
        with click.progressbar(length=len(reader.steps), label="verifying", file=sys.stderr) as bar:
            state = reader.status(progress=bar.update, recheck=True)
    else:
        state = reader.status(recheck=True)
    recorded = len(state.notes)
    state = notebook_plan.seeing_the_notebook(reader, state)  # edited cells stale, as status
    bad = [s for s in state.steps if s.state in ("stale", "failed")]
    certificate = _replayed(reader, run_id, repo) if replay else None
    if as_json:
        head = json.dumps({"run": state.run, "ok": not bad})
        if certificate is not None:
            head = head[:-1] + f', "replay": {json.dumps(certificate.as_json())}}}'
        click.echo(f'{head[:-1]}, "steps": {state.steps_json()}}}')
    else:
        for line in render.verify_lines(state):
            click.echo(line)
        for note in state.notes[recorded:]:
            click.echo(f"note: {note}")
        for line in certificate.lines() if certificate is not None else []:
            click.echo(line)
    sys.exit(1 if bad or (certificate is not None and not certificate.equal) else 0)


def _replayed(reader: Any, run_id: str | None, repo: str | None) -> Any:
    """The reproduction certificate of a fresh run of the run's notebook, committed to
    the run (`replayed.json`)."""
    from ..notebook import replay

    certificate = replay.replay(reader, reader.workdir)
    data = (json.dumps(certificate.as_json(), indent=2) + "\n").encode()
    said = "reproduces" if certificate.equal else f"{len(certificate.differences)} differences"
    with open_driver(reader.id if run_id is None else run_id, repo) as run:
        run.commit_record(replay.RECORD, data, f"replayed: {said}", [])
    return certificate


@main.command()
@run_option
@repo_option
@json_option
@click.option("--step", "step_name", help="Only the commits of this step.")
@click.option("--graph", is_flag=True, help="Every run of the store as a graph: forks show.")
@errors_as_exit_codes
def log(
    run_id: str | None, repo: str | None, as_json: bool, step_name: str | None, graph: bool
) -> None:
    """The run's history from Git, newest first (read from the commit trailers)."""
    if graph:
        from .history import graph_of

        click.echo(graph_of(GitStore(repo, create=False)), nl=False)
        return
    from ..agent import actions

    entries = actions.log(run_id, repo, step_name)
    if as_json:
        click.echo(json.dumps(entries))
        return
    for e in entries:
        click.echo(render.log_line(e))


@main.command()
@repo_option
@json_option
@errors_as_exit_codes
def runs(repo: str | None, as_json: bool) -> None:
    """The runs in the store."""
    from ..agent import actions

    rows = actions.runs(repo)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    elif not rows:
        click.echo("no runs")
    for row in rows if not as_json else []:
        click.echo(render.run_row(row))


@main.command()
@run_option
@repo_option
@click.option("--force", is_flag=True, help="Finish although steps, unknowns or effects are open.")
@json_option
@diverge_option
@errors_as_exit_codes
def finish(run_id: str | None, repo: str | None, force: bool, as_json: bool) -> None:
    """Write the run's summary from its records (RUN.summary.md in its work folder, and
    summary.md in the store) and archive it (tag stepstone/<run>)."""
    from ..agent import actions

    done = actions.finish(run_id, repo, force=force, via="cli")
    if as_json:
        click.echo(json.dumps(done, indent=2))
        return
    click.echo(done["summary"], nl=False)
    click.echo(f"stepstone: summary written to {done['file']}; tagged {done['tag']}", err=True)


@main.command()
@run_option
@repo_option
@click.option("--why", required=True, help="Why the finished run changes again.")
@json_option
@diverge_option
@errors_as_exit_codes
def reopen(run_id: str | None, repo: str | None, why: str, as_json: bool) -> None:
    """Reopen a finished run so that it can change again (the reason is recorded)."""
    from ..agent import actions

    done = actions.reopen(run_id, repo, why, via="cli")
    click.echo(json.dumps(done, indent=2) if as_json else f"run {done['run']} reopened: {why}")


@main.command()
@click.argument("step")
@run_option
@repo_option
@click.option("--why", required=True, help="Why the step runs again (recorded in Git).")
@click.option(
    "--downstream", is_flag=True, help="Also every step that depends on it, directly or not."
)
@json_option
@diverge_option
@errors_as_exit_codes
def rerun(
    run_id: str | None, repo: str | None, step: str, why: str, downstream: bool, as_json: bool
) -> None:
    """Mark STEP to run again at the next run (its confirmed effects are not repeated)."""
    from ..agent import actions

    done = actions.rerun(run_id, repo, step, why, downstream=downstream, via="cli")
    marked, run = done["marked"], done["run"]
    if as_json:
        click.echo(json.dumps(done, indent=2))
    elif marked:
        click.echo(f"run {run}: {', '.join(marked)} run(s) again at the next run: {why}")
    else:
        click.echo(f"run {run}: {step} has not been confirmed; it runs at the next run anyway")


@main.command()
@click.argument("key")
@run_option
@repo_option
@click.option(
    "--happened",
    "happened",
    flag_value=True,
    default=None,
    help="The effect did happen (give its --receipt).",
)
@click.option(
    "--not-happened",
    "happened",
    flag_value=False,
    help="The effect did not happen: the next run performs it.",
)
@click.option("--receipt", help="The receiver's receipt (JSON or text).")
@click.option("--why", default="", help="How you know.")
@json_option
@diverge_option
@errors_as_exit_codes
def resolve(
    key: str,
    run_id: str | None,
    repo: str | None,
    happened: bool | None,
    receipt: str | None,
    why: str,
    as_json: bool,
) -> None:
    """Settle an effect whose outcome was unknown."""
    if happened is None:
        raise click.UsageError("say --happened [--receipt R] or --not-happened")
    value: Any = receipt
    if receipt is not None:
        try:
            value = json.loads(receipt)
        except ValueError:
            value = receipt
    from ..agent import actions

    done = actions.resolve(run_id, repo, key, happened=happened, receipt=value, why=why, via="cli")
    if as_json:
        click.echo(json.dumps(done, indent=2))
    else:
        click.echo(f"effect {done['key']} ({done['step']}/{done['name']}): {done['state']}")


@main.command()
@run_option
@repo_option
@json_option
@recheck_option
@click.option("--task", default="", help="What you were asked to do: the brief says how.")
@errors_as_exit_codes
def brief(run_id: str | None, repo: str | None, as_json: bool, recheck: bool, task: str) -> None:
    """A short Markdown hand-off brief for a person or an agent whose context was reset
    (with --task, what the run offers for that task: the decisions it names, with the
    command that revises each and what it runs again)."""
    from ..present import brief as briefing

    reader = open_reader(run_id, repo)
    state = notebook_plan.seeing_the_notebook(reader, reader.status(recheck=recheck))
    where = briefing.Context.of(reader, task)
    if as_json:
        click.echo(json.dumps(briefing.to_json(state, where), indent=2))
    else:
        click.echo(render.brief(state, where), nl=False)


@main.command()
def schema() -> None:
    """The JSON Schema of every file in a run and of every command's --json output
    (`status --json`...; the MCP server's tools return the same shapes), generated from
    the models."""
    from ..agent import actions

    click.echo(json.dumps(actions.schema(), indent=2))


@main.command()
@run_option
@repo_option
@click.option("--force", is_flag=True, help="Repair although dropped commits recorded effects.")
@errors_as_exit_codes
def repair(run_id: str | None, repo: str | None, force: bool) -> None:
    """Move a damaged run back to its newest readable commit (nothing is deleted)."""

    store = GitStore(repo, create=False)
    run_id = store.pick_run(run_id)
    with holding(store, run_id):
        cleared = store.clear_leftovers(run_id, always=True)
    for said in cleared:
        click.echo(said)
    try:
        old, new, dropped = store.repair(
            run_id, force=force, sound=lambda commit: not problems_at(store, run_id, commit)
        )
    except NothingToRepair:
        if cleared:
            return  # the torn packs were all there was
        raise
    click.echo(
        f"run {run_id}: moved from {old[:10] if old else 'a damaged or missing ref'} to "
        f"{new[:10]}; {len(dropped)} commit(s) dropped from the run (their steps will run again)"
    )


@main.command()
@repo_option
@errors_as_exit_codes
def trust(repo: str | None) -> None:
    """Trust the saved values of a store written elsewhere (pickles run code when loaded).

    Values this user's own drivers wrote are trusted without it. The trust is kept in
    this user's configuration folder, never in the store, so it does not travel."""
    from ..values import trust as trusting

    store = GitStore(repo, create=False)
    noted = trusting.trust_store(store.git_dir)
    click.echo(f"trusted the values of store {store.path} (noted in {noted})")


@main.command("push")
@run_option
@repo_option
@click.option("--remote", "url", help="Set the remote (any URL git accepts) before pushing.")
@click.option(
    "--auto/--no-auto", default=None, help="Also push after every commit, in the background."
)
@json_option
@errors_as_exit_codes
def push_command(
    run_id: str | None, repo: str | None, url: str | None, auto: bool | None, as_json: bool
) -> None:
    """Push the run's history to its remote (never over another copy's work)."""
    from ..agent import moving

    done = moving.push(run_id, repo, url=url, auto=auto)
    echo_result(as_json, done, f"pushed run {done['run']} at {done['tip'][:10]}")


@main.command("pull")
@run_option
@repo_option
@click.option(
    "--keep",
    type=click.Choice(["local", "remote"]),
    help="When both copies advanced: which history becomes the run.",
)
@json_option
@errors_as_exit_codes
def pull_command(run_id: str | None, repo: str | None, keep: str | None, as_json: bool) -> None:
    """Bring the remote's history of the run here; diverged copies are shown, not merged."""
    from ..agent import moving

    done = moving.pull(run_id, repo, keep=keep)
    extra = f"; the other history is kept at {done['preserved']}" if done["preserved"] else ""
    if done["carried"]:
        extra += (
            f"; {done['carried']} effect(s) it performed were carried over, so they are "
            f"never performed again"
        )
    echo_result(as_json, done, f"run {done['run']}: {done['state']}{extra}")


@main.command("clone")
@click.argument("url")
@click.argument("directory", required=False, default=DEFAULT_STORE)
@json_option
@errors_as_exit_codes
def clone_command(url: str, directory: str, as_json: bool) -> None:
    """Clone a store from URL: plan, records and artifacts of every run, ready to resume."""
    from ..agent import moving

    done = moving.clone(url, directory)
    runs = ", ".join(done["runs"]) or "none"
    said = f"cloned {url} into {done['store']} (runs: {runs})"
    if Path(directory).name != DEFAULT_STORE:
        said += (
            f"\nstepstone reads the store beside the notebook as {DEFAULT_STORE}: keep it in "
            f"the notebook's project folder under that name, or pass --repo {directory}"
        )
    echo_result(as_json, done, said)


@main.command()
@run_option
@repo_option
@click.option("--remote", "url", help="Set the remote (any URL git accepts) before pushing.")
@json_option
@errors_as_exit_codes
def handoff(run_id: str | None, repo: str | None, url: str | None, as_json: bool) -> None:
    """Push the run, release its lease, and print the brief and the next agent's commands."""
    from ..agent import moving

    done = moving.handoff(run_id, repo, via="cli", url=url)
    if as_json:
        click.echo(json.dumps(done, indent=2))
        return
    click.echo(done["brief"], nl=False)
    click.echo(done["next_agent"])
    if done["note"]:
        click.echo(f"note: {done['note']}")
