"""A run with nothing to do, answered from its records: when every step of a notebook
run in `--cells` mode verifies (its cells, inputs and parameters unchanged, every value
saved, every output kept), `stepstone run` writes the executed notebook from what each
step's record displayed, without starting a kernel (as jupyter-cache answers a cached
notebook). A kernel would skip every cell and show the same outputs again.

Whatever a kernel would do otherwise is checked first, and in any doubt the answer is
None and the kernel runs: a plain cell that is not a literal assignment (it runs every
time), a step that bound what it could not save or displayed what was not kept, a
changed plan, a note in the status, a kernel other than the notebook's, no executed
notebook of an earlier run to take the kernel's `language_info` from.
"""

from __future__ import annotations

import ast
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..errors import StepstoneError
from ..model import events
from ..model.events import RunOpened, StepEnded, StepStarted
from ..run import active, open_run
from ..settings import Settings
from ..store.durable import write_atomic
from ..values import artifacts
from . import papermillmeta
from .cellargs import PARAMETER_TAGS, PLAIN_TAGS
from .failures import remove_error_markers
from .notebook import CARD, NotebookOutcome, Writing, log_cell
from .notebook_plan import plan_from_notebook, read_notebook, step_cells
from .parameters import beyond_defaults, canonical, inject

SHOWN_AGAIN = frozenset({"stream", "display_data", "execute_result"})  # as nbclient keeps them
_WIDGET = "application/vnd.jupyter.widget-view+json"  # its state lives in the kernel


def answered(
    notebook: Path,
    *,
    run_id: str,
    store: Path,
    output: Path,
    parameters: Mapping[str, Any],
    known: Mapping[str, Any],
    kernel: str | None,
    workdir: Path,
    via: str | None,
    writing: Writing,
    progress: Callable[[str], None] | None,
    log_output: Callable[[str], None] | None,
    events_path: Path | None,
    on_event: Callable[[Any], None] | None,
) -> NotebookOutcome | None:
    """The outcome of running `notebook` (run `run_id` of `store`, every code cell a step)
    when nothing is to run: the executed notebook written to `output` from the records,
    no kernel started. None when a kernel must run (the module's docstring says when)."""
    nb = read_notebook(notebook)
    if kernel is not None and kernel != nb.metadata.get("kernelspec", {}).get("name"):
        return None
    if not _plain_cells_inert(nb):
        return None
    language = _language_info(output, notebook)
    if language is None:
        return None
    if not _kernel_is_this_python(nb, language) or not _imports_found(nb, workdir):
        return None
    settings = Settings.from_env(origin=via) if via else Settings.from_env()
    driven = active.driven_run()  # a script's or kernel's own run stays its own
    try:
        run = open_run(run_id, repo=store, workdir=workdir, create=False, settings=settings)
    except StepstoneError:
        return None  # held by another driver, or unreadable: the kernel's run says why
    finally:
        if driven is not None:
            active.now_driving(driven)
    with run:
        shown = _outputs_if_all_verified(run, notebook, parameters, known)
        if shown is None:
            return None
        opened = RunOpened(
            run=run.id, store=str(run.store.path), steps=len(run.steps), cells=True,
            notes=list(run.notes),
        )  # fmt: skip
        said: list[Any] = [opened]
        for planned in run.steps:
            said.append(
                StepStarted(number=planned.number, name=planned.name, skip=True, reason="verified")
            )
            said.append(StepEnded(number=planned.number, name=planned.name, outcome="skipped"))
        opened_run = (run.id, run.store.path)
    try:
        _write(nb, shown, notebook, output, parameters, language, writing)
    except OSError as exc:  # as a kernel's run says it, the run's records unchanged
        note = (
            f"the executed notebook could not be written to {output} ({exc.strerror}): pass -o PATH"
        )
        return NotebookOutcome(True, "ok", output, note=note, opened=opened_run)
    if log_output is not None:  # as a kernel's run logs each cell's text as it ends
        for cell in nb.cells:
            if cell.cell_type == "code" and cell.source.strip():
                log_cell(cell, log_output)
    if events_path is not None:
        events.append(events_path, said)
    for event in said:
        if progress is not None and isinstance(event, RunOpened):
            for note in event.notes:
                progress(f"stepstone: {note}")
        if progress is not None and isinstance(event, StepEnded):
            progress(f"[{event.number}/{len(shown)}] {event.name}: skipped")
        if on_event is not None:
            on_event(event)
    return NotebookOutcome(True, "ok", output, opened=opened_run)


def _plain_cells_inert(nb: Any) -> bool:
    """Whether every code cell that is not a step shows nothing and changes nothing
    outside the kernel: empty, comments, or assignments of literals (a parameters cell)."""
    for _, parts, cell in step_cells(nb, cells=True):
        if cell.cell_type != "code":
            continue
        if (PLAIN_TAGS - PARAMETER_TAGS) & set(cell.metadata.get("tags", [])):
            return False
        if parts is None and not _literal_assignments(cell.source):
            return False
    return True


def _literal_assignments(source: str) -> bool:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    for statement in tree.body:
        if not isinstance(statement, ast.Assign) or not all(
            isinstance(target, ast.Name) for target in statement.targets
        ):
            return False
        try:
            ast.literal_eval(statement.value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return False
    return True


def _language_info(output: Path, notebook: Path) -> dict[str, Any] | None:
    """The kernel's `language_info`, as the executed notebook of an earlier run of this
    notebook has it (no kernel is asked)."""
    try:
        earlier = json.loads(output.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    metadata = earlier.get("metadata") if isinstance(earlier, dict) else None
    if not isinstance(metadata, dict):
        return None
    ran = metadata.get(papermillmeta.KEY)
    language = metadata.get("language_info")
    if not isinstance(ran, dict) or not ran.get("end_time") or ran.get("exception"):
        return None  # prepared only, or stopped: no kernel's word on its language
    given = ran.get("input_path")
    if not isinstance(given, str) or not isinstance(language, dict):
        return None
    if Path(given).resolve() != notebook.resolve():  # (as given: relative to this folder)
        return None
    return language


def _outputs_if_all_verified(
    run: Any, notebook: Path, parameters: Mapping[str, Any], known: Mapping[str, Any]
) -> dict[str, list[dict[str, Any]]] | None:
    """Each step's outputs as a kernel would show them again on a skip, when a kernel
    would skip every step; else None."""
    info = run.info
    if info.finished or not info.cells or not _claimed(run, notebook):
        return None
    recorded = info.parameters
    if recorded:
        recorded = canonical(beyond_defaults(json.loads(recorded), known))
    if recorded != canonical(beyond_defaults(dict(parameters), known)):
        return None
    plan = plan_from_notebook(notebook, validate=False, cells=True)
    if [_planned(p) for p in plan] != [_planned(p) for p in run.steps]:
        return None
    status = run.status()
    if (
        status.notes
        or status.added_cells
        or status.open_unknowns
        or status.unresolved_effects
        or any(step.state != "verified" for step in status.steps)
    ):
        return None
    shown: dict[str, list[dict[str, Any]]] = {}
    for planned in run.steps:
        record = run.records.get(planned.name)
        if record is None or record.status != "confirmed" or record.unsaved:
            return None
        if not _loads_as_a_kernel_would(run, record):
            return None
        try:
            kept = run.kernel_part(record, only=("displayed", "exited"))
        except StepstoneError:
            return None
        if kept.get("exited") or ("displayed" in record.kernel and kept.get("displayed") is None):
            return None
        outputs = kept.get("displayed") or []
        if not all(_shown_again(out) for out in outputs):
            return None
        shown[planned.name] = outputs
    return shown


def _kernel_is_this_python(nb: Any, language: Mapping[str, Any]) -> bool:
    """Whether the notebook's kernel runs this Python (its kernelspec starts this
    interpreter, of the version the earlier executed notebook says): what a skip runs
    again and loads can then be checked here."""
    import platform
    import shutil
    import sys

    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    name = nb.metadata.get("kernelspec", {}).get("name") or "python3"
    try:
        argv = KernelSpecManager().get_kernel_spec(name).argv
    except (NoSuchKernel, OSError, ValueError):
        return False
    if not argv:
        return False
    # jupyter_client starts `python`, `python3`, `python3.11` as the Python launching it
    ours = {"python", f"python{sys.version_info[0]}", "python{}.{}".format(*sys.version_info)}
    found = sys.executable if argv[0] in ours else shutil.which(argv[0])
    if found is None or os.path.realpath(found) != os.path.realpath(sys.executable):
        return False
    return language.get("version") == platform.python_version()


def _imports_found(nb: Any, workdir: Path) -> bool:
    """Whether every module the step cells import at their top (what a skip imports
    again) is found by this Python from the kernel's folder; a cell that is not plain
    Python (a magic, a shell line) cannot be read, and answers no."""

    wanted: set[str] = set()
    for _, parts, cell in step_cells(nb, cells=True):
        if parts is None or cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(parts[1])
        except (SyntaxError, ValueError):
            return False
        for statement in tree.body:
            if isinstance(statement, ast.Import):
                wanted.update(alias.name.split(".")[0] for alias in statement.names)
            elif isinstance(statement, ast.ImportFrom):
                if statement.level or not statement.module:
                    return False
                wanted.add(statement.module.split(".")[0])
    return _found(wanted, workdir)


def _found(modules: set[str], folder: Path) -> bool:
    """Whether this Python finds each of `modules` with `folder` first on its path."""
    import importlib.util
    import sys

    if not modules:
        return True
    sys.path.insert(0, str(folder))
    try:
        return all(
            name in sys.modules or importlib.util.find_spec(name) is not None for name in modules
        )
    except (ImportError, ValueError):
        return False
    finally:
        sys.path.remove(str(folder))


def _loads_as_a_kernel_would(run: Any, record: Any) -> bool:
    """Whether every value and kernel part `record` saved is in the store as recorded
    (size and sha256) and in a format whose loading needs nothing missing here: a
    pickle only of classes and functions from modules this Python finds. A big value
    is not read here: the kernel answers for it."""
    import hashlib
    import pickletools

    for art in [*record.outputs.values(), *record.kernel.values()]:
        if art.format not in _LOADED_HERE or art.size > _READ_AT_MOST:
            return False
        data = run.state.blob(artifacts.path_for(art.sha256, art.format))
        if data is None or len(data) != art.size or hashlib.sha256(data).hexdigest() != art.sha256:
            return False
        if art.format != "pickle":
            continue
        modules: set[str] = set()
        try:
            strings: list[str] = []
            for op, arg, _ in pickletools.genops(data):
                if op.name == "GLOBAL":
                    modules.add(str(arg).split(" ")[0].split(".")[0])
                elif op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
                    strings.append(str(arg))
                elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
                    modules.add(strings[-2].split(".")[0])
                elif op.name == "STACK_GLOBAL":
                    return False
        except Exception:
            return False
        if not _found(modules - {"__main__"}, run.workdir):
            return False
    return True


_LOADED_HERE = frozenset({"json", "pickle", "npy", "arrow", "parquet"})
_READ_AT_MOST = 4 << 20  # bytes of one saved value checked here; larger: a kernel's run


def _claimed(run: Any, notebook: Path) -> bool:
    """Whether the run's notebook is this one, where it was (a kernel claims a moved
    one, and says so)."""
    recorded, base = run.info.notebook, run.previous_workdir
    if not recorded or base is None:
        return False
    return bool((base / recorded).resolve() == notebook.resolve())


def _planned(step: Any) -> tuple[Any, ...]:
    return (step.name, step.checks, step.inputs, step.outputs, step.source_hash)


def _shown_again(out: Mapping[str, Any]) -> bool:
    kind = out.get("msg_type")
    content = out.get("content") or {}
    return kind in SHOWN_AGAIN and _WIDGET not in (content.get("data") or {})


def _write(
    nb: Any,
    shown: Mapping[str, list[dict[str, Any]]],
    notebook: Path,
    output: Path,
    parameters: Mapping[str, Any],
    language: dict[str, Any],
    writing: Writing,
) -> None:
    """The executed notebook, as the kernel's run would write it: each step cell with
    its kept outputs and the execution count it would get, papermill's metadata."""
    import nbformat

    began = papermillmeta.now()
    remove_error_markers(nb)
    papermillmeta.forget(nb)
    steps = {id(cell): parts for _, parts, cell in step_cells(nb, cells=True)}
    if parameters:
        inject(nb, parameters)
    if writing.report_mode:
        papermillmeta.hide_code(nb)
    count = number = 0
    for cell in nb.cells:
        if cell.cell_type != "code" or not cell.source.strip():
            continue  # nbclient does not execute an empty cell
        cell.outputs = []
        count += 1
        cell.execution_count = count
        papermillmeta.started(cell)
        at = _nbclient_time()
        cell.metadata["execution"] = {
            "iopub.execute_input": at,
            "iopub.status.busy": at,
            "iopub.status.idle": at,
            "shell.execute_reply": at,
        }
        parts = steps.get(id(cell))
        if parts is not None:
            number += 1
            name = parts[0].split()[0]
            cell.outputs = [_as_output(out, count) for out in shown.get(name, [])]
            said = (
                f"step {number} {name}: skipped, verified (nothing to run: no kernel was started)"
            )
            cell.metadata[CARD] = {"said": [said], "shown": [{"text/plain": said}]}
            for out in cell.outputs:
                writing.echo(out)
        papermillmeta.ended(cell, failed=False)
    nb.metadata["language_info"] = language
    shown_in, shown_out = writing.paths or (str(notebook), str(output))
    papermillmeta.finish(
        nb, input_path=shown_in, output_path=shown_out, parameters=parameters, start=began,
        failed=False,
    )  # fmt: skip
    write_atomic(output, nbformat.writes(nb).encode())  # type: ignore[no-untyped-call]


def _as_output(out: Mapping[str, Any], count: int) -> Any:
    """A kept output as nbclient writes it in the cell; an `execute_result` carries the
    cell's execution count now, as the kernel's display hook gives it."""
    import nbformat

    content = dict(out.get("content") or {})
    kind = out["msg_type"]
    if kind == "execute_result":
        content["execution_count"] = count
    message = {"header": {"msg_type": kind}, "content": content}
    return nbformat.v4.output_from_msg(message)  # type: ignore[no-untyped-call]


def _nbclient_time() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
