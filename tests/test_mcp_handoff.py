"""Issue 38: an agent that knows only `stepstone mcp` finishes a notebook's task. The
MCP SDK's own client talks to the server over stdio; the store is received by
`git clone --bare` beside its notebook; Git, the kernel and the files are real.
Every result is checked against the outputSchema its tool declares."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest
from conftest import clean_env, git
from conftest import stepstone_cli as cli
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.subscriptions import ResourceUpdated

ROOT = Path(__file__).resolve().parents[1]

TOOLS = {
    "status", "brief", "log", "show", "outputs", "get_output", "verify", "runs", "schema",
    "diff", "report", "show_cells", "answer", "ask", "decide", "resolve", "rerun", "fork",
    "finish", "reopen", "edit_step", "run", "edit_cell", "push", "pull", "clone", "handoff",
}  # fmt: skip
READING = {"status", "brief", "log", "show", "outputs", "verify", "runs", "schema", "diff"}
READING |= {"report", "show_cells"}

REPORT = """\
import json, pathlib, stepstone
threshold = float(stepstone.decided("threshold"))
currency = stepstone.answer("U1", "unknown currency")
summary = json.loads(pathlib.Path("data/summary.json").read_text())
flagged = sorted(t for t, s in summary.items() if s["last"] > threshold)
pathlib.Path("out").mkdir(exist_ok=True)
lines = ["# Price report", "", f"threshold: {threshold}", f"currency: {currency}", ""]
lines += [f"- {t}: last {s['last']}" + (" (flagged)" if t in flagged else "")
          for t, s in sorted(summary.items())]
pathlib.Path("out/report.md").write_text("\\n".join(lines) + "\\n")
"""

PAUSE = """\
%%step pause
import pathlib, time
pathlib.Path("started").write_text("yes")
while pathlib.Path("hold").exists():  # the test holds the step here, to cancel it
    time.sleep(0.05)
"""


@pytest.fixture
def first_folder(tmp_path: Path) -> Path:
    """Person A's folder: the quickstart, run once by `stepstone run` (U1 left open).
    One a test: the copies of a store on one machine take turns (run/copies.py), so two
    tests' clones of one store would take in each other's history."""
    folder = tmp_path / "person-a"
    folder.mkdir()
    shutil.copy(ROOT / "notebooks" / "quickstart.ipynb", folder)
    config = str(tmp_path / "config-a")
    done = cli("run", "quickstart.ipynb", cwd=folder, XDG_CONFIG_HOME=config)
    assert done.returncode == 0, done.stderr
    return folder


def received(first: Path, where: Path) -> Path:
    """Person B's folder: the notebook, beside the store received by `git clone --bare`."""
    where.mkdir()
    shutil.copy(first / "quickstart.ipynb", where)
    git("clone", "-q", "--bare", str(first / ".stepstone"), str(where / ".stepstone"), cwd=where)
    return where


class Agent:
    """The client side of one MCP session: each call's result checked against the
    outputSchema its tool declares, and kept."""

    def __init__(self, client: Client, tools: dict[str, Any]) -> None:
        self.client = client
        self.tools = tools
        self.called: list[str] = []

    async def call(self, tool: str, /, **arguments: Any) -> Any:
        """The tool's structuredContent (`{"result": [...]}` unwrapped), or {"error": ...}."""
        return await self.call_with(tool, arguments)

    async def call_with(self, tool: str, arguments: dict[str, Any], progress: Any = None) -> Any:
        result = await self.client.call_tool(tool, arguments, progress_callback=progress)
        if result.is_error:
            assert result.structured_content is None
            return {"error": result.content[0].text}
        found = result.structured_content
        jsonschema.validate(found, self.tools[tool].output_schema)
        self.called.append(tool)
        return found["result"] if set(found) == {"result"} else found


def session(folder: Path, script: Callable[[Agent], Awaitable[Any]]) -> Any:
    """Run `script(agent)` against `stepstone mcp` started in `folder`."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "stepstone", "mcp"], cwd=str(folder), env=clean_env()
    )

    async def main() -> Any:
        async with Client(params, read_timeout_seconds=180) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            return await script(Agent(client, tools))

    return anyio.run(main)


def refs(store: Path) -> str:
    """The store's runs and their tags, with their commits (a driver opened on a cloned
    store notes the copy under refs/stepstone/copies: no change to a run)."""
    return git(
        "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads", "refs/tags", cwd=store
    )


@pytest.mark.kernel
def test_an_agent_finishes_a_received_run_through_mcp_tools_alone(
    first_folder: Path, tmp_path: Path
) -> None:
    folder = received(first_folder, tmp_path / "person-b")
    (folder / "hold").touch()
    seen: dict[str, Any] = {}
    progress: dict[str, list[tuple[float, float | None, str | None]]] = {"first": [], "second": []}

    async def agent(me: Agent) -> None:
        seen["status"] = await me.call("status")
        seen["answer"] = await me.call("answer", unknown="U1", answer="EUR", why="vendor sheet")
        seen["cells"] = await me.call("show_cells")
        seen["edit"] = await me.call("edit_step", step="report", source=REPORT)
        seen["edited"] = await me.call("status")
        seen["insert"] = await me.call("edit_step", after="summarise", source=PAUSE)

        async def first(done: float, total: float | None, said: str | None) -> None:
            progress["first"].append((done, total, said))

        with anyio.CancelScope() as scope:  # cancelled while the step `pause` runs

            async def cancel_once_started() -> None:
                while not (folder / "started").exists():
                    await anyio.sleep(0.05)
                # the server reads the run's events every 0.1 s: the step before
                # `pause` is told before the call is cancelled
                with anyio.move_on_after(10):
                    while len(progress["first"]) < 3:
                        await anyio.sleep(0.05)
                scope.cancel()

            async with anyio.create_task_group() as group:
                group.start_soon(cancel_once_started)
                seen["cancelled"] = await me.call_with("run", {}, first)
        (folder / "hold").unlink()
        seen["stopped"] = await me.call("run", notebook="nosuch.ipynb")  # waits for it
        seen["after_cancel"] = await me.call("status")

        async def second(done: float, total: float | None, said: str | None) -> None:
            progress["second"].append((done, total, said))

        seen["ran"] = await me.call_with("run", {}, second)
        seen["brief"] = await me.call("brief")
        seen["finish"] = await me.call("finish")
        seen["log"] = await me.call("log")
        seen["runs"] = await me.call("runs")

    session(folder, agent)

    status = seen["status"]
    assert [u["id"] for u in status["unknowns"] if u["state"] == "open"] == ["U1"]
    assert [s["state"] for s in status["steps"]] == ["stale"] * 3  # its files are not here
    why = {s["name"]: s["reason"] for s in status["steps"]}["summarise"]  # every cause
    assert "data/summary.json does not exist" in why and "step make-data is stale" in why

    # the answer says that no step reads U1, and how one reads it
    assert seen["answer"]["runs_again"] == []
    assert 'stepstone.answer("U1", default)' in seen["answer"]["note"]

    # the step cells, read and edited; status sees the edit as the notebook's run will
    steps = [c["step"] for c in seen["cells"]["cells"] if c["step"]]
    assert steps == ["make-data", "summarise", "report"]
    assert seen["edit"]["action"] == "replaced" and seen["edit"]["step"] == "report"
    assert "report" in seen["edit"]["runs_again"]
    report = {s["name"]: s for s in seen["edited"]["steps"]}["report"]
    assert report["state"] == "stale" and "out/report.md does not exist" in report["reason"]
    assert "edited" in report["reason"] or "changed" in report["reason"]
    assert any("report" in note for note in seen["edited"]["notes"])
    assert seen["insert"]["action"] == "inserted" and seen["insert"]["step"] == "pause"
    assert "pause" in seen["insert"]["runs_again"]

    # the run was cancelled in `pause`: what was done before it stays done
    assert "cancelled" not in seen  # the call never returned: it was cancelled
    said = [message for _, _, message in progress["first"]]
    assert "make-data: done" in said and "summarise: done" in said, said
    assert "no notebook at" in seen["stopped"]["error"]
    after = {s["name"]: s["state"] for s in seen["after_cancel"]["steps"]}
    assert after["make-data"] == after["summarise"] == "verified"
    assert after["pause"] != "verified" and after["report"] != "verified"

    # run again: the rest runs, with a notification per step
    ran = seen["ran"]
    assert ran["outcome"] == "done" and ran["exit_code"] == 0, ran["said"]
    outcomes = {s["name"]: s["outcome"] for s in ran["steps"]}
    assert outcomes == {
        "make-data": "skipped",
        "summarise": "skipped",
        "pause": "done",
        "report": "done",
    }
    notified = [message for _, _, message in progress["second"]]
    assert notified[-4:] == [
        "make-data: skipped",
        "summarise: skipped",
        "pause: done",
        "report: done",
    ]
    assert [done for done, _, _ in progress["second"]][-4:] == [1, 2, 3, 4]
    assert "currency: EUR" in (folder / "out" / "report.md").read_text()

    # the brief keeps the answer, and says to finish
    brief = seen["brief"]
    assert brief["answered_unknowns"] == [
        {
            "id": "U1",
            "question": "Are the prices in EUR or USD? The feed does not say.",
            "answer": "EUR",
            "why": "vendor sheet",
        }
    ]
    assert brief["next_tool"] == {"tool": "finish", "arguments": {"run": "quickstart"}}

    # finish writes the summary where it says
    finished = seen["finish"]
    summary = Path(finished["file"])
    assert summary == folder / "quickstart.summary.md"
    assert summary.read_text() == finished["summary"]
    store = folder / ".stepstone"
    assert git("show", "stepstone/quickstart:summary.md", cwd=store) == finished["summary"]
    assert seen["runs"] == [
        {**seen["runs"][0], "run": "quickstart", "state": "finished", "steps": 4, "confirmed": 4}
    ]

    # every change says how it came: the agent's tools (mcp), the run they started (mcp run)
    vias = {(entry["subject"].split(":")[0], entry["via"]) for entry in seen["log"]}
    assert ("answer U1", "mcp") in vias and ("finish", "mcp") in vias
    assert ("step 3 pause", "mcp run") in vias and ("step 4 report", "mcp run") in vias
    subjects = [entry["subject"] for entry in seen["log"]]
    assert subjects.index("step 3 pause: failed") > subjects.index("step 3 pause: confirmed")


@pytest.mark.kernel
def test_every_tool_is_typed_and_annotated_and_a_bad_argument_changes_nothing(
    first_folder: Path, tmp_path: Path
) -> None:
    folder = received(first_folder, tmp_path / "person-b")
    store = folder / ".stepstone"
    notebook = (folder / "quickstart.ipynb").read_bytes()
    before = refs(store)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    seen: dict[str, Any] = {}

    async def agent(me: Agent) -> None:
        seen["tools"] = me.tools
        for tool in READING - {"show", "outputs", "diff"}:
            seen[tool] = await me.call(tool)
        seen["show"] = await me.call("show", step="summarise")
        seen["outputs"] = await me.call("outputs", step="summarise")
        seen["diff"] = await me.call("diff", run_a="quickstart", run_b="quickstart")
        seen["refused"] = {
            "no step": await me.call("edit_step", step="nosuch", source="x = 1"),
            "both": await me.call("edit_step", step="report", after="summarise", source="x = 1"),
            "twice": await me.call("edit_step", after="summarise", source="%%step report\nx = 1"),
            "bad line": await me.call(
                "edit_step", step="report", source="%%step report --no-such-option\nx = 1"
            ),
            "no line": await me.call("edit_step", after="report", source="x = 1"),
            "unknown": await me.call("answer", unknown="U9", answer="EUR"),
            "revise": await me.call("decide", key="threshold", value="110", why="fewer"),
            "no decision": await me.call(
                "decide", key="treshold", value="110", why="fewer", revise=True
            ),
            "no run": await me.call("status", run="nosuch"),
            "no output": await me.call("get_output", step="summarise", name="nosuch"),
            "unfinished": await me.call("finish"),
            "no notebook": await me.call("run", notebook="nosuch.ipynb"),
        }

    session(folder, agent)

    async def from_elsewhere(me: Agent) -> None:  # a server started in another folder
        seen["from elsewhere"] = await me.call("status", folder=str(folder))
        seen["cells elsewhere"] = await me.call("show_cells", folder="../person-b")
        seen["here"] = await me.call("status")

    session(elsewhere, from_elsewhere)

    tools = seen["tools"]
    assert set(tools) == TOOLS
    for name, tool in tools.items():
        hints = tool.annotations
        assert hints is not None, name
        assert None not in (
            hints.read_only_hint,
            hints.destructive_hint,
            hints.idempotent_hint,
            hints.open_world_hint,
        ), name
        assert hints.read_only_hint == (name in READING), name
        # only a run performs effects; moving tools reach a remote
        assert hints.open_world_hint == (name in {"run", "push", "pull", "clone", "handoff"}), name
        schema = tool.output_schema
        assert schema is not None and schema.get("type") == "object", name
        assert schema.get("additionalProperties") is not True, name  # typed, not any object
    assert set(seen["schema"]) >= {"status --json", "brief --json", "mcp run", "mcp edit_step"}

    refused = seen["refused"]
    for case, said in refused.items():
        assert set(said) == {"error"}, (case, said)
    assert "steps: make-data, summarise, report" in refused["no step"]["error"]
    assert "one of the two" in refused["both"]["error"]
    assert "report" in refused["twice"]["error"]
    assert "--no-such-option" in refused["bad line"]["error"]
    assert "%%step NAME" in refused["no line"]["error"]
    assert "U1" in refused["unknown"]["error"]
    assert "revise" in refused["revise"]["error"]
    assert "threshold" in refused["no decision"]["error"]
    assert "quickstart" in refused["no run"]["error"]
    assert "summary" in refused["no output"]["error"]
    assert "force" in refused["unfinished"]["error"]
    assert "no notebook at" in refused["no notebook"]["error"]
    # nothing changed: the store's refs, the notebook, the folder
    assert refs(store) == before
    assert (folder / "quickstart.ipynb").read_bytes() == notebook
    assert sorted(p.name for p in folder.iterdir()) == [".stepstone", "quickstart.ipynb"]
    assert seen["from elsewhere"]["run"] == "quickstart"
    assert seen["cells elsewhere"]["notebook"] == str(folder / "quickstart.ipynb")
    assert "stepstone run" in seen["here"]["error"] or ".stepstone" in seen["here"]["error"]


@pytest.mark.kernel
def test_a_subscriber_hears_when_the_run_moves_and_the_prompt_gives_the_brief(
    first_folder: Path, tmp_path: Path
) -> None:
    folder = received(first_folder, tmp_path / "person-b")
    seen: dict[str, Any] = {}

    async def agent(me: Agent) -> None:
        prompts = (await me.client.list_prompts()).prompts
        seen["prompts"] = [p.name for p in prompts]
        picked = await me.client.get_prompt("pick_up")
        seen["prompt"] = picked.messages[0].content.text  # type: ignore[union-attr]
        uri = "stepstone://runs/quickstart/status"
        async with me.client.listen(resource_subscriptions=[uri]) as events:
            seen["answer"] = await me.call("answer", unknown="U1", answer="EUR")
            with anyio.fail_after(30):
                async for event in events:
                    if isinstance(event, ResourceUpdated) and event.uri == uri:
                        break
        seen["resource"] = (await me.client.read_resource(uri)).contents[0].text  # type: ignore[union-attr]
        seen["brief.md"] = (await me.client.read_resource("stepstone://brief")).contents[0].text  # type: ignore[union-attr]

    session(folder, agent)
    assert seen["prompts"] == ["pick_up"]
    assert "# Hand-off: run `quickstart`" in seen["prompt"]
    assert "Next tool: `run(run='quickstart')`" in seen["prompt"]
    assert "edit_step" in seen["prompt"] and "finish" in seen["prompt"]
    assert '"answer": "EUR"' in seen["resource"]
    assert "U1: Are the prices in EUR or USD? The feed does not say. → **EUR**" in seen["brief.md"]
    text = cli("status", cwd=folder)  # the text status keeps the answered unknown
    assert (
        "  answered U1: Are the prices in EUR or USD? The feed does not say. → EUR\n" in text.stdout
    )
