"""`stepstone run`: execute a notebook headlessly, resuming it after any interruption,
with papermill's command line (`stepstone run IN.ipynb [OUT.ipynb] -p NAME VALUE ...`)."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import IO

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
    "--inject-input-path",
    is_flag=True,
    help="Pass the input notebook's path as the parameter PAPERMILL_INPUT_PATH.",
)
@click.option(
    "--inject-output-path",
    is_flag=True,
    help="Pass the output notebook's path as the parameter PAPERMILL_OUTPUT_PATH.",
)
@click.option("--inject-paths", is_flag=True, help="Both of the above.")
@click.option(
    "--prepare-only/--prepare-execute",
    default=False,
    help="Write the notebook with its parameters injected, without running it.",
)
@click.option("--report-mode/--no-report-mode", default=False, help="Hide the code cells' source.")
@click.option(
    "--request-save-on-cell-execute/--no-request-save-on-cell-execute",
    "save_each_cell",
    default=True,
    help="Save the output notebook after cells as the run goes (default), or only at its end.",
)
@click.option(
    "--autosave-cell-every",
    type=int,
    default=30,
    metavar="SECONDS",
    help="Save it every so often during a long cell too (0: not; default 30).",
)
@click.option(
    "--stdout-file",
    type=click.File(mode="w", encoding="utf-8"),
    help="Write what the cells print to FILE as they print it.",
)
@click.option(
    "--stderr-file",
    type=click.File(mode="w", encoding="utf-8"),
    help="Write what the cells write to standard error to FILE.",
)
@click.option(
    "--log-level",
    type=click.Choice(headless.LEVELS, case_sensitive=False),
    default="INFO",
    help="INFO (default) says how the run goes; WARNING only notes; ERROR neither.",
)
@click.option("--engine", help="papermill's engine: only nbclient, which stepstone runs with.")
@click.option("-l", "--language", help="papermill's language: only python.")
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
    inject_input_path: bool,
    inject_output_path: bool,
    inject_paths: bool,
    prepare_only: bool,
    report_mode: bool,
    save_each_cell: bool,
    autosave_cell_every: int,
    stdout_file: IO[str] | None,
    stderr_file: IO[str] | None,
    log_level: str,
    engine: str | None,
    language: str | None,
    diverge: bool,
    new: bool,
    cells: bool | None,
    events: Path | None,
) -> None:
    """Execute NOTEBOOK headlessly; run it again after any interruption and it resumes.
    With parameters the default run id ends with a hash of them: each set is a run."""
    if output and output_path and output != output_path:
        raise click.UsageError("give the output notebook once: as OUTPUT_PATH or as -o")
    if engine not in (None, "nbclient"):
        raise click.UsageError(f"--engine {engine}: stepstone runs notebooks with nbclient only")
    if language not in (None, "python"):
        raise click.UsageError(f"--language {language}: stepstone runs Python notebooks only")
    written = output or output_path
    to_stdout = written == Path("-")  # papermill's: the executed notebook on stdout
    parameters = params.gathered(pairs, files, raw=raw, yamls=yamls, base64s=base64s)
    paths = {}  # papermill's, first: a parameter of the same name given too overrides them
    if inject_input_path or inject_paths:
        paths["PAPERMILL_INPUT_PATH"] = str(notebook)
    if inject_output_path or inject_paths:
        paths["PAPERMILL_OUTPUT_PATH"] = str(written or "")
    parameters = {**paths, **parameters}
    if prepare_only:
        shown_out = str(written) if written else ""
        out = written or notebook.with_name(f"{notebook.stem}.out.ipynb")
        nb = headless.prepare(
            notebook,
            Path("-") if to_stdout else out,
            parameters,
            report_mode=report_mode,
            shown_as=(str(notebook), shown_out or str(out)),
        )
        if to_stdout:
            import nbformat

            sys.stdout.write(nbformat.writes(nb))  # type: ignore[no-untyped-call]
        else:
            click.echo(f"prepared {notebook.name} with its parameters: {out} (not run)")
        return
    output_default = notebook.with_name(f"{notebook.stem}.out.ipynb")
    if to_stdout:
        written = Path(tempfile.mkdtemp(prefix="stepstone-stdout-")) / notebook.name
        if log_level.upper() == "INFO":
            log_level = "ERROR"  # as papermill: the notebook on stdout, little on stderr
    request = headless.Request(
        notebook=notebook,
        output=written,
        run_id=run_id,
        repo=repo,
        parameters=parameters,
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
        writing=nbrun.Writing(
            each_cell=save_each_cell and not to_stdout,
            autosave_every=autosave_cell_every,
            report_mode=report_mode,
            stdout_file=stdout_file,
            stderr_file=stderr_file,
            paths=(str(notebook), "-" if to_stdout else str(written or output_default)),
        ),
        log_level=log_level,
        papermills=frozenset(paths),
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
        if log_level.upper() not in ("WARNING", "ERROR", "CRITICAL"):  # papermill: silent
            click.echo(ended.message, err=to_stdout)
        return
    click.echo(f"stepstone: {ended.message}", err=True)
    sys.exit(ended.exit_code)
