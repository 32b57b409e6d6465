"""What a notebook's magics do, from the command line: answer and ask unknowns, make
and revise decisions, and look at one step and its outputs. Each change is a commit
whose trailers say it came `Stepstone-Via: cli`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from ..agent import actions
from ..errors import InvalidInput
from .common import (
    diverge_option,
    echo_result,
    errors_as_exit_codes,
    json_option,
    main,
    open_reader,
    repo_option,
)
from .common import run_option as run_option


@main.command()
@click.argument("unknown_id", metavar="UNKNOWN")
@click.argument("text", metavar="ANSWER")
@click.option("--why", default="", help="How you know (recorded with the answer).")
@click.option("--revise", is_flag=True, help="Change the answer of an answered unknown.")
@run_option
@repo_option
@json_option
@diverge_option
@errors_as_exit_codes
def answer(
    unknown_id: str,
    text: str,
    why: str,
    revise: bool,
    run_id: str | None,
    repo: str | None,
    as_json: bool,
) -> None:
    """Close the open unknown UNKNOWN (U1...) with ANSWER. The notebook's `%unknown`
    line that asked it is then not asked again; another answer later needs --revise."""
    done = actions.answer(run_id, repo, unknown_id, text, why, revise=revise, via="cli")
    said = f"run {done['run']}: unknown {done['id']} answered: {text}"
    if done["runs_again"]:
        said += f"; runs again: {', '.join(done['runs_again'])}"
    echo_result(as_json, done, f"{said}\n{done['note']}" if done["note"] else said)


@main.command()
@click.argument("question")
@run_option
@repo_option
@json_option
@errors_as_exit_codes
def ask(question: str, run_id: str | None, repo: str | None, as_json: bool) -> None:
    """Record QUESTION as an open unknown (asked again, it is the one already recorded)."""
    done = actions.ask(run_id, repo, question, via="cli")
    said = f"unknown {done['id']} is {done['state']}: {done['question']}"
    echo_result(as_json, done, f"run {done['run']}: {said}")


@main.command()
@click.argument("key")
@click.argument("value")
@click.option("--why", required=True, help="Why (recorded with the decision).")
@click.option("--revise", is_flag=True, help="Change a decision already made.")
@click.option("--dry-run", is_flag=True, help="Record nothing: say which steps would run again.")
@run_option
@repo_option
@json_option
@diverge_option
@errors_as_exit_codes
def decide(
    key: str,
    value: str,
    why: str,
    revise: bool,
    dry_run: bool,
    run_id: str | None,
    repo: str | None,
    as_json: bool,
) -> None:
    """Decide KEY=VALUE with its reason. A revision stands over the notebook's `%decide`
    line for KEY until that line is edited; the steps that read KEY run again."""
    from ..present import render

    done = actions.decide(run_id, repo, key, value, why, revise=revise, dry_run=dry_run, via="cli")
    if dry_run:
        text = render.decision_preview(
            key, done["was"], value, done["runs_again"], done["new_reason"]
        )
    else:
        text = render.decision_text(key, value, why, done["was"], done["runs_again"])
    if done["note"]:
        text += f"\n{done['note']}"
    if done.get("notebook_line"):
        text += f"\n{done['notebook_line']}"
    echo_result(as_json, done, f"run {done['run']}: {text}")


@main.command()
@click.argument("step")
@run_option
@repo_option
@json_option
@errors_as_exit_codes
def show(step: str, run_id: str | None, repo: str | None, as_json: bool) -> None:
    """Everything recorded about STEP: its state, evidence, what it read, its outputs
    (type, shape, size, how to load them), the commit that recorded it, its effects."""
    from ..present.render_steps import shown_step

    shown = actions.show(run_id, repo, step)
    click.echo(json.dumps(shown, indent=2) if as_json else shown_step(shown), nl=as_json)


@main.command()
@click.argument("step")
@click.option("--get", "name", help="Write this output's stored bytes (its own format).")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where --get writes (default: NAME.<format> here; - for stdout).",
)
@run_option
@repo_option
@json_option
@errors_as_exit_codes
def outputs(
    step: str,
    name: str | None,
    output: Path | None,
    run_id: str | None,
    repo: str | None,
    as_json: bool,
) -> None:
    """The values STEP saved, described without loading them; with --get NAME, write
    one out (`.npy`, Parquet, JSON or pickle, as stored; checked against its sha256)."""
    if name is None:
        from ..present.render_steps import output_lines

        listed = actions.outputs(run_id, repo, step)
        click.echo(json.dumps(listed, indent=2) if as_json else output_lines(listed))
        return
    if output is not None and str(output) == "-":
        from ..run import showing

        _, chunks = showing.output_bytes(open_reader(run_id, repo), step, name)
        for chunk in chunks:
            sys.stdout.buffer.write(chunk)
        return
    said = actions.get_output(run_id, repo, step, name, str(output) if output else None)
    text = f"wrote {name} ({said['format']}, {said['size']} bytes) to {said['file']}"
    echo_result(as_json, said, text)


@main.command("mcp")
@repo_option
@errors_as_exit_codes
def mcp_command(repo: str | None) -> None:
    """Serve the agents' tools over MCP on stdin/stdout: every command an agent needs
    (status, brief, log, show, outputs, get_output, verify, runs, schema, answer, ask,
    decide, resolve, rerun, fork, diff, run, finish, reopen, report, show_cells,
    edit_step), with the same JSON as these commands' --json; the brief, summary, cells
    and report as resources. Add it to an MCP client as the command `stepstone mcp`,
    started in the notebook's folder."""
    try:
        from ..agent.mcpserver import serve

        serve(repo)
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("mcp"):
            raise
        raise InvalidInput(
            "the MCP server needs the mcp package: pip install 'stepstone[mcp]'"
        ) from exc
