"""Issue 50: the hand-off in the fewest steps. A fresh agent picks up a received run,
revises a decision, finishes and hands back, by the command line or by MCP alone; each
observation of the issue is pinned here as the agent met it."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from conftest import git, killed_when, mcp_session
from conftest import stepstone_cli as cli
from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
REVISE = ["stepstone", "decide", "threshold", "VALUE", "--revise", "--why", "REASON"]


def _quickstart(workdir: Path, **env: str) -> Path:
    shutil.copy(ROOT / "notebooks" / "quickstart.ipynb", workdir)
    nb = workdir / "quickstart.ipynb"
    done = cli("run", str(nb), cwd=workdir, **env)
    assert done.returncode == 0, done.stderr
    return nb


def _notebook(path: Path, *sources: str, parameters: str | None = None) -> Path:
    book = nbformat.v4.new_notebook()
    book.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    cells = []
    if parameters is not None:
        cell = nbformat.v4.new_code_cell(parameters)
        cell.metadata["tags"] = ["parameters"]
        cells.append(cell)
    cells.append(nbformat.v4.new_code_cell("%load_ext stepstone\n%resume"))
    cells += [nbformat.v4.new_code_cell(source) for source in sources]
    book.cells = cells
    nbformat.write(book, str(path))
    return path


def _mcp(workdir: Path, script: Any, **env: str) -> Any:
    """Run `script(call)` against `stepstone mcp` started in `workdir`; a refused call
    gives `{"error": TEXT}`."""
    return mcp_session(workdir, lambda call, _: script(call), read_timeout=120, **env)


# -- 1. the brief says what can be done -------------------------------------------


@pytest.mark.kernel
def test_the_brief_offers_to_revise_each_decision_and_says_what_it_runs_again(workdir: Path):
    _quickstart(workdir)
    text = cli("brief", cwd=workdir).stdout
    assert "do not reopen" not in text
    assert "stepstone decide threshold VALUE --revise --why REASON --run quickstart" in text
    assert "revising it runs again: report" in text
    data = json.loads(cli("brief", "--json", cwd=workdir).stdout)
    (decision,) = data["decisions"]
    assert decision["runs_again"] == ["report"]
    assert decision["revise"] == {
        "argv": [*REVISE, "--run", "quickstart"],
        "tool": {
            "tool": "decide",
            "arguments": {"key": "threshold", "revise": True, "run": "quickstart"},
        },
    }

    async def agent(call: Any) -> Any:
        return await call("brief")

    briefed = _mcp(workdir, agent)
    assert briefed["decisions"][0]["runs_again"] == ["report"]


# -- 5. each surface's spelling ----------------------------------------------------


@pytest.mark.kernel
def test_refusals_and_the_next_action_are_spelled_for_the_surface_that_asked(workdir: Path):
    _quickstart(workdir)
    refused = cli("decide", "threshold", "110", "--why", "fewer flags", cwd=workdir)
    assert refused.returncode == 2
    assert "--revise" in refused.stderr and "revise=True" not in refused.stderr
    early = cli("finish", cwd=workdir)  # U1 is open
    assert early.returncode != 0
    assert "--force" in early.stderr and "force=True" not in early.stderr
    assert cli("answer", "U1", "EUR", "--why", "the sheet", cwd=workdir).returncode == 0
    said = json.loads(cli("status", "--json", cwd=workdir).stdout)["next_action"]
    assert "stepstone finish" in said

    async def agent(call: Any) -> dict[str, Any]:
        return {
            "refused": await call("decide", key="threshold", value="110", why="fewer flags"),
            "status": await call("status"),
            "brief": await call("brief"),
        }

    seen = _mcp(workdir, agent)
    assert "revise=true" in seen["refused"]["error"], seen["refused"]
    assert "--revise" not in seen["refused"]["error"]
    for said in (seen["status"]["next_action"], seen["brief"]["next_action"]):
        assert "`finish`" in said and "stepstone finish" not in said and "%finish" not in said


# -- 6. the notebook's own run is the default -------------------------------------


@pytest.mark.kernel
def test_a_run_with_parameters_leaves_the_notebooks_own_run_the_default(workdir: Path):
    nb = _notebook(workdir / "p.ipynb", "%%step double\nx = n * 2\nprint(x)", parameters="n = 3")
    assert cli("run", str(nb), cwd=workdir).returncode == 0
    assert cli("run", str(nb), "-p", "n", "4", cwd=workdir).returncode == 0
    status = cli("status", "--json", cwd=workdir)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["run"] == "p"
    assert cli("brief", cwd=workdir).returncode == 0

    async def agent(call: Any) -> dict[str, Any]:
        return {"status": await call("status"), "brief": await call("brief")}

    seen = _mcp(workdir, agent)
    assert seen["status"]["run"] == "p" and seen["brief"]["run"] == "p", seen


# -- 7. a read listed once --------------------------------------------------------


def test_a_file_declared_and_traced_is_listed_once():
    from stepstone.present.render import reads_text

    both = {"decision:threshold": "105", "file:orders.csv": "ab12", "read:orders.csv": "ab12"}
    assert reads_text(both) == "decision threshold, orders.csv"


# -- 9. pending is not edited ------------------------------------------------------


@pytest.mark.kernel
def test_finishing_a_received_interrupted_run_names_its_pending_steps_as_not_run(
    workdir: Path,
):
    origin = workdir / "a"
    origin.mkdir()
    nb = _notebook(
        origin / "job.ipynb",
        "%%step A\nx = 1",
        "%%step B\nimport os\nif not os.path.exists('go'): raise SystemExit('stopped')\ny = 2",
        "%%step C\nz = 3",
    )
    assert cli("run", str(nb), cwd=origin).returncode != 0
    shutil.copytree(origin, workdir / "b")
    refused = cli("finish", cwd=workdir / "b")
    assert refused.returncode != 0
    assert "edited or added" not in refused.stderr, refused.stderr
    assert "step 3 C is pending" in refused.stderr, refused.stderr
    status = json.loads(cli("status", "--json", cwd=workdir / "b").stdout)
    assert "were added" not in status["next_action"]


# -- 11. an answer's reason --------------------------------------------------------


@pytest.mark.kernel
def test_an_answers_reason_is_shown_where_a_decisions_is(workdir: Path):
    _quickstart(workdir)
    why = "the vendor's sheet says EUR"
    assert cli("answer", "U1", "EUR", "--why", why, cwd=workdir).returncode == 0
    assert why in cli("status", cwd=workdir).stdout
    (unknown,) = json.loads(cli("status", "--json", cwd=workdir).stdout)["unknowns"]
    assert unknown["why"] == why
    assert why in cli("brief", cwd=workdir).stdout
    (answered,) = json.loads(cli("brief", "--json", cwd=workdir).stdout)["answered_unknowns"]
    assert answered["why"] == why
    log = json.loads(cli("log", "--json", cwd=workdir).stdout)
    assert log[0]["subject"] == "answer U1: EUR" and log[0]["why"] == why
    assert cli("finish", cwd=workdir).returncode == 0
    assert why in (workdir / "quickstart.summary.md").read_text()


# -- 4. the summary tells the story -------------------------------------------------


@pytest.mark.kernel
def test_the_summary_and_the_log_tell_a_decisions_history(workdir: Path):
    nb = _quickstart(workdir)
    assert cli("answer", "U1", "EUR", cwd=workdir).returncode == 0
    revised = cli(
        "decide", "threshold", "110", "--revise", "--why", "105 flagged too many", cwd=workdir
    )
    assert revised.returncode == 0, revised.stderr
    assert cli("run", str(nb), cwd=workdir).returncode == 0
    log = json.loads(cli("log", "--json", cwd=workdir).stdout)
    (entry,) = [e for e in log if e["subject"].startswith("revise threshold")]
    assert entry["why"] == "105 flagged too many"
    assert cli("finish", cwd=workdir).returncode == 0
    text = (workdir / "quickstart.summary.md").read_text()
    assert "105 → 110" in text
    assert "105 flagged too many" in text
    assert "mean of the feed is about 104" in text  # the first value's reason stays


# -- 12. who acted -------------------------------------------------------------------


@pytest.mark.kernel
def test_who_acted_is_named_as_git_names_people(workdir: Path):
    home = workdir / "home"
    home.mkdir()
    git("config", "--file", str(home / ".gitconfig"), "user.name", "Ann Example", cwd=workdir)
    git("config", "--file", str(home / ".gitconfig"), "user.email", "ann@example.org", cwd=workdir)
    _quickstart(workdir, HOME=str(home))
    done = cli("answer", "U1", "EUR", cwd=workdir, HOME=str(home), GIT_AUTHOR_NAME="Bob Other")
    assert done.returncode == 0, done.stderr
    people = git("log", "--format=%an <%ae>", "quickstart", cwd=workdir / ".stepstone")
    first, *rest = people.splitlines()
    assert first.startswith("Bob Other <")
    assert set(rest) == {"Ann Example <ann@example.org>"}
    shown = cli("show", "report", cwd=workdir, HOME=str(home)).stdout
    assert "by Ann Example@" in shown


# -- 2. one truth for a decision ------------------------------------------------------


def _decide_cell(nb: Path) -> str:
    book = nbformat.read(str(nb), as_version=4)
    (cell,) = [c for c in book.cells if c.source.startswith("%decide")]
    return str(cell.source)


@pytest.mark.kernel
def test_a_revision_from_outside_rewrites_the_notebooks_decide_line(workdir: Path):
    nb = _quickstart(workdir)
    done = cli(
        "decide", "threshold", "110", "--revise", "--why", "105 flagged too many", cwd=workdir
    )
    assert done.returncode == 0, done.stderr
    assert "quickstart.ipynb cell 5 now says %decide threshold=110 --revise" in done.stdout
    assert _decide_cell(nb) == "%decide threshold=110 --revise --why '105 flagged too many'"
    ran = cli("run", str(nb), cwd=workdir)
    assert ran.returncode == 0, ran.stderr
    assert "[3/3] report: done" in ran.stderr and "[2/3] summarise: skipped" in ran.stderr
    assert "threshold: 110.0" in (workdir / "out" / "report.md").read_text()
    again = cli("run", str(nb), cwd=workdir)
    assert again.returncode == 0 and "[3/3] report: skipped" in again.stderr, again.stderr

    async def agent(call: Any) -> Any:
        return await call("decide", key="threshold", value="104", why="flag more", revise=True)

    made = _mcp(workdir, agent)
    assert made["notebook_line"].startswith("quickstart.ipynb cell 5 now says"), made
    assert _decide_cell(nb) == "%decide threshold=104 --revise --why 'flag more'"


@pytest.mark.kernel
def test_an_edited_decide_line_is_seen_by_status_before_the_notebook_runs(workdir: Path):
    nb = _quickstart(workdir)
    book = nbformat.read(str(nb), as_version=4)
    (cell,) = [c for c in book.cells if c.source.startswith("%decide")]
    cell.source = '%decide threshold=500 --why "fewer flags"'  # no --revise: refused
    nbformat.write(book, str(nb))
    status = json.loads(cli("status", "--json", cwd=workdir).stdout)
    assert status["decisions"][0]["value"] == "105"
    assert any("without --revise" in n for n in status["notes"]), status["notes"]
    assert [s["state"] for s in status["steps"]] == ["verified"] * 3

    cell.source = '%decide threshold=500 --revise --why "fewer flags"'
    nbformat.write(book, str(nb))
    status = json.loads(cli("status", "--json", cwd=workdir).stdout)
    assert status["decisions"] == [{"key": "threshold", "value": "500", "why": "fewer flags"}]
    report = status["steps"][2]
    assert report["state"] == "stale", report
    assert "%decide line revises decision threshold: 105 → 500" in report["reason"]
    assert [s["state"] for s in status["steps"][:2]] == ["verified"] * 2
    assert "`threshold` = `500`" in cli("brief", cwd=workdir).stdout
    ran = cli("run", str(nb), cwd=workdir)
    assert ran.returncode == 0 and "[3/3] report: done" in ran.stderr, ran.stderr
    after = json.loads(cli("status", "--json", cwd=workdir).stdout)
    assert after["decisions"] == status["decisions"]
    assert [s["state"] for s in after["steps"]] == ["verified"] * 3


@pytest.mark.kernel
def test_a_decide_line_the_kernel_expands_is_not_taken_for_an_edit(workdir: Path):
    nb = _quickstart(workdir)
    book = nbformat.read(str(nb), as_version=4)
    (cell,) = [c for c in book.cells if c.source.startswith("%decide")]
    line = cell.source.replace("threshold=105", "threshold={limit}")
    assert line != cell.source
    cell.source = f"limit = 105\n{line}"
    nbformat.write(book, str(nb))
    status = json.loads(cli("status", "--json", cwd=workdir).stdout)
    assert not any("%decide" in n for n in status["notes"]), status["notes"]
    assert [s["state"] for s in status["steps"]] == ["verified"] * 3
    ran = cli("run", str(nb), cwd=workdir)  # the kernel expands it to what was decided
    assert ran.returncode == 0 and "[3/3] report: skipped" in ran.stderr, ran.stderr


# -- 3. MCP complete for a hand-off ----------------------------------------------------


@pytest.mark.kernel
def test_an_mcp_only_agent_receives_revises_finishes_and_hands_back(tmp_path: Path):
    remote = tmp_path / "remote.git"
    git("init", "-q", "--bare", str(remote), cwd=tmp_path)
    sender = tmp_path / "a"
    sender.mkdir()
    nb = _quickstart(sender)
    assert cli("answer", "U1", "EUR", "--why", "the sheet", cwd=sender).returncode == 0
    pushed = cli("handoff", cwd=sender)
    assert pushed.returncode != 0 and "push --remote URL" in pushed.stderr  # no remote yet
    assert cli("push", "--remote", str(remote), cwd=sender).returncode == 0

    receiver = tmp_path / "b"  # the notebook travels by its own means; the store by Git
    receiver.mkdir()
    shutil.copy(nb, receiver / nb.name)
    shutil.copytree(sender / "data", receiver / "data")

    async def agent(call: Any) -> dict[str, Any]:
        seen: dict[str, Any] = {"clone": await call("clone", url=str(remote))}
        seen["brief"] = await call("brief")
        seen["decide"] = await call(
            "decide", key="threshold", value="110", why="105 flagged too many", revise=True
        )
        seen["cells"] = await call("show_cells")
        seen["ran"] = await call("run")
        seen["finish"] = await call("finish")
        seen["handoff"] = await call("handoff")
        return seen

    seen = _mcp(receiver, agent)
    assert seen["clone"]["runs"] == ["quickstart"], seen["clone"]
    assert seen["brief"]["decisions"][0]["runs_again"] == ["report"]
    assert seen["decide"]["runs_again"] == ["report"], seen["decide"]
    assert seen["ran"]["exit_code"] == 0, seen["ran"]
    assert "threshold: 110.0" in (receiver / "out" / "report.md").read_text()
    assert "error" not in seen["finish"], seen["finish"]
    assert "error" not in seen["handoff"], seen["handoff"]
    assert seen["handoff"]["remote"] == str(remote)

    # the sender sees the finished run the receiver handed back
    pulled = cli("pull", "--json", cwd=sender)
    assert pulled.returncode == 0, pulled.stderr
    status = json.loads(cli("status", "--json", cwd=sender).stdout)
    assert status["finished"] and status["decisions"][0]["value"] == "110"


def test_a_remotes_credentials_never_reach_a_result():
    from stepstone.agent.moving import shown_url

    assert (
        shown_url("https://ann:s3cret@git.example.org/x.git") == "https://***@git.example.org/x.git"
    )
    assert shown_url("https://git.example.org/x.git") == "https://git.example.org/x.git"
    assert shown_url("/srv/remote.git") == "/srv/remote.git"


# -- 10. a kernel killed mid-step leaves a trace ------------------------------------------

DIES_ONCE = """%%step B --check file:b.txt
import os, pathlib
pathlib.Path('b.part').write_text('half')
if not pathlib.Path('died-once').exists():
    pathlib.Path('died-once').write_text('')
    os.kill(os.getpid(), 9)
pathlib.Path('b.txt').write_text('done')"""


@pytest.mark.kernel
def test_an_attempt_killed_with_its_kernel_is_recorded_as_interrupted(workdir: Path):
    nb = _notebook(workdir / "job.ipynb", "%%step A\nx = 1", DIES_ONCE, "%%step C\nz = 3")
    died = cli("run", str(nb), cwd=workdir)
    assert died.returncode != 0
    assert "the kernel died during step B (recorded as interrupted)" in died.stderr, died.stderr
    status = json.loads(cli("status", "--json", cwd=workdir).stdout)
    (b,) = [s for s in status["steps"] if s["name"] == "B"]
    assert b["state"] == "failed" and "the kernel died" in b["reason"], b
    assert "the kernel died" in cli("brief", cwd=workdir).stdout
    log = json.loads(cli("log", "--json", cwd=workdir).stdout)
    assert log[0]["subject"] == "step 2 B: failed", log[0]
    again = cli("run", str(nb), cwd=workdir)
    assert again.returncode == 0, again.stderr
    assert "[1/3] A: skipped" in again.stderr and "[2/3] B: done" in again.stderr


# -- 13. withheld values, named only when a cell that runs reads them ----------------------


@pytest.mark.kernel
def test_values_withheld_from_another_user_are_named_only_when_a_cell_that_runs_reads_them(
    tmp_path: Path,
):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    made = "%%step A\nfrom fractions import Fraction\nimport random\nrng = random.Random(1)\n"
    made += "v = Fraction(1, 3)"
    again = "%%step B\nimport pathlib, random\nrng = random.Random(2)\nv = 5\n"
    again += "if not pathlib.Path('go').exists():\n    raise SystemExit('not yet')"
    nb = _notebook(a / "job.ipynb", made, again, "%%step C\nw = v + rng.random()")
    assert cli("run", str(nb), cwd=a).returncode != 0  # B stops: A's pickles are saved
    shutil.copytree(a, b)
    other = {"STEPSTONE_CONFIG": str(tmp_path / "someone-else")}
    status = json.loads(cli("status", "--json", cwd=b, **other).stdout)
    assert not [n for n in status["notes"] if "pickles" in n], status["notes"]

    book = nbformat.read(str(b / "job.ipynb"), as_version=4)  # B now reads A's v
    book.cells[2].source = book.cells[2].source.replace("v = 5", "u = v * 2")
    nbformat.write(book, str(b / "job.ipynb"))
    status = json.loads(cli("status", "--json", cwd=b, **other).stdout)
    (note,) = [n for n in status["notes"] if "pickles" in n]
    assert "(A: v)" in note, note  # rng is bound again before any cell reads it

    (b / "go").write_text("")
    assert cli("run", "job.ipynb", cwd=b, **other).returncode != 0  # B needs A's v: it fails
    assert cli("trust", cwd=b, **other).returncode == 0
    assert cli("run", "job.ipynb", cwd=b, **other).returncode == 0
    assert cli("finish", cwd=b, **other).returncode == 0
    status = json.loads(cli("status", "--json", cwd=b, **other).stdout)
    assert not [n for n in status["notes"] if "pickles" in n]


# -- 15. a copy whose origin is gone takes over -------------------------------------------


@pytest.mark.kernel
def test_a_tarball_whose_idle_origin_was_moved_away_takes_over_without_diverge(
    tmp_path: Path,
):
    import tarfile

    a = tmp_path / "a"
    a.mkdir()
    nb = _quickstart(a)
    with tarfile.open(tmp_path / "handoff.tar", "w") as tar:
        tar.add(a, arcname="project")
    shutil.move(a, tmp_path / "archived")  # the sender moved its folder away
    with tarfile.open(tmp_path / "handoff.tar") as tar:
        tar.extractall(tmp_path / "b", filter="data")
    b = tmp_path / "b" / "project"
    answered = cli("answer", "U1", "EUR", "--why", "the sheet", cwd=b)
    assert answered.returncode == 0, answered.stderr
    ran = cli("run", nb.name, cwd=b)
    assert ran.returncode == 0, ran.stderr
    assert "--diverge" not in ran.stderr
    assert all(f"{name}: skipped" in ran.stderr for name in ("make-data", "summarise", "report"))
    assert cli("finish", cwd=b).returncode == 0
    assert not list((tmp_path / "archived" / ".stepstone").rglob("*.copies"))  # not written


# -- 8. reads sized for an agent ------------------------------------------------------------


def test_mcp_reads_of_a_long_run_list_what_an_agent_acts_on_and_every_step_when_asked(
    workdir: Path,
):
    import stepstone

    with stepstone.open_run("long") as run:
        for i in range(40):
            Path(f"s{i}.txt").write_text(str(i))
            run.step(f"s{i}", lambda: None, checks=[f"file:s{i}.txt"])
    Path("s37.txt").write_text("changed")

    async def agent(call: Any) -> dict[str, Any]:
        return {
            "status": await call("status"),
            "every": await call("status", every=True),
            "verify": await call("verify"),
            "brief": await call("brief"),
            "log": await call("log", limit=5),
        }

    seen = _mcp(workdir, agent)
    status = seen["status"]
    assert [s["name"] for s in status["steps"]] == ["s34", "s35", "s36", "s37", "s38", "s39"]
    assert status["left_out"] == {
        "count": 34,
        "by_state": {"verified": 34},
        "how": "status(every=true) lists every step",
    }
    assert len(seen["every"]["steps"]) == 40 and "left_out" not in seen["every"]
    assert [s["state"] for s in status["steps"]][3:] == ["stale"] * 3
    assert len(seen["verify"]["steps"]) == 6 and seen["verify"]["left_out"]["count"] == 34
    assert seen["brief"]["left_out"]["count"] == 34 and len(seen["log"]) == 5


def test_mcp_output_schemas_are_flat_for_a_quick_check():
    from stepstone.agent.mcpserver import make_server

    tools = asyncio.run(make_server().list_tools())
    for tool in tools:
        text = json.dumps(tool.output_schema)
        assert "$ref" not in text, tool.name
        assert not re.search(r'"anyOf": \[\{[^{}]*\}, \{"type": "null"\}\]', text), tool.name


@pytest.mark.kernel
def test_a_brief_for_a_task_puts_what_the_task_names_first(workdir: Path):
    _quickstart(workdir)
    task = "A colleague asks: raise the threshold to 110 (105 flags too many), then finish"
    text = cli("brief", "--task", task, cwd=workdir).stdout
    assert f"**Your task:** {task}" in text
    offered = text.split("## For your task")[1].split("##")[0]
    assert "revise `threshold` (now `105`)" in offered and "runs again: report" in offered
    assert "`stepstone finish --run quickstart`" in offered and "stepstone handoff" in offered

    async def agent(call: Any) -> Any:
        return await call("brief", task=task)

    briefed = _mcp(workdir, agent)
    assert briefed["task"] == task
    first = briefed["for_task"][0]
    assert "`decide(key='threshold', value=..., why=..., revise=true)`" in first, first
    assert "`finish`" in briefed["for_task"][-1] and "`handoff`" in briefed["for_task"][-1]


# -- found by fresh agents on the hand-offs of benchmarks/handoff_trial.py -----------------

DIES_SENDING = """%%step send
import json, os, pathlib, stepstone
def do(key):
    with open('outbox.log', 'a') as f:
        f.write(key + '\\n')
    if not pathlib.Path('died-once').exists():
        pathlib.Path('died-once').write_text('')
        os.kill(os.getpid(), 9)  # the laptop dies after the write, before the receipt
    return {'sent': key}
stepstone.effect('notify', do)"""


def _in_doubt(folder: Path) -> str:
    nb = _notebook(folder / "job.ipynb", "%%step load\nx = 1", DIES_SENDING)
    assert cli("run", str(nb), cwd=folder).returncode != 0
    status = json.loads(cli("status", "--json", cwd=folder).stdout)
    (effect,) = status["effects"]
    assert effect["state"] == "submitted" and effect["next_action"].startswith("in doubt")
    return str(effect["key"])


@pytest.mark.kernel
def test_an_effect_sent_blind_and_in_doubt_is_offered_for_settling_first(workdir: Path):
    key = _in_doubt(workdir)
    status = json.loads(cli("status", "--json", cwd=workdir).stdout)
    assert status["next_action"].startswith(f"settle the in doubt effect {key} (send/notify)")
    assert json.loads(cli("brief", "--json", cwd=workdir).stdout)["next_tool"] == {
        "tool": "resolve",
        "arguments": {"key": key, "run": "job"},
    }

    async def agent(call: Any) -> Any:
        return await call(
            "resolve", key=key, happened=True, receipt="line 1", why="outbox.log has its key"
        )

    settled = _mcp(workdir, agent)
    assert settled["state"] == "confirmed" and settled["resolution"]["happened"], settled
    log = json.loads(cli("log", "--json", cwd=workdir).stdout)
    assert log[0]["why"] == "outbox.log has its key"
    assert cli("run", "job.ipynb", cwd=workdir).returncode == 0
    assert (workdir / "outbox.log").read_text().splitlines() == [key]  # never sent again


@pytest.mark.kernel
def test_an_effect_settled_as_not_sent_by_mcp_answers_in_its_schema(workdir: Path):
    """Found by a fresh agent: `resolve(happened=false)` answered a schema error (the
    record's new `settled` field), though the resolution was recorded."""
    key = _in_doubt(workdir)

    async def agent(call: Any) -> Any:
        return await call("resolve", key=key, happened=False, why="outbox.log lacks it")

    settled = _mcp(workdir, agent)
    assert settled.get("key") == key, settled  # a record, not a refusal
    assert settled["state"] == "planned" and settled["settled"], settled


SENDS_SLOWLY = """%%step send
import stepstone, time
def do(key):
    with open('outbox.log', 'a') as f:
        f.write(key + '\\n')
    time.sleep(60)
stepstone.effect('notify', do)"""


def _killed_while_sending(folder: Path) -> None:
    """Run a notebook and kill it, `stepstone run` and its kernel at once, while its
    effect is being sent (as a machine that dies)."""
    nb = _notebook(folder / "job.ipynb", "%%step load\nx = 1", SENDS_SLOWLY)
    argv = [sys.executable, "-m", "stepstone", "run", str(nb)]
    killed_when(argv, cwd=folder, ready=(folder / "outbox.log").exists)


def _as_if_copied_while_driven(store: Path, run: str = "job") -> None:
    lock = store / "stepstone" / "locks" / f"{run}.lock"
    held = json.loads(lock.read_text())
    held.pop("released", None)  # as the lock file of a driver that died holding it
    lock.write_text(json.dumps(held))


@pytest.mark.kernel
def test_each_command_that_changes_a_copy_takes_diverge_when_its_original_is_gone(
    tmp_path: Path,
):
    a = tmp_path / "a"
    a.mkdir()
    key = _in_doubt(a)
    for copy in ("b", "c"):
        shutil.copytree(a, tmp_path / copy)
        _as_if_copied_while_driven(tmp_path / copy / ".stepstone")
    shutil.rmtree(a)
    b, c = tmp_path / "b", tmp_path / "c"
    said = cli("status", cwd=b).stdout  # said before a command is refused for it
    assert "is gone (moved, archived or on another machine)" in said, said
    assert "--diverge (MCP: diverge=true)" in said
    refused = cli("resolve", key, "--not-happened", cwd=b)
    assert refused.returncode == 2 and "Diverged" in refused.stderr
    assert "`stepstone resolve KEY ... --diverge`" in refused.stderr
    done = cli("resolve", key, "--happened", "--why", "outbox has it", "--diverge", cwd=b)
    assert done.returncode == 0, done.stderr
    assert "is gone" not in cli("status", cwd=b).stdout  # driven as a new lineage now
    assert cli("run", "job.ipynb", cwd=b).returncode == 0

    async def agent(call: Any) -> dict[str, Any]:
        return {
            "refused": await call("resolve", key=key, happened=True),
            "done": await call("resolve", key=key, happened=True, diverge=True),
            "ran": await call("run"),
        }

    seen = _mcp(c, agent)
    assert "diverge=true" in seen["refused"]["error"], seen["refused"]
    assert seen["done"]["state"] == "confirmed" and seen["ran"]["exit_code"] == 0, seen
    assert (tmp_path / "b" / "outbox.log").read_text().splitlines() == [key]
    assert (tmp_path / "c" / "outbox.log").read_text().splitlines() == [key]


@pytest.mark.kernel
def test_a_finished_run_is_pushed_and_handed_off_and_a_refused_push_sets_nothing(
    tmp_path: Path,
):
    remote = tmp_path / "remote.git"
    git("init", "-q", "--bare", str(remote), cwd=tmp_path)
    a = tmp_path / "a"
    a.mkdir()
    nb = _quickstart(a)
    git("init", "-q", cwd=a)
    git("add", nb.name, cwd=a)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "nb", cwd=a)
    assert cli("answer", "U1", "EUR", cwd=a).returncode == 0
    assert cli("decide", "threshold", "110", "--revise", "--why", "fewer", cwd=a).returncode == 0
    assert cli("run", nb.name, cwd=a).returncode == 0
    assert cli("finish", cwd=a).returncode == 0
    pushed = cli("push", "--remote", str(remote), cwd=a)
    assert pushed.returncode == 0, pushed.stderr
    assert "refs/tags/stepstone/quickstart" in git("show-ref", cwd=remote)
    handed = cli("handoff", cwd=a)
    assert handed.returncode == 0, handed.stderr
    assert "note: quickstart.ipynb has changes its project's Git repository" in handed.stdout


@pytest.mark.kernel
def test_a_refused_push_sets_no_remote(tmp_path: Path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    _quickstart(a)
    shutil.copytree(a, b)
    _as_if_copied_while_driven(b / ".stepstone", "quickstart")
    shutil.rmtree(a)  # driven when copied, and gone: what it did since is unknown
    other = tmp_path / "other.git"
    git("init", "-q", "--bare", str(other), cwd=tmp_path)
    refused = cli("push", "--remote", str(other), cwd=b)
    assert refused.returncode == 2 and "Diverged" in refused.stderr, refused.stderr
    assert str(other) not in (b / ".stepstone" / "config").read_text()


@pytest.mark.kernel
def test_handoff_takes_the_remote_and_show_says_a_step_was_interrupted_after_its_effects(
    tmp_path: Path,
):
    remote = tmp_path / "remote.git"
    git("init", "-q", "--bare", str(remote), cwd=tmp_path)
    a = tmp_path / "a"
    a.mkdir()
    _killed_while_sending(a)  # the machine dies: nobody records the attempt
    shown = cli("show", "send", cwd=a).stdout
    assert "no record: it was interrupted partway, after asking for effects" in shown
    assert "effect notify (ss-" in shown
    handed = cli("handoff", "--remote", str(remote), cwd=a)
    assert handed.returncode == 0, handed.stderr
    assert "refs/heads/job" in git("show-ref", cwd=remote)
    clone = tmp_path / "clone.git"
    git("clone", "-q", "--bare", str(remote), str(clone), cwd=tmp_path)
    info = json.loads(git("show", "job:run.json", cwd=clone))
    assert info["shared"] is True  # a plain clone of the remote takes the lease


@given(
    st.text(
        st.characters(blacklist_categories=("Cc", "Cs"), whitelist_characters="\n"), min_size=1
    ).filter(str.strip),
    st.text("abc 012.'\"$", min_size=1),
)
def test_a_rewritten_decide_line_reads_back_as_the_value_and_reason_given(why: str, value: str):
    from stepstone.notebook.cellargs import decide_line, parse_decide_line

    line = decide_line("k", value, why)
    assert "\n" not in line  # one line, whatever the reason's breaks
    said = parse_decide_line(line.removeprefix("%decide "))
    assert (said.key, said.value, said.why, said.revise) == (
        "k",
        value,
        " ".join(why.split()),
        True,
    )


def test_a_decision_or_answer_with_who_made_it_is_written_as_a_newer_schema():
    from stepstone.model import models

    made = models.Decision(key="k", value="v", why="w", time=models.now(), who="Ann")
    old = models.Decision(key="k", value="v", why="w", time=models.now())
    assert json.loads(models.dump(made))["schema_version"] == 6  # older readers: "too new"
    assert "who" not in json.loads(models.dump(old))


def test_a_push_with_no_remote_is_refused_before_it_marks_the_run_shared(workdir: Path):
    import stepstone

    with stepstone.open_run("job") as run:
        run.step("a", lambda: 1)
    refused = cli("push", cwd=workdir)
    assert refused.returncode == 2 and "push --remote URL" in refused.stderr
    with stepstone.open_run("job") as run:  # still driven here, with no remote
        assert not run.info.shared


def test_a_failed_clone_names_its_url_without_credentials(tmp_path: Path):
    from stepstone.agent import moving
    from stepstone.errors import StoreError

    with pytest.raises(StoreError) as refused:
        moving.clone("https://ann:s3cret@127.0.0.1:9/x.git", str(tmp_path / "s"))
    assert "s3cret" not in str(refused.value) and "***@127.0.0.1" in str(refused.value)
