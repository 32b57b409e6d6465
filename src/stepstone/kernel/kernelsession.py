"""The kernel side of a notebook's run: what the `%%step` cells of one shell gave back,
saved and saw, what a failed attempt left changed, and the process state a step set.

The magics hold one `KernelSession` and delegate to it, as IPython's autoreload magics
hold one `ModuleReloader`: `resume` and `step` own `%resume`'s and a step cell's whole
sequence; the magic parses its line, calls one of them and renders what it returns. It
takes the shell as an object and imports no IPython.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import inspect
import io
import pickle
import tokenize
import types
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePath
from types import CodeType
from typing import Any, Protocol

from pydantic import BaseModel

from ..errors import InvalidInput, StepstoneError
from ..model import events as model_events
from ..model import models, names
from ..model.events import RunOpened, StepEnded, StepStarted
from ..model.models import PlannedStep, StepSpec
from ..notebook import cellargs, namespace, parameters
from ..notebook.cellargs import parse_step_line
from ..notebook.notebook import choose_run, claim, goal_of
from ..notebook.notebook_plan import (
    notebook_cells,
    parameter_defaults,
    plan_from_notebook,
    read_notebook,
    step_cells,
)
from ..notebook.plaincells import made_anew
from ..present import render, render_cells
from ..present.render_cells import CellOutcome
from ..rules import dependencies
from ..rules.index import evidence_rows
from ..rules.status import RunStatus, StepStatus
from ..run import Attempt, Run, StepStart, open_run
from ..settings import Settings
from ..store import resolve_store_path
from ..values.artifacts import kind_of
from . import clients, displayed, everycell, processstate, retrying, sharing, usernames


def compiler(ip: Any) -> namespace.Compiler:
    """IPython's compiler, as it compiles a plain cell: the cell's own `__future__`
    imports hold for later cells, and none of this module's apply."""
    return lambda tree, filename: ip.compile(tree, filename, "exec")


def compiled(
    ip: Any, code: str, raw: str | None = None, *, awaiting: bool = False
) -> list[CodeType]:
    """A cell's code compiled by `compiler`, from the tree `read_cell` parsed, as IPython
    runs a cell: its last expression apart, in "single" mode, so that its value is
    displayed (and kept in `Out`), unless a `;` ends it. Its file is named after the cell
    running it (`Cell In[5]` in a traceback, as a plain cell's); a Jupyter kernel names
    that file after the `raw` code, as it names a plain cell's after the code sent. With
    `awaiting`, `await` may be used at its top level (each part is then a coroutine)."""
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT if awaiting else 0
    with ip.compile.extra_flags(flags):
        filename = ip.compile.cache(code, max(ip.execution_count - 1, 0), raw_code=raw)
        tree = dependencies.parsed(code)
        if tree is None:  # raises the cell's SyntaxError
            return [compile(code, filename, "exec", flags=flags, dont_inherit=True)]
        body = tree.body
        if not body or not isinstance(body[-1], ast.Expr) or _quiet(code):
            return [compiler(ip)(tree, filename)]
        first = compiler(ip)(ast.Module(body=body[:-1], type_ignores=[]), filename)
        return [first, ip.compile(ast.Interactive(body=[body[-1]]), filename, "single")]


def awaits(code: str) -> bool:
    """Whether a cell's code awaits at its top level (`await`, `async for`, `async with`
    outside any function), which Python compiles only as IPython compiles a cell."""
    tree = dependencies.parsed(code)
    if tree is None:
        return False
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Await, ast.AsyncFor, ast.AsyncWith)):
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        todo.extend(ast.iter_child_nodes(node))
    return False


def _quiet(code: str) -> bool:
    """Whether a `;` ends the cell's code (its last expression is not displayed)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        return False
    skip = {tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT, tokenize.ENDMARKER}
    skip |= {tokenize.DEDENT, tokenize.INDENT}
    meaningful = [t for t in tokens if t.type not in skip]
    return bool(meaningful) and meaningful[-1].string == ";"


def _relative(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


FROM_CELL = "_stepstone_from_cell"  # set on an error the cell's own code raised
EXITED = "exited"  # in the kernel's part of a step whose code called sys.exit(0)
RESULT = "result"  # in the kernel's part: the value its last line evaluated to
# a notebook's code cell as read: (its step name or None, the names it reads or None for
# any, the names it binds)
CellShape = tuple[str | None, frozenset[str] | None, tuple[str, ...]]


@dataclass
class Resumed:
    """What `%resume` shows: the run's status, and what its verified steps gave back."""

    status: RunStatus
    giving_back: str | None


@dataclass
class Ran:
    """What a step cell's code left beside the names it bound: the kernel's part of the
    step (`models.KERNEL_KEYS`), and plain cells' values it changed in place."""

    kernel: dict[str, Any] = field(default_factory=dict)
    changed: dict[str, Any] = field(default_factory=dict)


@contextmanager
def cell_code() -> Iterator[None]:
    """Around the user's code of a cell: a `StepstoneError` it raises (a failed
    `stepstone.effect`, say) keeps its traceback instead of becoming a `UsageError`."""
    try:
        yield
    except StepstoneError as exc:
        setattr(exc, FROM_CELL, True)
        raise


class Shown(Protocol):
    """How a step cell is shown as it goes (the magic's card): put up as it starts,
    replaced by how it ended."""

    @property
    def started(self) -> bool: ...
    def began(self, number: int, name: str) -> None: ...
    def ended(self, outcome: CellOutcome) -> None: ...


class KernelSession:
    """One shell's run and what its step cells left in the kernel."""

    def __init__(self, ip: Any) -> None:
        self.ip = ip
        self.run: Run | None = None
        self.unrestored = namespace.Unrestored()  # names skipped steps could not give back
        self.plain: dict[str, frozenset[str]] = {}  # step -> what plain cells make anew
        self.cells = False  # every code cell is a step (`%resume --cells`)
        self.cell_files: set[str] = set()  # the files step cells' code was compiled as
        self.exited: SystemExit | None = None  # the cell's code called sys.exit(0)
        self.seen = namespace.Seen()  # large values as last saved or restored
        self.given: dict[str, int] = {}  # name -> id of the value a skipped step gave back
        self.kept: set[str] = set()  # the names the steps met so far saved
        self.unsaved: set[str] = set()  # the names they bound and could not save
        self.met: set[str] = set()  # the steps met (run or skipped) since %resume
        self.cell_shapes: list[CellShape] = []  # the notebook's code cells, in order
        self.cell_at: dict[str, int] = {}  # a step's place among them
        self.retries = retrying.Retries(self.seen)  # what failed attempts left changed
        self.names = usernames.UserNames(getattr(ip, "user_ns_hidden", None))
        self.events: str | None = None  # where `stepstone run` reads the events (%resume)

    def resume(
        self,
        args: argparse.Namespace,
        settings: Settings,
        notebook: Path | None,
        every: everycell.EveryCell,
    ) -> Resumed:
        """`%resume`: open the run of `notebook` (`args` as the line gives them), claim it
        for the notebook and commit its plan, say so to `stepstone run`; its status, and
        what the verified steps give back."""
        self.events = settings.events
        self.events = settings.events
        run_id = args.run or settings.run
        cells = args.cells or settings.cells
        # its client read the notebook already: its cells as plain JSON (nbformat's validator
        # costs a kernel over a second where jsonschema finds its optional format checkers)
        plan = (
            plan_from_notebook(notebook, validate=False, cells=cells)
            if notebook is not None
            else None
        )
        if run_id is None and notebook is not None and plan is not None:
            run_id = choose_run(
                resolve_store_path(args.repo),
                names.from_filename(notebook.stem),
                notebook,
                plan,
                default_store=not (args.repo or settings.store),
            )
        if run_id is None:
            raise InvalidInput(clients.unknown_notebook(self.ip.user_ns, settings=settings))
        if self.run is not None:
            self.run.close()
            self.run = None
        steal = args.steal or settings.steal
        run = open_run(
            run_id,
            repo=args.repo,
            workdir=Path.cwd(),
            steal=steal,
            diverge=args.diverge,
            settings=replace(settings, origin=settings.origin or "notebook"),
        )
        opening = list(run.notes)  # what opening it said (copies, the remote, --diverge)
        given = settings.parameters
        if given is not None:  # from `stepstone run -p`: they are part of the run
            try:
                recorded, known = run.info.parameters, parameter_defaults(notebook)
                parameters.refuse_other(run.id, recorded, given, begun=run.begun, known=known)
            except StepstoneError:
                run.close()
                raise
            run.state.note_info(parameters=given)
        if run.info.cells and not cells and notebook is not None:  # a run of every cell
            cells, plan = True, plan_from_notebook(notebook, validate=False, cells=True)
        self.cells = cells
        self._every_cell(every, notebook if cells else None)
        try:
            status = self._open_plan(run, notebook, plan)
        except BaseException:
            run.close()
            raise
        self.run = run
        self.emit(
            RunOpened(
                run=run.id,
                store=str(run.store.path),
                steps=len(run.steps),
                cells=cells,
                notes=opening,
            )
        )
        shown = render.shown_steps(status)
        verified = [s.name for s in shown if isinstance(s, StepStatus) and s.state == "verified"]
        giving = [(name, run.records.get(name)) for name in verified]
        withheld = run.withheld  # untrusted pickles, named in the status's notes
        rows = (
            (
                n,
                [v for v in r.outputs if v not in withheld.get(n, ())],
                r.unsaved,
            )
            for n, r in giving
            if r
        )
        return Resumed(status, render.giving_back(rows))

    def _every_cell(self, every: everycell.EveryCell, notebook: Path | None) -> None:
        """In `--cells` mode, run each code cell of the saved `notebook` as its step though
        it does not say `%%step` (`everycell`); else stop doing so."""
        if notebook is None:
            everycell.uninstall(self.ip, every)
            return
        cells = step_cells(read_notebook(notebook, validate=False), cells=True)
        every.know(
            [
                (getattr(cell, "id", None), parse_step_line(parts[0]).name, cell.source)
                for _, parts, cell in cells
                if parts is not None and cellargs.split_cell(cell.source) is None
            ]
        )
        everycell.install(self.ip, every)

    def _open_plan(
        self, run: Run, notebook: Path | None, plan: list[PlannedStep] | None
    ) -> RunStatus:
        """Claim the run for the notebook and commit the notebook's plan; the status."""
        self.fresh()
        if notebook is not None and plan is not None:
            every = self.cells
            cells = notebook_cells(notebook, self.ip.transform_cell, cells=every)
            shapes = [
                (name, shape.reads if shape else None, shape.binds if shape else ())
                for name, code, _ in cells
                for shape in [namespace.read_cell(code) if code is not None else None]
            ]
            self.fresh(shapes, made_anew([(n, code) for n, code, _ in cells]))
            moved = claim(run, notebook)
            if moved:
                run.notes.append(moved)
            changes = run.set_plan(
                plan,
                mode="notebook",
                goal=goal_of(notebook),
                notebook=_relative(notebook),
                cells=every,
            )
            if changes:
                run.notes.append(f"the notebook changed: {'; '.join(changes)}")
            joined = run.join_lineage(notebook)
            if joined:
                run.notes.append(joined)
        elif run.info.plan_mode == "incremental":
            run.notes.append("the plan is incremental: steps are added as they are met")
        return run.status(namespace=self.ip.user_ns)

    def emit(self, *events: BaseModel) -> None:
        """Append `events` for the `stepstone run` that started this kernel, if one did."""
        if self.events:
            try:
                model_events.append(self.events, events)
            except OSError:
                self.events = None  # the run that reads them is gone: nothing to tell

    def fresh(
        self,
        shapes: list[CellShape] | None = None,
        plain: dict[str, frozenset[str]] | None = None,
    ) -> None:
        """A run opened (again): the notebook's code cells as read (`cell_shapes`), and
        what plain cells before each step make anew (`plaincells.made_anew`); nothing
        saved or failed yet."""
        self.cell_shapes = shapes or []
        self.cell_at = {n: i for i, (n, _, _) in enumerate(self.cell_shapes) if n is not None}
        self.kept, self.plain = set(), plain or {}
        self.unsaved, self.met = set(), set()
        self.retries = retrying.Retries(self.seen)

    async def step(self, spec: StepSpec, cell: str, *, awaits: bool, shown: Shown) -> CellOutcome:
        """A step cell, start to end: skip it (its values, definitions and process state
        given back) while its evidence verifies, else run its code and record it with
        what it bound, changed and displayed. `shown` puts the card up as it starts and
        shows how it ended (a failure's card too, before its error goes on); the events
        say the same for `stepstone run`. The outcome, for the magic to render."""
        run = self._require_run()
        ip, ns = self.ip, self.ip.user_ns
        forced = self._runs_again(run, spec)
        self.met.add(spec.name)
        if self.cells:  # Jupyter runs cells in any order (`stepstone run` runs them in order)
            spec = replace(spec, force=True)
        if forced is not None:
            run.rerun(spec.name, forced)
        elif spec.rerun is not None:
            run.rerun(spec.name, spec.rerun, once=True)
        code = ip.transform_cell(cell)
        if self.cells:
            self._as_written(cell, code)
        shape = namespace.read_cell(code)
        before = run.records.get(spec.name)
        pickled = before is not None and any(a.format == "pickle" for a in before.outputs.values())
        defined = shape is not None and pickled and namespace.define_first(shape, ns, compiler(ip))
        cell_raised = ran = False  # ran: the cell's code started, and may have changed values
        spec = replace(spec, source=cell)
        remade: list[str] = []
        began: StepStart | None = None
        try:
            with run.stepping(spec, namespace=ns) as attempt:
                start = began = attempt.start
                number = start.planned.number
                shown.began(number, spec.name)
                self.emit(
                    StepStarted(number=number, name=spec.name, skip=start.skip, reason=start.reason)
                )
                before = start.record  # "again" only over a confirmed record
                again = not attempt.skipped and before is not None and before.status == "confirmed"
                if attempt.skipped:
                    unsaved = attempt.record.unsaved if attempt.record else {}
                    remade = self.give_back(
                        spec.name, attempt.values, start.kernel, unsaved, shape, defined
                    )
                else:
                    self.put_back(spec.name, run)
                    start.plain = self.made_anew(spec.name, shape)
                    start.check_writes = self.cells
                    cell_raised = ran = True
                    # the body as sent, without the newline IPython adds to every cell
                    raw = cell.removesuffix("\n")
                    ran_code = (
                        await self.execute_awaiting(code, shape, raw)
                        if awaits
                        else self.execute(code, shape, raw)
                    )
                    cell_raised = False
                    self._offer(attempt, spec, shape, ran_code)
        except BaseException as exc:
            if began is not None:
                self.emit(*began.told)  # how its effects ended, before the step
            self._failed(spec, shape, exc, cell_raised=cell_raised, ran=ran, shown=shown)
            raise
        return self._ended(attempt, spec, again=again, remade=remade, shown=shown)

    def _runs_again(self, run: Run, spec: StepSpec) -> str | None:
        """Why a step whose evidence may hold runs all the same, or None: in `--cells`
        mode a cell run again in this kernel runs again on what the kernel holds now
        (Jupyter's meaning); a step that bound a value it could not save (a generator, a
        connection) that a later cell reads runs again rather than leave it missing."""
        record = run.records.get(spec.name)
        if record is None or record.status != "confirmed":
            return None
        if self.cells and spec.name in self.met:
            return f"run again in this kernel (at {models.now()})"
        needed = [n for n in record.unsaved if self._needed_later(run, spec.name, n)]
        if needed:
            return f"{', '.join(needed)} cannot be restored and a cell that runs reads it"
        return None

    def _needed_later(self, run: Run, step: str, name: str) -> bool:
        """Whether a cell after `step` that will run (a plain cell, a step not verified)
        reads `name` before a cell binds it again or a skipped step gives it back."""
        cells = self.cell_shapes
        at = self.cell_at.get(step)
        if at is None:
            return False
        records, verdicts = run.records, run.stepper.verdicts
        for later, reads, binds in cells[at + 1 :]:
            runs = later is None or verdicts.state(later) != "verified"
            if runs and (reads is None or name in reads):
                return True
            record = records.get(later) if later is not None else None
            if name in binds or (not runs and record is not None and name in record.outputs):
                return False
        return False

    def _as_written(self, cell: str, code: str) -> None:
        """In `--cells` mode the `%%step` line is stepstone's, not the user's: the kernel's
        history holds the cell as written (`In[N]`, `_iN`, and `_i` in the next cell)."""
        history = getattr(self.ip, "history_manager", None)
        raw = cell.rstrip("\n")
        if history is None or not history.input_hist_raw:
            return
        stored = history.input_hist_raw[-1]
        if not stored.lstrip().startswith("%%step"):
            return
        history.input_hist_raw[-1] = raw
        history.input_hist_parsed[-1] = code.rstrip("\n")
        history._i00 = raw
        ns, count = self.ip.user_ns, self.ip.execution_count
        for n in (count, count - 1):  # (IPython counts the cell before or after its code)
            if ns.get(f"_i{n}") == stored:
                ns[f"_i{n}"] = raw

    def _require_run(self) -> Run:
        if self.run is None or not self.run.driving:
            raise StepstoneError("no run is open: run %resume first (usually the first cell)")
        return self.run

    def _offer(
        self, attempt: Attempt, spec: StepSpec, shape: namespace.Cell | None, ran: Ran
    ) -> None:
        """What the step's code bound and changed, offered to its record, and what the
        kernel keeps of it for itself."""
        ns = self.ip.user_ns
        attempt.keep({var: ns[var] for var in spec.outputs if var in ns})
        attempt.offer(ran.changed)
        attempt.keep_for_kernel(ran.kernel)
        if shape is None:
            return
        offered = namespace.offered(shape, ns, spec.outputs)
        # a value an earlier step could not save that this cell reads, and may have made
        # one that can be (`out.close()` of a file a step opened): saved with this cell
        reads = self.unsaved if shape.reads is None else self.unsaved & shape.reads
        offered.update({n: ns[n] for n in reads if n in ns and n not in spec.outputs})
        attempt.offer(offered)
        read = namespace.touched(shape, ns, self.kept)
        given = {*offered, *spec.outputs, *ran.changed}
        partners, links = self.shared(given, read)
        attempt.offer_changed(self.seen.maybe_changed(read | partners))
        if links:
            attempt.keep_for_kernel({sharing.KEY: links})
        self.unrestored.bound(shape.binds)

    def _failed(
        self,
        spec: StepSpec,
        shape: namespace.Cell | None,
        exc: BaseException,
        *,
        cell_raised: bool,
        ran: bool,
        shown: Shown,
    ) -> None:
        """A step that raised: its failed card (the cell's own error), or its error made
        the cell's (stepstone's own, a check that failed, a commit cut short)."""
        left = self.left_changed(spec.name, shape) if ran else ""
        number = self.run.state.numbers.get(spec.name, 0) if self.run is not None else 0
        why = f"{type(exc).__name__}: {exc}".strip().rstrip(":")
        if shown.started:
            self.emit(StepEnded(number=number, name=spec.name, outcome="failed", reasons=[why]))
        if cell_raised and not isinstance(exc, StepstoneError):
            failed = render_cells.of(number, spec.name, "failed", why=why)
            failed.notes += [left] if left else []
            shown.ended(failed)
            return
        if cell_raised:  # shown with its traceback, and recording's own if any
            setattr(exc, FROM_CELL, True)
        if left:
            displayed.say(self.ip, f"step {spec.name}: {left}")

    def _ended(
        self, attempt: Attempt, spec: StepSpec, *, again: bool, remade: list[str], shown: Shown
    ) -> CellOutcome:
        """The bookkeeping after a step cell ended (what it saved, as seen now) and its
        outcome; raises the `sys.exit(0)` its code called, once recorded."""
        ns = self.ip.user_ns
        record = attempt.record
        assert record is not None
        npy = {n: a.sha256 for n, a in record.outputs.items() if a.format == "npy"}
        seen = {*record.outputs, *attempt.touched} & ns.keys()
        self.seen.saw({n: ns[n] for n in seen}, npy)
        self.kept.update(record.outputs)
        self.unsaved = (self.unsaved | set(record.unsaved)) - set(record.outputs)
        self.retries.stepped(spec.name, record.outputs, seen, self.ip.execution_count)
        number = attempt.start.planned.number
        outcome = "skipped" if attempt.skipped else "again" if again else "confirmed"
        if attempt.skipped:
            lost = {n: k for n, k in record.unsaved.items() if ns.get(n) is not self.ip}
            # and the untrusted pickles the step stands without:
            lost.update({n: namespace.UNTRUSTED for n in record.outputs if n not in attempt.values})
            back = {*attempt.values, *remade, *lost}
            unread = [n for n in record.binds if n not in back and n not in ns]
            self.unrestored.skipped(spec.name, lost, unread)
            said = render.kernel_names(attempt.values, remade, lost, skipped=True)
        else:
            said = render.kernel_names((), (), record.unsaved, skipped=False)
        why = attempt.start.reason if again else ""
        rows = evidence_rows(record)
        done = render_cells.of(number, spec.name, outcome, rows, why=why, kernel=said)
        done.notes += attempt.start.said  # effects taken from another run of the lineage
        shown.ended(done)
        self.emit(
            *attempt.start.told,  # how its effects ended
            StepEnded(
                number=number,
                name=spec.name,
                outcome="skipped" if attempt.skipped else "done",
                reasons=[why] if why else [],
                said=list(attempt.start.said),
                unsaved={} if attempt.skipped else dict(record.unsaved),
            ),
        )
        exited, self.exited = self.exited, None
        if exited is not None:  # confirmed: IPython shows the exit as it does a plain cell's
            raise exited
        return done

    def made_anew(self, step: str, shape: namespace.Cell | None) -> frozenset[str]:
        """The names `step`'s cell reads that plain cells before it make anew, and whose
        values now are ones a plain cell makes alike every time (a function, a class, a
        module, a number, a string, a tuple of such): not kernel reads of what an earlier
        step left. A list or an array a plain cell made is not among them (a step may
        have changed it in place)."""
        clean = self.plain.get(step)
        if not clean or shape is None or shape.reads is None:
            return frozenset()
        ns = self.ip.user_ns
        return frozenset(n for n in shape.reads & clean if n in ns and _alike(ns[n]))

    def execute(self, code: str, shape: namespace.Cell | None, raw: str | None = None) -> Ran:
        """Run a step cell's code in the kernel; what the kernel keeps of it for itself
        (`Ran.kernel`: what it displayed, the process state it set, whether it exited),
        and the values of plain cells it changed in place (`Ran.changed`: a generator it
        drew from, a list it appended to), which a plain cell run again on resume would
        make anew. Says what it changed that cannot be kept."""
        ns = self.ip.user_ns
        with self._executing(shape) as ran:
            for part in compiled(self.ip, code, raw):
                self.cell_files.add(part.co_filename)
                exec(part, ns)
        return ran

    async def execute_awaiting(
        self, code: str, shape: namespace.Cell | None, raw: str | None = None
    ) -> Ran:
        """`execute` for code that awaits at its top level, as IPython runs such a cell
        (compiled with `PyCF_ALLOW_TOP_LEVEL_AWAIT`, each part awaited in the kernel's
        event loop)."""
        ns = self.ip.user_ns
        with self._executing(shape) as ran:
            for part in compiled(self.ip, code, raw, awaiting=True):
                self.cell_files.add(part.co_filename)
                result = eval(part, ns)  # the cell's own code, as IPython runs it
                if part.co_flags & inspect.CO_COROUTINE:
                    await result
        return ran

    @contextmanager
    def _executing(self, shape: namespace.Cell | None) -> Iterator[Ran]:
        """Around a step cell's code: what it changed, filled in once it ran (`execute`)."""
        ns = self.ip.user_ns
        watch = processstate.Watch()
        plain = _plain_values(shape, ns, self.kept)
        before = {name: _state_print(value) for name, value in plain.items()}
        names = self.names.of(ns)
        self.retries.began(ns, names, self._may_change(shape, ns, names))
        ran = Ran()
        last = ns.get("_")
        with cell_code(), displayed.capturing(self.ip) as outputs:
            try:
                yield ran
            except SystemExit as exc:  # sys.exit(0): the code ended here, as it asked
                if exc.code not in (0, None):
                    raise
                self.exited = exc
            finally:
                displayed.draw_figures()
        changed, left = watch.changed()
        if left:
            displayed.say(self.ip, f"will not survive a resume: {', '.join(left)}")
        if changed:
            ran.kernel[processstate.KEY] = changed
        if self.exited is not None:  # skipped later, it stops the notebook there again
            ran.kernel[EXITED] = {"args": list(self.exited.args)}  # sys.exit() or (0)
        if outputs:
            ran.kernel[displayed.KEY] = displayed.kept(outputs)
            if ns.get("_") is not last and any(o["msg_type"] == "execute_result" for o in outputs):
                ran.kernel[RESULT] = ns["_"]  # what `_` and `Out[N]` hold after a skip
        for name, value in plain.items():
            if ns.get(name) is value and before[name] not in (None, _state_print(value)):
                ran.changed[name] = value

    def _may_change(
        self, shape: namespace.Cell | None, ns: dict[str, Any], names: list[str]
    ) -> list[set[str]]:
        """The names a cell's code may change in place, each with the names it shares
        objects with: what it reads (all, when it may read any or calls the notebook's
        own functions), of the values a notebook made (`names`: the notebook's names)."""
        values = user_values(ns, names)
        reads = None if shape is None else shape.reads
        if reads is not None and any(namespace.calls_notebook_code(ns.get(n)) for n in reads):
            reads = None
        changeable = set(values) if reads is None else {n for n in reads if n in values}
        if not changeable:
            return []
        return sharing.Sharing(values).groups(changeable)

    def shared(
        self, given: Iterable[str], read: dict[str, Any]
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """After a step's code ran: the values earlier steps saved that share an object
        with what it gives back or may have changed (`view` of `arr`: a change through
        one is a change of the other), to be saved again when they changed; and the links
        that make the names it gives back share again on a skip (`sharing`)."""
        ns = self.ip.user_ns
        found = sharing.Sharing(user_values(ns, self.names.of(ns)))
        given = set(given)
        partners = found.partners(given | read.keys())
        changed = {n: ns[n] for n in partners if n in self.kept and n not in read}
        return changed, found.links(given | changed.keys() | read.keys())

    def give_back(
        self,
        step: str,
        values: dict[str, Any],
        kernel: Mapping[str, Any],
        unsaved: Mapping[str, str],
        shape: namespace.Cell | None,
        defined: bool,
    ) -> list[str]:
        """Put a skipped step's saved values, definitions and, from the kernel's part of
        its record, displayed outputs and process state back in the kernel; the names its
        definitions made again, and the process state it set."""
        ns = self.ip.user_ns
        values = dict(values)
        shown = kernel.get(displayed.KEY) or []
        if RESULT in kernel:
            displayed.show_again(self.ip, shown, kernel[RESULT])
        else:
            displayed.show_again(self.ip, shown)
        exited = kernel.get(EXITED)
        if exited:  # as the code raised it: `sys.exit()` says '', `sys.exit(0)` says '0'
            args = exited.get("args", [0]) if isinstance(exited, dict) else [0]
            self.exited = SystemExit(*args)
        links = kernel.get(sharing.KEY) or []
        process = processstate.restore(kernel.get(processstate.KEY) or {})
        process = [f"{part} state" for part in process]
        ns.update(values := namespace.living_globals(values, ns))
        self.given.update({name: id(value) for name, value in values.items()})
        shell = kind_of(self.ip)
        for name in unsaved:  # as given back by an earlier step: from before this one ran
            if name in ns and self.given.get(name) == id(ns[name]):
                del ns[name]
            if unsaved[name] == shell:  # `ip = get_ipython()`: this shell is that shell
                ns[name] = self.ip
        if shape is None:
            sharing.relink(ns, links)
            return process
        remade = (
            sorted(shape.defined)
            if defined
            else namespace.remake(shape, ns, step, compiler(self.ip))
        )
        for name in shape.defined & shape.others:  # rebound after: its definition is not it
            if name in values:
                ns[name] = values[name]
            else:
                ns.pop(name, None)
                remade.remove(name)
        sharing.relink(ns, links)
        return [name for name in remade if name not in values] + process

    def left_changed(self, step: str, shape: namespace.Cell | None) -> str:
        """What a failed attempt of `step` changed of the values earlier steps saved, said
        in a sentence ('' when nothing, or when telling failed: it must not hide the
        failure)."""
        ns = self.ip.user_ns
        if shape is not None:
            read = namespace.touched(shape, ns, self.kept, bound=True)
        else:
            read = {name: ns[name] for name in self.kept if name in ns}
        try:
            names = self.names.of(ns)
            return self.retries.failed(step, read, self.ip.execution_count, ns, names)
        except Exception:
            return ""

    def put_back(self, step: str, run: Run) -> None:
        """Before `step`'s cell runs again, undo what its failed attempt changed in place."""
        done, missed = self.retries.put_back(step, self.ip.user_ns, run.saved_values)
        if done:
            displayed.say(self.ip, f"put back as the failed attempt found them: {', '.join(done)}")
        if missed:
            displayed.say(
                self.ip,
                f"not put back: {'; '.join(missed)}. The cell starts from them as the "
                "failed attempt left them: restart the kernel and run all to start from the "
                "saved values",
            )


_SCALARS = (int, float, complex, str, bytes, bool, type(None), range, PurePath)
_DEFINED = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType)


def _alike(value: Any, depth: int = 0) -> bool:
    """Whether a plain cell's value is made alike each time its cell runs and cannot be
    changed in place: a definition, or an immutable value of immutable parts."""
    if isinstance(value, _DEFINED) or type(value) in _SCALARS:
        return True
    if type(value) in (tuple, frozenset) and depth < 4 and len(value) <= 1000:
        return all(_alike(item, depth + 1) for item in value)
    return False


_SHELL_NAMES = frozenset({"In", "Out", "get_ipython", "exit", "quit", "open"})


def user_values(ns: dict[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """The values of `names` (the kernel's names not starting with `_`: `UserNames`) a
    notebook made: not IPython's own (`In`), nor modules, functions and classes, which
    hold nothing to share."""
    return {
        name: value
        for name in names
        if name not in _SHELL_NAMES
        and not isinstance(value := ns[name], (types.ModuleType, type, types.FunctionType))
    }


def _plain_values(
    shape: namespace.Cell | None, ns: dict[str, Any], kept: set[str]
) -> dict[str, Any]:
    """The values a cell reads that plain cells made (no step saved them) and that it
    may change in place: not modules, functions or classes."""
    if shape is None or shape.reads is None:
        return {}
    return {
        name: ns[name]
        for name in shape.reads
        if name in ns
        and name not in kept
        and name not in shape.binds
        and not name.startswith("_")
        and not isinstance(ns[name], (types.ModuleType, type, types.FunctionType))
        and not callable(ns[name])
    }


PLAIN_LIMIT = 16 << 20  # bytes: a larger value of a plain cell is not watched per step


def _state_print(value: Any) -> str | None:
    """A fingerprint of a value's state, to tell whether a cell changed it in place: a
    random generator's state, an array's or frame's content, else its pickle's; None
    when there is none to take, or the value is too large to take one at every step
    (`PLAIN_LIMIT`: a big frame a plain cell loaded is read, not hashed, by each step)."""
    state = getattr(getattr(value, "bit_generator", value), "state", None)  # NumPy's
    if state is None and hasattr(value, "getstate"):  # random.Random
        try:
            state = value.getstate()
        except Exception:
            state = None
    try:
        if state is not None:
            return hashlib.sha256(pickle.dumps(state)).hexdigest()
        size = getattr(value, "nbytes", None)  # an array's
        if size is None and hasattr(value, "memory_usage"):  # a frame's or Series'
            size = int(value.memory_usage(index=True).sum())
        if size is not None and size > PLAIN_LIMIT:
            return None
        found = namespace.fingerprint(value)
        if found is not None:
            return found
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        return None if len(data) > PLAIN_LIMIT else hashlib.sha256(data).hexdigest()
    except Exception:
        return None
