"""`stepstone mcp`: an MCP server over stdio, on the `mcp` SDK, that gives an agent every
action it needs to finish a notebook's task: read where the run stands, answer and
decide, read and edit the notebook's step cells, run the notebook (a progress
notification per step; cancelling it stops the running cell as Ctrl-C does), finish.

Each tool returns the JSON its command prints with `--json` (`actions`) as its
`structuredContent`, declared as its `outputSchema` from the models of
`model/shapes.py` (`stepstone schema` prints the same); a refusal is a tool error with
the command's message. Each tool says what it does to the world in its annotations.
Reading runs no notebook code (`status` and `verify` do not run `cmd:` or `call:`
checks again); only `run` does. Changes are commits that say `Stepstone-Via: mcp`
(`mcp run` for a run's).

The server answers for the folder it was started in (the notebook's, with its store
`.stepstone`, or the store `--repo` names), and for another folder a tool names
(`folder`). The brief, the summary, the status, the cells and the report of each run
are resources; a client that subscribes to one is told when the run moves (a commit, by
anyone) or its notebook changes. One prompt, `pick_up`, gives a fresh agent the brief
and the tools to use.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from mcp.server.subscriptions import InMemorySubscriptionBus, ResourceUpdated
from mcp_types import (
    CallToolResult,
    EmbeddedResource,
    ResourceLink,
    TextContent,
    TextResourceContents,
    ToolAnnotations,
)

from ..errors import StepstoneError
from ..model import events, shapes
from ..present.report.page import html_report
from ..run import Run
from ..settings import VIA_ENV, Settings, child_environment
from ..store import DEFAULT_STORE
from . import actions, compact, flatschema, moving, spelling
from .warm import Warm, signature

INSTRUCTIONS = """\
stepstone keeps a notebook's progress in a Git store: each `%%step` cell's completion is \
committed with its evidence, and a run of the notebook skips what still verifies.
Pick up a run: `brief` (or the prompt `pick_up`) -> `status` -> act -> `status`.
Act with tools only: `answer` an open question and `decide` a value (each says which steps \
read it and run again; a step reads an answer with `stepstone.answer("U1", default)` in its \
cell, a decision with `stepstone.decided("KEY")`); `show_cells`, `edit_step` and \
`edit_cell` to read and change the notebook's cells; `run` to execute the notebook (it \
resumes; progress per step; cancelling it stops the running cell, nothing is lost); \
`finish` once every step is verified and no question is open. `resolve` settles an effect \
in doubt, `rerun` marks a step to run again, `fork`/`diff` try an alternative, `report` \
gives a page for people.
Every tool takes `run` (default: the notebook's own run, else the store's only run) and \
`folder` (default: the folder the server started in). `push`, `pull`, `clone` and \
`handoff` move a run between machines (leases and fencing as the command line has them); \
`edit_cell` edits any cell. Only `repair` and `trust` are shell commands (`stepstone ...`)."""

READS = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
RECORDS = ToolAnnotations(  # one commit to the run; the same call again records nothing
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
MARKS = ToolAnnotations(  # one commit to the run each time
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)
WRITES = ToolAnnotations(  # a file in the work folder, replaced when named
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
)
SHARES = ToolAnnotations(  # the run's history to or from a remote: never over other work
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=True
)
EDITS = ToolAnnotations(  # the notebook, in place: inserting twice inserts two cells
    read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
)
RUNS = ToolAnnotations(  # the notebook's code: its files, and its effects (sent once each)
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=True
)

STOP_GRACE = 30.0  # seconds a cancelled run may take to stop its cell and record it
WATCH_EVERY = 0.5  # seconds between looks at the runs' tips, while anyone subscribes


class Place:
    """The folder and store a tool call is about: the server's, or the folder it names."""

    def __init__(self, repo: str | None, folder: Path) -> None:
        self.folder = folder
        chosen = repo or Settings.from_env().store
        self.repo = Path(chosen).absolute() if chosen else folder / DEFAULT_STORE

    def at(self, folder: str | None) -> tuple[str, str]:
        """(the store, the folder) for a call that names `folder` (None: the server's)."""
        if folder is None:
            return str(self.repo), str(self.folder)
        path = Path(os.path.normpath(self.folder / folder))  # absolute, or the server's
        return str(path / DEFAULT_STORE), str(path)


def _text(data: Any) -> list[Any]:
    return [TextContent(type="text", text=json.dumps(data, separators=(",", ":")))]


def _refused(exc: StepstoneError) -> CallToolResult:
    """A tool error with the command line's message (what went wrong, what to do)."""
    text = spelling.for_tools(str(exc))
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def _answered(data: Any, *, listed: bool = False) -> CallToolResult:
    structured = {"result": data} if listed else data
    return CallToolResult(content=_text(data), structured_content=structured)


def _told(
    call: Callable[[], Any], *, listed: bool = False, diverge: bool = False
) -> CallToolResult:
    """The result of `call` (the JSON its command prints), or its refusal; with
    `diverge`, a change to a copy that cannot take turns drives it as a new lineage."""
    try:
        with actions.diverging(diverge):
            return _answered(call(), listed=listed)
    except StepstoneError as exc:
        return _refused(exc)


def _with_tools(
    described: list[dict[str, Any]], step: str, run: str | None
) -> list[dict[str, Any]]:
    """Saved values as the MCP server describes them: `get` names the tool call."""
    for item in described:
        given = f", run={run!r}" if run else ""
        item["get"] = f"get_output(step={step!r}, name={item['name']!r}{given})"
    return described


def make_server(repo: str | None = None, folder: str | Path | None = None) -> Any:
    """The MCP server for the folder `folder` (default: the current one) and its store
    `repo` (default: `STEPSTONE_REPO`, else `.stepstone` in the folder)."""
    place = Place(repo, Path(folder or Path.cwd()).absolute())
    warm = Warm()
    bus = WatchedBus(place, {})
    one_run = anyio.Lock()  # a run waits for the one before it (a cancelled one, stopping)

    @asynccontextmanager
    async def watching(_: MCPServer) -> AsyncIterator[None]:
        async with anyio.create_task_group() as group:
            group.start_soon(_watch, bus)
            yield None
            group.cancel_scope.cancel()

    from importlib.metadata import version

    server = MCPServer(
        "stepstone",
        version=version("stepstone"),
        instructions=INSTRUCTIONS,
        log_level="WARNING",
        subscriptions=bus,
        lifespan=watching,
    )
    _legacy_subscriptions(server, bus)

    # -- reading -------------------------------------------------------------

    @server.tool(annotations=READS, title="Where the run stands")
    def status(
        run: str | None = None, folder: str | None = None, every: bool = False
    ) -> Annotated[CallToolResult, shapes.StatusShape]:
        """Steps (verified, stale and why, pending, failed), evidence, decisions, unknowns
        (open and answered), effects, notes (how the notebook changed since its plan was
        committed) and the next action, as the next run of the notebook will see it. Of
        a long run, the steps not verified and the last verified ones (`left_out` says
        what else; `every=true` lists every step)."""
        store, home = place.at(folder)
        return _told(
            lambda: compact.steps(
                warm.answer("status", run, store, home, _status), "status", every=every
            )
        )

    @server.tool(annotations=READS, title="Hand-off brief")
    def brief(
        run: str | None = None, folder: str | None = None, every: bool = False, task: str = ""
    ) -> Annotated[CallToolResult, shapes.BriefShape]:
        """The hand-off brief: goal, done, not done and why, decisions (with what revising
        each runs again), unknowns, effects in doubt, and the next tool to call
        (`next_tool`); with `task` (what you were asked to do), what the run offers for
        it (`for_task`). Of a long run, its last steps done and first not done (`left_out`
        says what else; `every=true` lists them all)."""
        store, home = place.at(folder)
        return _told(
            lambda: compact.brief(
                warm.answer("brief", run, store, home, lambda v: _brief(v, task), task),
                every=every,
            )
        )

    @server.tool(annotations=READS, title="History")
    def log(
        run: str | None = None,
        step: str | None = None,
        folder: str | None = None,
        limit: int = compact.LOG,
    ) -> Annotated[CallToolResult, shapes.LogShape]:
        """The run's commits, newest first (only one step's with `step`), each with how it
        came (`via`), its reason (`why`) and who made it (`by`); the newest `limit` of
        them (0: all)."""
        store, home = place.at(folder)
        return _told(
            lambda: compact.log(
                warm.answer("log", run, store, home, lambda v: actions.log_of(v, step), step),
                limit,
            ),
            listed=True,
        )

    @server.tool(annotations=READS, title="One step")
    def show(
        step: str, run: str | None = None, folder: str | None = None
    ) -> Annotated[CallToolResult, shapes.ShowShape]:
        """One step: state, record, evidence, what it read, outputs (type, shape, size,
        how to get and load them), the commit that recorded it, its effects."""
        store, home = place.at(folder)

        def shown(view: Run) -> dict[str, Any]:
            found = actions.show_of(view, step)
            _with_tools(found["outputs"], found["step"], run)
            return found

        return _told(lambda: warm.answer("show", run, store, home, shown, step))

    @server.tool(annotations=READS, title="A step's saved values")
    def outputs(
        step: str, run: str | None = None, folder: str | None = None
    ) -> Annotated[CallToolResult, shapes.OutputsShape]:
        """The values a step saved, described without loading them; `get` is the
        `get_output` call that writes one out."""
        store, home = place.at(folder)

        def described(view: Run) -> list[dict[str, Any]]:
            return _with_tools(actions.outputs_of(view, step), step, run)

        return _told(lambda: warm.answer("outputs", run, store, home, described, step), listed=True)

    @server.tool(annotations=WRITES, title="Write a saved value to a file")
    def get_output(
        step: str,
        name: str,
        to: str | None = None,
        run: str | None = None,
        folder: str | None = None,
    ) -> Annotated[CallToolResult, shapes.GotOutputShape]:
        """Write saved value `name` of `step` to the file `to` (default: NAME.<format> in
        the folder, never over an existing file) in its stored format (.npy, Parquet,
        JSON, pickle), checked against its sha256; says where."""
        store, home = place.at(folder)
        return _told(lambda: actions.get_output(run, store, step, name, to, home=home))

    @server.tool(annotations=READS, title="Check the evidence again")
    def verify(
        run: str | None = None, folder: str | None = None, every: bool = False
    ) -> Annotated[CallToolResult, shapes.VerifyShape]:
        """Every recorded step's evidence checked again now, read from Git (cmd: and
        call: checks are not run again: reading runs no code). Of a long run, the steps
        not verified and the last verified ones (`every=true` lists every step)."""
        store, home = place.at(folder)
        return _told(
            lambda: compact.steps(
                warm.answer(
                    "verify",
                    run,
                    store,
                    home,
                    lambda view: actions.verify_of(view, recheck=False),
                    cached=False,
                ),
                "verify",
                every=every,
            )
        )

    @server.tool(annotations=READS, title="The runs of the store")
    def runs(folder: str | None = None) -> Annotated[CallToolResult, shapes.RunsShape]:
        """The runs in the store: active or finished, steps confirmed, last activity."""
        store, home = place.at(folder)
        return _told(lambda: warm.runs(store, home), listed=True)

    @server.tool(annotations=READS, title="JSON shapes")
    def schema() -> Annotated[CallToolResult, shapes.Schemas]:
        """The JSON Schema of every record file and of every command's and tool's result
        (as `stepstone schema`)."""
        return _told(actions.schema)

    @server.tool(annotations=READS, title="Compare two runs")
    def diff(
        run_a: str, run_b: str, folder: str | None = None
    ) -> Annotated[CallToolResult, shapes.DiffShape]:
        """What two runs recorded differently: steps, evidence, outputs, decisions,
        answers."""
        store, home = place.at(folder)
        return _told(lambda: actions.diff(run_a, run_b, store, home=home))

    @server.tool(annotations=READS, title="The page for people")
    def report(
        run: str | None = None, folder: str | None = None
    ) -> Annotated[CallToolResult, shapes.ReportShape]:
        """The run's report, one self-contained HTML page for the people beside you, as a
        link to the resource `stepstone://runs/{run}/report` (read it to get the page);
        for another `folder` than the server's, the page itself (its resources are the
        server's folder's)."""
        store, home = place.at(folder)
        try:
            run_id, page = warm.answer(
                "report.html+id", run, store, home, lambda v: (v.id, html_report(v))
            )
        except StepstoneError as exc:
            return _refused(exc)
        uri = f"stepstone://runs/{run_id}/report"
        data = {"run": run_id, "uri": uri, "mime_type": "text/html", "size": len(page)}
        link: ResourceLink | EmbeddedResource = ResourceLink(
            type="resource_link",
            uri=uri,
            name=f"report of run {run_id}",
            mime_type="text/html",
            size=len(page.encode()),
        )
        if folder is not None and (store, home) != place.at(None):
            link = EmbeddedResource(
                type="resource",
                resource=TextResourceContents(uri=uri, mime_type="text/html", text=page),
            )
        return CallToolResult(content=[link, *_text(data)], structured_content=data)

    @server.tool(annotations=READS, title="The notebook's cells")
    def show_cells(
        run: str | None = None, notebook: str | None = None, folder: str | None = None
    ) -> Annotated[CallToolResult, shapes.CellsShape]:
        """The cells of the run's notebook (or `notebook`), in order: each one's number,
        type, source, the step it is and that step's state now."""
        store, home = place.at(folder)
        return _told(
            lambda: warm.maybe(
                "cells",
                run,
                store,
                home,
                lambda v: actions.cells_of(v, notebook, home),
                notebook,  # a notebook named: its file's stat tells an edit of it
                signature(Path(home or ".") / notebook) if notebook else None,
            )
        )

    # -- recording -----------------------------------------------------------

    @server.tool(annotations=RECORDS, title="Answer an open question")
    def answer(
        unknown: str,
        answer: str,
        why: str = "",
        revise: bool = False,
        run: str | None = None,
        folder: str | None = None,
        diverge: bool = False,
    ) -> Annotated[CallToolResult, shapes.AnswerShape]:
        """Close the open unknown `unknown` (U1...) with `answer`; the notebook's
        `%unknown` line that asked it is then not asked again. Says which steps read it
        and run again (`runs_again`), or, when none does, how a step reads it. Another
        answer to an answered unknown needs `revise`."""
        store, home = place.at(folder)
        return _told(
            lambda: actions.answer(
                run, store, unknown, answer, why, revise=revise, via="mcp", home=home
            ),
            diverge=diverge,
        )

    @server.tool(annotations=RECORDS, title="Ask a question")
    def ask(
        question: str, run: str | None = None, folder: str | None = None
    ) -> Annotated[CallToolResult, shapes.UnknownRecordShape]:
        """Record an open question (asked again, it is the one already recorded)."""
        store, home = place.at(folder)
        return _told(lambda: actions.ask(run, store, question, via="mcp", home=home))

    @server.tool(annotations=RECORDS, title="Decide a value")
    def decide(
        key: str,
        value: str,
        why: str,
        revise: bool = False,
        dry_run: bool = False,
        run: str | None = None,
        folder: str | None = None,
        diverge: bool = False,
    ) -> Annotated[CallToolResult, shapes.DecideShape]:
        """Decide `key`=`value` with its reason (`revise` to change one already made: it
        stands over the notebook's `%decide` line until that line is edited). Says which
        steps read it and run again; `dry_run` records nothing."""
        store, home = place.at(folder)
        return _told(
            lambda: actions.decide(
                run,
                store,
                key,
                value,
                why,
                revise=revise,
                dry_run=dry_run,
                via="mcp",
                home=home,
            ),
            diverge=diverge,
        )

    @server.tool(annotations=RECORDS, title="Settle an effect in doubt")
    def resolve(
        key: str,
        happened: bool,
        receipt: str | None = None,
        why: str = "",
        run: str | None = None,
        folder: str | None = None,
        diverge: bool = False,
    ) -> Annotated[CallToolResult, shapes.ResolvedEffectShape]:
        """Settle an effect whose outcome was unknown: it did happen (give its
        `receipt`) or it did not (the next run performs it)."""
        store, home = place.at(folder)
        return _told(
            lambda: actions.resolve(
                run,
                store,
                key,
                happened=happened,
                receipt=receipt,
                why=why,
                via="mcp",
                home=home,
            ),
            diverge=diverge,
        )

    @server.tool(annotations=MARKS, title="Mark a step to run again")
    def rerun(
        step: str,
        why: str,
        downstream: bool = False,
        run: str | None = None,
        folder: str | None = None,
        diverge: bool = False,
    ) -> Annotated[CallToolResult, shapes.RerunShape]:
        """Mark a step (and with `downstream` what depends on it) to run again at the
        next run of the notebook; its confirmed effects are not repeated."""
        store, home = place.at(folder)
        return _told(
            lambda: actions.rerun(
                run, store, step, why, downstream=downstream, via="mcp", home=home
            ),
            diverge=diverge,
        )

    @server.tool(annotations=MARKS, title="Fork a run")
    def fork(
        run: str, at: str, new: str, folder: str | None = None
    ) -> Annotated[CallToolResult, shapes.ForkShape]:
        """A new run `new` whose history is `run`'s up to step `at` (a Git branch point),
        to try an alternative without losing `run`."""
        store, _ = place.at(folder)
        return _told(lambda: actions.fork(run, store, at, new, via="mcp"))

    @server.tool(annotations=RECORDS, title="Finish the run")
    def finish(
        force: bool = False,
        run: str | None = None,
        folder: str | None = None,
        diverge: bool = False,
    ) -> Annotated[CallToolResult, shapes.FinishShape]:
        """Finish the run once every step is verified and no question or effect is open
        (`force` to finish anyway): its summary is committed, written to
        `<run>.summary.md` in its work folder (`file`), and the run tagged."""
        store, home = place.at(folder)
        return _told(
            lambda: actions.finish(run, store, force=force, via="mcp", home=home),
            diverge=diverge,
        )

    @server.tool(annotations=RECORDS, title="Reopen a finished run")
    def reopen(
        why: str, run: str | None = None, folder: str | None = None, diverge: bool = False
    ) -> Annotated[CallToolResult, shapes.ReopenShape]:
        """Reopen a finished run so that it can change again (the reason is recorded)."""
        store, home = place.at(folder)
        return _told(
            lambda: actions.reopen(run, store, why, via="mcp", home=home),
            diverge=diverge,
        )

    @server.tool(annotations=WRITES, title="Edit a step cell")
    def edit_step(
        source: str,
        step: str | None = None,
        after: str | None = None,
        run: str | None = None,
        notebook: str | None = None,
        folder: str | None = None,
    ) -> Annotated[CallToolResult, shapes.EditShape]:
        """Edit the run's notebook (or `notebook`) as a person would in Jupyter: replace
        the source of step `step`'s cell with `source` (given without its `%%step` line,
        the cell keeps its own), or insert a new step cell `source` (starting with its
        `%%step NAME` line) after step `after`. Written in one go, only if the notebook
        stays valid and its steps still read (else refused, nothing changed); says which
        steps the next `run` runs again."""
        store, home = place.at(folder)
        return _told(
            lambda: actions.edit_step(
                run, store, source, step=step, after=after, notebook=notebook, home=home
            )
        )

    @server.tool(annotations=EDITS, title="Edit any cell")
    def edit_cell(
        cell: int,
        source: str,
        insert: bool = False,
        run: str | None = None,
        notebook: str | None = None,
        folder: str | None = None,
    ) -> Annotated[CallToolResult, shapes.CellEditShape]:
        """Edit any cell of the run's notebook (or `notebook`) by its number from 1, as
        `show_cells` lists them: a plain cell, a `%decide` or `%unknown` line, a step.
        Replace cell `cell`'s source with `source`, or with `insert` add a code cell
        `source` after it (0: at the top). Written in one go, only if the notebook stays
        valid and its steps still read; says which steps the next `run` runs again."""
        store, home = place.at(folder)
        return _told(
            lambda: actions.edit_cell(
                run, store, source, cell=cell, insert=insert, notebook=notebook, home=home
            )
        )

    # -- moving the run between machines ------------------------------------------

    @server.tool(annotations=SHARES, title="Push the run to its remote")
    def push(
        run: str | None = None,
        remote: str | None = None,
        auto: bool | None = None,
        folder: str | None = None,
    ) -> Annotated[CallToolResult, shapes.PushShape]:
        """Push the run's history to the store's remote (`remote`: set it to this URL
        first), never over another copy's work; `auto` also pushes after every commit."""
        store, home = place.at(folder)
        return _told(lambda: moving.push(run, store, url=remote, auto=auto, home=home))

    @server.tool(annotations=SHARES, title="Pull the run from its remote")
    def pull(
        run: str | None = None, keep: str | None = None, folder: str | None = None
    ) -> Annotated[CallToolResult, shapes.PullShape]:
        """Bring the remote's history of the run here. When both copies advanced they are
        shown, not merged: `keep` (`local` or `remote`) says which becomes the run; the
        other history is kept on a ref."""
        store, home = place.at(folder)
        return _told(lambda: moving.pull(run, store, keep=keep, home=home))

    @server.tool(annotations=SHARES, title="Clone a store")
    def clone(
        url: str, directory: str | None = None, folder: str | None = None
    ) -> Annotated[CallToolResult, shapes.CloneShape]:
        """Clone a store from `url` into `directory` (default: `.stepstone` in the
        folder): every run's plan, records and artifacts, ready to resume."""
        _, home = place.at(folder)
        return _told(lambda: moving.clone(url, directory, home=home))

    @server.tool(annotations=SHARES, title="Hand the run off")
    def handoff(
        run: str | None = None, folder: str | None = None, remote: str | None = None
    ) -> Annotated[CallToolResult, shapes.HandoffShape]:
        """Push the run (to `remote`, set as the store's remote first, when given), let go
        of its lease, and give the brief and the commands that continue it on the next
        agent's machine."""
        store, home = place.at(folder)
        return _told(
            lambda: moving.handoff(run, store, via="mcp", home=home, tools=True, url=remote)
        )

    @server.tool(name="run", annotations=RUNS, title="Run the notebook")
    async def run_notebook(
        ctx: Context,
        run: str | None = None,
        notebook: str | None = None,
        parameters: dict[str, Any] | None = None,
        cells: bool | None = None,
        timeout: int | None = None,
        folder: str | None = None,
        diverge: bool = False,
    ) -> Annotated[CallToolResult, shapes.RanShape]:
        """Run the notebook headlessly, as `stepstone run` does: verified steps are
        skipped, the rest run; a progress notification per step. Cancelling the call stops
        the running cell as Ctrl-C does (it is recorded as failed and runs again next
        time; nothing done is lost). `parameters` as papermill's (a run of their own),
        `cells` runs every code cell as a step, `timeout` bounds a cell (seconds);
        `diverge` drives a copy whose original is gone (or went apart) as a new lineage."""
        store, home = place.at(folder)
        async with one_run:
            return await _run_once(
                ctx, run, notebook, parameters, cells, timeout, store, home, diverge
            )

    async def _run_once(
        ctx: Context,
        run: str | None,
        notebook: str | None,
        parameters: dict[str, Any] | None,
        cells: bool | None,
        timeout: int | None,
        store: str,
        home: str,
        diverge: bool = False,
    ) -> CallToolResult:
        try:
            argv, path = await anyio.to_thread.run_sync(
                lambda: actions.run_command(
                    run, store, notebook, parameters, cells, timeout, home=home
                )
            )
        except StepstoneError as exc:
            return _refused(exc)
        if diverge:
            argv.append("--diverge")
        return await _running(ctx, argv, path, store, home)

    # -- resources -----------------------------------------------------------

    def read(call: Callable[[], Any]) -> Any:
        try:
            return call()
        except StepstoneError as exc:
            raise ResourceError(str(exc)) from exc

    @server.resource("stepstone://brief", mime_type="text/markdown", title="Hand-off brief")
    def brief_resource() -> str:
        """The hand-off brief of the store's only run, in Markdown."""
        store, home = place.at(None)
        return str(read(lambda: warm.answer("brief.md", None, store, home, _markdown_brief)))

    @server.resource("stepstone://runs/{run}/brief", mime_type="text/markdown")
    def run_brief(run: str) -> str:
        """A run's hand-off brief, in Markdown."""
        store, home = place.at(None)
        return str(read(lambda: warm.answer("brief.md", run, store, home, _markdown_brief)))

    @server.resource("stepstone://runs/{run}/summary", mime_type="text/markdown")
    def run_summary(run: str) -> str:
        """A run's summary in Markdown: the one `finish` wrote, or what it would write now."""
        store, home = place.at(None)
        return str(
            read(lambda: warm.answer("summary.md", run, store, home, actions.summary_text_of))
        )

    @server.resource("stepstone://runs/{run}/status", mime_type="application/json")
    def run_status(run: str) -> str:
        """A run's status, as the `status` tool gives it."""
        store, home = place.at(None)
        return json.dumps(read(lambda: warm.answer("status", run, store, home, _status)))

    @server.resource("stepstone://runs/{run}/cells", mime_type="application/json")
    def run_cells(run: str) -> str:
        """The cells of a run's notebook, as the `show_cells` tool gives them."""
        store, home = place.at(None)
        found = read(
            lambda: warm.answer(
                "cells", run, store, home, lambda v: actions.cells_of(v, None, home), None
            )
        )
        return json.dumps(found)

    @server.resource("stepstone://runs/{run}/report", mime_type="text/html")
    def run_report(run: str) -> str:
        """A run's report: one self-contained HTML page."""
        store, home = place.at(None)
        return str(read(lambda: warm.answer("report.html", run, store, home, html_report)))

    # -- the prompt ----------------------------------------------------------

    @server.prompt(name="pick_up", title="Pick up this run")
    def pick_up(run: str | None = None, task: str | None = None) -> str:
        """Pick up this run: the hand-off brief (with `task`, what you were asked to do:
        what the run offers for it), and the tools that finish its task."""
        store, home = place.at(None)
        try:
            told = actions.brief_text(run, store, home=home, tools=True, task=task or "")
            said = spelling.for_tools(told)
        except StepstoneError as exc:
            said = f"(no brief: {exc}. A store is brought here with the tool `clone(url=...)`;"
            said += " the notebook's project goes in the same folder.)"
        return PICK_UP.format(brief=said)

    _flatten_output_schemas(server)
    return server


def _flatten_output_schemas(server: MCPServer) -> None:
    """Give each tool's `outputSchema` flat (`flatschema`): a client validates a long
    run's answer in half the time. The SDK keeps a tool's schema as a cached property;
    where it does not, the schemas stay as pydantic made them."""
    for tool in server._tool_manager.list_tools():
        schema = tool.output_schema
        if schema is not None and "output_schema" in vars(tool):
            vars(tool)["output_schema"] = flatschema.flat(schema)


def _markdown_brief(view: Run) -> str:
    return spelling.for_tools(actions.brief_text_of(view, tools=True))


def _status(view: Run) -> dict[str, Any]:
    return spelling.status_for_tools(actions.status_of(view))


def _brief(view: Run, task: str = "") -> dict[str, Any]:
    return spelling.status_for_tools(actions.brief_of(view, task))


PICK_UP = """\
You are picking up a notebook's task that someone else started; its progress is kept in \
a Git store by stepstone, and the tools of this server are all you need (no shell).

{brief}
How to go on, with the tools:
1. `status` says each step's state and why; `show_cells` shows the notebook's cells.
2. Settle what is asked: `answer` an open question, `decide` a value. Each says which steps \
read it and run again; when none does, make a step read it (`stepstone.answer("U1", \
default)`, `stepstone.decided("KEY")`) with `edit_step`.
3. `run` executes the notebook: verified steps are skipped, the others run (a progress \
notification per step). A failed step: `show` it, fix its cell with `edit_step`, `run` again.
4. When every step is verified and nothing is open, `finish` (the summary: `file`).
Every change is a commit: `log` shows them (a cell edited with `edit_step` is recorded
by the next `run`, in its plan commit). Revise a decision (`decide` with `revise=true` and \
a reason) when the task asks for it: the brief says which steps each revision runs again.
"""


async def _running(
    ctx: Context, argv: list[str], notebook: Path, store: str, home: str
) -> CallToolResult:
    """Run `argv` (`stepstone run ...`) in `home`, reading the run's typed events as it
    goes (`--events`: a progress notification per step it ends, the run it opened, how
    it ended); cancelled, it is stopped as Ctrl-C stops it (SIGINT: the running cell is
    interrupted and recorded, no further cell starts) and waited for."""
    said: list[str] = []
    steps: list[dict[str, Any]] = []
    opened: list[events.RunOpened] = []
    ended: list[events.RunEnded] = []
    scratch = Path(tempfile.mkdtemp(prefix="stepstone-mcp-run-"))
    channel = events.Tail(scratch / "events.jsonl")
    planned = [0]

    async def heard(line: str) -> None:
        said.append(line)

    async def told() -> None:
        for event in channel.read():
            if isinstance(event, events.RunOpened):
                opened.append(event)
                planned[0] = event.steps
                await ctx.report_progress(0, event.steps, f"running as run {event.run}")
            elif isinstance(event, events.StepEnded):
                of = planned[0] or event.number
                steps.append(
                    {"number": event.number, "of": of, "name": event.name, "outcome": event.outcome}
                )
                await ctx.report_progress(event.number, of, f"{event.name}: {event.outcome}")
            elif isinstance(event, events.RunEnded):
                ended.append(event)

    async def follow(process: Any) -> None:
        while process.returncode is None:
            await told()
            await anyio.sleep(0.1)

    process = await anyio.open_process(
        [*argv, "--events", str(channel.path)],
        cwd=home,
        env=child_environment({VIA_ENV: "mcp run"}),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(_lines, process.stderr, heard)
            group.start_soon(_lines, process.stdout, heard)
            group.start_soon(follow, process)
            code = await process.wait()
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True):
            await _stop(process)
        raise
    finally:
        if process.returncode is None:  # an error of ours, not a cancellation
            with anyio.CancelScope(shield=True):
                await _stop(process)
        await told()
        shutil.rmtree(scratch, ignore_errors=True)
    last = ended[-1] if ended else None
    message = last.message if last is not None else (said[-1] if said else "")
    if last is not None and last.outcome == "refused" and not opened:  # nothing changed
        return _refused(StepstoneError(message))
    outcome = _OUTCOMES.get(last.outcome if last is not None else "", "failed")
    run_id = last.run if last is not None and last.run else (opened[-1].run if opened else None)
    status = None
    if run_id:
        try:
            status = await anyio.to_thread.run_sync(
                lambda: actions.status(run_id, store, home=home)
            )
        except StepstoneError:
            status = None
    data = {
        "run": run_id,
        "notebook": str(notebook),
        "executed": str(notebook.with_name(f"{notebook.stem}.out.ipynb")),
        "exit_code": code,
        "outcome": outcome,
        "message": message,
        "steps": steps,
        "said": said,
        "status": status,
    }
    return _answered(data)


# how a run ended (`RunEnded.outcome`), as the `run` tool says it
_OUTCOMES = {
    "ok": "done",
    "exited": "done",
    "not done": "not done",
    "interrupted": "interrupted",
    "failed": "failed",
    "died": "failed",
    "refused": "failed",
}


async def _lines(stream: Any, heard: Callable[[str], Any]) -> None:
    """Each line `stream` gives, to `heard`, until it ends."""
    if stream is None:
        return
    pending = b""
    async for chunk in stream:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            await heard(line.decode(errors="replace").rstrip("\r"))
    if pending:
        await heard(pending.decode(errors="replace"))


async def _stop(process: Any) -> None:
    """Stop `stepstone run` as Ctrl-C does and wait for it (it records the interrupted
    step); killed only if it has not stopped within `STOP_GRACE`."""
    if process.returncode is None:
        process.send_signal(signal.SIGINT)

    async def drained(line: str) -> None:
        return None

    with anyio.move_on_after(STOP_GRACE):
        async with anyio.create_task_group() as group:
            group.start_soon(_lines, process.stderr, drained)
            group.start_soon(_lines, process.stdout, drained)
            await process.wait()
    if process.returncode is None:
        process.kill()
        await process.wait()


# -- telling subscribers when a run moves ----------------------------------------


def _uris(run: str, only: bool) -> list[str]:
    found = [f"stepstone://runs/{run}/{part}" for part in RESOURCES]
    return [*found, "stepstone://brief"] if only else found


RESOURCES = ("brief", "summary", "status", "cells", "report")


def _looks(place: Place) -> dict[str, tuple[Any, ...]]:
    """What a subscriber's resources depend on, by run: its tip, and its notebook's
    modification time and size."""
    from ..store import GitStore

    try:
        store = GitStore(str(place.repo), create=False)
    except StepstoneError:
        return {}
    found: dict[str, tuple[Any, ...]] = {}
    notebooks = {p: p.stat() for p in place.folder.glob("*.ipynb")}
    said = tuple(sorted((p.name, s.st_mtime_ns, s.st_size) for p, s in notebooks.items()))
    for run in store.refs.runs():
        found[run] = (store.refs.tip(run), said)
    return found


def _looked(place: Place, before: dict[str, tuple[Any, ...]] | None) -> dict[str, tuple[Any, ...]]:
    try:
        return _looks(place)
    except Exception:  # a store being made or moved: look again later
        return before or {}


class WatchedBus(InMemorySubscriptionBus):
    """The SDK's bus of events, knowing whether anyone listens: the runs are looked at
    only then. The first subscriber's arrival takes the first look at once (before its
    subscription is acknowledged), so that a commit right after it is told."""

    def __init__(self, place: Place, legacy: dict[Any, set[str]]) -> None:
        super().__init__()
        self.place = place
        self.legacy = legacy  # the 2025 way (resources/subscribe): session -> uris
        self.listeners = 0
        self.seen: dict[str, tuple[Any, ...]] | None = None  # the last look, while listened to

    def listened(self) -> bool:
        return self.listeners > 0 or any(self.legacy.values())

    def arrived(self) -> None:
        """A subscriber arrived: the look to compare with, unless one is kept already."""
        if self.seen is None:
            self.seen = _looked(self.place, None)

    def subscribe(self, listener: Callable[[Any], None]) -> Callable[[], None]:
        self.arrived()
        unsubscribe = super().subscribe(listener)
        self.listeners += 1
        gone = False

        def once() -> None:
            nonlocal gone
            if not gone:
                gone = True
                self.listeners -= 1
            unsubscribe()

        return once


async def _watch(bus: WatchedBus) -> None:
    """Publish `resources/updated` for a run's resources whenever its tip moves (a
    commit, by this server, a notebook's kernel or a command) or a notebook of the
    folder changes, while anyone listens."""
    while True:
        await anyio.sleep(WATCH_EVERY)
        if not bus.listened():
            bus.seen = None  # looked at afresh when the next subscriber arrives
            continue
        seen = bus.seen
        now = await anyio.to_thread.run_sync(_looked, bus.place, seen)
        if seen is not None:
            moved = [run for run in now if now[run] != seen.get(run)]
            for run in moved:
                for uri in _uris(run, only=len(now) == 1):
                    await bus.publish(ResourceUpdated(uri=uri))
                    for session, uris in list(bus.legacy.items()):
                        if uri not in uris:
                            continue
                        try:
                            await session.send_resource_updated(uri)
                        except Exception:  # that client is gone
                            bus.legacy.pop(session, None)
        bus.seen = now


def _legacy_subscriptions(server: MCPServer, bus: WatchedBus) -> None:
    """Serve `resources/subscribe` for clients of the 2025 protocol versions (newer ones
    use `subscriptions/listen`, which the SDK serves from the same events): a subscribed
    session is told of every change of a run's resources."""
    from mcp_types import EmptyResult, SubscribeRequestParams, UnsubscribeRequestParams

    async def subscribe(ctx: Any, params: SubscribeRequestParams) -> EmptyResult:
        bus.arrived()
        bus.legacy.setdefault(ctx.session, set()).add(str(params.uri))
        return EmptyResult()

    async def unsubscribe(ctx: Any, params: UnsubscribeRequestParams) -> EmptyResult:
        bus.legacy.get(ctx.session, set()).discard(str(params.uri))
        return EmptyResult()

    lowlevel = server._lowlevel_server
    lowlevel.add_request_handler("resources/subscribe", SubscribeRequestParams, subscribe)
    lowlevel.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, unsubscribe)


def serve(repo: str | None = None) -> None:
    """Serve over stdin and stdout until the client closes them."""
    make_server(repo).run("stdio")
