"""The read caches (the JSON file cache and the step index) are derived data: reads
through them equal full reads from Git, and damage to them only means a full read."""

import json
from pathlib import Path

import pytest

import stepstone
from stepstone.errors import RecordError
from stepstone.run import step_path
from stepstone.settings import Settings


def _state(run: stepstone.Run) -> tuple:
    return (
        [s.model_dump() for s in run.steps],
        {k: v.model_dump() for k, v in run.records.items()},
        {k: v.model_dump() for k, v in run.decisions.items()},
        run.status().to_json(),
    )


def _caches(workdir: Path, run: str = "big") -> list[Path]:
    folder = workdir / ".stepstone" / "stepstone" / "cache"
    return [folder / f"{run}.json", folder / f"{run}.index"]


def _big_run(steps: int = 120, planned: int = 150) -> None:
    with stepstone.open_run("big") as run:
        run.set_plan([f"s{i}" for i in range(planned)])
        for i in range(steps):
            run.step(f"s{i}", lambda: None)
        for i in range(210):  # the JSON cache is kept from 200 files on
            run.decide(f"k{i}", "v", "why")


def test_reads_through_the_caches_equal_full_reads(workdir: Path):
    _big_run()
    stepstone.open_run("big", drive=False)
    assert all(cache.exists() for cache in _caches(workdir))
    # change records, shrink the plan, add a decision: the caches are now behind
    with stepstone.open_run("big") as run:
        run.set_plan([f"s{i}" for i in range(100)] + ["new"])
        run.decide("k", "v", "why")
        run.step("s0", lambda: 1, force=True)
    cached = _state(stepstone.open_run("big", drive=False))
    for cache in _caches(workdir):
        cache.unlink()
    full = _state(stepstone.open_run("big", drive=False))
    assert cached == full
    assert len(full[0]) == 101 and "k" in full[2]
    assert [s["state"] for s in full[3]["steps"]] == ["verified"] * 100 + ["pending"]


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["torn", "garbage", "empty", "other tree"])
def test_a_damaged_cache_means_a_full_read(workdir: Path, damage: str):
    _big_run(steps=120, planned=120)
    stepstone.open_run("big", drive=False)
    for cache in _caches(workdir):
        data = cache.read_bytes()
        cache.write_bytes(
            {
                "torn": data[: len(data) // 2],
                "garbage": b"\x00\xff" * 50,
                "empty": b"",
                "other tree": data.replace(data[10:30], b"0" * 20),
            }[damage]
        )
    run = stepstone.open_run("big", drive=False)
    assert len(run.records) == 120 and len(run.decisions) == 210
    assert [s.state for s in run.status().steps] == ["verified"] * 120


def test_the_index_is_brought_up_to_date_by_the_steps_since(workdir: Path):
    _big_run(steps=50, planned=150)
    stepstone.open_run("big", drive=False)
    index = _caches(workdir)[1]
    before = index.stat().st_mtime_ns
    with stepstone.open_run("big") as run:
        for i in range(50, 60):
            run.step(f"s{i}", lambda: None)
    status = stepstone.open_run("big", drive=False).status()
    assert index.stat().st_mtime_ns != before
    assert [s.state for s in status.steps[:61]] == ["verified"] * 60 + ["pending"]


def test_a_file_check_is_rechecked_through_the_index(workdir: Path):
    with stepstone.open_run("big") as run:
        run.set_plan(["write", "after"])
        run.step("write", lambda: Path("out.txt").write_text("one"), checks=["file:out.txt"])
        run.step("after", lambda: None)
    assert [s.state for s in stepstone.open_run("big", drive=False).status().steps] == [
        "verified",
        "verified",
    ]
    Path("out.txt").write_text("two")
    status = stepstone.open_run("big", drive=False).status()
    assert [s.state for s in status.steps] == ["stale", "stale"]
    assert "changed since it was recorded" in status.steps[0].reason


def test_a_corrupt_record_is_never_cached_and_is_reported_on_every_open(workdir: Path):
    _big_run(steps=30, planned=200)
    stepstone.open_run("big", drive=False)  # index saved at this tree
    index = _caches(workdir)[1]
    saved = index.read_bytes()
    with stepstone.open_run("big") as run:
        run.commit_record(step_path("s3"), b'{"not": "a record"}\n', "hand edit", [])
    for _ in range(2):
        reader = stepstone.open_run("big", drive=False)
        assert any(step_path("s3") in note for note in reader.corrupt)
        assert reader.status().steps[3].state == "pending"
        assert index.read_bytes() == saved  # the index with the bad record was not kept
    with pytest.raises(RecordError):
        stepstone.open_run("big")


def test_status_json_text_equals_to_json(workdir: Path):
    with stepstone.open_run("big") as run:
        run.set_plan(["a", "b:1", "c+d=e@f", "g"])
        run.step("a", lambda: Path("a.txt").write_text("x"), checks=["file:a.txt"])

        def fails() -> None:
            raise ValueError('a "quoted" reason, caf\u00e9\\n')

        with pytest.raises(ValueError):
            run.step("b:1", fails)
    status = stepstone.open_run("big", drive=False).status()
    assert json.loads(status.json_text()) == status.to_json()
    assert json.loads(status.steps_json()) == status.to_json()["steps"]


def _saved_index(workdir: Path) -> tuple:
    from stepstone.rules.index import StepIndex

    index = StepIndex.loads(_caches(workdir)[1].read_bytes())
    names, seqs, finished, kinds, shapes = index.records.columns()
    records = {
        name: (seq, when, shapes[kind])
        for name, seq, when, kind in zip(names, seqs, finished, kinds, strict=True)
    }
    return index.tree, index.plan, index.extras, records, index.legacy_layout


def test_a_driver_saves_the_index_it_kept_up_to_date(workdir: Path):
    with stepstone.open_run("big", settings=Settings.from_env(index_every=7)) as run:
        run.set_plan([f"s{i}" for i in range(200)])  # worth keeping an index for
        for i in range(20):
            run.step(f"s{i}", lambda: None)
            if i == 10:  # saved between steps, every 7 commits
                mid = _saved_index(workdir)
                # 7 commits (created, plan, s0-s4) before s5 began: saved with 5 records
                assert mid[0] != run.state.snap.tree and sorted(mid[3]) == [
                    f"s{k}" for k in range(5)
                ]
        with pytest.raises(ZeroDivisionError):
            run.step("s20", lambda: 1 / 0)
        tip_tree = run.state.snap.tree
    kept = _saved_index(workdir)
    assert kept[0] == tip_tree  # saved at close, describing the last commit
    _caches(workdir)[1].unlink()
    stepstone.open_run("big", drive=False)  # rebuilt from Git alone
    assert _saved_index(workdir) == kept


def test_a_driver_that_wrote_records_around_the_index_does_not_save_it(workdir: Path):
    _big_run(steps=5, planned=200)
    stepstone.open_run("big", drive=False)
    saved = _saved_index(workdir)
    with stepstone.open_run("big") as run:
        record = run.records["s1"].model_copy(update={"seq": 999})
        from stepstone.model.models import dump

        run.commit_record(step_path("s1"), dump(record), "by hand", [])
    assert _saved_index(workdir) == saved
    assert stepstone.open_run("big", drive=False).records["s1"].seq == 999


def test_a_small_run_keeps_no_index_and_reads_every_record(workdir: Path):
    with stepstone.open_run("small") as run:
        run.set_plan(["a", "b"])
        run.step("a", lambda: None)
    stepstone.open_run("small", drive=False).status()
    assert not any(cache.exists() for cache in _caches(workdir, "small"))


def test_the_short_path_for_plain_steps_agrees_with_the_full_check(workdir: Path):
    """status() takes a short path for plain confirmed steps; status(progress=...)
    checks every step the long way. Both must say the same of a mixed run."""
    Path("f.txt").write_text("one")
    with stepstone.open_run("mixed") as run:
        run.set_plan(
            [f"p{i}" for i in range(220)]
            + [{"name": "checked", "checks": ["file:f.txt"]}]
            + [f"q{i}" for i in range(5)]
            + ["fails", "after", "never"]
        )
        for i in range(220):
            run.step(f"p{i}", lambda: None)
        run.step("checked", lambda: None)
        for i in range(5):
            run.step(f"q{i}", lambda: None)
        with pytest.raises(ZeroDivisionError):
            run.step("fails", lambda: 1 / 0)
    with stepstone.open_run("mixed") as run:
        run.step("p3", lambda: None, force=True)  # skipped: verified, nothing redone
    for change in (None, "f.txt changed", "p100 redone"):
        if change == "f.txt changed":
            Path("f.txt").write_text("two")
        if change == "p100 redone":
            with stepstone.open_run("mixed") as run:
                start = run.begin("p100", force=True)
                run.confirm(start, values={})  # a newer seq than the steps after it
        reader = stepstone.open_run("mixed", drive=False)
        short = reader.status()
        long = reader.status(progress=lambda n: None)
        assert short == long, change
        assert json.loads(short.json_text()) == long.to_json()
    states = [s.state for s in long.steps]
    assert states[:101] == ["verified"] * 101 and states[101] == "stale"
