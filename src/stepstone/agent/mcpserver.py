"""`stepstone mcp`: an MCP server over stdio, on the `mcp` SDK, that gives an agent the
same JSON as the command line (`actions`). It reads and records; it never runs notebook
code (`status` and `verify` do not run `cmd:` or `call:` checks again). Its changes are
commits that say `Stepstone-Via: mcp`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import StepstoneError
from . import actions

F = TypeVar("F", bound=Callable[..., Any])

INSTRUCTIONS = (
    "stepstone keeps a notebook's progress in a Git store. Loop: brief -> status -> act "
    "(answer, decide, resolve, rerun, fork) -> status. Every tool takes `run` (default: "
    "the store's only run) and returns the JSON `stepstone <tool> --json` prints."
)


def _told(tool: F) -> F:
    """A tool whose stepstone errors reach the agent as the tool's error message (what
    went wrong and what to do), not as a crash."""

    @functools.wraps(tool)
    def told(*args: Any, **kwargs: Any) -> Any:  # (its docstring, dedented, describes it)
        from mcp.server.mcpserver.exceptions import ToolError

        try:
            return tool(*args, **kwargs)
        except StepstoneError as exc:
            raise ToolError(str(exc)) from exc

    told.__doc__ = inspect.cleandoc(tool.__doc__ or "")
    return told  # type: ignore[return-value]


def make_server(repo: str | None = None) -> Any:
    """The MCP server for the store at `repo` (default: `STEPSTONE_REPO`, else
    `.stepstone` in the folder it is started in)."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("stepstone", instructions=INSTRUCTIONS, log_level="WARNING")

    @server.tool()
    @_told
    def status(run: str | None = None) -> dict[str, Any]:
        """Steps (verified, stale, pending, failed), evidence, decisions, unknowns,
        effects and the next action."""
        return actions.status(run, repo)

    @server.tool()
    @_told
    def brief(run: str | None = None) -> dict[str, Any]:
        """The hand-off brief: goal, where the run stands, the next command, open items."""
        return actions.brief(run, repo)

    @server.tool()
    @_told
    def log(run: str | None = None, step: str | None = None) -> list[dict[str, Any]]:
        """The run's commits, newest first (only one step's with `step`)."""
        return actions.log(run, repo, step)

    @server.tool()
    @_told
    def show(step: str, run: str | None = None) -> dict[str, Any]:
        """One step: state, record, evidence, what it read, outputs (type, shape, size,
        how to load them), the commit that recorded it, its effects."""
        return actions.show(run, repo, step)

    @server.tool()
    @_told
    def outputs(step: str, run: str | None = None) -> list[dict[str, Any]]:
        """The values a step saved, described without loading them."""
        return actions.outputs(run, repo, step)

    @server.tool()
    @_told
    def get_output(
        step: str, name: str, to: str | None = None, run: str | None = None
    ) -> dict[str, Any]:
        """Write saved value `name` of `step` to the file `to` (default: NAME.<format>
        in the server's folder, never over an existing file) in its stored format
        (.npy, Parquet, JSON, pickle), checked against its sha256; says where."""
        return actions.get_output(run, repo, step, name, to)

    @server.tool()
    @_told
    def verify(run: str | None = None) -> dict[str, Any]:
        """Every recorded step's evidence checked again now, read from Git (cmd: and
        call: checks are not run again: this server runs no code)."""
        return actions.verify(run, repo, recheck=False)

    @server.tool()
    @_told
    def answer(
        unknown: str, answer: str, why: str = "", revise: bool = False, run: str | None = None
    ) -> dict[str, Any]:
        """Close the open unknown `unknown` (U1...) with `answer`; the notebook's
        `%unknown` line that asked it is then not asked again. Another answer to an
        answered unknown needs `revise`."""
        return actions.answer(run, repo, unknown, answer, why, revise=revise, via="mcp")

    @server.tool()
    @_told
    def ask(question: str, run: str | None = None) -> dict[str, Any]:
        """Record an open question (asked again, it is the one already recorded)."""
        return actions.ask(run, repo, question, via="mcp")

    @server.tool()
    @_told
    def decide(
        key: str, value: str, why: str, revise: bool = False, run: str | None = None
    ) -> dict[str, Any]:
        """Decide `key`=`value` with its reason (`revise` to change one already made: it
        stands over the notebook's `%decide` line until that line is edited)."""
        return actions.decide(run, repo, key, value, why, revise=revise, via="mcp")

    @server.tool()
    @_told
    def resolve(
        key: str, happened: bool, receipt: str | None = None, why: str = "", run: str | None = None
    ) -> dict[str, Any]:
        """Settle an effect whose outcome was unknown: it did happen (give its
        `receipt`) or it did not (the next run performs it)."""
        return actions.resolve(
            run, repo, key, happened=happened, receipt=receipt, why=why, via="mcp"
        )

    @server.tool()
    @_told
    def rerun(
        step: str, why: str, downstream: bool = False, run: str | None = None
    ) -> dict[str, Any]:
        """Mark a step (and with `downstream` what depends on it) to run again at the
        next run of the notebook; its confirmed effects are not repeated."""
        return actions.rerun(run, repo, step, why, downstream=downstream, via="mcp")

    @server.tool()
    @_told
    def fork(run: str, at: str, new: str) -> dict[str, Any]:
        """A new run `new` whose history is `run`'s up to step `at` (a Git branch point),
        to try an alternative without losing `run`."""
        return actions.fork(run, repo, at, new, via="mcp")

    @server.tool()
    @_told
    def diff(run_a: str, run_b: str) -> dict[str, Any]:
        """What two runs recorded differently: steps, evidence, outputs, decisions,
        answers."""
        return actions.diff(run_a, run_b, repo)

    @server.resource("stepstone://brief", mime_type="text/markdown")
    def brief_resource() -> str:
        """The hand-off brief of the store's only run, in Markdown."""
        return actions.brief_text(None, repo)

    @server.resource("stepstone://runs/{run}/brief", mime_type="text/markdown")
    def run_brief(run: str) -> str:
        """A run's hand-off brief, in Markdown."""
        return actions.brief_text(run, repo)

    @server.resource("stepstone://runs/{run}/summary", mime_type="application/json")
    def run_summary(run: str) -> dict[str, Any]:
        """A run's summary: its status as JSON."""
        return actions.status(run, repo)

    return server


def serve(repo: str | None = None) -> None:
    """Serve over stdin and stdout until the client closes them."""
    make_server(repo).run("stdio")
