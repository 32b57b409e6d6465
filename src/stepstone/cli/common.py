"""The `stepstone` command group and what its commands share: options, exit codes,
opening a run to read.

Exit codes: 0 ok; 1 the thing asked about is not ok (a cell failed, a step is
stale, an effect is unresolved); 2 usage or bad input.
"""

from __future__ import annotations

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


def errors_as_exit_codes(fn: F) -> F:
    """A command whose stepstone errors print as `stepstone: ...` and exit 2."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except StepstoneError as exc:
            click.echo(f"stepstone: {exc}", err=True)
            sys.exit(2)

    return wrapper  # type: ignore[return-value]


def open_reader(run_id: str | None, repo: str | None, *, cached: bool = True) -> Run:
    """The run, opened to read (no lock, no lease, nothing created)."""
    from ..actions import reader

    return reader(run_id, repo, cached=cached)


@click.group()
@click.version_option(package_name="stepstone")
def main() -> None:
    """Resumable notebook tasks: steps with verified evidence, committed to Git."""


def open_driver(run_id: str | None, repo: str | None) -> Run:
    """The run, held as its driver for one change; its commits say they came via cli."""
    from ..actions import driver

    return driver(run_id, repo, "cli")
