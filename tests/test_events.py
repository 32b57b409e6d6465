"""A run's typed events (issue 48): the kernel writes them, `stepstone run --events FILE`
keeps them as JSON Lines valid against `stepstone schema`, and the MCP `run` tool's
progress is those events; no reader parses English."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest
from conftest import clean_env, stepstone_cli
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from stepstone import agent

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "stepstone"
pytestmark = pytest.mark.kernel


def _events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _schema(workdir: Path) -> dict[str, Any]:
    done = stepstone_cli("schema", cwd=workdir)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["Event"]


def test_a_runs_events_are_json_lines_that_match_stepstone_schema(workdir: Path):
    shutil.copy(ROOT / "notebooks" / "quickstart.ipynb", workdir)
    schema = _schema(workdir)
    for attempt in ("first", "again"):
        done = stepstone_cli("run", "quickstart.ipynb", "--events", "events.jsonl", cwd=workdir)
        assert done.returncode == 0, done.stderr
        found = _events(workdir / "events.jsonl")
        for event in found:
            jsonschema.validate(event, schema)
        types = [e["type"] for e in found]
        assert types[0] == "run_opened" and types[-1] == "run_ended", types
        opened = found[0]
        ended = [e for e in found if e["type"] == "step_ended"]
        assert len(ended) == opened["steps"] == 3
        want = "done" if attempt == "first" else "skipped"
        assert {e["outcome"] for e in ended} == {want}
        assert found[-1]["exit_code"] == 0 and found[-1]["run"] == "quickstart"
        # the progress lines say what the events say
        for event in ended:
            assert f"{event['name']}: {event['outcome']}" in done.stderr


def test_each_effect_says_how_it_ended_before_its_step(workdir: Path):
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    cells = [
        "%load_ext stepstone\n%resume",
        "%%step send\nimport stepstone\nstepstone.effect('notify', lambda key: {'id': 1})",
        "%%step fail\nimport os\nstepstone.effect('page', lambda key: 1 / 0 if os.path.exists('x') "
        "else 2)",
    ]
    book = new_notebook(cells=[new_code_cell(c) for c in cells])
    book.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    nbformat.write(book, str(workdir / "job.ipynb"))
    (workdir / "x").touch()
    schema = _schema(workdir)
    told: list[list[tuple[str, str, str]]] = []
    for _ in range(2):
        stepstone_cli("run", "job.ipynb", "--events", "events.jsonl", cwd=workdir)
        found = _events(workdir / "events.jsonl")
        for event in found:
            jsonschema.validate(event, schema)
        told.append(
            [
                (e["type"], e["name"], e.get("outcome", ""))
                for e in found
                if e["type"] in ("effect_ended", "step_ended")
            ]
        )
        (workdir / "x").unlink(missing_ok=True)
    assert told[0] == [
        ("effect_ended", "notify", "sent"),
        ("step_ended", "send", "done"),
        ("effect_ended", "page", "failed"),
        ("step_ended", "fail", "failed"),
    ]
    # a blind request that raised may have landed: in doubt, never sent again
    assert told[1] == [
        ("step_ended", "send", "skipped"),
        ("effect_ended", "page", "unresolved"),
        ("step_ended", "fail", "failed"),
    ]


def test_a_refusal_is_an_event_with_its_name(workdir: Path):
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    cell = new_code_cell("n = 3")
    cell.metadata["tags"] = ["parameters"]
    nbformat.write(new_notebook(cells=[cell]), str(workdir / "quickstart.ipynb"))
    done = stepstone_cli(
        "run", "quickstart.ipynb", "-p", "nope", "1", "--events", "e.jsonl", cwd=workdir
    )
    assert done.returncode == 2
    found = _events(workdir / "e.jsonl")
    assert [e["type"] for e in found] == ["refused", "run_ended"]
    assert found[0]["error"] == "InvalidInput" and found[1]["exit_code"] == 2
    jsonschema.validate(found[0], _schema(workdir))


def test_the_mcp_run_tools_progress_is_the_runs_events(workdir: Path):
    shutil.copy(ROOT / "notebooks" / "quickstart.ipynb", workdir)
    heard: list[tuple[float, float | None, str | None]] = []
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "stepstone", "mcp"], cwd=str(workdir), env=clean_env()
    )

    async def main() -> Any:
        async with Client(params, read_timeout_seconds=180) as client:

            async def progress(done: float, total: float | None, message: str | None) -> None:
                heard.append((done, total, message))

            result = await client.call_tool(
                "run", {"notebook": "quickstart.ipynb"}, progress_callback=progress
            )
            return result.structured_content

    ran = anyio.run(main)
    assert ran["outcome"] == "done" and ran["exit_code"] == 0, ran
    steps = [(s["number"], s["name"], s["outcome"]) for s in ran["steps"]]
    assert steps == [(1, "make-data", "done"), (2, "summarise", "done"), (3, "report", "done")]
    notified = [(done, message) for done, _, message in heard if done]
    assert notified == [(number, f"{name}: {outcome}") for number, name, outcome in steps]


def test_no_module_of_the_agent_package_reads_progress_text():
    """The MCP server reads events, not `stepstone run`'s lines: no pattern of them is left."""
    for path in (SRC / "agent").glob("*.py"):
        text = path.read_text()
        assert "[N/M]" not in text and r"\[(\d+)/(\d+)\]" not in text, path
        assert "as run (" not in text, path
    assert agent is not None
