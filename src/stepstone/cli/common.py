"""The `stepstone` command group and what its commands share: options, exit codes,
opening a run to read.

Exit codes: 0 ok; 1 the thing asked about is not ok (a cell failed, a step is
stale, an effect is unresolved); 2 usage or bad input.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import click

from ..errors import StepstoneError
from ..run import Run

F = TypeVar("F", bound=Callable[..., Any])

run_option = click.option(
    "--run", "run_id", help="Run id (default: $STEPSTONE_RUN, else the only run)."
)
repo_option = click.option("--repo", help="Store (default: $STEPSTONE_REPO, else .stepstone).")
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
recheck_option = click.option(
    "--recheck", is_flag=True, help="Also run cmd: and call: checks again (reading runs no code)."
)


def diverge_option(fn: F) -> F:
    """A command that changes the run, given `--diverge`: on a copy of a store that
    cannot take turns with its copies (its original is gone, or they went apart), the
    change drives this copy as a new lineage, as `stepstone run --diverge` does."""

    @wraps(fn)
    def wrapper(*args: Any, diverge: bool = False, **kwargs: Any) -> Any:
        from ..agent.actions import diverging

        with diverging(diverge):
            return fn(*args, **kwargs)

    return click.option(  # type: ignore[return-value]
        "--diverge",
        is_flag=True,
        help="On a copy whose original is gone or went apart: drive it as a new lineage.",
    )(wrapper)


def echo_result(as_json: bool, data: Any, text: str) -> None:
    """Print a command's result: its JSON with `--json`, else `text` for people."""
    click.echo(json.dumps(data, indent=2) if as_json else text)


def refusal(exc: StepstoneError) -> str:
    """A refusal as a command prints it: its error's name (`RunLocked: ...`), so that a
    script or an agent can tell one from another, then what it says."""
    name = type(exc).__name__
    return str(exc) if type(exc) is StepstoneError else f"{name}: {exc}"


def errors_as_exit_codes(fn: F) -> F:
    """A command whose stepstone errors print as `stepstone: ...` and exit 2."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except StepstoneError as exc:
            click.echo(f"stepstone: {refusal(exc)}", err=True)
            sys.exit(2)
        except KeyboardInterrupt:  # Ctrl-C before a kernel ran anything, or a reader's
            click.echo(
                "stepstone: interrupted (Ctrl-C); what was recorded stays recorded: run the "
                "same command again",
                err=True,
            )
            sys.exit(130)

    return wrapper  # type: ignore[return-value]


def open_reader(run_id: str | None, repo: str | None, *, cached: bool = True) -> Run:
    """The run, opened to read (no lock, no lease, nothing created)."""
    from ..agent.actions import reader

    return reader(run_id, repo, cached=cached)


COMMAND_MODULES = {
    **dict.fromkeys(["answer", "ask", "decide", "mcp", "outputs", "show"], "agents"),
    **dict.fromkeys(["diff", "fork"], "history"),
    "report": "report",
    "run": "running",
    **dict.fromkeys(
        [
            *("brief", "clone", "finish", "handoff", "log", "pull", "push", "reopen"),
            *("repair", "rerun", "resolve", "runs", "schema", "status", "trust", "verify"),
        ],
        "commands",
    ),
}


class _Commands(click.Group):
    """The command group; a command's module is imported when the command is asked for
    (a new process pays for what its command reads, not for every command's imports)."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = COMMAND_MODULES.get(cmd_name)
        if module is not None and cmd_name not in self.commands:
            importlib.import_module(f"{__package__}.{module}")
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        for module in sorted(set(COMMAND_MODULES.values())):
            importlib.import_module(f"{__package__}.{module}")
        return super().list_commands(ctx)


HAND_OFF = """\b
Picking up a run someone else started, in six commands:
  stepstone clone URL .stepstone        the store, beside the notebook's project
  stepstone brief --task "what you were asked"   where it stands, and how to do it
  stepstone decide KEY VALUE --revise --why "..."   a revised rule (or answer, resolve)
  stepstone run NOTEBOOK.ipynb          runs what changed; nothing is sent twice
  stepstone finish                      the summary, once every step is verified
  stepstone handoff [--remote URL]      push it back, let go of the lease
"""


@click.group(cls=_Commands, epilog=HAND_OFF)
@click.option("--repo", help="Store, for the command that follows (as if given after it).")
@click.option("--run", "run_id", help="Run id, for the command that follows (likewise).")
@click.version_option(package_name="stepstone")
@click.pass_context
def main(ctx: click.Context, repo: str | None, run_id: str | None) -> None:
    """Resumable notebook tasks: steps with verified evidence, committed to Git."""
    given = {name: value for name, value in (("repo", repo), ("run_id", run_id)) if value}
    name, group = ctx.invoked_subcommand, ctx.command
    if not given or name is None or not isinstance(group, click.Group):
        return
    command = group.get_command(ctx, name)
    takes = {param.name for param in command.params} if command else set()
    refused = [f"--{'run' if key == 'run_id' else key}" for key in given if key not in takes]
    if refused:
        raise click.UsageError(f"stepstone {name} takes no {' or '.join(refused)}")
    ctx.default_map = {name: given}  # the command's own option, if given too, wins


def open_driver(run_id: str | None, repo: str | None) -> Run:
    """The run, held as its driver for one change; its commits say they came via cli."""
    from ..agent.actions import driver

    return driver(run_id, repo, "cli")
