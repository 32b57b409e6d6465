"""Processes race to drive the same run: exactly one drives, the others get its name."""

import multiprocessing
from pathlib import Path

import pytest
from racer import race


@pytest.mark.fault
@pytest.mark.parametrize("processes", [2, 8])
def test_exactly_one_process_drives_each_round(tmp_path: Path, processes: int):
    rounds = 100
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(processes, timeout=60)
    results = ctx.Queue()
    workers = [
        ctx.Process(target=race, args=(str(tmp_path / "store"), rounds, barrier, results))
        for _ in range(processes)
    ]
    for w in workers:
        w.start()
    outcomes = [results.get(timeout=120) for _ in range(rounds * processes)]
    for w in workers:
        w.join(timeout=60)
        assert w.exitcode == 0
    results.close()
    results.join_thread()
    assert not [o for o in outcomes if o[1] == "error"], outcomes
    for round_ in range(rounds):
        this = [o for o in outcomes if o[0] == round_]
        winners = [o for o in this if o[1] == "won"]
        assert len(winners) == 1, this
        holder = winners[0][2]
        assert all(holder in o[2] for o in this if o[1] == "lost"), this
