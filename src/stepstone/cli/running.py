"""`stepstone run`: execute a notebook headlessly, resuming it after any interruption,
with papermill's parameters (`-p`, `-f`) and output (`-o`)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..model import names
from ..notebook import notebook as nbrun
from ..notebook import notebook_plan
from ..notebook import parameters as params
from ..run import open_run
from ..run.copies import settle_now
from ..settings import Settings
from ..store import DEFAULT_STORE, GitStore
from .common import errors_as_exit_codes, main, repo_option, run_option


@main.command("run")
@click.argument("notebook", type=click.Path(dir_okay=False, path_type=Path))
@run_option
@repo_option
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write the executed notebook (default: NAME.out.ipynb beside it).",
)
@click.option(
    "--timeout", type=int, default=None, help="Seconds a cell may run (default: no limit)."
)
@click.option("--steal", metavar="REASON", help="Take the run's lease from a live holder.")
@click.option(
    "-p",
    "--parameters",
    "pairs",
    nargs=2,
    multiple=True,
    metavar="NAME VALUE",
    help="A parameter, as papermill's -p (put after the cell tagged `parameters`).",
)
@click.option(
    "-f",
    "--parameters-file",
    "files",
    multiple=True,
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="A YAML file of parameters, as papermill's -f.",
)
@click.option(
    "--diverge",
    is_flag=True,
    help="Drive a store copied while its run was driven as a new lineage (may send again).",
)
@click.option(
    "--new",
    is_flag=True,
    help="Start a new run although its --run id looks like a typo of an existing one.",
)
@click.option(
    "--cells/--no-cells",
    default=None,
    help="Make every code cell a step (the default for a notebook with no stepstone magics), "
    "or run such a notebook plainly, as nbclient does.",
)
@errors_as_exit_codes
def run_command(
    notebook: Path,
    run_id: str | None,
    repo: str | None,
    output: Path | None,
    timeout: int | None,
    steal: str | None,
    pairs: tuple[tuple[str, str], ...],
    files: tuple[Path, ...],
    diverge: bool,
    new: bool,
    cells: bool | None,
) -> None:
    """Execute NOTEBOOK headlessly; run it again after any interruption and it resumes.
    With parameters the default run id ends with a hash of them: each set is a run."""
    given = params.gathered(pairs, files)

    with nbrun.interrupts_raised():
        try:
            notebook = notebook.absolute()
            magics = notebook_plan.uses_stepstone(notebook)
            cells = not magics if cells is None else cells
            uses = magics or cells
            # a malformed plan fails before any kernel starts
            plan = notebook_plan.plan_from_notebook(notebook, cells=cells)
            problem = notebook_plan.schema_problem(notebook)
            if problem:
                click.echo(
                    f"stepstone: note: {notebook.name} does not match the notebook schema "
                    f"({problem}); running it as Jupyter does",
                    err=True,
                )
            known = notebook_plan.parameter_defaults(notebook)
            given = params.normalised(given, known)
            identity = params.beyond_defaults(given, known)
            settings = Settings.from_env()
            store = Path(repo or settings.store or notebook.parent / DEFAULT_STORE).absolute()
            run_id = run_id or settings.run
            if not run_id:
                run_id = params.run_id_for(names.from_filename(notebook.stem), identity)
                if uses:
                    run_id = nbrun.choose_run(
                        store,
                        run_id,
                        notebook,
                        plan,
                        default_store=not (repo or settings.store),
                        parameters=params.canonical(identity),
                    )
            elif uses and not new:
                nbrun.refuse_a_misspelled_run(store, run_id, notebook)
            output = (output or notebook.with_name(f"{notebook.stem}.out.ipynb")).absolute()
            if uses:
                made = GitStore(store)  # a store that cannot be made says why, before a kernel
                if made.refs.tip(run_id) is not None and not diverge:
                    for note in settle_now(made, run_id):  # a copy taken while it was driven
                        click.echo(f"stepstone: {note}", err=True)
                if made.refs.tip(run_id) is not None:
                    recorded = open_run(run_id, repo=store, drive=False, create=False)
                    begun = any(recorded.records.get(n) for n in recorded.steps.names)
                    params.refuse_other(
                        run_id,
                        recorded.info.parameters,
                        params.canonical(identity),
                        begun=begun,
                        known=known,
                    )
                said = f"as run {run_id} ({len(plan)} steps, store {store})"
                if cells and not magics:
                    said += (
                        " in --cells mode: every code cell is a step (it uses no stepstone "
                        "magics; --no-cells runs it as nbclient does)"
                    )
                elif cells:
                    said += " in --cells mode: every code cell is a step"
            else:
                said = "(--no-cells: executed as nbclient does)"
            click.echo(f"running {notebook.name} {said}", err=True)
            outcome = nbrun.execute(
                notebook,
                run_id=run_id,
                repo=store,
                output=output,
                timeout=timeout,
                progress=nbrun.default_progress,
                steal=steal,
                parameters=given,
                diverge=diverge,
                cells=cells,
            )
            if outcome.note:
                click.echo(f"stepstone: {outcome.note}", err=True)
            if outcome.signal is not None:
                click.echo(f"stepstone: {outcome.message}", err=True)
                sys.exit(128 + outcome.signal)
            if not outcome.ok:
                where = "" if outcome.note else f" (executed notebook: {output})"
                click.echo(f"stepstone: {outcome.message}{where}", err=True)
                sys.exit(1)
            if outcome.opened is None:
                click.echo(
                    f"ran {notebook.name}: no steps (it opens no stepstone run: add "
                    f"`%load_ext stepstone` and `%resume` to make it resumable); executed "
                    f"notebook: {output}"
                )
                return
            run_id, store = outcome.opened
            status = open_run(
                run_id, repo=store, workdir=notebook.parent, drive=False, create=False
            ).status()
        except nbrun.Interrupted as exc:
            click.echo(f"stepstone: {exc.message}", err=True)
            sys.exit(128 + exc.signum)
    undone = [s for s in status.steps if s.state != "verified"]
    if undone or status.unresolved_effects:
        click.echo(f"stepstone: not done: {status.next_action}", err=True)
        sys.exit(1)
    if not status.steps:
        click.echo(f"ran {notebook.name} as run {status.run}: it has no %%step cells yet")
        return
    click.echo(f"all {len(status.steps)} steps confirmed; next: {status.next_action}")
