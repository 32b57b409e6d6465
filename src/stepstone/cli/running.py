"""`stepstone run`: execute a notebook headlessly, resuming it after any interruption,
with papermill's command line (`stepstone run IN.ipynb [OUT.ipynb] -p NAME VALUE ...`)."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import click

from ..notebook import headless
from ..notebook import notebook as nbrun
from ..notebook import parameters as params
from .common import errors_as_exit_codes, main, repo_option, run_option


@main.command("run")
@click.argument("notebook", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("output_path", required=False, type=click.Path(dir_okay=False, path_type=Path))
@run_option
@repo_option
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write the executed notebook (default: NAME.out.ipynb beside it); "
    "or give it after NOTEBOOK, as papermill's OUTPUT_PATH.",
)
@click.option(
    "--timeout",
    "--execution-timeout",
    "timeout",
    type=int,
    default=None,
    help="Seconds a cell may run (default: no limit).",
)
@click.option("--start-timeout", type=int, default=60, help="Seconds the kernel may take to start.")
@click.option("--steal", metavar="REASON", help="Take the run's lease from a live holder.")
@click.option(
    "-p",
    "--parameters",
    "pairs",
    nargs=2,
    multiple=True,
    metavar="NAME VALUE",
    help="A parameter, typed as papermill types it (put after the cell tagged `parameters`).",
)
@click.option(
    "-r",
    "--parameters-raw",
    "raw",
    nargs=2,
    multiple=True,
    metavar="NAME VALUE",
    help="A parameter as text, as papermill's -r.",
)
@click.option(
    "-f",
    "--parameters-file",
    "files",
    multiple=True,
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="A YAML file of parameters, as papermill's -f.",
)
@click.option("-y", "--parameters-yaml", "yamls", multiple=True, help="Parameters as YAML.")
@click.option(
    "-b", "--parameters-base64", "base64s", multiple=True, help="Parameters as base64 YAML."
)
@click.option(
    "--cwd",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="The folder the kernel runs in (default: the notebook's).",
)
@click.option("-k", "--kernel", help="The kernel to run it with (default: python3).")
@click.option(
    "--log-output/--no-log-output", default=False, help="Print each cell's output as it ends."
)
@click.option(
    "--progress-bar/--no-progress-bar",
    default=None,
    help="Print a line as each step ends (default: on, unless --log-output).",
)
@click.option(
    "--diverge",
    is_flag=True,
    help="Drive a store copied while its run was driven as a new lineage (may send again).",
)
@click.option(
    "--new",
    is_flag=True,
    help="Start a new run although its --run id looks like a typo of an existing one, or "
    "pass a parameter the notebook's parameters cell does not assign.",
)
@click.option(
    "--cells/--no-cells",
    default=None,
    help="Make every code cell a step (the default for a notebook with no stepstone magics), "
    "or run such a notebook plainly, as nbclient does.",
)
@click.option(
    "--events",
    "events",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the run's typed events to FILE as JSON Lines (one object a line, a `type` "
    "field; their JSON Schema: `stepstone schema`, `Event`).",
)
@errors_as_exit_codes
def run_command(
    notebook: Path,
    output_path: Path | None,
    run_id: str | None,
    repo: str | None,
    output: Path | None,
    timeout: int | None,
    start_timeout: int,
    steal: str | None,
    pairs: tuple[tuple[str, str], ...],
    raw: tuple[tuple[str, str], ...],
    files: tuple[Path, ...],
    yamls: tuple[str, ...],
    base64s: tuple[str, ...],
    cwd: Path | None,
    kernel: str | None,
    log_output: bool,
    progress_bar: bool | None,
    diverge: bool,
    new: bool,
    cells: bool | None,
    events: Path | None,
) -> None:
    """Execute NOTEBOOK headlessly; run it again after any interruption and it resumes.
    With parameters the default run id ends with a hash of them: each set is a run."""
    if output and output_path and output != output_path:
        raise click.UsageError("give the output notebook once: as OUTPUT_PATH or as -o")
    written = output or output_path
    to_stdout = written == Path("-")  # papermill's: the executed notebook on stdout
    if to_stdout:
        written = Path(tempfile.mkdtemp(prefix="stepstone-stdout-")) / notebook.name
    request = headless.Request(
        notebook=notebook,
        output=written,
        run_id=run_id,
        repo=repo,
        parameters=params.gathered(pairs, files, raw=raw, yamls=yamls, base64s=base64s),
        timeout=timeout,
        start_timeout=start_timeout,
        steal=steal,
        diverge=diverge,
        new=new,
        cells=cells,
        cwd=cwd,
        kernel=kernel,
        log_output=log_output,
        progress=not log_output if progress_bar is None else progress_bar,
        events=events.absolute() if events is not None else None,
    )
    if events is not None:
        events.write_bytes(b"")  # this run's events, from the first
    with nbrun.interrupts_raised():
        try:
            ran = headless.run_notebook(request, lambda line: click.echo(line, err=True))
        except nbrun.Interrupted as exc:
            click.echo(f"stepstone: {exc.message}", err=True)
            sys.exit(128 + exc.signum)
    if to_stdout:
        assert written is not None
        if written.is_file():
            sys.stdout.write(written.read_text())
            sys.stdout.flush()
        shutil.rmtree(written.parent, ignore_errors=True)
    if ran.outcome.note:
        click.echo(f"stepstone: {ran.outcome.note}", err=True)
    ended = ran.ended
    assert ended is not None
    if ended.exit_code == 0:
        click.echo(ended.message, err=to_stdout)
        return
    click.echo(f"stepstone: {ended.message}", err=True)
    sys.exit(ended.exit_code)
