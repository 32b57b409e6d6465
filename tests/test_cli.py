"""The command line in a subprocess, against stores made by real runs."""

import json
from pathlib import Path

import pytest
from conftest import git, run_python
from conftest import stepstone_cli as cli
from test_records import _commit_edit

import stepstone
from stepstone.present import render


def _make_run(workdir: Path, steps: int = 3, run_id: str = "job") -> None:
    with stepstone.open_run(run_id) as run:
        run.set_plan(
            [{"name": f"s{i}", "checks": [f"file:s{i}.txt"]} for i in range(1, steps + 1)],
            goal="Publish the weekly numbers",
        )
        for i in range(1, steps + 1):
            run.step(f"s{i}", lambda i=i: Path(f"s{i}.txt").write_text(str(i)) and None)
        run.decide("region", "eu", "the client is in Lisbon")
        run.unknown("Is the feed complete for Sunday?")


def _unresolved_effect(run_id: str = "job") -> str:
    def boom(key: str) -> None:
        raise TimeoutError("no answer")

    with stepstone.open_run(run_id) as run:
        run.set_plan([*run.steps, {"name": "notify"}])
        with pytest.raises(TimeoutError):
            run.step("notify", lambda: stepstone.effect("page", boom))
        with pytest.raises(stepstone.UnresolvedEffect):
            run.step("notify", lambda: stepstone.effect("page", boom))
        return next(iter(run.effects))


def test_status_json_has_the_documented_shape(workdir: Path):
    _make_run(workdir)
    done = cli("status", "--json", cwd=workdir)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["run"] == "job" and "next_action" in data
    assert [(s["name"], s["state"]) for s in data["steps"]] == [
        ("s1", "verified"),
        ("s2", "verified"),
        ("s3", "verified"),
    ]
    assert data["decisions"] == [{"key": "region", "value": "eu", "why": "the client is in Lisbon"}]
    assert data["unknowns"][0]["state"] == "open" and data["unknowns"][0]["id"] == "U1"
    assert data["effects"] == []


def test_status_json_matches_the_schema_stepstone_schema_prints(workdir: Path):
    import jsonschema

    _make_run(workdir)
    with stepstone.open_run("job") as run:
        run.set_plan([*run.steps, {"name": "send"}, {"name": "reader"}])
        run.step("send", lambda: stepstone.effect("ping", lambda key: {"id": 7}))
        run.step("reader", lambda: stepstone.decided("region"), inputs=["unknown:U1"])
    _unresolved_effect()
    Path("s1.txt").write_text("changed")
    data = json.loads(cli("status", "--json", cwd=workdir).stdout)
    schema = json.loads(cli("schema", cwd=workdir).stdout)["status --json"]
    jsonschema.validate(data, schema)
    assert {e["state"] for e in data["effects"]} == {"confirmed", "unresolved"}
    steps = {s["name"]: s for s in data["steps"]}
    assert steps["reader"]["inputs"] == {"decision:region": "eu", "unknown:U1": None}
    assert steps["s1"]["reason"] and steps["s2"]["reason"]  # the stale step, and the chain
    assert data["resting_on_open_unknowns"] == [{"step": "reader", "unknown": "U1"}]
    for broken in ({**data, "extra": 1}, {**data, "steps": [{**data["steps"][0], "state": "x"}]}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, schema)


def test_status_exits_1_and_names_the_resolve_command_with_an_unresolved_effect(workdir: Path):
    _make_run(workdir)
    key = _unresolved_effect()
    done = cli("status", cwd=workdir)
    assert done.returncode == 1
    assert f"stepstone resolve {key}" in done.stdout
    effect = json.loads(cli("status", "--json", cwd=workdir).stdout)["effects"][0]
    assert (effect["key"], effect["step"], effect["name"], effect["state"]) == (
        key,
        "notify",
        "page",
        "unresolved",
    )


def test_log_agrees_with_git_and_filters_by_step(workdir: Path):
    _make_run(workdir)
    lines = cli("log", cwd=workdir).stdout.splitlines()
    subjects = git("log", "--format=%s", "job", cwd=workdir / ".stepstone").splitlines()
    assert [line.split(" ", 3)[3] for line in lines] == subjects
    only = json.loads(cli("log", "--json", "--step", "s2", cwd=workdir).stdout)
    assert [e["subject"] for e in only] == ["step 2 s2: confirmed"]
    assert only[0]["evidence"][0].startswith("file:s2.txt sha256=")
    bad = cli("log", "--step", "nope", cwd=workdir)
    assert bad.returncode == 2 and "has no step 'nope'" in bad.stderr


def test_verify_reports_what_went_stale(workdir: Path):
    _make_run(workdir)
    assert cli("verify", cwd=workdir).returncode == 0
    Path("s2.txt").write_text("changed")
    done = cli("verify", "--json", cwd=workdir)
    assert done.returncode == 1
    states = {s["name"]: (s["state"], s["reason"]) for s in json.loads(done.stdout)["steps"]}
    assert states["s1"][0] == "verified"
    assert states["s2"] == ("stale", "s2.txt changed since it was recorded (sha256 differs)")
    assert states["s3"][0] == "stale"


@pytest.mark.kernel
def test_repo_and_run_given_before_the_command_apply_to_it(workdir: Path):
    _make_run(workdir, run_id="alpha")
    _make_run(workdir, run_id="beta")
    elsewhere = workdir / "elsewhere"
    elsewhere.mkdir()
    store = str(workdir / ".stepstone")
    before = cli("--repo", store, "--run", "beta", "status", "--json", cwd=elsewhere)
    after = cli("status", "--json", "--repo", store, "--run", "beta", cwd=elsewhere)
    assert before.returncode == after.returncode == 0, before.stderr
    assert json.loads(before.stdout)["run"] == json.loads(after.stdout)["run"] == "beta"
    assert json.loads(before.stdout)["steps"] == json.loads(after.stdout)["steps"]
    # the command's own option wins over the one before it, as the nearer one
    done = cli(
        "--run", "alpha", "--repo", store, "status", "--json", "--run", "beta", cwd=elsewhere
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["run"] == "beta"
    refused = cli("--repo", store, "schema", cwd=elsewhere)
    assert refused.returncode == 2
    assert "stepstone schema takes no --repo" in refused.stderr, refused.stderr
    assert "--repo" in cli("--help", cwd=elsewhere).stdout


def test_runs_lists_each_run_with_its_state(workdir: Path):
    _make_run(workdir, run_id="alpha")
    _make_run(workdir, run_id="beta")
    with stepstone.open_run("beta") as run:
        run.finish(force=True)
    rows = {r["run"]: r for r in json.loads(cli("runs", "--json", cwd=workdir).stdout)}
    assert rows["alpha"]["state"] == "active" and rows["beta"]["state"] == "finished"
    assert rows["alpha"]["confirmed"] == rows["alpha"]["steps"] == 3
    text = cli("runs", cwd=workdir).stdout
    assert "alpha" in text and "finished" in text


def test_several_runs_need_a_run_id(workdir: Path):
    _make_run(workdir, run_id="alpha")
    _make_run(workdir, run_id="beta")
    done = cli("status", cwd=workdir)
    assert done.returncode == 2 and "alpha, beta" in done.stderr and "--run" in done.stderr
    assert cli("status", "--run", "beta", cwd=workdir).returncode == 0


def test_brief_of_a_50_step_run_is_short_and_complete(workdir: Path):
    _make_run(workdir, steps=50)
    key = _unresolved_effect()
    Path("s30.txt").write_text("changed")
    done = cli("brief", cwd=workdir)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert len(text.splitlines()) < 60
    for expected in (
        "Publish the weekly numbers",
        "`region` = `eu`",
        "Is the feed complete",
        f"stepstone resolve {key}",
        "30 s30: **stale**",
        "## Next",
        "steps 1-26: verified",
        "29 s29: file:s29.txt",
        "open_run('job')",  # no notebook, no script known: the code that drives it
    ):
        assert expected in text, expected
    data = json.loads(cli("brief", "--json", cwd=workdir).stdout)
    assert data["goal"] == "Publish the weekly numbers" and len(data["done"]) == 29


def test_status_of_a_long_run_is_a_few_lines_and_all_lists_every_step(workdir: Path):
    with stepstone.open_run("long") as run:
        run.set_plan([f"s{i}" for i in range(1, 301)])
        for i in range(1, 251):
            run.step(f"s{i}", lambda: None)
    short = cli("status", cwd=workdir)
    assert short.returncode == 0, short.stderr
    lines = short.stdout.splitlines()
    assert len(lines) < 15, short.stdout
    assert "... 246 more verified (steps 3-248)" in short.stdout
    assert "... 46 more pending (steps 253-298)" in short.stdout
    assert [line.split()[0] for line in lines if line.strip().startswith(("249", "251"))] == [
        "249",
        "251",
    ]
    assert lines[-1] == "next: run step 251 s251 (not run yet)"
    every = cli("status", "--all", cwd=workdir)
    assert len(every.stdout.splitlines()) == 1 + 300 + 1
    html = render.status_html(stepstone.open_run("long", drive=False).status())
    assert html.count("<tr>") == 1 + 4 + 1 + 4 + 1


def test_schema_describes_every_record_file(workdir: Path):
    schemas = json.loads(cli("schema", cwd=workdir).stdout)
    assert {"RunInfo", "PlannedStep", "StepRecord", "Decision", "Unknown", "EffectRecord"} <= set(
        schemas
    )
    assert "schema_version" in schemas["StepRecord"]["properties"]


def test_finish_from_the_command_line(workdir: Path):
    _make_run(workdir)
    refused = cli("finish", cwd=workdir)
    assert refused.returncode == 2 and "U1 is open" in refused.stderr
    done = cli("finish", "--force", cwd=workdir)
    assert done.returncode == 0 and "# Run job" in done.stdout
    assert git("tag", cwd=workdir / ".stepstone").split() == ["stepstone/job"]


@pytest.mark.parametrize("command", ["status", "log", "verify", "brief", "runs"])
def test_a_path_that_is_not_a_store_is_one_line_and_exit_2(workdir: Path, command: str):
    (workdir / "plain").mkdir()
    (workdir / "plain" / "x.txt").write_text("x")
    done = cli(command, "--repo", "plain", cwd=workdir)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and "not a Git repository" in done.stderr


def test_an_unknown_run_lists_the_runs(workdir: Path):
    _make_run(workdir)
    done = cli("status", "--run", "nope", cwd=workdir)
    assert done.returncode == 2 and "runs there: job" in done.stderr


def test_a_corrupt_record_is_reported_and_the_rest_still_shown(workdir: Path):
    _make_run(workdir)
    store = workdir / ".stepstone"
    step_file = next(
        p
        for p in git("ls-tree", "-r", "--name-only", "job", cwd=store).split()
        if p.endswith("/s2.json")
    )
    tip = _commit_edit(store, step_file, "{broken")
    done = cli("status", cwd=workdir)
    assert done.returncode == 1
    assert step_file in done.stdout and tip[:10] in done.stdout
    assert "s1" in done.stdout and "s3" in done.stdout


def test_a_store_from_a_newer_schema_asks_for_an_upgrade(workdir: Path):
    _make_run(workdir)
    store = workdir / ".stepstone"
    raw = json.loads(git("show", "job:run.json", cwd=store))
    raw["schema_version"] = 99
    _commit_edit(store, "run.json", json.dumps(raw))
    done = cli("status", cwd=workdir)
    assert done.returncode == 2 and "upgrade stepstone" in done.stderr


def test_each_command_is_registered_by_the_module_the_lazy_group_imports_for_it():
    import importlib

    from stepstone.cli import common

    for module in set(common.COMMAND_MODULES.values()):
        importlib.import_module(f"stepstone.cli.{module}")
    registered = {name: cmd.callback.__module__ for name, cmd in common.main.commands.items()}
    wanted = {name: f"stepstone.cli.{module}" for name, module in common.COMMAND_MODULES.items()}
    assert registered == wanted


def test_status_in_a_new_process_imports_no_other_commands_module(workdir: Path):
    _make_run(workdir)
    code = """
import sys
from stepstone.cli import main
try:
    main(["status"])
except SystemExit:
    pass
shown = ("stepstone.cli.", "stepstone.notebook.notebook")
print(sorted(m for m in sys.modules if m.startswith(shown)))
"""
    done = run_python(code, cwd=workdir)
    imported = done.stdout.strip().splitlines()[-1]
    wanted = ["stepstone.cli.commands", "stepstone.cli.common", "stepstone.notebook.notebook_plan"]
    assert imported == repr(wanted)


def test_rerun_of_a_name_the_run_does_not_have_says_which_names_it_has_and_how(workdir: Path):
    _make_run(workdir)
    bad = cli("rerun", "s2-renamed", "--why", "the feed was late", cwd=workdir)
    assert bad.returncode == 2
    assert "has no step 's2-renamed'" in bad.stderr and "s1, s2, s3" in bad.stderr
    assert "stepstone rerun OLD_NAME --why REASON" in bad.stderr


def test_a_summary_file_that_cannot_be_written_says_the_run_is_finished_and_how_to_write_it(
    workdir: Path,
):
    (workdir / "demo.summary.md").mkdir()  # in the way of the file
    with stepstone.open_run("demo") as run:
        run.step("a", lambda: 1)
        with pytest.raises(stepstone.StepstoneError, match=r"is finished .* finish again"):
            run.finish()
        assert run.info.finished
    (workdir / "demo.summary.md").rmdir()
    with stepstone.open_run("demo") as run:
        assert "demo" in run.finish()
    assert "demo" in (workdir / "demo.summary.md").read_text()
