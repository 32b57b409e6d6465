"""`stepstone report`: one self-contained HTML page about a run, to read in a browser."""

from __future__ import annotations

from pathlib import Path

import click

from .common import errors_as_exit_codes, main, open_reader, repo_option, run_option


@main.command()
@run_option
@repo_option
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("report.html"),
    show_default=True,
    help="Where to write the page.",
)
@errors_as_exit_codes
def report(run_id: str | None, repo: str | None, output: Path) -> None:
    """Write one HTML page about the run: its plan and each step's state now, a
    timeline of the attempts (failed and interrupted ones too), evidence, saved
    outputs, decisions, unknowns, effects and the Git commits. The page loads nothing
    from elsewhere; reading the run runs no code."""
    from ..present.report.page import html_report
    from ..store import durable

    reader = open_reader(run_id, repo)
    durable.write_atomic(output, html_report(reader).encode())
    click.echo(f"wrote the report of run {reader.id} to {output}")
