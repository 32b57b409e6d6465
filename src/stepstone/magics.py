"""The IPython magics: thin shells over the Python API (`%load_ext stepstone`)."""

from __future__ import annotations

import atexit
import os
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.display import Markdown, display

from . import cellargs, names
from .errors import StepstoneError
from .index import evidence_rows
from .models import PlannedStep
from .notebook import NOTEBOOK_ENV, choose_run, claim, goal_of, plan_from_notebook
from .run import Run, open_run
from .status import RunStatus, evidence_text
from .store import RUN_ENV, STORE_ENV, resolve_store_path


def _relative(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _usage(exc: StepstoneError) -> UsageError:
    return UsageError(str(exc))


@magics_class
class StepstoneMagics(Magics):
    """`%resume`, `%%step`, `%decide`, `%unknown`, `%%plan` and `%finish`."""

    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        self.run: Run | None = None

    # -- helpers ----------------------------------------------------------------

    @property
    def ip(self) -> Any:
        """The shell these magics are registered on."""
        return self.shell

    def _notebook_path(self) -> Path | None:
        for candidate in (
            os.environ.get(NOTEBOOK_ENV),
            self.ip.user_ns.get("__session__"),
            os.environ.get("JPY_SESSION_NAME"),
        ):
            if candidate and str(candidate).endswith(".ipynb") and Path(candidate).is_file():
                return Path(candidate).absolute()
        return None

    def _require_run(self) -> Run:
        if self.run is None or not self.run.driving:
            raise UsageError("no run is open: run %resume first (usually the first cell)")
        return self.run

    def _show(self, status: RunStatus) -> None:
        display({"text/plain": status.render_text(), "text/html": status.render_html()}, raw=True)

    # -- magics -----------------------------------------------------------------

    @line_magic
    def resume(self, line: str) -> None:
        """%resume [--run ID] [--repo DIR] [--steal REASON]

        Open the run (create it if new), read its latest commit, verify the
        recorded evidence and show every step's state and the next action.
        The run id defaults to STEPSTONE_RUN, then to the notebook's name;
        the store to STEPSTONE_REPO, then `.stepstone` in the current folder.
        With a remote, the run's lease is taken there; --steal takes a live one.
        """
        try:
            args = cellargs.parse_resume_line(line)
            notebook = self._notebook_path()
            run_id = args.run or os.environ.get(RUN_ENV)
            plan = plan_from_notebook(notebook) if notebook is not None else None
            if run_id is None and notebook is not None and plan is not None:
                run_id = choose_run(
                    resolve_store_path(args.repo),
                    names.from_filename(notebook.stem),
                    notebook,
                    plan,
                    default_store=not (args.repo or os.environ.get(STORE_ENV)),
                )
            if run_id is None:
                raise UsageError("cannot tell which run this is: write %resume --run ID")
            if self.run is not None:
                self.run.close()
                self.run = None
            steal = args.steal or os.environ.get("STEPSTONE_STEAL") or None
            run = open_run(run_id, repo=args.repo, workdir=Path.cwd(), steal=steal)
            try:
                status = self._open_plan(run, notebook, plan)
            except BaseException:
                run.close()
                raise
            self.run = run
        except StepstoneError as exc:
            raise _usage(exc) from exc
        self._show(status)

    def _open_plan(
        self, run: Run, notebook: Path | None, plan: list[PlannedStep] | None
    ) -> RunStatus:
        """Claim the run for the notebook and commit the notebook's plan; the status."""
        if notebook is not None and plan is not None:
            moved = claim(run, notebook)
            if moved:
                run.notes.append(moved)
            changes = run.set_plan(
                plan, mode="notebook", goal=goal_of(notebook), notebook=_relative(notebook)
            )
            if changes:
                run.notes.append(f"the notebook changed: {'; '.join(changes)}")
        elif run.info.plan_mode == "incremental":
            run.notes.append("the plan is incremental: steps are added as they are met")
        return run.status(namespace=self.ip.user_ns)

    @cell_magic
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
        try:
            changes = run.set_plan(steps, mode="explicit")
            status = run.status(namespace=self.ip.user_ns)
        except StepstoneError as exc:
            raise _usage(exc) from exc
        if changes:
            print("plan changed: " + "; ".join(changes))
        self._show(status)

    @cell_magic
    def step(self, line: str, cell: str) -> None:
        """%%step NAME [--check CHECK]... [--out VAR]... [--in VAR]... [--force]

        Run the cell as one step. While its recorded evidence verifies and its
        source is unchanged the cell is skipped and its --out variables are
        restored; otherwise it runs, its checks run, and the record is
        committed. CHECK is file:PATH, sha256:PATH=HEX, cmd:COMMAND,
        expr:EXPRESSION or call:NAME.
        """
        run = self._require_run()
        ns = self.ip.user_ns
        try:
            parsed = cellargs.parse_step_line(line)
            start = run.begin(
                parsed.name,
                checks=parsed.checks,
                inputs=parsed.inputs,
                outputs=parsed.outputs,
                source=cell,
                force=parsed.force,
                namespace=ns,
                was=parsed.was,
            )
        except StepstoneError as exc:
            raise _usage(exc) from exc
        label = f"step {start.planned.number} {parsed.name}"
        if start.skip and start.record is not None:
            ns.update(start.values)
            print(f"{label}: skipped, verified ({evidence_text(evidence_rows(start.record))})")
            return
        try:
            code = self.ip.transform_cell(cell)
            filename = self.ip.compile.cache(code)
            with run.running(start):
                exec(compile(code, filename, "exec"), ns)
        except BaseException as exc:
            run.fail(start, exc)
            raise
        try:
            values = {var: ns[var] for var in parsed.outputs if var in ns}
            record = run.confirm(start, values=values, namespace=ns)
        except StepstoneError as exc:
            raise _usage(exc) from exc
        print(f"{label}: confirmed ({evidence_text(evidence_rows(record))})")

    @line_magic
    def decide(self, line: str) -> None:
        """%decide KEY=VALUE --why REASON [--revise]

        Record a decision with its reason; read it with stepstone.decided(KEY).
        A resumed run does not reopen it: the same line again is a no-op, a
        different value needs --revise.
        """
        run = self._require_run()
        try:
            key, value, why, revise = cellargs.parse_decide_line(line)
            decision = run.decide(key, value, why, revise=revise)
        except StepstoneError as exc:
            raise _usage(exc) from exc
        print(f"decided {decision.key}={decision.value} ({decision.why})")

    @line_magic
    def unknown(self, line: str) -> None:
        """%unknown QUESTION  |  %unknown --resolve ID ANSWER

        Record an open question, or close one with its answer.
        """
        run = self._require_run()
        try:
            resolve_id, text = cellargs.parse_unknown_line(line)
            if resolve_id is None:
                item = run.unknown(text)
                if item.state == "open":
                    print(f"unknown {item.id} is open: {item.question}")
                else:
                    print(f"unknown {item.id} was answered: {item.answer} (not asked again)")
            else:
                item = run.resolve_unknown(resolve_id, text)
                print(f"unknown {item.id} resolved: {item.answer}")
        except StepstoneError as exc:
            raise _usage(exc) from exc

    @line_magic
    def finish(self, line: str) -> None:
        """%finish [--force]

        Write the summary from the records and archive the run (tag
        stepstone/<run>). Refuses while a step is not verified, an unknown is
        open or an effect is unresolved, unless --force.
        """
        run = self._require_run()
        try:
            text = run.finish(force=cellargs.parse_finish_line(line))
        except StepstoneError as exc:
            raise _usage(exc) from exc
        display(Markdown(text))

    def close(self) -> None:
        """Let go of the run."""
        if self.run is not None:
            self.run.close()
            self.run = None


_registered: dict[int, StepstoneMagics] = {}


def register(ipython: Any) -> None:
    """Register the magics on a shell (once)."""
    if id(ipython) in _registered:
        return
    magics = StepstoneMagics(ipython)
    ipython.register_magics(magics)
    from . import inputs  # lines ending in `?` stay magic lines, not help requests

    inputs.install(ipython)
    _registered[id(ipython)] = magics
    atexit.register(magics.close)  # a kernel shut down normally hands its lease back


def unregister(ipython: Any) -> None:
    """Release the run held by a shell's magics."""
    from . import inputs

    magics = _registered.pop(id(ipython), None)
    inputs.uninstall(ipython)
    if magics is not None:
        atexit.unregister(magics.close)
        magics.close()
