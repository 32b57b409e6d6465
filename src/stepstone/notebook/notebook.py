"""Notebooks as plans: collect the `%%step` cells, and run a notebook headlessly.

`stepstone run` executes the notebook in a real kernel with nbclient. The
kernel runs in the notebook's folder with `STEPSTONE_RUN`, `STEPSTONE_REPO` and
`STEPSTONE_NOTEBOOK` set, so `%resume` opens the right run and commits the
plan read from the notebook before any step runs. Ctrl-C or SIGTERM interrupts
the running cell (its step is recorded as failed and runs again on resume),
starts no further cell and shuts the kernel down.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import math
import os
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InvalidInput, StepstoneError
from ..model import names
from ..model.events import Refused, RunOpened, StepEnded, Tail, unsaved_line
from ..model.models import PlannedStep, now
from ..run import Run, open_run
from ..settings import (
    CELLS_ENV,
    DIVERGE_ENV,
    EVENTS_ENV,
    NOTEBOOK_ENV,
    PARAMETERS_ENV,
    RUN_ENV,
    STEAL_ENV,
    STORE_ENV,
    UNWATCHED_ENV,
    VIA_ENV,
    Settings,
    child_environment,
)
from ..store import DEFAULT_STORE, GitStore
from . import live, papermillmeta
from .cellargs import split_cell
from .failures import CellFailed, mark_failure, remove_error_markers
from .notebook_plan import read_notebook, step_cells
from .parameters import beyond_defaults, canonical, defaults, inject


def claim(run: Run, notebook: Path) -> str | None:
    """Make `notebook` the notebook of `run`. Returns a note when the run's notebook
    moved or was renamed (the one it recorded is gone); raises `InvalidInput` when the
    run belongs to another notebook that is still there (two notebooks, one run)."""
    recorded = run.info.notebook
    base = run.previous_workdir
    if not recorded or base is None:
        return None
    before = (base / recorded).resolve()
    if before == notebook.resolve():
        return None
    if before.is_file():
        raise InvalidInput(
            f"run {run.id!r} belongs to the notebook {before}, which is still there; this is "
            f"{notebook}. Give this notebook a run of its own: `%resume --run NEW_ID`, or "
            f"`stepstone run {notebook.name} --run NEW_ID`"
        )
    return f"the run's notebook moved: it was {before}, it is now {notebook}"


def choose_run(
    store_path: Path,
    run_id: str,
    notebook: Path,
    plan: list[PlannedStep],
    *,
    default_store: bool,
    parameters: str = "",
) -> str:
    """The run a notebook drives when no run id was given (`run_id` is the one its file
    name gives): the run that records this very notebook, if the store has one (a
    renamed notebook that was continued keeps its run); else `run_id`, unless a run lost
    its notebook and has this notebook's steps (renamed, or moved away from its store:
    nearby stores are looked at too when the store is the default beside the notebook),
    which is refused with the command that continues it."""
    readers = _readers(store_path)
    recording = [  # of the runs made with these parameters (a run per set of them)
        r
        for r in readers
        if _recorded_notebook(r) == notebook.resolve() and r.info.parameters == parameters
    ]
    if recording:  # a fork records its run's notebook too: the run itself comes first
        chosen = [r for r in recording if r.id == run_id] or [
            r for r in recording if not r.info.forked_from
        ]
        if len(recording) == 1 or len(chosen) == 1:
            return (chosen or recording)[0].id
        ids = ", ".join(r.id for r in recording)
        raise InvalidInput(f"runs {ids} all record {notebook.name}: pick one with --run ID")
    if any(reader.id == run_id for reader in readers):
        return run_id
    places = [store_path]
    if default_store:
        places += [folder / DEFAULT_STORE for folder in [*notebook.parent.parents][:3]]
        places.append(Path.cwd() / DEFAULT_STORE)
    seen: set[Path] = set()
    for place in places:
        if place.resolve() in seen:
            continue
        seen.add(place.resolve())
        found = readers if place == store_path else _readers(place)
        _refuse_renamed(found, place, store_path, run_id, notebook, plan)
    return run_id


def refuse_a_misspelled_run(store_path: Path, run_id: str, notebook: Path) -> None:
    """Refuse a run id that names no run of the store but looks like a typo of a run of
    the same notebook (or of a run that records no notebook yet: its first driver was
    stopped before it committed its plan): it would start that notebook's work again
    as a new run."""
    readers = _readers(store_path)
    if any(reader.id == run_id for reader in readers):
        return
    mine = [r.id for r in readers if _recorded_notebook(r) in (notebook.resolve(), None)]
    meant = names.misspelled(run_id, mine)
    if meant is not None:
        raise InvalidInput(
            f"{store_path} has no run {run_id!r}, and run {meant!r} of {notebook.name} is "
            f"{names.distance(run_id, meant)} letter(s) away: did you mean --run {meant}? A new "
            f"run would do that run's work, and send its effects, again. To start a new "
            f"run {run_id!r} on purpose, add --new"
        )


def _recorded_notebook(reader: Run) -> Path | None:
    base = reader.recorded_workdir()
    return (base / reader.info.notebook).resolve() if base and reader.info.notebook else None


def _readers(store_path: Path) -> list[Run]:
    try:
        store = GitStore(store_path, create=False)
    except StepstoneError:
        return []
    found = []
    for run in store.refs.runs():
        try:
            found.append(open_run(run, repo=store_path, drive=False, create=False))
        except StepstoneError:
            continue
    return found


def _refuse_renamed(
    readers: list[Run],
    place: Path,
    store_path: Path,
    run_id: str,
    notebook: Path,
    plan: list[PlannedStep],
) -> None:
    here = {step.name for step in plan}
    for reader in readers:
        base = reader.recorded_workdir()
        shared = here & set(reader.steps.names)
        if not reader.info.notebook or not shared:
            continue
        if base is not None and (base / reader.info.notebook).is_file():
            continue
        repo = (
            "" if place.resolve() == store_path.resolve() else f" --repo {shlex.quote(str(place))}"
        )
        typed = shlex.quote(os.path.relpath(notebook))  # as it is reached from here
        raise InvalidInput(
            f"{notebook.name} would start a new run {run_id!r}, but run {reader.id!r} in "
            f"{place} was made by the notebook {reader.info.notebook}, which is gone, and has "
            f"its steps ({names.listing(sorted(shared), 5)}). If this is that notebook "
            f"renamed or moved, continue its run: `stepstone run {typed} --run "
            f"{reader.id}{repo}` (or `%resume --run {reader.id}{repo}`); to start a new run "
            f"in {store_path} on purpose, name it: --run NAME"
        )


def goal_of(path: Path) -> str:
    """The notebook's goal: the first heading of its first Markdown cell, if any."""
    for cell in read_notebook(path, validate=False).cells:
        if cell.cell_type == "markdown":
            first = cell.source.strip().splitlines()[0] if cell.source.strip() else ""
            return first.lstrip("#").strip() if first.startswith("#") else ""
    return ""


INTERRUPT_GRACE = 5.0
"""Seconds a cell has to stop after SIGINT or SIGTERM before its kernel is killed."""
_GIVE_UP = 10.0  # seconds to wait for nbclient's cleanup after the kernel was killed
_RESUME_HINT = "run the same command again to resume"


@dataclass(frozen=True)
class Writing:
    """How the executed notebook is written as the run goes, by papermill's options."""

    each_cell: bool = True  # saved after cells (--request-save-on-cell-execute)
    autosave_every: int = 30  # and during a long cell, every so many seconds (0: not)
    report_mode: bool = False  # code cells' source hidden (--report-mode)
    stdout_file: Any = None  # what the cells print, as they print it (--stdout-file)
    stderr_file: Any = None  # what they write to standard error (--stderr-file)
    paths: tuple[str, str] | None = None  # input and output as given, for papermill's metadata

    def echo(self, output: Any) -> None:
        """A stream output, to `--stdout-file` or `--stderr-file`, as papermill's are."""
        if output.get("output_type") != "stream":
            return
        to = self.stdout_file if output.get("name") == "stdout" else self.stderr_file
        if to is not None:
            to.write("".join(output.get("text", "")))
            to.flush()


WRITTEN_AS_PAPERMILL = Writing()


@dataclass(frozen=True)
class NotebookOutcome:
    """How a headless run ended; `signal` is the signal that interrupted it, if one did."""

    ok: bool
    message: str
    output: Path
    signal: int | None = None
    note: str = ""  # what went wrong besides (the executed notebook not written)
    opened: tuple[str, Path] | None = None  # the run (and store) its `%resume` opened
    failed: CellFailed | None = None  # the cell that raised, marked in the executed notebook
    exited: bool = False  # a cell called sys.exit(0): the run stopped there, as it asked
    refused: Refused | None = None  # the run was refused (its lock held, its lease...)


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM, raised by `interrupts_raised` outside a notebook's execution."""

    message = f"interrupted between steps; {_RESUME_HINT}"

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextmanager
def _signal_handlers(handler: Callable[[int, Any], None]) -> Iterator[None]:
    """Handle SIGINT and SIGTERM with `handler`, then restore the previous handlers.

    Only the main thread can set handlers; elsewhere this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, signal.SIG_DFL if old is None else old)


@contextmanager
def interrupts_raised() -> Iterator[None]:
    """Make SIGINT and SIGTERM raise `Interrupted` (`execute` handles them itself meanwhile)."""

    def handler(signum: int, _frame: Any) -> None:
        raise Interrupted(signum)

    with _signal_handlers(handler):
        yield


class _Stopped(Exception):
    """Raised from an nbclient hook to start no further cell after a signal."""


class _Stopper:
    """SIGINT and SIGTERM while a notebook runs: interrupt the kernel's cell, start no
    further cell, and kill the kernel on a second signal or once the cell has not
    stopped within `INTERRUPT_GRACE`. Nothing is raised inside nbclient's event loop."""

    def __init__(self) -> None:
        self.client: Any = None  # the NotebookClient, once running
        self.signum: int | None = None
        self.step: str | None = None  # the step whose cell the kernel is running
        self.started = ""  # when its cell started
        self.where = "between steps"
        self.deadline = math.inf
        self.killed = False

    def on_signal(self, signum: int, _frame: Any) -> None:
        if self.signum is None:
            self.signum = signum
            if self.step is not None:
                self.where = f"during step {self.step}"
            self.deadline = time.monotonic() + INTERRUPT_GRACE
            self._signal_kernel(signal.SIGINT)  # the cell raises KeyboardInterrupt
        elif not self.killed:
            self.kill()

    def kill(self) -> None:
        self.killed = True
        self._signal_kernel(signal.SIGKILL)

    def _signal_kernel(self, signum: int) -> None:
        provisioner = getattr(getattr(self.client, "km", None), "provisioner", None)
        process = getattr(provisioner, "process", None)
        if process is None or process.returncode is not None:
            return
        pgid = getattr(provisioner, "pgid", None)
        try:
            # jupyter_client starts the kernel in a session of its own, out of reach of
            # a terminal's Ctrl-C; its group holds the processes its cells started.
            if pgid and pgid != os.getpgrp():
                os.killpg(pgid, signum)
            else:
                os.kill(process.pid, signum)
        except OSError:
            pass  # it has exited

    def check(self, **_: Any) -> None:
        """An nbclient hook before each cell: none starts after a signal."""
        if self.signum is not None:
            raise _Stopped

    def run(self, client: Any, env: dict[str, str]) -> BaseException | None:
        """Execute `client`'s notebook in a thread while this one waits; its error, if any.
        The kernel starts with the environment `env` (jupyter_client's `start_kernel`).

        In a thread other than the main one nbclient installs no signal handlers of its
        own (they would shut the kernel down under the running cell), so `on_signal`,
        set in the main thread, sees them.
        """
        self.client = client
        errors: list[BaseException] = []

        def target() -> None:
            try:
                import asyncio  # here: it costs every command's start

                asyncio.run(self.client.async_execute(env=env))
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=target, name="stepstone-notebook", daemon=True)
        thread.start()
        give_up = math.inf
        while thread.is_alive():
            thread.join(0.1)
            now = time.monotonic()
            if now >= self.deadline and not self.killed:
                self.kill()
            if self.killed:
                give_up = min(give_up, now + _GIVE_UP)
            if now >= give_up:
                atexit.unregister(self.client._cleanup_kernel)
                break
        error = errors[0] if errors else None
        if isinstance(error, RuntimeError) and str(error).startswith("Kernel died"):
            # killed before it answered (jupyter_client's wait_for_ready): no kernel to
            # clean up at exit either (nbclient's hook would fail on it)
            from nbclient.exceptions import DeadKernelError

            atexit.unregister(self.client._cleanup_kernel)
            return DeadKernelError(str(error))
        return error


def execute(
    path: Path,
    *,
    run_id: str,
    repo: Path,
    output: Path,
    timeout: int | None = None,
    progress: Callable[[str], None] | None = None,
    steal: str | None = None,
    parameters: Mapping[str, Any] | None = None,
    diverge: bool = False,
    cells: bool = False,
    cwd: Path | None = None,
    kernel: str | None = None,
    start_timeout: int = 60,
    log_output: Callable[[str], None] | None = None,
    via: str | None = None,
    events: Path | None = None,
    on_event: Callable[[Any], None] | None = None,
    writing: Writing = WRITTEN_AS_PAPERMILL,
) -> NotebookOutcome:
    """Execute a notebook in a fresh kernel in its folder; write the executed copy to `output`
    (as it goes, as `writing` says).

    The kernel appends the run's typed events to `events` (a scratch file when None:
    `model/events.py`); each step cell's outcome is read from them, and `on_event` gets
    each as the cell that said it ends. SIGINT or SIGTERM interrupts
    the running cell, shuts the kernel down and ends the run with `signal` set. With
    `cells`, every code cell is a step (`cellargs.cell_step`): each runs as a `%%step`
    cell, after `%load_ext stepstone` and `%resume` when the notebook has none, and the
    executed notebook keeps the cells as they were written. The kernel runs in `cwd`
    (default: the notebook's folder). A cell that raised is marked as papermill marks it
    (`failures`); `log_output` gets each cell's text output as it ends. The kernel's
    commits say `Stepstone-Via: via` (`cli run`...).
    """
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    nb = read_notebook(path)
    remove_error_markers(nb)  # an earlier run's, when this notebook is its output
    papermillmeta.forget(nb)  # and its cells' papermill metadata, as papermill does
    identity = beyond_defaults(parameters or {}, defaults(nb))
    if parameters:
        inject(nb, parameters)
    if writing.report_mode:
        papermillmeta.hide_code(nb)
    written = {id(cell): cell.source for cell in nb.cells}  # the sources, as written
    setup = None
    if cells and not any("%resume" in c.source for c in nb.cells if c.cell_type == "code"):
        # the cells keep the execution counts they have without it (papermill's, nbclient's)
        code = (  # and not in the kernel's history: `In[1]` is the notebook's first cell
            "%load_ext stepstone\n%resume\n"
            "get_ipython().execution_count -= 1\n"
            "get_ipython().history_manager.input_hist_parsed.pop()\n"
            "get_ipython().history_manager.input_hist_raw.pop()\n"
            "get_ipython().history_manager._i00 = ''"
        )
        setup = nbformat.v4.new_code_cell(code)  # type: ignore[no-untyped-call]
    steps: dict[int, tuple[int, str]] = {}  # cell index -> step number and name
    for index, parts, cell in step_cells(nb, cells=cells):  # named as the notebook has them
        if parts is None:
            continue
        at = index if setup is not None else index - 1  # run after the setup cell
        steps[at] = (len(steps) + 1, parts[0].split()[0] if parts[0] else "?")
        if split_cell(cell.source) is None:  # a cell of `--cells`: run as the step it is
            cell.source = f"%%step {parts[0]}\n{parts[1]}"
    if setup is not None:
        nb.cells.insert(0, setup)
    began = papermillmeta.now()
    raised: list[Any] = []  # the cells whose execution failed
    running: list[Any] = [None]  # the cell the kernel runs now
    failed_step: list[str] = []
    stopper = _Stopper()
    scratch = Path(tempfile.mkdtemp(prefix="stepstone-run-"))
    channel = Tail(events or scratch / "events.jsonl")
    live.point(path, channel.path)
    opened: list[RunOpened] = []  # what `%resume` opened, whatever its id
    refused: list[Refused] = []
    ended: dict[str, StepEnded] = {}  # the steps the cell that ran last ended

    def heard() -> None:
        for event in channel.read():
            if isinstance(event, RunOpened):
                opened.append(event)
                if progress is not None:
                    for note in event.notes:
                        progress(f"stepstone: {note}")
            elif isinstance(event, Refused):
                refused.append(event)
            elif isinstance(event, StepEnded):
                ended[event.name] = event
            if on_event is not None:
                on_event(event)

    def on_cell_execute(cell_index: int, **_: Any) -> None:
        heard()
        ended.clear()
        running[0] = nb.cells[cell_index]
        papermillmeta.started(nb.cells[cell_index])
        stopper.step = steps[cell_index][1] if cell_index in steps else None
        stopper.started = now()
        stopper.check()

    saved = [-math.inf, 0.0]  # when the last save ended, and how long it took
    autosave_every = [float(writing.autosave_every)]
    began_running = time.monotonic()

    def save() -> None:  # the output notebook so far, noting when and how long it took
        began_saving = time.monotonic()
        _save_so_far(nb, written, setup, output)
        done_saving = time.monotonic()
        saved[:] = [done_saving, done_saving - began_saving]

    def on_output(shown: Any) -> None:
        if shown is None:
            return
        writing.echo(shown)
        # during a long cell, every autosave_every seconds, backing off as papermill's does
        every = autosave_every[0]
        if not writing.each_cell or not every:
            return
        if time.monotonic() - max(saved[0], began_running) < every:
            return
        save()
        if saved[1] > every * _AUTOSAVE_SHARE:
            autosave_every[0] = every * 2

    def on_cell_executed(cell_index: int, execute_reply: Any, **_: Any) -> None:
        stopper.step = None
        heard()
        failed_here = execute_reply.get("content", {}).get("status", "ok") != "ok"
        papermillmeta.ended(nb.cells[cell_index], failed=failed_here)
        # saved as it goes, as papermill's is, but never for more than 1/SAVE_SHARE of the
        # run's time: a long notebook of quick cells is saved every few cells
        if (
            writing.each_cell
            and nb.cells[cell_index] is not setup
            and time.monotonic() - saved[0] >= SAVE_SHARE * saved[1]
        ):
            save()
        if failed_here:
            raised.append(nb.cells[cell_index])
        if setup is not None and cell_index == 0:  # not counted: the cells keep their counts
            client.code_cells_executed -= 1
        if log_output is not None:
            log_cell(nb.cells[cell_index], log_output)
        if cell_index not in steps:
            return
        number, name = steps[cell_index]
        said = ended.get(name)
        state = said.outcome if said is not None else "failed"  # it ended, or it raised first
        if state == "failed":
            failed_step.append(name)
        elif stopper.signum is not None:
            stopper.where = "between steps"  # the step finished before the interrupt reached it
        if progress is not None and not (state == "failed" and stopper.signum is not None):
            progress(f"[{number}/{len(steps)}] {name}: {state}")
            if said is not None and said.unsaved:
                progress(unsaved_line(said.unsaved))

    env = child_environment(
        {
            RUN_ENV: run_id,
            STORE_ENV: str(repo),
            NOTEBOOK_ENV: str(path),
            EVENTS_ENV: str(channel.path),
            PARAMETERS_ENV: canonical(identity),
        },
        unless_set={"PYTHONHASHSEED": hash_seed(run_id)},
    )
    if via:
        env[VIA_ENV] = via
    if steal:
        env[STEAL_ENV] = steal
    if diverge:
        env[DIVERGE_ENV] = "1"
    if cells:
        env[CELLS_ENV] = "1"
    written_here = [  # what this process writes as the cells run is no step's writing
        os.path.realpath(to.name)
        for to in (writing.stdout_file, writing.stderr_file)
        if isinstance(getattr(to, "name", None), str) and not to.name.startswith("<")
    ]
    if written_here:
        env[UNWATCHED_ENV] = os.pathsep.join(written_here)
    client = _client_class(NotebookClient)(
        nb,
        config=_over_unix_sockets(scratch),
        timeout=timeout,
        startup_timeout=start_timeout,
        kernel_name=kernel or "python3",
        resources={"metadata": {"path": str(cwd or path.parent)}},
        on_cell_start=stopper.check,
        on_cell_execute=on_cell_execute,
        on_cell_executed=on_cell_executed,
    )
    client.on_output = on_output
    expected = (CellExecutionError, CellTimeoutError, DeadKernelError)
    with _signal_handlers(stopper.on_signal):
        error = stopper.run(client, env)
        if error is not None and stopper.signum is None and not isinstance(error, expected):
            raise error
        unwritten = ""
        _as_written(nb, written, setup)
        _cards_to_metadata(nb)
        failed = None
        if isinstance(error, CellExecutionError):
            failed = mark_failure(nb, raised[-1] if raised else None)
        elif isinstance(error, CellTimeoutError) and running[0] is not None:
            late = ("CellTimeoutError", f"it ran past --execution-timeout ({timeout} s)")
            failed = mark_failure(nb, running[0], late)
        shown_in, shown_out = writing.paths or (str(path), str(output))
        papermillmeta.finish(
            nb,
            input_path=shown_in,
            output_path=shown_out,
            parameters=parameters or {},
            start=began,
            failed=failed is not None,
        )
        try:
            nbformat.write(nb, str(output))  # type: ignore[no-untyped-call]
        except OSError as exc:
            unwritten = (
                f"the executed notebook could not be written to {output} ({exc.strerror}): "
                f"pass -o PATH"
            )
    heard()
    shutil.rmtree(scratch, ignore_errors=True)
    live.unpoint(path)
    opened_run = (opened[-1].run, Path(opened[-1].store)) if opened else None
    unended = stopper.step if stopper.step not in ended else None  # it said how it ended
    if stopper.signum is not None:
        said = ""  # a kernel killed at the second signal recorded nothing itself
        if stopper.killed and _record_died(opened_run, unended, stopper.started, via):
            said = " (the kernel was killed: recorded as interrupted)"
        message = f"interrupted {stopper.where}{said}; {_RESUME_HINT}"
        return NotebookOutcome(False, message, output, stopper.signum, unwritten, opened_run)
    if isinstance(error, CellExecutionError) and failed is None:  # it called sys.exit(0)
        message = "the notebook stopped itself (sys.exit(0)); the cells after it did not run"
        return NotebookOutcome(
            True, message, output, note=unwritten, opened=opened_run, exited=True
        )
    if isinstance(error, CellExecutionError) and refused:
        message = f"{refused[-1].error}: {refused[-1].message}"
        return NotebookOutcome(
            False, message, output, note=unwritten, opened=opened_run, refused=refused[-1]
        )
    if isinstance(error, CellExecutionError):
        where = f"step {failed_step[-1]}" if failed_step else "a cell"
        summary = f"{error.ename}: {error.evalue}".strip()
        message = f"{where} failed: {summary}"
        return NotebookOutcome(
            False, message, output, note=unwritten, opened=opened_run, failed=failed
        )
    if isinstance(error, DeadKernelError):
        said = f" during step {stopper.step}" if stopper.step is not None else ""
        if _record_died(opened_run, unended, stopper.started, via):
            said += " (recorded as interrupted)"
        message = f"the kernel died{said}; {_RESUME_HINT}"
        return NotebookOutcome(False, message, output, note=unwritten, opened=opened_run)
    if isinstance(error, CellTimeoutError):
        why = f"interrupted: it timed out (ran past --execution-timeout, {timeout} s)"
        where = f"step {stopper.step}" if stopper.step is not None else "a cell"
        recorded = _record_died(opened_run, unended, stopper.started, via, why)
        message = (
            f"{where} timed out: it ran past --execution-timeout ({timeout} s)"
            + (" (recorded as interrupted)" if recorded else "")
            + "; the executed notebook marks it. Raise the timeout or make the cell "
            + f"quicker, then {_RESUME_HINT}"
        )
        return NotebookOutcome(
            False, message, output, note=unwritten, opened=opened_run, failed=failed
        )
    return NotebookOutcome(True, "ok", output, note=unwritten, opened=opened_run)


def log_cell(cell: Any, log_output: Callable[[str], None]) -> None:
    """Give `log_output` each text a cell's outputs hold (`--log-output`), stepstone's
    cards aside."""
    for out in cell.get("outputs", []):
        text = out.get("text") or (out.get("data") or {}).get("text/plain") or ""
        text = text or "\n".join(out.get("traceback", []))
        if text and CARD not in (out.get("metadata") or {}):
            log_output(str(text).rstrip("\n"))


@functools.cache
def _client_class(base: type[Any]) -> type[Any]:
    """nbclient's client, whose kernel is killed at once when a cell runs past its
    timeout: shut down gently, the kernel would finish the cell later and fail to answer
    on closed sockets, printing a traceback of its own (papermill's runs do)."""

    class Client(base):  # type: ignore[misc]
        on_output: Callable[[Any], None] | None = None  # gets each output as it comes

        def process_message(self, msg: Any, cell: Any, cell_index: int) -> Any:
            output = super().process_message(msg, cell, cell_index)
            if self.on_output is not None:
                self.on_output(output)
            return output

        async def _async_handle_timeout(self, timeout: int, cell: Any = None) -> Any:
            self.shutdown_kernel = "immediate"
            return await super()._async_handle_timeout(timeout, cell)

    return Client


def _record_died(
    opened: tuple[str, Path] | None,
    step: str | None,
    started: str,
    via: str | None,
    why: str = "interrupted: the kernel died while it ran (killed, or out of memory)",
) -> bool:
    """Record that step `step`'s attempt ended with its kernel (killed, out of memory), as
    Ctrl-C's is recorded, so that status, the log and the report say so. Whether it was
    recorded (not when no step was running, or another driver holds the run now)."""
    if opened is None or step is None:
        return False
    run_id, store = opened
    try:
        settings = Settings.from_env(origin=via) if via else None
        with open_run(run_id, repo=store, create=False, settings=settings) as run:
            return run.record_interrupted(step, why, started) is not None
    except StepstoneError:
        return False


def hash_seed(run_id: str) -> str:
    """The seed a run's kernels hash text with (`PYTHONHASHSEED`), the same in each of
    them: a set of text iterates in the same order in a kernel resumed after a kill as in
    the one killed, so a family of effects sent from it asks for its members in the same
    order (docs/effects.md). A seed the user set is left as it is."""
    import hashlib

    return str(int(hashlib.sha256(run_id.encode()).hexdigest()[:8], 16) % 4_294_967_295 + 1)


CARD = "stepstone"  # the metadata key of a step cell's outcome card (kernel.displayed.CARD)


_AUTOSAVE_SHARE = 0.25  # an autosave that takes longer than this share of its interval
# doubles the interval (papermill's max_autosave_pct)
SAVE_SHARE = 20  # the output notebook is saved after a cell once this many times as long
# has passed since the last save as that save took


def _save_so_far(nb: Any, written: dict[int, str], setup: Any, output: Path) -> None:
    """Write the output notebook as it is so far (its cells as written, without the
    setup cell and stepstone's cards), in one rename: a run killed with its process
    leaves what ran, as papermill's does. Not validated: the end writes it whole."""
    import json

    from ..store.durable import write_atomic

    cells = []
    for cell in nb.cells:
        if cell is setup:
            continue
        shown = {**cell, "source": written.get(id(cell), cell.source)}
        if "outputs" in shown:
            shown["outputs"] = [o for o in shown["outputs"] if not _is_card(o)]
        cells.append(shown)
    # a snapshot only: the end of the run writes the notebook, or says why it could not
    with contextlib.suppress(OSError, TypeError, ValueError):
        write_atomic(output, json.dumps({**nb, "cells": cells}, indent=1).encode())


def _is_card(output: Any) -> bool:
    """Whether a cell's output is what stepstone said (a card), not the cell's code."""
    return CARD in (output.get("metadata") or {})


def _as_written(nb: Any, written: dict[int, str], setup: Any) -> None:
    """The executed notebook's cells as they were written: `--cells`' `%%step` lines
    taken off again, the setup cell it ran first left out."""
    if setup is not None and setup in nb.cells:
        nb.cells.remove(setup)
    for cell in nb.cells:
        if id(cell) in written:
            cell.source = written[id(cell)]


def _cards_to_metadata(nb: Any) -> None:
    """Move what stepstone said in each cell (a step's outcome card, `%resume`'s table, a
    decision made) from its outputs to its metadata (`metadata.stepstone.said`: each as
    its text, `metadata.stepstone.shown`: each as the bundle Jupyter showed, the card's
    HTML too), so that the executed notebook's outputs are what the cells' code
    displayed, the same whether a step ran or was skipped."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        ours = [o for o in cell.outputs if _is_card(o)]
        if not ours:
            continue
        cell.outputs = [o for o in cell.outputs if not _is_card(o)]
        said = [str(o.get("data", {}).get("text/plain", "")) for o in ours]
        kept = cell.metadata.setdefault(CARD, {})
        kept["said"], kept["shown"] = said, [dict(o.get("data", {})) for o in ours]


def _over_unix_sockets(folder: Path) -> Any:
    """nbclient's config for a kernel that talks over Unix sockets in `folder` (only
    this user reaches them), not over unencrypted TCP on loopback, as Jupyter warns."""
    from traitlets.config import Config

    if sys.platform == "win32":
        return Config()
    return Config({"KernelManager": {"transport": "ipc", "ip": str(folder / "kernel")}})
