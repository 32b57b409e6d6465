"""The IPython magics: thin shells over the Python API (`%load_ext stepstone`)."""

from __future__ import annotations

import atexit
import functools
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class, no_var_expand
from IPython.display import Markdown, display

from ..errors import StepstoneError
from ..model.events import Refused
from ..notebook import cellargs
from ..notebook.notebook_plan import (
    refuse_to_leave_out,
)
from ..present import render, render_cells
from ..rules.status import RunStatus
from ..run import Run
from ..settings import Settings
from . import clients, displayed, everycell
from .kernelsession import FROM_CELL, KernelSession

M = TypeVar("M", bound=Callable[..., Any])


def _usage_errors(magic: M) -> M:
    """Show a `StepstoneError` as a one-line `UsageError`, as IPython shows bad input;
    every magic is wrapped in this. What a `%%step` cell's own code raised goes on as
    it is (see `_cell_code`)."""

    @functools.wraps(magic)
    def wrapper(self: StepstoneMagics, *args: Any, **kwargs: Any) -> Any:
        try:
            return magic(self, *args, **kwargs)
        except StepstoneError as exc:
            if getattr(exc, FROM_CELL, False):
                raise
            self.session.emit(Refused(error=type(exc).__name__, message=str(exc)))
            raise UsageError(str(exc)) from exc

    return wrapper  # type: ignore[return-value]


def _options(magic: str) -> Callable[[M], M]:
    """Give a magic its `%magic?` help from the parser that reads its line (`cellargs`),
    after the first line of its docstring."""

    def document(method: M) -> M:
        summary = (method.__doc__ or "").strip().splitlines()[:1]
        method.__doc__ = "\n\n".join([*summary, cellargs.help_text(magic)])
        return method

    return document


@magics_class
class StepstoneMagics(Magics):
    """`%resume`, `%%step`, `%decide`, `%unknown`, `%%plan` and `%finish`."""

    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        self.session = KernelSession(shell)  # the kernel-side state; these are its shell
        self.every = everycell.EveryCell()  # `%resume --cells`: each cell runs as its step

    # -- helpers ----------------------------------------------------------------

    @property
    def ip(self) -> Any:
        """The shell these magics are registered on."""
        return self.shell

    def _notebook_path(self, settings: Settings) -> Path | None:
        return clients.notebook_of(self.ip.user_ns, settings=settings)

    def _require_run(self) -> Run:
        if self.session.run is None or not self.session.run.driving:
            raise UsageError("no run is open: run %resume first (usually the first cell)")
        return self.session.run

    def _show(self, status: RunStatus) -> None:
        display(render.status_bundle(status), raw=True, metadata={displayed.CARD: {"status": 1}})

    # -- magics -----------------------------------------------------------------

    @line_magic
    @_usage_errors
    @_options("resume")
    def resume(self, line: str) -> None:
        """Open the run, verify its evidence and show where it stands."""
        settings = Settings.from_env()
        args = cellargs.parse_resume_line(line)
        resumed = self.session.resume(args, settings, self._notebook_path(settings), self.every)
        self._show(resumed.status)
        if resumed.giving_back:
            displayed.say(self.ip, resumed.giving_back)

    @cell_magic
    @_usage_errors
    def plan(self, line: str, cell: str) -> None:
        """%%plan

        An explicit plan as YAML or JSON: a list of step names, or of
        mappings with `name`, `checks`, `inputs`, `outputs`.
        """
        import yaml

        run = self._require_run()
        try:
            steps = yaml.safe_load(cell)
        except yaml.YAMLError as exc:
            raise UsageError(f"%%plan: not YAML or JSON ({exc})") from exc
        if not isinstance(steps, list):
            raise UsageError("%%plan: write a list of steps (names or mappings with a name)")
        changes = run.set_plan(steps, mode="explicit")
        status = run.status(namespace=self.ip.user_ns)
        if changes:
            displayed.say(self.ip, "plan changed: " + "; ".join(changes))
        self._show(status)

    @cell_magic
    @no_var_expand  # the line as the saved notebook has it, which gives the plan its names
    @_usage_errors
    @_options("step")
    def step(self, line: str, cell: str) -> None:
        """Run the cell as one step, or skip it while its evidence verifies."""
        _at_once(self._step(line, cell, awaits=False))

    async def step_awaiting(self, line: str, cell: str) -> None:
        """`%%step` of a cell whose code awaits at its top level (`await ...`, as IPython
        runs a plain cell): `inputs.rewrite` makes such a cell await this."""
        try:
            await self._step(line, cell, awaits=True)
        except StepstoneError as exc:
            if getattr(exc, FROM_CELL, False):
                raise
            self.session.emit(Refused(error=type(exc).__name__, message=str(exc)))
            raise UsageError(str(exc)) from exc

    async def _step(self, line: str, cell: str, *, awaits: bool) -> None:
        run = self._require_run()
        spec = cellargs.parse_step_line(line)
        if (
            self.session.cell_at
            and spec.name not in self.session.cell_at
            and spec.name not in run.steps.names
        ):
            raise UsageError(  # JupyterLab runs what you see; the plan is the saved file's
                f"step {spec.name!r} is not in {run.info.notebook or 'the notebook'} as last "
                f"saved: save the notebook, then run %resume again (it reads the plan from "
                f"the saved file)"
            )
        await self.session.step(spec, cell, awaits=awaits, shown=_Card(self.ip))

    @line_magic
    @_usage_errors
    @_options("decide")
    def decide(self, line: str) -> None:
        """Record a decision with its reason; a resumed run does not reopen it."""
        run = self._require_run()
        key, value, why, revise, dry_run = cellargs.parse_decide_line(line)
        if dry_run:  # says what the line would meet, as the line would
            seen = run.preview_decision(key, value, why, revise=revise, line=True)
            if seen.standing is not None:
                displayed.say(self.ip, render.decision_standing(seen.standing, value))
            else:
                preview = render.decision_preview(
                    key, seen.was, value, seen.runs_again, seen.new_reason
                )
                displayed.say(self.ip, preview)
            return
        was, readers = run.revising(key, value)
        decided = run.decide(key, value, why, revise=revise, line=True)
        if decided.value != value:  # revised outside the notebook over this very line
            displayed.say(self.ip, render.decision_standing(decided, value))
            return
        displayed.say(self.ip, render.decision(decided, was=was, readers=readers))

    @line_magic
    @_usage_errors
    @_options("unknown")
    def unknown(self, line: str) -> None:
        """Record an open question, or close one with its answer."""
        run = self._require_run()
        resolve_id, text = cellargs.parse_unknown_line(line)
        if resolve_id is None:
            displayed.say(self.ip, render.unknown(run.unknown(text)))
        else:
            displayed.say(
                self.ip, render.unknown(run.resolve_unknown(resolve_id, text), resolved=True)
            )

    @line_magic
    @_usage_errors
    @_options("finish")
    def finish(self, line: str) -> None:
        """Write the run's summary from its records and archive it."""
        run = self._require_run()
        force = cellargs.parse_finish_line(line)
        if not force:
            refuse_to_leave_out(run)
        display(Markdown(run.finish(force=force)))

    def close(self) -> None:
        """Let go of the run."""
        if self.session.run is not None:
            self.session.run.close()
            self.session.run = None


def _at_once(step: Coroutine[Any, Any, None]) -> None:
    """Run a step that awaits nothing to its end, here and now (as IPython's own
    `_pseudo_sync_runner` runs a cell that needs no event loop)."""
    try:
        step.send(None)
    except StopIteration:
        return
    step.close()
    raise RuntimeError("a %%step cell that awaits ran without an event loop")


class _Card:
    """A step cell's card: put up as it starts, replaced by how it ended (in Jupyter; in
    a terminal, its text once it ended)."""

    def __init__(self, ip: Any) -> None:
        self.ip = ip
        self.card: displayed.Card | None = None

    @property
    def started(self) -> bool:
        return self.card is not None

    def began(self, number: int, name: str) -> None:
        self.card = displayed.Card(self.ip, render_cells.running(number, name))

    def ended(self, outcome: render_cells.CellOutcome) -> None:
        (self.card or displayed.Card(self.ip, {})).end(render_cells.bundle(outcome))


_registered: dict[int, StepstoneMagics] = {}


async def step_awaiting(ipython: Any, line: str, cell: str) -> None:
    """The `%%step` cell of `ipython` whose code awaits (see `inputs.rewrite`)."""
    await _registered[id(ipython)].step_awaiting(line, cell)


def _cell_errors(magics: StepstoneMagics) -> Callable[..., None]:
    """An IPython handler for what a cell's code raised: a step cell's traceback starts at
    its own code, as a plain cell's does (not in the magic that runs it); a `NameError`
    of a name a step skipped on resume could not give back says so and what to do."""

    def handler(
        shell: Any, etype: type, value: BaseException, tb: Any, tb_offset: Any = None
    ) -> None:
        if isinstance(value, NameError):
            hint = magics.session.unrestored.hint(getattr(value, "name", None) or "")
            if hint is not None:
                if hasattr(value, "add_note"):
                    value.add_note(hint)
                else:  # Python 3.10
                    value.args = (f"{value}\n{hint}",)
        found, files = tb, magics.session.cell_files
        while found is not None and found.tb_frame.f_code.co_filename not in files:
            found = found.tb_next
        if found is None and isinstance(value, SyntaxError):
            shell.showsyntaxerror()  # the cell's own code does not compile: as for a plain cell
            return
        if found is not None and not getattr(value, FROM_CELL, False):
            tb, tb_offset = found, 0
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset, running_compiled_code=True)

    return handler


def register(ipython: Any) -> None:
    """Register the magics on a shell (once)."""
    if id(ipython) in _registered:
        return
    magics = StepstoneMagics(ipython)
    ipython.register_magics(magics)
    from . import inputs  # lines ending in `?` stay magic lines, not help requests

    inputs.install(ipython)
    if not ipython.custom_exceptions:  # a handler the user set stays theirs
        ipython.set_custom_exc((Exception,), _cell_errors(magics))
    _registered[id(ipython)] = magics
    atexit.register(magics.close)  # a kernel shut down normally hands its lease back


def unregister(ipython: Any) -> None:
    """Release the run held by a shell's magics."""
    from . import inputs

    magics = _registered.pop(id(ipython), None)
    inputs.uninstall(ipython)
    if ipython.custom_exceptions == (Exception,):
        ipython.set_custom_exc((), None)
        ipython.custom_exceptions = ()
    if magics is not None:
        everycell.uninstall(ipython, magics.every)
        atexit.unregister(magics.close)
        magics.close()
