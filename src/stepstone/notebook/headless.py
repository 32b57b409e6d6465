"""Running a notebook headlessly, as `stepstone run` and `stepstone.execute_notebook` do:
choose its run, settle copies of its store, execute it (resuming), mark a failed cell as
papermill marks it, and say what came of it.

papermill's users change one word: the same arguments (`-p`, `-r`, `-y`, `-b`, `-f`,
`--cwd`, `-k`, `--execution-timeout`...) and the same output notebook on a failure (an
error cell at the top, an anchor before the failed cell), and the next run resumes.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InvalidInput, StepstoneError
from ..model import events, names
from ..model.events import Refused, RunEnded
from ..rules.status import RunStatus
from ..run import open_run
from ..run.copies import settle_now
from ..settings import Settings
from ..store import DEFAULT_STORE, GitStore
from . import fromrecords, notebook_plan
from . import notebook as nbrun
from . import parameters as params
from .failures import CellFailed, as_papermills


@dataclass
class Request:
    """What to run, and how: `stepstone run`'s options."""

    notebook: Path
    output: Path | None = None
    run_id: str | None = None
    repo: str | None = None
    parameters: Mapping[str, Any] = field(default_factory=dict)
    timeout: int | None = None
    start_timeout: int = 60
    steal: str | None = None
    diverge: bool = False
    new: bool = False
    cells: bool | None = None  # None: every code cell is a step when it uses no magics
    cwd: Path | None = None
    kernel: str | None = None
    log_output: bool = False
    progress: bool = True
    via: str = "cli run"  # its commits' Stepstone-Via, unless STEPSTONE_VIA says another
    events: Path | None = None  # where the run's events go, as JSON Lines (`--events`)
    writing: nbrun.Writing = field(default_factory=nbrun.Writing)  # papermill's saving
    log_level: str = "INFO"  # WARNING: no line about how it runs; ERROR: no notes either
    papermills: frozenset[str] = frozenset()  # PAPERMILL_INPUT_PATH...: never refused unknown


@dataclass
class Ran:
    """What came of a run: the executed notebook, the run's status (None when the
    notebook ran plainly, with no run), and how it ended (`ended`: the last event, with
    the exit code `stepstone run` exits with)."""

    outcome: nbrun.NotebookOutcome
    output: Path
    status: RunStatus | None
    failed: CellFailed | None = None
    cells: bool = False  # it ran in --cells mode
    ended: RunEnded | None = None


def conclude(ran: Ran, notebook: Path) -> RunEnded:
    """How a run ended, as one event: ok, failed, refused (before or between its steps),
    interrupted, died (the kernel), exited (`sys.exit(0)`), and the exit code: 0 every
    step confirmed (or the notebook stopped itself, or has no steps), 1 not done, 2
    refused, 128 + the signal that interrupted it."""
    outcome, status = ran.outcome, ran.status
    run = status.run if status is not None else (outcome.opened[0] if outcome.opened else None)
    if outcome.signal is not None:
        return RunEnded(
            outcome="interrupted", message=outcome.message, run=run, exit_code=128 + outcome.signal
        )
    if outcome.refused is not None:
        return RunEnded(outcome="refused", message=outcome.message, run=run, exit_code=2)
    if not outcome.ok:
        where = "" if outcome.note else f" (executed notebook: {ran.output})"
        died = outcome.message.startswith("the kernel died")
        return RunEnded(
            outcome="died" if died else "failed",
            message=outcome.message + where,
            run=run,
            exit_code=1,
        )
    if outcome.exited:  # as papermill has it: not a failure
        message = f"ran {notebook.name}: {outcome.message}; executed notebook: {ran.output}"
        return RunEnded(outcome="exited", message=message, run=run, exit_code=0)
    if status is None:
        message = (
            f"ran {notebook.name}: no steps (it opens no stepstone run: add "
            f"`%load_ext stepstone` and `%resume` to make it resumable, or run it with "
            f"--cells); executed notebook: {ran.output}"
        )
        return RunEnded(outcome="ok", message=message, run=run, exit_code=0)
    undone = [s for s in status.steps if s.state != "verified"]
    if undone or status.unresolved_effects:
        message = f"not done: {status.next_action}"
        return RunEnded(outcome="not done", message=message, run=run, exit_code=1)
    if not status.steps:
        what = "code cells" if ran.cells else "%%step cells"
        message = f"ran {notebook.name} as run {status.run}: it has no {what} yet"
        return RunEnded(outcome="ok", message=message, run=run, exit_code=0)
    if status.open_unknowns or status.plan_mode == "incremental":
        message = f"all {len(status.steps)} steps confirmed; next: {status.next_action}"
    else:  # a scheduled job runs it again: finishing is the end of it, said as such
        message = (
            f"all {len(status.steps)} steps confirmed; run it again to redo only what "
            f"changed (`stepstone finish` closes the run for good: it is not run again)"
        )
    return RunEnded(outcome="ok", message=message, run=run, exit_code=0)


def run_notebook(
    request: Request, say: Callable[[str], None], on_event: Callable[[Any], None] | None = None
) -> Ran:
    """Run `request.notebook` headlessly, resuming its run; `say` gets each line for a
    person (the first says how it runs), `on_event` each event of the run as it comes
    (`model/events.py`; they go to `request.events` too, the last one `RunEnded`).
    Raises `StepstoneError` for what stops it before a kernel starts (a `Refused` event
    is written first); `nbrun.Interrupted` on SIGINT or SIGTERM."""
    try:
        ran = _run_notebook(request, say, on_event)
    except StepstoneError as exc:
        if request.events is not None:
            said = Refused(error=type(exc).__name__, message=str(exc))
            ended = RunEnded(outcome="refused", message=said.message, exit_code=2)
            events.append(request.events, [said, ended])
        raise
    except nbrun.Interrupted as exc:
        if request.events is not None:
            ended = RunEnded(outcome="interrupted", message=exc.message, exit_code=128 + exc.signum)
            events.append(request.events, [ended])
        raise
    ran.ended = conclude(ran, request.notebook)
    if request.events is not None:
        events.append(request.events, [ran.ended])
    if on_event is not None:
        on_event(ran.ended)
    return ran


def _run_notebook(
    request: Request, say: Callable[[str], None], on_event: Callable[[Any], None] | None
) -> Ran:
    info, note = _levelled(say, request.log_level)
    notebook = request.notebook.absolute()
    if not notebook.is_file():
        raise InvalidInput(
            f"no notebook at {notebook}"
            + (": it is a folder" if notebook.is_dir() else "")
            + "; give the path of an .ipynb file"
        )
    magics = notebook_plan.uses_stepstone(notebook)
    cells = not magics if request.cells is None else request.cells
    stepped = magics or cells
    plan = notebook_plan.plan_from_notebook(notebook, cells=cells)  # a bad plan: no kernel
    problem = notebook_plan.schema_problem(notebook)
    if problem:
        note(
            f"stepstone: note: {notebook.name} does not match the notebook schema "
            f"({problem}); running it as Jupyter does"
        )
    notebook_plan.refuse_another_language(notebook, request.kernel)
    known = notebook_plan.parameter_defaults(notebook)
    if not request.new:
        params.refuse_unknown(
            {k: v for k, v in request.parameters.items() if k not in request.papermills},
            notebook_plan.parameter_names(notebook),
            notebook.name,
        )
    given = params.normalised(request.parameters, known)
    identity = params.beyond_defaults(given, known)
    settings = Settings.from_env()
    repo = request.repo
    store = Path(repo or settings.store or notebook.parent / DEFAULT_STORE).absolute()
    run_id = request.run_id or settings.run
    if not run_id:
        run_id = params.run_id_for(names.from_filename(notebook.stem), identity)
        if stepped:
            run_id = nbrun.choose_run(
                store,
                run_id,
                notebook,
                plan,
                default_store=not (repo or settings.store),
                parameters=params.canonical(identity),
            )
    elif stepped and not request.new:
        nbrun.refuse_a_misspelled_run(store, run_id, notebook)
    output = (request.output or notebook.with_name(f"{notebook.stem}.out.ipynb")).absolute()
    begun = False  # a step of the run has a record
    if stepped:
        made = GitStore(store)  # a store that cannot be made says why, before a kernel
        if made.refs.tip(run_id) is not None and not request.diverge:
            for settled in settle_now(made, run_id):  # a copy taken while it was driven
                note(f"stepstone: {settled}")
        if made.refs.tip(run_id) is not None:
            recorded = open_run(run_id, repo=store, drive=False, create=False)
            params.refuse_other(
                run_id,
                recorded.info.parameters,
                params.canonical(identity),
                begun=recorded.begun,
                known=known,
            )
            begun = recorded.begun
        said = f"as run {run_id} ({len(plan)} steps, store {store})"
        if cells:
            said += " in --cells mode: every code cell is a step"
            if not magics:
                said += " (it uses no stepstone magics; --no-cells runs it as nbclient does)"
    else:
        said = "(--no-cells: executed as nbclient does)"
    folder = (request.cwd or notebook.parent).absolute()
    if request.cwd is None and folder != Path.cwd().absolute():
        note(  # papermill's kernel runs in the caller's folder
            f"running {notebook.name} {said}; its kernel runs in the notebook's folder "
            f"{folder}, as Jupyter's does (papermill's runs in the current folder: pass "
            f"--cwd . for that)"
        )
    else:
        info(f"running {notebook.name} {said}")
    outcome = None
    if cells and not magics and not (request.diverge or request.steal) and begun:
        outcome = fromrecords.answered(
            notebook,
            run_id=run_id,
            store=store,
            output=output,
            parameters=given,
            known=known,
            kernel=request.kernel,
            workdir=folder,
            via=settings.origin or request.via,
            writing=request.writing,
            progress=(lambda line: say(line)) if request.progress else None,
            log_output=say if request.log_output else None,
            events_path=request.events,
            on_event=on_event,
        )
        if outcome is not None:
            info(
                "nothing to run: every step verified, and the executed notebook is written "
                "from their records (no kernel was started)"
            )
    if outcome is None:
        outcome = nbrun.execute(
            notebook,
            run_id=run_id,
            repo=store,
            output=output,
            timeout=request.timeout,
            progress=(lambda line: say(line)) if request.progress else None,
            steal=request.steal,
            parameters=given,
            diverge=request.diverge,
            cells=cells,
            cwd=request.cwd,
            kernel=request.kernel,
            start_timeout=request.start_timeout,
            log_output=say if request.log_output else None,
            via=settings.origin or request.via,
            events=request.events,
            on_event=on_event,
            writing=request.writing,
        )
    status = None
    if outcome.opened is not None and outcome.ok:
        opened_id, opened_store = outcome.opened
        status = open_run(
            opened_id, repo=opened_store, workdir=folder, drive=False, create=False
        ).status()
    return Ran(outcome, output, status, outcome.failed, cells)


LEVELS = ("NOTSET", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")  # papermill's --log-level


def _levelled(
    say: Callable[[str], None], level: str
) -> tuple[Callable[[str], None], Callable[[str], None]]:
    """`say` for the line about how the run goes (INFO) and for notes (WARNING), or
    nothing, at log level `level` (the progress lines follow --progress-bar)."""
    at = LEVELS.index(level.upper()) if level.upper() in LEVELS else LEVELS.index("INFO")

    def silent(_: str) -> None:
        return None

    return (
        say if at <= LEVELS.index("INFO") else silent,
        say if at <= LEVELS.index("WARNING") else silent,
    )


def prepare(
    notebook: Path,
    output: Path,
    parameters: Mapping[str, Any],
    *,
    report_mode: bool = False,
    shown_as: tuple[str, str] | None = None,
) -> Any:
    """papermill's `--prepare-only`: write the notebook with its parameters injected,
    and papermill's metadata, to `output` without running it (`shown_as`: the input and
    output paths as the user gave them). Returns the notebook."""
    import nbformat

    from .failures import remove_error_markers
    from .papermillmeta import forget, hide_code, prepared

    if not notebook.is_file():
        raise InvalidInput(f"no notebook at {notebook.absolute()}; give the path of an .ipynb file")
    nb = notebook_plan.read_notebook(notebook)
    remove_error_markers(nb)
    forget(nb)
    if parameters:
        params.inject(nb, dict(parameters))
    if report_mode:
        hide_code(nb)
    shown_in, shown_out = shown_as or (str(notebook), str(output))
    prepared(nb, input_path=shown_in, output_path=shown_out, parameters=parameters)
    if str(output) != "-":
        try:
            nbformat.write(nb, str(output))  # type: ignore[no-untyped-call]
        except OSError as exc:
            raise InvalidInput(
                f"the prepared notebook could not be written to {output} ({exc.strerror}): "
                f"give another output path"
            ) from exc
    return nb


def execute_notebook(
    input_path: str | Path,
    output_path: str | Path | None,
    parameters: Mapping[str, Any] | None = None,
    engine_name: str | None = None,
    request_save_on_cell_execute: bool = True,
    prepare_only: bool = False,
    kernel_name: str | None = None,
    language: str | None = None,
    progress_bar: bool = True,
    log_output: bool = False,
    stdout_file: Any = None,
    stderr_file: Any = None,
    start_timeout: int = 60,
    report_mode: bool = False,
    cwd: str | Path | None = None,
    **engine_kwargs: Any,
) -> Any:
    """papermill's `execute_notebook`, resuming: run the notebook at `input_path` with
    `parameters` and write the executed notebook to `output_path` (None: not written);
    run it again after an interruption or a failure and it resumes where it stopped.
    Returns the executed notebook (an nbformat `NotebookNode`). A cell that raised is
    marked in it as papermill marks it, and `CellFailed` is raised after it is written.

    Every argument of papermill 2.x's means what it means there (`autosave_cell_every`,
    `execution_timeout` among the keywords; only the nbclient engine and Python). A
    `NotebookNode` input runs as the notebook named after `output_path`, its store and
    its kernel in the current folder (or `cwd`). Besides: stepstone's `run_id`, `repo`,
    `cells` (every code cell a step: the default for a notebook with no stepstone
    magics), `steal`, `diverge`, `new`."""
    import tempfile

    import nbformat

    if engine_name not in (None, "nbclient"):
        raise InvalidInput(f"engine_name={engine_name!r}: stepstone runs notebooks with nbclient")
    if language not in (None, "python"):
        raise InvalidInput(f"language={language!r}: stepstone runs Python notebooks")
    extra = {k: engine_kwargs.pop(k) for k in list(engine_kwargs) if k in _EXTRA}
    timeout = engine_kwargs.pop("execution_timeout", None)
    autosave_every = engine_kwargs.pop("autosave_cell_every", 30)
    if engine_kwargs:
        raise InvalidInput(f"unknown arguments: {', '.join(sorted(engine_kwargs))}")
    if isinstance(input_path, (str, Path)):
        path = Path(input_path)
    else:  # a NotebookNode: written where the next call with this output finds it again
        path = _node_written(input_path, output_path)
        extra.setdefault("repo", str(Path.cwd() / DEFAULT_STORE))
        cwd = cwd if cwd is not None else Path.cwd()
    if prepare_only:
        out = Path(output_path) if output_path is not None else Path("-")
        return prepare(path, out, parameters or {}, report_mode=report_mode)
    scratch = None
    if output_path is None:
        scratch = Path(tempfile.mkdtemp(prefix="stepstone-out-")) / path.name
    request = Request(
        notebook=path,
        output=Path(output_path) if output_path is not None else scratch,
        parameters=dict(parameters or {}),
        timeout=timeout,
        start_timeout=start_timeout,
        cwd=Path(cwd) if cwd is not None else None,
        kernel=kernel_name,
        log_output=log_output,
        progress=progress_bar and not log_output,
        via="python run",
        writing=nbrun.Writing(
            each_cell=request_save_on_cell_execute and output_path is not None,
            autosave_every=int(autosave_every or 0),
            report_mode=report_mode,
            stdout_file=stdout_file,
            stderr_file=stderr_file,
            paths=(str(path), str(output_path)) if output_path is not None else None,
        ),
        log_level="WARNING",  # papermill logs how it runs at INFO, which Python's logging hides
        **extra,
    )
    with contextlib.ExitStack() as files, nbrun.interrupts_raised():
        if isinstance(stdout_file, (str, Path)) or isinstance(stderr_file, (str, Path)):
            out = _opened(files, stdout_file)
            same = isinstance(stderr_file, (str, Path)) and stderr_file == stdout_file
            request.writing = dataclasses.replace(  # a path: papermill's takes a file only
                request.writing,
                stdout_file=out,
                stderr_file=out if same else _opened(files, stderr_file),
            )
        ran = run_notebook(request, _logged)
    if ran.outcome.signal is not None:
        raise KeyboardInterrupt(ran.outcome.message)
    nb = nbformat.read(str(ran.output), as_version=4)  # type: ignore[no-untyped-call]
    if scratch is not None:
        import shutil

        shutil.rmtree(scratch.parent, ignore_errors=True)
    if ran.failed is not None:
        raise as_papermills(ran.failed)
    if not ran.outcome.ok:
        raise StepstoneError(ran.outcome.message)
    return nb


def _opened(files: contextlib.ExitStack, given: Any) -> Any:
    """A file to write to: `given`, or the file at path `given`, opened (and closed with
    `files`)."""
    if isinstance(given, (str, Path)):
        return files.enter_context(open(given, "w", encoding="utf-8"))
    return given


def _node_written(node: Any, output_path: str | Path | None) -> Path:
    """Where a notebook given as a `NotebookNode` is run from: a file named after the
    output notebook in a folder of this user's cache kept for that output, so
    that a second call with the same output resumes its run (the run is named after it,
    its store is in the current folder, its kernel runs there)."""
    import hashlib

    import nbformat

    out = Path(output_path).absolute() if output_path is not None else Path.cwd() / "notebook"
    key = hashlib.sha256(str(out).encode()).hexdigest()[:16]
    folder = Path.home() / ".cache" / "stepstone" / "notebooks" / key  # this user's only
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = folder / (out.stem.removesuffix(".out") + ".ipynb")
    from ..store.durable import write_atomic

    write_atomic(path, nbformat.writes(node).encode())  # type: ignore[no-untyped-call]
    return path


_EXTRA = frozenset({"run_id", "repo", "cells", "steal", "diverge", "new"})


def _logged(line: str) -> None:
    """A line for a person, as papermill logs its progress: on standard error."""
    import sys

    print(line, file=sys.stderr, flush=True)
