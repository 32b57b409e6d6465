"""`stepstone mcp` in a real subprocess, driven by the MCP SDK's own client over stdio:
an agent with only MCP tools picks up a notebook's run, and every tool answers with
the JSON the command line prints."""

import asyncio
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from conftest import cell_text, clean_env, git, mcp_session
from conftest import stepstone_cli as cli
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from stepstone.agent import spelling

ROOT = Path(__file__).resolve().parents[1]


def _quickstart(workdir: Path) -> Path:
    shutil.copy(ROOT / "notebooks" / "quickstart.ipynb", workdir)
    nb = workdir / "quickstart.ipynb"
    done = cli("run", str(nb), cwd=workdir)
    assert done.returncode == 0, done.stderr
    return nb


def _session(workdir: Path, script: Any) -> Any:
    """Run `script(call, read)` against `stepstone mcp` started in `workdir`."""
    return mcp_session(workdir, script)


@pytest.mark.kernel
def test_an_agent_with_only_mcp_tools_picks_up_the_run_and_the_notebook_agrees(workdir: Path):
    nb = _quickstart(workdir)

    async def agent_b(call: Any, read: Any) -> dict[str, Any]:
        seen: dict[str, Any] = {"brief": await read("stepstone://brief")}
        seen["status"] = await call("status")
        seen["answer"] = await call("answer", unknown="U1", answer="EUR", why="vendor sheet")
        seen["refused"] = await call("decide", key="threshold", value="110", why="fewer flags")
        seen["decide"] = await call(
            "decide", key="threshold", value="110", why="fewer flags", revise=True
        )
        seen["outputs"] = await call("outputs", step="summarise")
        seen["fork"] = await call("fork", run="quickstart", at="summarise", new="alt")
        seen["diff"] = await call("diff", run_a="quickstart", run_b="alt")
        seen["which"] = await call("show", step="report")  # not the fork: the run itself
        seen["got"] = await call("get_output", step="summarise", name="summary")
        seen["missing"] = await call("show", step="nosuch", run="quickstart")
        return seen

    seen = _session(workdir, agent_b)
    assert "# Hand-off: run `quickstart`" in seen["brief"]
    assert [u["id"] for u in seen["status"]["unknowns"]] == ["U1"]
    assert seen["answer"]["state"] == "resolved" and seen["answer"]["answer"] == "EUR"
    assert "revise=true" in seen["refused"]["error"]  # the tool's spelling
    assert seen["decide"]["was"] == "105" and seen["decide"]["runs_again"] == ["report"]
    assert [o["name"] for o in seen["outputs"]] == ["f", "prices", "row", "summary"]
    assert seen["fork"]["steps"] == ["make-data", "summarise"]
    assert {"key": "threshold", "a": "110", "b": "-"} in seen["diff"]["decisions"]
    assert seen["which"]["run"] == "quickstart"
    assert seen["got"]["file"] == str(workdir / "summary.json")
    assert set(json.loads((workdir / "summary.json").read_text())) == {"ACME", "GLOBEX", "INITECH"}
    assert "no step 'nosuch' (steps: make-data, summarise, report)" in seen["missing"]["error"]

    store = workdir / ".stepstone"
    log = git("log", "--format=%s|%(trailers:key=Stepstone-Via,valueonly)", "quickstart", cwd=store)
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    assert lines[:2] == ["revise threshold: 105 -> 110|mcp", "answer U1: EUR|mcp"]
    forked = git("log", "-1", "--format=%B", "alt", cwd=store)
    assert "Stepstone-Via: mcp" in forked

    again = cli("run", str(nb), cwd=workdir)  # the notebook agrees with what B recorded
    assert again.returncode == 0, again.stderr
    assert "threshold: 110.0" in (workdir / "out" / "report.md").read_text()
    book = nbformat.read(str(workdir / "quickstart.out.ipynb"), as_version=4)
    said = "".join(cell_text(c) for c in book.cells)
    assert "U1 was answered: EUR (not asked again)" in said and "decided threshold=110" in said
    (line,) = [c.source for c in book.cells if c.source.startswith("%decide")]
    assert line == "%decide threshold=110 --revise --why 'fewer flags'"  # the tool rewrote it


@pytest.mark.kernel
def test_each_reading_tool_returns_the_json_the_command_line_prints(workdir: Path):
    _quickstart(workdir)

    async def read_all(call: Any, read: Any) -> dict[str, Any]:
        return {
            "status": await call("status"),
            "show": await call("show", step="summarise"),
            "log": await call("log"),
            "outputs": await call("outputs", step="summarise"),
            "brief": await call("brief"),
        }

    tools = _session(workdir, read_all)
    for name, args in (
        ("status", ["status", "--json"]),
        ("show", ["show", "summarise", "--json"]),
        ("log", ["log", "--json"]),
        ("outputs", ["outputs", "summarise", "--json"]),
        ("brief", ["brief", "--json"]),
    ):
        printed = cli(*args, cwd=workdir)
        assert printed.returncode == 0, printed.stderr
        printed_data = json.loads(printed.stdout)
        if name in ("status", "brief"):  # the next action, spelled for tools
            printed_data = spelling.status_for_tools(printed_data)
        assert _without_get(tools[name]) == _without_get(printed_data), name
    got = tools["outputs"][-1]["get"]  # the MCP server names its own tool, not a command
    assert got == "get_output(step='summarise', name='summary')"


def _without_get(found: Any) -> Any:
    """`found` without the `get` of its outputs (a command line, or the MCP tool call)."""
    if isinstance(found, list):
        return [_without_get(item) for item in found]
    if isinstance(found, dict):
        return {key: _without_get(value) for key, value in found.items() if key != "get"}
    return found


@pytest.mark.kernel
def test_show_cells_of_another_notebook_sees_an_edit_of_it(workdir: Path):
    nb = _quickstart(workdir)
    shutil.copy(nb, workdir / "draft.ipynb")

    async def agent(call: Any, read: Any) -> tuple[Any, Any, Any]:
        before = await call("show_cells", notebook="draft.ipynb")
        edited = await call(
            "edit_step", notebook="draft.ipynb", step="report", source="print('draft')"
        )
        after = await call("show_cells", notebook="draft.ipynb")
        return before, edited, after

    before, edited, after = _session(workdir, agent)
    assert edited["action"] == "replaced", edited

    def report(cells: Any) -> str:
        rows = cells["cells"] if isinstance(cells, dict) else cells
        return next(c["source"] for c in rows if c["step"] == "report")

    assert "print('draft')" not in report(before)
    assert report(after).endswith("print('draft')")  # not the answer cached before the edit


@pytest.mark.kernel
def test_the_report_of_another_folder_comes_as_the_page_itself(workdir: Path, tmp_path: Path):
    _quickstart(workdir)
    elsewhere = tmp_path / "server-home"
    elsewhere.mkdir()
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "stepstone", "mcp"], cwd=str(elsewhere), env=clean_env()
    )

    async def main() -> Any:
        async with Client(params, read_timeout_seconds=60) as client:
            there = await client.call_tool("report", {"folder": str(workdir)})
            here = await client.call_tool("report", {})
            return there, here

    there, here = asyncio.run(main())
    page = there.content[0]
    assert page.type == "resource" and page.resource.uri == "stepstone://runs/quickstart/report"
    assert "quickstart" in page.resource.text and "<html" in page.resource.text.lower()
    assert here.is_error  # the server's own folder has no store: no link to a page it lacks


def test_the_server_looks_at_the_runs_only_while_a_client_listens_and_tells_it_of_a_commit(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import anyio
    from mcp.shared.subscriptions import ResourceUpdated

    import stepstone
    from stepstone.agent import mcpserver

    with stepstone.open_run("watched", repo=workdir / ".stepstone") as run:
        run.decide("region", "eu", why="where the data lives")
    looks: list[float] = []
    real = mcpserver._looks

    def counted(place: Any) -> Any:
        looks.append(1)
        return real(place)

    monkeypatch.setattr(mcpserver, "_looks", counted)
    monkeypatch.setattr(mcpserver, "WATCH_EVERY", 0.05)
    server = mcpserver.make_server(folder=workdir)
    uri = "stepstone://runs/watched/status"
    seen: dict[str, Any] = {}

    async def main() -> None:
        async with Client(server) as client:
            await anyio.sleep(0.5)  # ten turns of the watcher, nobody listening
            seen["idle"] = len(looks)
            async with client.listen(resource_subscriptions=[uri]) as events:
                with stepstone.open_run("watched", repo=workdir / ".stepstone") as run:
                    run.decide("currency", "EUR", why="the feed's prices")
                with anyio.fail_after(10):
                    async for event in events:
                        if isinstance(event, ResourceUpdated) and event.uri == uri:
                            seen["told"] = True
                            break
                seen["listening"] = len(looks)
            await anyio.sleep(0.5)
            seen["after"] = len(looks)

    asyncio.run(main())
    assert seen["idle"] == 0
    assert seen["told"] and seen["listening"] >= 2  # the first look, and the one that saw it
    assert seen["after"] - seen["listening"] <= 1  # stopped looking once the client left
