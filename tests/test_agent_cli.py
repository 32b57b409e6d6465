"""An agent with a fresh context picks up a notebook's run from the command line only:
answers its unknown, revises a decision, looks at a step and its outputs; the notebook
run afterwards agrees with everything it recorded, and `git log` shows each action."""

import json
import shutil
from pathlib import Path

import nbformat
import numpy as np
import pytest
from conftest import cell_text, git
from conftest import stepstone_cli as cli

import stepstone

ROOT = Path(__file__).resolve().parents[1]


def _quickstart(workdir: Path) -> Path:
    shutil.copy(ROOT / "notebooks" / "quickstart.ipynb", workdir)
    nb = workdir / "quickstart.ipynb"
    done = cli("run", str(nb), cwd=workdir)
    assert done.returncode == 0, done.stderr
    return nb


def _cell_output(workdir: Path, starts: str) -> str:
    book = nbformat.read(str(workdir / "quickstart.out.ipynb"), as_version=4)
    (cell,) = [c for c in book.cells if c.source.startswith(starts)]
    return cell_text(cell)


def _trailers(workdir: Path, count: int) -> list[str]:
    log = git("log", f"-{count}", "--format=%B%x00", "quickstart", cwd=workdir / ".stepstone")
    return [entry.strip() for entry in log.split("\0") if entry.strip()]


@pytest.mark.kernel
def test_an_unknown_answered_from_the_command_line_is_not_asked_again_by_its_cell(
    workdir: Path,
):
    nb = _quickstart(workdir)
    wrong = cli("resolve", "U1", "--happened", cwd=workdir)  # the command for effects
    assert wrong.returncode == 2
    done = cli("answer", "U1", "EUR", "--why", "the vendor's sheet says EUR", "--json", cwd=workdir)
    assert done.returncode == 0, done.stderr
    answered = json.loads(done.stdout)
    assert answered["state"] == "resolved" and answered["answer"] == "EUR"
    assert answered["why"] == "the vendor's sheet says EUR"
    (message,) = _trailers(workdir, 1)
    assert "Stepstone-Unknown: U1" in message and "Stepstone-Via: cli" in message
    again = cli("answer", "U1", "EUR", cwd=workdir)  # the same answer: nothing changes
    assert again.returncode == 0, again.stderr
    other = cli("answer", "U1", "USD", cwd=workdir)  # another: only on purpose
    assert other.returncode == 2
    assert "U1 is already answered: 'EUR' (the vendor's sheet says EUR)" in other.stderr
    assert "--revise" in other.stderr
    subject = git("log", "-1", "--format=%s", "quickstart", cwd=workdir / ".stepstone")
    assert subject.strip() == "answer U1: EUR"  # nothing recorded
    for text in ("USD", "EUR"):  # changed on purpose, and back
        assert cli("answer", "U1", text, "--revise", cwd=workdir).returncode == 0
    assert "answer U1: USD" in git("log", "-2", "--format=%s", cwd=workdir / ".stepstone")

    again = cli("run", str(nb), cwd=workdir)
    assert again.returncode == 0, again.stderr
    assert "U1 was answered: EUR (not asked again)" in _cell_output(workdir, "%unknown")
    status = json.loads(cli("status", "--json", cwd=workdir).stdout)
    assert [(u["id"], u["state"]) for u in status["unknowns"]] == [("U1", "resolved")]


@pytest.mark.kernel
def test_a_decision_revised_from_the_command_line_rewrites_its_cell_and_an_edit_wins_again(
    workdir: Path,
):
    nb = _quickstart(workdir)
    unrevised = cli("decide", "threshold", "110", "--why", "a look", "--dry-run", cwd=workdir)
    assert unrevised.returncode == 2 and "--revise" in unrevised.stderr  # as the real one
    preview = cli(
        "decide", "threshold", "110", "--why", "a look", "--revise", "--dry-run", cwd=workdir
    )
    assert preview.returncode == 0, preview.stderr
    assert "105 → 110 would run again: report (nothing recorded)" in preview.stdout
    refused = cli("decide", "threshold", "110", "--why", "too many flagged", cwd=workdir)
    assert refused.returncode == 2 and "--revise" in refused.stderr  # the preview decided nothing
    for dry in ((), ("--dry-run",)):  # a misspelled key is not a new decision
        typo = cli("decide", "treshold", "110", "--why", "x", "--revise", *dry, cwd=workdir)
        assert typo.returncode == 2, typo.stdout
        assert "no decision 'treshold' to revise (decisions: threshold)" in typo.stderr
    assert "treshold" not in cli("status", cwd=workdir).stdout
    done = cli("decide", "threshold", "110", "--why", "too many flagged", "--revise", cwd=workdir)
    assert done.returncode == 0, done.stderr
    assert "105 → 110" in done.stdout and "runs again: report" in done.stdout

    again = cli("run", str(nb), cwd=workdir)
    assert again.returncode == 0, again.stderr
    assert "[3/3] report: done" in again.stderr  # it read the threshold: it runs again
    assert "threshold: 110.0" in (workdir / "out" / "report.md").read_text()
    said = _cell_output(workdir, "%decide")  # the cell says what was decided outside
    assert said.startswith("decided threshold=110 (too many flagged)"), said

    # editing the line is the notebook's own revision: it wins again
    book = nbformat.read(str(nb), as_version=4)
    (cell,) = [c for c in book.cells if c.source.startswith("%decide")]
    cell.source = '%decide threshold=120 --revise --why "back to the notebook"'
    nbformat.write(book, str(nb))
    assert cli("run", str(nb), cwd=workdir).returncode == 0
    assert "threshold: 120.0" in (workdir / "out" / "report.md").read_text()
    decided = json.loads(cli("status", "--json", cwd=workdir).stdout)["decisions"]
    assert decided == [{"key": "threshold", "value": "120", "why": "back to the notebook"}]


@pytest.mark.kernel
def test_ask_records_an_unknown_once(workdir: Path):
    _quickstart(workdir)
    first = json.loads(cli("ask", "Which desk owns GLOBEX?", "--json", cwd=workdir).stdout)
    second = json.loads(cli("ask", "Which desk owns GLOBEX?", "--json", cwd=workdir).stdout)
    assert first["id"] == second["id"] == "U2" and first["state"] == "open"
    assert "Stepstone-Via: cli" in _trailers(workdir, 1)[0]


@pytest.mark.kernel
def test_show_gives_a_steps_record_evidence_inputs_outputs_and_commit(workdir: Path):
    _quickstart(workdir)
    done = cli("show", "summarise", "--json", cwd=workdir)
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["state"] == "verified" and shown["record"]["status"] == "confirmed"
    assert [e["check"] for e in shown["evidence"]] == [
        "file:data/summary.json",
        "expr:len(summary) == 3",
    ]
    assert "file:data/prices.csv" in shown["inputs"]
    (summary,) = [o for o in shown["outputs"] if o["name"] == "summary"]
    assert summary["type"] == "dict" and summary["shape"] == [3] and summary["format"] == "json"
    commit = git("log", "-1", "--format=%s", shown["commit"]["id"], cwd=workdir / ".stepstone")
    assert commit.strip() == "step 2 summarise: confirmed"
    text = cli("show", "summarise", cwd=workdir).stdout
    assert "evidence file:data/summary.json" in text and "output summary: dict 3" in text
    unknown = cli("show", "nosuch", cwd=workdir)
    assert unknown.returncode == 2 and "steps: make-data, summarise, report" in unknown.stderr


@pytest.mark.kernel
def test_outputs_describes_arrays_without_loading_them_and_get_writes_the_stored_bytes(
    workdir: Path,
):
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    with stepstone.open_run("job") as run:
        run.step("make", lambda: array)
    listed = json.loads(cli("outputs", "make", "--json", cwd=workdir).stdout)
    (row,) = listed
    assert (row["type"], row["shape"], row["dtype"]) == ("numpy.ndarray", [3, 4], "float32")
    done = cli("outputs", "make", "--get", "return", cwd=workdir)
    assert done.returncode == 0, done.stderr
    assert np.array_equal(np.load(workdir / "return.npy"), array)
    refused = cli("outputs", "make", "--get", "return", cwd=workdir)
    assert refused.returncode == 2 and "-o FILE" in refused.stderr  # never over a file
    assert cli("outputs", "make", "--get", "return", "-o", "a.npy", cwd=workdir).returncode == 0
    assert np.array_equal(np.load(workdir / "a.npy"), array)
    missing = cli("outputs", "make", "--get", "nosuch", cwd=workdir)
    assert missing.returncode == 2 and "outputs: return" in missing.stderr


def test_a_pickled_output_is_named_by_its_class_and_not_loaded(workdir: Path):
    from fractions import Fraction

    with stepstone.open_run("job") as run:
        run.step("make", lambda: Fraction(1, 3))
    (row,) = json.loads(cli("outputs", "make", "--json", cwd=workdir).stdout)
    assert row["format"] == "pickle" and row["type"] == "fractions.Fraction"
    assert row["loaded"] is False


@pytest.mark.kernel
def test_a_fork_shares_the_history_up_to_its_step_and_runs_apart_from_it(workdir: Path):
    nb = _quickstart(workdir)
    shown = json.loads(cli("show", "summarise", "--json", cwd=workdir).stdout)
    done = cli("fork", "quickstart", "--at", "summarise", "--as", "alt", "--json", cwd=workdir)
    assert done.returncode == 0, done.stderr
    made = json.loads(done.stdout)
    assert made["commit"] == shown["commit"]["id"] and made["steps"] == ["make-data", "summarise"]
    store = workdir / ".stepstone"
    base = git("merge-base", "quickstart", "alt", cwd=store).strip()
    assert base == made["commit"]  # a Git branch point, not a copy
    assert git("symbolic-ref", "HEAD", cwd=store).strip() == "refs/heads/quickstart"
    current = json.loads(cli("status", "--json", cwd=workdir).stdout)
    assert current["run"] == "quickstart"  # of two runs, the one that is not a fork
    (message,) = [git("log", "-1", "--format=%B", "alt", cwd=store)]
    assert "Stepstone-Status: forked" in message and "Stepstone-Via: cli" in message

    status = json.loads(cli("status", "--run", "alt", "--json", cwd=workdir).stdout)
    states = [(s["name"], s["state"]) for s in status["steps"]]
    assert states == [("make-data", "verified"), ("summarise", "verified"), ("report", "pending")]
    assert status["decisions"] == [] and status["unknowns"] == []

    ran = cli("run", str(nb), "--run", "alt", cwd=workdir)
    assert ran.returncode == 0, ran.stderr
    assert "[1/3] make-data: skipped" in ran.stderr and "[3/3] report: done" in ran.stderr
    plain = cli("run", str(nb), cwd=workdir)  # without --run: the run itself, not its fork
    assert plain.returncode == 0 and "as run quickstart" in plain.stderr, plain.stderr
    graph = cli("log", "--graph", cwd=workdir).stdout
    assert "fork of quickstart at step summarise" in graph and "|/" in graph

    again = cli("fork", "quickstart", "--at", "summarise", "--as", "alt", cwd=workdir)
    assert again.returncode == 2 and "choose another id" in again.stderr
    nowhere = cli("fork", "quickstart", "--at", "nosuch", "--as", "b", cwd=workdir)
    assert nowhere.returncode == 2 and "no step 'nosuch'" in nowhere.stderr


@pytest.mark.kernel
def test_diff_names_what_two_runs_recorded_differently(workdir: Path):
    nb = _quickstart(workdir)
    forked = cli("fork", "quickstart", "--at", "summarise", "--as", "alt", cwd=workdir)
    assert forked.returncode == 0, forked.stderr
    same = cli("diff", "quickstart", "quickstart", cwd=workdir)
    assert same.returncode == 0 and "the same" in same.stdout
    book = nbformat.read(str(nb), as_version=4)
    (cell,) = [c for c in book.cells if c.source.startswith("%decide")]
    cell.source = '%decide threshold=100 --why "a lower bar in the alternative"'
    nbformat.write(book, str(nb))
    assert cli("run", str(nb), "--run", "alt", cwd=workdir).returncode == 0
    done = cli("diff", "quickstart", "alt", "--json", cwd=workdir)
    assert done.returncode == 1
    found = json.loads(done.stdout)
    assert found["decisions"] == [{"key": "threshold", "a": "105", "b": "100"}]
    (report,) = found["steps"]
    assert report["step"] == "report" and "evidence file:out/report.md" in report["differs"]
    assert found["unknowns"] == []  # both asked the same question and left it open


def test_diff_pairs_a_step_renamed_in_one_run_with_its_old_name_in_the_other(workdir: Path):
    with stepstone.open_run("job") as run:
        run.set_plan(["load", "mail"])
        for name in ("load", "mail"):
            run.step(name, lambda name=name: name)
    assert cli("fork", "job", "--at", "mail", "--as", "alt", cwd=workdir).returncode == 0
    with stepstone.open_run("alt") as run:
        run.set_plan(["load", {"name": "mail-team", "renamed_from": ["mail"]}])
        run.step("load", lambda: "load")
        run.step("mail-team", lambda: "mail")
    found = json.loads(cli("diff", "job", "alt", "--json", cwd=workdir).stdout)
    (row,) = found["steps"]
    assert row["step"] == "mail-team" and row["differs"][0] == "renamed mail / mail-team"
    assert row["a"] is not None and row["b"] is not None


def test_the_docs_name_every_command_and_every_mcp_tool():
    import asyncio

    import click

    from stepstone.agent.mcpserver import make_server
    from stepstone.cli import main

    agents = (ROOT / "docs" / "agents.md").read_text()
    readme = (ROOT / "README.md").read_text()
    commands = main.list_commands(click.Context(main))  # imports every command's module
    assert len(commands) == 26
    for name in commands:
        text = agents + readme
        assert f"`stepstone {name}" in text or f" / `{name}" in text, name  # `push` / `pull`
    tools = asyncio.run(make_server().list_tools())
    assert len(tools) == 27
    for tool in tools:
        assert f"`{tool.name}(" in agents, tool.name


@pytest.mark.kernel
def test_agent_b_picks_up_the_run_with_only_the_command_line(workdir: Path):
    nb = _quickstart(workdir)  # agent A ran the notebook; B starts from the folder
    brief = cli("brief", "--json", cwd=workdir)
    assert brief.returncode == 0 and json.loads(brief.stdout)["run"] == "quickstart"
    actions = [
        ["answer", "U1", "USD", "--why", "the feed's README"],
        ["decide", "threshold", "104", "--why", "flag more", "--revise"],
        ["fork", "quickstart", "--at", "summarise", "--as", "alt"],
    ]
    for args in actions:
        done = cli(*args, cwd=workdir)
        assert done.returncode == 0, (args, done.stderr)
    outputs = json.loads(
        cli("outputs", "summarise", "--run", "quickstart", "--json", cwd=workdir).stdout
    )
    (summary,) = [o for o in outputs if o["name"] == "summary"]
    assert summary["type"] == "dict"
    assert cli("run", str(nb), "--run", "alt", cwd=workdir).returncode == 0
    assert cli("run", str(nb), cwd=workdir).returncode == 0  # the notebook agrees with B
    assert "threshold: 104.0" in (workdir / "out" / "report.md").read_text()
    differ = json.loads(cli("diff", "quickstart", "alt", "--json", cwd=workdir).stdout)
    assert differ["decisions"] == []  # the notebook's line says B's revision: the fork read it
    done = cli("finish", "--run", "quickstart", cwd=workdir)
    assert done.returncode == 0, done.stderr
    log = git(
        "log",
        "--format=%s|%(trailers:key=Stepstone-Via,valueonly)",
        "quickstart",
        cwd=workdir / ".stepstone",
    )
    by_b = [line.split("|")[0] for line in log.splitlines() if line.strip().endswith("|cli")]
    assert by_b[-2:] == ["revise threshold: 105 -> 104", "answer U1: USD"]
    assert by_b[0].startswith("finish")


@pytest.mark.kernel
def test_a_decision_made_outside_before_the_notebook_met_it_stands_over_its_line(
    workdir: Path,
):
    nb = _quickstart(workdir)
    forked = cli("fork", "quickstart", "--at", "summarise", "--as", "alt", cwd=workdir)
    assert forked.returncode == 0, forked.stderr
    assert "left behind: decision threshold; unknown U1" in forked.stdout
    # the fork has no decision yet: an agent makes one before the notebook runs there
    made = cli("decide", "threshold", "100", "--why", "a lower bar", "--run", "alt", cwd=workdir)
    assert made.returncode == 0, made.stderr
    ran = cli("run", str(nb), "--run", "alt", cwd=workdir)
    assert ran.returncode == 0, ran.stderr
    assert "threshold: 100.0" in (workdir / "out" / "report.md").read_text()
    said = _cell_output(workdir, "%decide")
    assert "threshold=100 stands: decided outside the notebook (cli) over this line's 105" in said
    again = cli("run", str(nb), "--run", "alt", cwd=workdir)  # and keeps standing
    assert again.returncode == 0 and "[3/3] report: skipped" in again.stderr, again.stderr


@pytest.mark.kernel
def test_an_edited_cell_is_stale_in_status_and_finish_refuses_to_leave_it_out(workdir: Path):
    nb = _quickstart(workdir)

    def edit(old: str, new: str, body: str = "\nedited = True") -> None:
        book = nbformat.read(str(nb), as_version=4)
        (cell,) = [c for c in book.cells if c.source.startswith(old)]
        cell.source = cell.source.replace(old, new) + body
        nbformat.write(book, str(nb))

    def states() -> dict[str, tuple[str, str]]:
        shown = json.loads(cli("status", "--json", cwd=workdir).stdout)
        return {s["name"]: (s["state"], s["reason"]) for s in shown["steps"]}

    edit("%%step summarise", "%%step summarise --out summary", "")  # an option: no rerun
    assert {state for state, _ in states().values()} == {"verified"}
    edit("%%step summarise --out summary", "%%step summarise")
    assert states() == {
        "make-data": ("verified", ""),
        "summarise": ("stale", "its source changed since it ran (its cell in the notebook)"),
        "report": ("stale", "it runs again after step summarise"),
    }
    shown = json.loads(cli("status", "--json", cwd=workdir).stdout)
    assert shown["next_action"].startswith("run step 2 summarise (its source changed")
    checked = cli("verify", cwd=workdir)  # says what status says, and exits 1 for it
    assert checked.returncode == 1, checked.stdout
    assert "2 summarise: stale - its source changed since it ran" in checked.stdout
    checked = json.loads(cli("verify", "--json", cwd=workdir).stdout)
    assert not checked["ok"] and checked["steps"][1]["state"] == "stale"
    assert cli("answer", "U1", "USD", "--why", "the feed's README", cwd=workdir).returncode == 0
    refused = cli("finish", cwd=workdir)
    assert refused.returncode == 2
    assert "edited or added since they ran: summarise." in refused.stderr
    edit("%%step summarise", "%%step summarise-prices")  # renamed and edited: a new step
    shown = json.loads(cli("status", "--json", cwd=workdir).stdout)
    assert shown["next_action"].startswith("run the notebook again: its step(s) summarise-prices")
    refused = cli("finish", cwd=workdir)
    assert refused.returncode == 2 and "since they ran: summarise-prices." in refused.stderr
    assert cli("run", str(nb), cwd=workdir).returncode == 0  # runs it: now it may finish
    assert cli("finish", cwd=workdir).returncode == 0


@pytest.mark.kernel
def test_the_brief_names_finish_once_only_finishing_is_left_and_a_gone_input_as_gone(
    workdir: Path,
):
    _quickstart(workdir)
    brief = json.loads(cli("brief", "--json", cwd=workdir).stdout)
    assert brief["next_tool"]["tool"] == "answer"  # U1 is open: running again is the way on
    assert brief["next_command"]["argv"][:2] == ["stepstone", "run"]
    assert cli("answer", "U1", "EUR", cwd=workdir).returncode == 0
    brief = json.loads(cli("brief", "--json", cwd=workdir).stdout)
    assert brief["next_tool"]["tool"] == "finish"
    assert brief["command"].endswith("&& stepstone finish --run quickstart")  # as next_action
    (workdir / "data" / "prices.csv").unlink()
    status = json.loads(cli("status", "--json", cwd=workdir).stdout)
    reasons = {s["name"]: s["reason"] for s in status["steps"]}
    assert "its input data/prices.csv is gone since it ran" in reasons["summarise"]
