"""The read cache is derived data: reads through it equal full reads from Git."""

from pathlib import Path

import stepstone


def _state(run: stepstone.Run) -> tuple:
    return (
        [s.model_dump() for s in run.steps],
        {k: v.model_dump() for k, v in run.records.items()},
        {k: v.model_dump() for k, v in run.decisions.items()},
    )


def test_reads_through_the_cache_equal_full_reads(workdir: Path):
    with stepstone.open_run("big") as run:
        run.set_plan([f"s{i}" for i in range(150)])
        for i in range(120):
            run.step(f"s{i}", lambda: None)
    cache = workdir / ".stepstone" / "stepstone" / "cache" / "big.json"
    stepstone.open_run("big", drive=False)
    assert cache.exists()
    # change records, shrink the plan, add a decision: the cache is now behind
    with stepstone.open_run("big") as run:
        run.set_plan([f"s{i}" for i in range(100)] + ["new"])
        run.decide("k", "v", "why")
        run.step("s0", lambda: 1, force=True)
    cached = _state(stepstone.open_run("big", drive=False))
    cache.unlink()
    full = _state(stepstone.open_run("big", drive=False))
    assert cached == full
    assert len(full[0]) == 101 and "k" in full[2]


def test_a_damaged_cache_means_a_full_read(workdir: Path):
    with stepstone.open_run("big") as run:
        run.set_plan([f"s{i}" for i in range(120)])
        for i in range(120):
            run.step(f"s{i}", lambda: None)
    stepstone.open_run("big", drive=False)
    cache = workdir / ".stepstone" / "stepstone" / "cache" / "big.json"
    cache.write_text('{"tree": "0000", "files": ')
    run = stepstone.open_run("big", drive=False)
    assert len(run.records) == 120
