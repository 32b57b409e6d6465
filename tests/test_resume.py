"""Resume reads the latest commit, re-verifies evidence, and names the next action."""

import json
from pathlib import Path

import pytest
from conftest import git

import stepstone


def _three_steps(run: stepstone.Run, calls: list[str]) -> None:
    def fetch():
        calls.append("fetch")
        Path("raw.json").write_text(json.dumps([1, 2, 3]))
        return {"rows": 3}

    def clean():
        calls.append("clean")
        data = json.loads(Path("raw.json").read_text())
        Path("clean.csv").write_text("x\n" + "\n".join(str(v) for v in data) + "\n")

    def report():
        calls.append("report")
        return "ok"

    run.step("fetch", fetch, checks=["file:raw.json"])
    run.step("clean", clean, checks=["file:clean.csv"])
    run.step("report", report)


def test_a_resumed_run_skips_verified_steps_and_restores_their_values(workdir: Path):
    calls: list[str] = []
    with stepstone.open_run("demo") as run:
        _three_steps(run, calls)
    with stepstone.open_run("demo") as run:
        status = run.status()
        assert [s.state for s in status.steps] == ["verified"] * 3
        assert "finish" in status.next_action
        result = run.step("fetch", lambda: pytest.fail("must not run"), checks=["file:raw.json"])
        assert result.skipped and result.value == {"rows": 3}
    assert calls == ["fetch", "clean", "report"]


def test_changed_evidence_makes_the_step_and_those_after_it_stale(workdir: Path):
    calls: list[str] = []
    with stepstone.open_run("demo") as run:
        _three_steps(run, calls)
    Path("clean.csv").write_text("x\n9\n")
    with stepstone.open_run("demo") as run:
        status = run.status()
        assert [s.state for s in status.steps] == ["verified", "stale", "stale"]
        assert "changed" in status.steps[1].reason
        assert status.next_action.startswith("run step 2 clean")
        calls.clear()
        _three_steps(run, calls)
    assert calls == ["clean", "report"]


def test_a_deleted_output_file_is_stale_not_trusted(workdir: Path):
    with stepstone.open_run("demo") as run:
        _three_steps(run, [])
    Path("raw.json").unlink()
    with stepstone.open_run("demo") as run:
        first = run.status().steps[0]
    assert first.state == "stale" and "does not exist" in first.reason


def test_a_failing_step_is_recorded_failed_and_nothing_after_it_is_done(workdir: Path):
    with stepstone.open_run("demo") as run:
        run.set_plan(["a", "b"])
        with pytest.raises(ZeroDivisionError):
            run.step("a", lambda: 1 / 0)
        with pytest.raises(stepstone.StepOrderError, match="'a' is not confirmed"):
            run.step("b", lambda: 2)
    with stepstone.open_run("demo") as run:
        states = [(s.state, s.reason) for s in run.status().steps]
    assert states[0][0] == "failed" and "ZeroDivisionError" in states[0][1]
    assert states[1] == ("pending", "")


def test_a_check_that_does_not_pass_fails_the_step(workdir: Path):
    with stepstone.open_run("demo") as run, pytest.raises(stepstone.CheckFailed, match=r"x\.json"):
        run.step("a", lambda: None, checks=["file:x.json"])
    with stepstone.open_run("demo") as run:
        assert run.status().steps[0].state == "failed"


def test_force_runs_a_step_out_of_order(workdir: Path):
    with stepstone.open_run("demo") as run:
        run.set_plan(["a", "b"])
        assert run.step("b", lambda: 2, force=True).value == 2


def test_redoing_an_earlier_step_makes_later_steps_run_again(workdir: Path):
    calls: list[str] = []
    with stepstone.open_run("demo") as run:
        _three_steps(run, calls)
    Path("raw.json").write_text("[5]")
    calls.clear()
    with stepstone.open_run("demo") as run:
        _three_steps(run, calls)
    assert calls == ["fetch", "clean", "report"]
    with stepstone.open_run("demo") as run:
        assert [s.state for s in run.status().steps] == ["verified"] * 3


def test_an_explicit_plan_rejects_unknown_checks_before_anything_is_committed(workdir: Path):
    with stepstone.open_run("demo") as run:
        tip = run.store.refs.tip("demo")
        with pytest.raises(stepstone.UnknownCheck, match="nope:x"):
            run.set_plan([{"name": "a", "checks": ["nope:x"]}])
        assert run.store.refs.tip("demo") == tip


def test_an_explicit_plan_refuses_a_step_it_does_not_have(workdir: Path):
    with stepstone.open_run("demo") as run:
        run.set_plan(["a"])
        with pytest.raises(stepstone.PlanError, match="not in the plan"):
            run.step("zzz", lambda: 1)


def test_duplicate_step_names_in_a_plan_are_refused(workdir: Path):
    with stepstone.open_run("demo") as run, pytest.raises(stepstone.PlanError, match="duplicate"):
        run.set_plan(["a", "b", "a"])


def test_decisions_are_not_reopened(workdir: Path):
    with stepstone.open_run("demo") as run:
        run.decide("model", "ridge", "lowest error")
    with stepstone.open_run("demo") as run:
        assert stepstone.decided("model") == "ridge"
        tip = run.store.refs.tip("demo")
        run.decide("model", "ridge", "lowest error")  # the same cell run again: no new commit
        assert run.store.refs.tip("demo") == tip
        with pytest.raises(stepstone.DecisionConflict, match="already made as 'ridge'"):
            run.decide("model", "lasso", "changed my mind")
        revised = run.decide("model", "lasso", "new data", revise=True)
        assert revised.revised_from == "ridge"


def test_unknowns_stay_open_until_resolved(workdir: Path):
    with stepstone.open_run("demo") as run:
        u = run.unknown("is the feed complete?")
        assert run.unknown("is the feed complete?").id == u.id
        assert [x.id for x in run.status().open_unknowns] == [u.id]
    with stepstone.open_run("demo") as run:
        run.resolve_unknown(u.id, "yes, checked with the vendor")
        assert run.status().open_unknowns == ()
        with pytest.raises(stepstone.InvalidInput, match="no unknown 'U9'"):
            run.resolve_unknown("U9", "?")


@pytest.mark.parametrize("bad", ["", "../x", "a/b", "x" * 200, "a\x00b", ".hidden", "a..b"])
def test_names_that_could_escape_the_store_are_refused(workdir: Path, bad: str):
    with pytest.raises(stepstone.InvalidInput):
        stepstone.open_run(bad)
    with stepstone.open_run("ok") as run, pytest.raises(stepstone.InvalidInput):
        run.step(bad, lambda: 1)


def test_a_run_opened_read_only_takes_no_lock_and_cannot_commit(workdir: Path):
    with stepstone.open_run("demo") as driver:
        driver.step("a", lambda: 1)
        reader = stepstone.open_run("demo", drive=False)
        assert reader.status().steps[0].state == "verified"
        with pytest.raises(stepstone.StepstoneError, match="read-only"):
            reader.step("b", lambda: 2)


def test_reading_an_unknown_run_lists_the_runs(workdir: Path):
    stepstone.open_run("alpha").close()
    with pytest.raises(stepstone.RunNotFound, match="alpha"):
        stepstone.open_run("beta", drive=False)


def test_a_run_begun_with_the_two_level_layout_keeps_it(workdir: Path):
    from stepstone.model.models import StepRecord, dump, now
    from stepstone.run import step_path

    with stepstone.open_run("old") as run:
        run.set_plan(["a", "b"])
        failed = StepRecord(
            number=1, name="a", status="failed", started=now(), finished=now(), seq=run.seq + 1
        )
        run.ledger.commit(
            {step_path("a", legacy=True): dump(failed)},
            "as an older version wrote it",
            [],
            verbatim=True,
        )
    with stepstone.open_run("old") as run:
        assert run.step("a", lambda: 1).value == 1  # rewritten where it was, not duplicated
        run.step("b", lambda: 2)
    files = git("ls-tree", "-r", "--name-only", "old", "steps", cwd=workdir / ".stepstone").split()
    assert sorted(files) == sorted([step_path("a", legacy=True), step_path("b", legacy=True)])
    with stepstone.open_run("new") as run:
        run.step("a", lambda: 1)
    files = git("ls-tree", "-r", "--name-only", "new", "steps", cwd=workdir / ".stepstone").split()
    assert files == [step_path("a")] and files[0].count("/") == 4


def test_a_run_closed_inside_a_step_commits_nothing_more(workdir: Path):
    run = stepstone.open_run("job")
    with pytest.raises(stepstone.StepstoneError, match="read-only or is closed"):
        run.step("s1", run.close)
    subjects = git("log", "--all", "--format=%s", cwd=workdir / ".stepstone").splitlines()
    assert subjects == ["run job: created"]  # no record of s1, nor its plan entry


def test_a_skipped_step_gives_back_a_dict_in_its_key_order(workdir: Path):
    made = {"zeta": 1, "alpha": {"y": 2, "b": [3, {"d": 4, "c": 5}]}}
    with stepstone.open_run("order") as run:
        run.step("make", lambda: made)
    with stepstone.open_run("order") as run:
        result = run.step("make", lambda: {})
    assert result.skipped and result.value == made
    assert list(result.value) == ["zeta", "alpha"] and list(result.value["alpha"]) == ["y", "b"]
    assert list(result.value["alpha"]["b"][1]) == ["d", "c"]


def test_a_step_met_incrementally_costs_one_commit_that_holds_its_plan_entry(workdir: Path):
    with stepstone.open_run("one") as run:
        for name in ("a", "b", "c"):
            run.step(name, lambda: 1)
    store = workdir / ".stepstone"
    subjects = git("log", "--format=%s", "one", cwd=store).splitlines()
    assert subjects == [
        "step 3 c: confirmed",
        "step 2 b: confirmed",
        "step 1 a: confirmed",
        "run one: created",
    ]
    changed = git("show", "--name-only", "--format=", "one~1", cwd=store).split()
    assert any(path.startswith("plan/") for path in changed)  # b's entry rode with b
    with stepstone.open_run("one") as run:
        assert [run.step(n, lambda: 2).skipped for n in ("a", "b", "c")] == [True] * 3
    assert len(git("log", "--format=%s", "one", cwd=store).splitlines()) == 4
