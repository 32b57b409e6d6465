"""A notebook's `%%step` cells as a plan, and how the notebook on disk differs from the
plan its run last committed."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ..errors import InvalidInput, PlanError
from ..model import names
from ..model.models import PlannedStep
from ..rules.status import RunStatus
from ..run import Run, source_hash
from .cellargs import INJECTED, DecideLine, cell_step, decide_lines, parse_step_line
from .namespace import without_our_magics
from .parameters import declared, defaults
from .plaincells import contexts

# the last notebook read as plain JSON, with its key: one tuple, replaced whole (threads)
_LAST: list[tuple[Any, Any]] = [(None, None)]


def file_version(seen: os.stat_result) -> tuple[int, ...]:
    """What changes when a file is written again (in place or replaced)."""
    return (seen.st_ino, seen.st_size, seen.st_mtime_ns, seen.st_ctime_ns)


def read_notebook(path: Path, *, validate: bool = True) -> Any:
    """Read and validate a notebook, or raise `InvalidInput` saying what is wrong.
    Without `validate` (a reader that only looks at the cells: `status`), a version 4
    notebook is read as plain JSON: its schema's validator costs a new process more
    than the rest of `status`."""
    if not validate:
        try:
            seen = path.stat()
        except OSError:
            seen = None
        key = (str(path.absolute()), *file_version(seen)) if seen is not None else None
        seen_key, seen_read = _LAST[0]
        if key is not None and seen_key == key:
            return seen_read  # `%resume` and `status` read one file in several places
        try:
            raw = json.loads(path.read_bytes())
            if raw.get("nbformat") == 4 and isinstance(raw.get("cells"), list):
                cells = [
                    SimpleNamespace(
                        id=cell.get("id"),
                        cell_type=cell.get("cell_type"),
                        source="".join(source) if isinstance(source, list) else source,
                        metadata=cell.get("metadata") or {},
                    )
                    for cell in raw["cells"]
                    for source in [cell.get("source", "")]
                ]
                read = SimpleNamespace(cells=cells, metadata=raw.get("metadata") or {})
                if key is not None and file_version(path.stat()) == key[1:]:  # unchanged meanwhile
                    _LAST[0] = (key, read)
                return read
        except (ValueError, AttributeError, TypeError):
            pass  # the full read below says what is wrong
    import nbformat

    captured: dict[str, Any] = {}  # a schema problem: Jupyter's tools warn and go on
    try:
        nb = nbformat.read(  # type: ignore[no-untyped-call]
            str(path), as_version=4, capture_validation_error=captured
        )
        if not isinstance(nb.get("cells"), list):
            raise ValueError("it has no list of cells")
    except FileNotFoundError as exc:
        raise InvalidInput(f"no notebook at {path}") from exc
    except Exception as exc:
        raise InvalidInput(f"{path} is not a valid notebook: {str(exc).splitlines()[0]}") from exc
    return nb


def parameter_defaults(path: Path | None) -> dict[str, Any]:
    """The values the notebook's cell tagged `parameters` assigns ({} with no notebook)."""
    return defaults(read_notebook(path, validate=False)) if path is not None else {}


def parameter_names(path: Path) -> set[str] | None:
    """The names the notebook's cell tagged `parameters` assigns (None: it has none)."""
    return declared(read_notebook(path, validate=False))


def schema_problem(path: Path) -> str | None:
    """What in a readable notebook does not match the notebook schema (a kernelspec
    without its name, say), in one line; None when it matches. Jupyter's tools run
    such a notebook, and so does `stepstone run`, after saying so."""
    import nbformat

    captured: dict[str, Any] = {}
    try:
        nbformat.read(str(path), as_version=4, capture_validation_error=captured)  # type: ignore[no-untyped-call]
    except Exception:
        return None  # `read_notebook` says what is wrong
    error = captured.get("ValidationError")
    return str(error).splitlines()[0] if error is not None else None


# what a notebook that drives its own run says: its magics, or the Python API's run (a
# notebook that only imports stepstone, for `stepstone.effect` say, is run --cells)
_USES = ("%resume", "%%step", "load_ext stepstone", "open_run(")


def refuse_another_language(path: Path, kernel: str | None) -> None:
    """Refuse a notebook written for a kernel of another language (R, Julia...) unless
    `kernel` is given: its steps would run as Python code. A notebook that names no
    language runs in Python, as Jupyter's tools run it."""
    if kernel is not None:
        return
    meta = read_notebook(path, validate=False).metadata or {}
    spec = meta.get("kernelspec") or {}
    language = spec.get("language") or (meta.get("language_info") or {}).get("name") or ""
    if language and language.lower() not in ("python", "python3", "ipython"):
        raise InvalidInput(
            f"{path.name} is written for a {language} kernel ({spec.get('name', '?')!r}): "
            f"stepstone runs its steps in a Python kernel. If its code is Python, run it "
            f"with -k python3 (execute_notebook: kernel_name='python3')"
        )


def uses_stepstone(path: Path) -> bool:
    """Whether any code cell of the notebook at `path` drives a run of its own
    (stepstone's magics, or `open_run`): one that does not is run with every code cell
    a step (`--cells`), whose effects, decisions and answers are that run's."""
    nb = read_notebook(path, validate=False)
    return any(
        cell.cell_type == "code" and any(word in cell.source for word in _USES) for cell in nb.cells
    )


def step_cells(nb: Any, *, cells: bool = False) -> list[tuple[int, tuple[str, str] | None, Any]]:
    """A read notebook's code cells: (its index among all cells from 1, (its `%%step`
    option line, its body) or None for a plain cell, the cell), by `cellargs.cell_step`."""
    found = []
    code = 0
    for index, cell in enumerate(nb.cells, start=1):
        if cell.cell_type != "code":
            continue
        tags = (cell.metadata or {}).get("tags", [])
        code += INJECTED not in tags  # the notebook's own cells only: names as written
        found.append((index, cell_step(cell.source, code, tags, cells=cells), cell))
    return found


_READ: dict[tuple[Any, ...], list[PlannedStep]] = {}  # plans read unvalidated, by file stat
_KEPT = 8


def plan_from_notebook(
    path: Path, *, validate: bool = True, cells: bool = False
) -> list[PlannedStep]:
    """The `%%step` cells of a notebook (with `cells`, every code cell but the plain ones
    `cellargs.cell_step` names), in order, as plan steps. Read without `validate`, the
    plan of a file whose stat (inode, size, modification and change times) is the one it
    had when last read is not read again (a long-lived server reads it at every call)."""
    stamp: tuple[Any, ...] | None = None
    if not validate:
        try:
            st = path.stat()
            stamp = (str(path.absolute()), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            stamp += (cells,)
        except OSError:
            stamp = None
        if stamp is not None and stamp in _READ:
            return list(_READ[stamp])
    steps = _plan_of(path, validate=validate, cells=cells)
    if stamp is not None:
        if len(_READ) >= _KEPT:
            _READ.pop(next(iter(_READ)))
        _READ[stamp] = steps
    return list(steps)


def _plan_of(path: Path, *, validate: bool, cells: bool) -> list[PlannedStep]:
    nb = read_notebook(path, validate=validate)
    steps: list[PlannedStep] = []
    seen: dict[str, int] = {}
    context = plain_contexts(nb, cells=cells)
    for index, parts, _ in step_cells(nb, cells=cells):
        if parts is None:
            continue
        line, body = parts
        try:
            parsed = parse_step_line(line)
            names.step_name(parsed.name)
        except InvalidInput as exc:
            raise PlanError(f"{path.name}, cell {index}: {exc}") from exc
        if parsed.name in seen:
            raise PlanError(
                f"{path.name}: step {parsed.name!r} appears in cells {seen[parsed.name]} and "
                f"{index}; give each step cell its own name"
            )
        seen[parsed.name] = index
        steps.append(
            PlannedStep(
                number=len(steps) + 1,
                name=parsed.name,
                checks=parsed.checks,
                inputs=parsed.inputs,
                outputs=parsed.outputs,
                source_hash=source_hash(body, context.get(parsed.name, "")),
                renamed_from=(parsed.was,) if parsed.was else (),
            )
        )
    return steps


def notebook_cells(
    path: Path, transform: Callable[[str], str], *, cells: bool = False
) -> list[tuple[str | None, str | None, Sequence[str]]]:
    """A notebook's code cells as the kernel reads them (what each step reads and binds,
    what plain cells make anew), their IPython syntax turned into Python by `transform`."""
    found: list[tuple[str | None, str | None, Sequence[str]]] = []
    for _, parts, cell in step_cells(read_notebook(path, validate=False), cells=cells):
        try:
            if parts is None:
                found.append((None, transform(without_our_magics(cell.source)), ()))
            else:
                parsed = parse_step_line(parts[0])
                found.append((parsed.name, transform(parts[1]), [str(c) for c in parsed.checks]))
        except (InvalidInput, SyntaxError, ValueError):
            found.append((None, None, ()))
    return found


def _named_cells(
    nb: Any, *, cells: bool = False
) -> list[tuple[str | None, tuple[str, str] | None, Any]]:
    """A read notebook's code cells: the step each is (None: a plain cell, or a line
    the grammar refuses), its (option line, body) or None for a plain cell, the cell."""
    found: list[tuple[str | None, tuple[str, str] | None, Any]] = []
    for _, parts, cell in step_cells(nb, cells=cells):
        try:
            name = parse_step_line(parts[0]).name if parts is not None else None
        except InvalidInput:
            name = None
        found.append((name, parts, cell))
    return found


def plain_contexts(nb: Any, *, cells: bool = False) -> dict[str, str]:
    """For each step cell of a read notebook, the plain cells it reads from
    (`plaincells.contexts`)."""
    return contexts(
        [
            (name, parts[1] if parts is not None else cell.source)
            for name, parts, cell in _named_cells(nb, cells=cells)
        ]
    )


def _notebook_path(run: Run) -> Path | None:
    """Where the run's notebook is on this machine (None: the run records none)."""
    if not run.info.notebook:
        return None
    path = Path(run.info.notebook)
    return path if path.is_absolute() else run.workdir / path


def _notebook_steps(run: Run) -> list[PlannedStep] | None:
    """The steps of the run's notebook as it is on disk now, with the earlier names the
    run knows them by; None when the run has no notebook or it cannot be read."""
    path = _notebook_path(run)
    if path is None:
        return None
    try:
        plan = plan_from_notebook(path, validate=False, cells=run.info.cells)
    except (InvalidInput, OSError):
        return None
    from ..run.planning import carry_renames

    return carry_renames(run.state, plan)


def notebook_changes(run: Run) -> list[str]:
    """How the run's notebook, as it is on disk now, differs from the plan the run last
    committed (`changed s1`, `added t4`, `moved s3 3->2`...): what the next run of the
    notebook will see. Empty when the run has no notebook or it cannot be read."""
    from ..run.planning import changes_from

    steps = _notebook_steps(run)
    return [] if steps is None else changes_from(run.state, steps)


def _unrun(run: Run, steps: list[PlannedStep]) -> tuple[dict[str, tuple[str, str]], list[str]]:
    """The run's steps whose notebook cell the next run will run again, as the run names
    them, with the notebook's name and why (their source or checks differ from their
    records'); and the notebook's steps the run has no record of."""
    from ..rules.verdicts import plan_changed

    edited: dict[str, tuple[str, str]] = {}
    added: list[str] = []
    for step in steps:
        name = step.name
        if name not in run.steps.names and step.renamed_from:
            name = step.renamed_from[-1]  # the run knows it by its old name until it runs
        record = run.records.get(name)
        if record is None:
            if name not in run.steps.names:  # planned and not run yet is pending, not added
                added.append(step.name)
            continue
        why = plan_changed(step.checks, step.source_hash, record.checks, record.source_hash)
        if why is not None:
            edited[name] = (step.name, f"{why} (its cell in the notebook)")
    return edited, added


def seeing_the_notebook(run: Run, status: RunStatus) -> RunStatus:
    """`status` with a note of how the run's notebook changed since its plan was
    committed (the cells the next run of the notebook sees as edited, added, moved);
    its edited steps stale, and the steps after them as the conservative rule has it
    (the next run of the notebook runs them again)."""
    from ..rules.verdicts import runs_after
    from ..run.planning import changes_from

    status = _seeing_decide_lines(run, status)
    status = _seeing_withheld(run, status)
    status = _seeing_elsewhere(run, status)
    steps = _notebook_steps(run)
    changes = [] if steps is None else changes_from(run.state, steps)
    if steps is None or not changes:
        return status
    note = f"the notebook changed since its plan was committed: {'; '.join(changes)}"
    edited, added = _unrun(run, steps)
    first = next((s.name for s in status.steps if s.name in edited), None)
    after = False
    marked = []
    for step in status.steps:
        if step.name in edited and step.state in ("verified", "stale"):
            cause = edited[step.name][1]  # beside the causes it has already
            reason = f"{cause}; {step.reason}" if step.state == "stale" else cause
            step = step._replace(state="stale", reason=reason)
        elif after and step.state == "verified" and not run.settings.follow_inputs:
            step = step._replace(state="stale", reason=runs_after(first or ""))
        after = after or step.name == first
        marked.append(step)
    notes = (*status.notes, note)
    return dataclasses.replace(status, steps=tuple(marked), notes=notes, added_cells=tuple(added))


def _decide_lines(run: Run) -> dict[str, DecideLine]:
    """The `%decide` lines of the run's notebook as it is on disk now, by key (the last
    line of a key wins, as it does when the notebook runs); empty without one."""
    path = _notebook_path(run)
    if path is None:
        return {}
    try:
        nb = read_notebook(path, validate=False)
    except (InvalidInput, OSError):
        return {}
    found: dict[str, DecideLine] = {}
    for cell in nb.cells:
        if cell.cell_type == "code" and "%decide" in cell.source:
            found.update((said.key, said) for _, said in decide_lines(cell.source))
    return found


_EXPANDED = re.compile(r"\{[^{}]*\}|\$\w")  # IPython's expansion of a line magic's words


def _seeing_decide_lines(run: Run, status: RunStatus) -> RunStatus:
    """`status` as the next run of the notebook will see its edited `%decide` lines: a
    line that revises a decision (`--revise`) shows the new value, its readers stale; a
    line that changes one without `--revise` is noted (that run refuses it). A decision
    made outside the notebook stands over the line it was made over."""
    lines = _decide_lines(run)
    if not lines:
        return status
    decisions = list(status.decisions)
    stale: dict[str, str] = {}
    notes = []
    for at, decision in enumerate(decisions):
        line = lines.get(decision.key)
        if line is None or line.value == decision.value or _EXPANDED.search(line.value):
            continue  # (a `{name}` or `$name` the kernel expands: only a run knows it)
        if decision.by is not None and decision.over in (None, line.value):
            continue  # decided outside over what this line says: it stands
        if not line.revise:
            notes.append(
                f"the notebook's %decide line says {decision.key}={line.value} without "
                f"--revise over {decision.value}: its next run refuses it (add --revise)"
            )
            continue
        cause = (
            f"the notebook's %decide line revises decision {decision.key}: "
            f"{decision.value} → {line.value}"
        )
        notes.append(f"{cause} (recorded when the notebook runs)")
        for name in run.revising(decision.key, line.value)[1]:
            stale.setdefault(name, cause)
        update = {"value": line.value, "why": line.why, "revised_from": decision.value}
        decisions[at] = decision.model_copy(update={**update, "by": None})
    steps = tuple(
        s._replace(state="stale", reason=stale[s.name])
        if s.name in stale and s.state == "verified"
        else s
        for s in status.steps
    )
    return dataclasses.replace(
        status, steps=steps, decisions=tuple(decisions), notes=(*status.notes, *notes)
    )


def _seeing_elsewhere(run: Run, status: RunStatus) -> RunStatus:
    """`status` with a note when the run's notebook is not in the folder its files are
    checked in: a store read away from its project sees every file as gone."""
    path = _notebook_path(run)
    if path is None or Path(run.info.notebook).is_absolute() or path.exists():
        return status
    note = (
        f"the run's notebook {run.info.notebook} is not in {run.workdir}, where its steps' "
        f"files are checked: put the store in the notebook's project folder (as "
        f".stepstone), or run from there with --repo"
    )
    return dataclasses.replace(status, notes=(*status.notes, note))


def _seeing_withheld(run: Run, status: RunStatus) -> RunStatus:
    """`status` whose note of saved values not given back here (pickles of a store this
    user does not trust) names only those a cell that runs next would read: none once
    the run is finished, none that the cells after their step bind again first."""
    from ..run.checking import WITHHELD, withheld_note

    withheld = run.withheld
    if not withheld:
        return status
    notes = tuple(n for n in status.notes if not n.startswith(WITHHELD))
    if not status.finished:
        needed = _needed_withheld(run, withheld, {s.name: s.state for s in status.steps})
        if needed:
            notes += (withheld_note(needed, run.store.path),)
    return dataclasses.replace(status, notes=notes)


def _needed_withheld(
    run: Run, withheld: dict[str, list[str]], states: dict[str, str]
) -> dict[str, list[str]]:
    """Of `withheld` (saved names by step), those a cell of the notebook that runs next
    (a plain cell, a step not verified) reads before a cell binds it again; all of them
    when the notebook cannot be read."""
    path = _notebook_path(run)
    if path is None:
        return withheld
    try:
        found = _named_cells(read_notebook(path, validate=False), cells=run.info.cells)
    except (InvalidInput, OSError):
        return withheld
    cells = [  # a plain cell as the kernel reads it: without our magics
        (name, parts[1] if parts is not None else without_our_magics(cell.source))
        for name, parts, cell in found
    ]
    order = [name for name, _ in cells]
    needed: dict[str, list[str]] = {}
    for step, saved in withheld.items():
        if step not in order:
            needed[step] = list(saved)
            continue
        after = cells[order.index(step) + 1 :]
        read = [var for var in saved if _read_before_bound(var, after, states)]
        if read:
            needed[step] = read
    return needed


def _read_before_bound(
    var: str, cells: list[tuple[str | None, str]], states: dict[str, str]
) -> bool:
    """Whether a cell of `cells` that runs (a plain cell, a step not verified) reads
    `var` before one binds it."""
    from ..rules.dependencies import DYNAMIC, cell_names

    for name, source in cells:
        runs = name is None or states.get(name) != "verified"
        found = cell_names(source)
        if found is None:  # not plain Python: it may read anything
            if runs:
                return True
            continue
        reads, binds = found
        if runs and (var in reads or DYNAMIC in reads):
            return True
        if var in binds:
            return False
    return False


def refuse_to_leave_out(run: Run) -> None:
    """Raise `InvalidInput` while the run's notebook, as saved, has steps edited or added
    since they ran: finishing now would leave them out. A finished run is not asked."""
    unrun = [] if run.info.finished else unrun_cells(run)
    if unrun:
        raise InvalidInput(
            f"the notebook {run.info.notebook} has steps edited or added since they "
            f"ran: {', '.join(unrun)}. Run them first (their cells, or `stepstone run "
            f"{run.info.notebook}`), or finish with --force to leave them out"
        )


def unrun_cells(run: Run) -> list[str]:
    """The notebook's steps whose cells were edited or added since they ran (what
    finishing now would leave out), as the notebook names them; empty without one."""
    steps = _notebook_steps(run)
    if steps is None:
        return []
    edited, added = _unrun(run, steps)
    return [name for name, _ in edited.values()] + added
