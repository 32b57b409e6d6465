"""kill -9 at named points, then resume: at most one step repeats, nothing is lost."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import fsck, git

import stepstone

pytestmark = pytest.mark.fault

DRIVERS = Path(__file__).resolve().parent / "drivers"
FIVE_STEPS = str(DRIVERS / "five_steps.py")
LOOPS = str(DRIVERS / "crash_loops.py")


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"exited {proc.returncode}"
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def test_kill_during_step_3_repeats_only_step_3(workdir: Path):
    proc = subprocess.Popen([sys.executable, FIVE_STEPS], cwd=workdir, stderr=subprocess.DEVNULL)
    _wait_for(workdir / "in-step3", proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()

    (workdir / "resumed").write_text("")
    done = subprocess.run(
        [sys.executable, FIVE_STEPS], cwd=workdir, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    executions = (workdir / "executions.log").read_text().split()
    assert executions == ["step1", "step2", "step3", "step3", "step4", "step5"]
    subjects = git("log", "--format=%s", cwd=workdir / ".stepstone").splitlines()
    confirmed = [s for s in subjects if s.endswith(": confirmed")]
    assert confirmed == [f"step {i} step{i}: confirmed" for i in range(5, 0, -1)]
    trailers = git(
        "log", "--format=%(trailers:key=Stepstone-Step,valueonly)", cwd=workdir / ".stepstone"
    )
    assert "3 step3" in trailers
    fsck(workdir / ".stepstone")


@pytest.mark.fault
def test_kill_at_random_instants_during_commits_never_damages_the_store(workdir: Path):
    rng = random.Random(1234)
    tips = []
    for _ in range(12):
        (workdir / "ready").unlink(missing_ok=True)
        proc = subprocess.Popen(
            [sys.executable, LOOPS, "commits"], cwd=workdir, stderr=subprocess.DEVNULL
        )
        _wait_for(workdir / "ready", proc)
        time.sleep(rng.uniform(0.01, 0.15))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        fsck(workdir / ".stepstone")
        with stepstone.open_run("loop") as run:  # a stale ref lock, if any, is recovered
            tips.append(run.store.refs.tip("loop"))
            assert run.decisions  # every committed decision reads back
    assert len(set(tips)) == len(tips), "each kill happened after new commits"


def test_a_stale_ref_lock_from_a_killed_writer_is_removed_under_the_run_lock(workdir: Path):
    stepstone.open_run("demo").close()
    lock = workdir / ".stepstone" / "refs" / "heads" / "demo.lock"
    lock.write_text("0" * 40 + "\n")
    with stepstone.open_run("demo") as run:
        assert any("stale lock" in note for note in run.notes)
        run.step("a", lambda: 1)
    assert not lock.exists()


def test_a_second_driver_is_refused_with_the_holders_name(workdir: Path):
    holder = subprocess.Popen(
        [sys.executable, str(DRIVERS / "holder.py"), "demo", "held", "--seconds", "60"],
        cwd=workdir,
    )
    try:
        _wait_for(workdir / "held", holder)
        with pytest.raises(stepstone.RunLocked, match=f"pid {holder.pid} since"):
            stepstone.open_run("demo")
        # readers never need the lock
        assert stepstone.open_run("demo", drive=False).status().steps == ()
    finally:
        holder.kill()
        holder.wait()
    # the holder died: its lock went with it
    with stepstone.open_run("demo") as run:
        assert run.driving


def test_a_second_driver_in_the_same_process_is_refused(workdir: Path):
    with stepstone.open_run("demo"), pytest.raises(stepstone.RunLocked):
        stepstone.open_run("demo")


def _merge_loop(workdir: Path, mode: str) -> subprocess.Popen:
    (workdir / "ready").unlink(missing_ok=True)
    return subprocess.Popen(
        [sys.executable, LOOPS, "merges", mode], cwd=workdir, stderr=subprocess.DEVNULL
    )


def test_a_kill_between_writing_a_merged_pack_and_removing_the_old_ones_loses_nothing(
    workdir: Path,
):
    proc = _merge_loop(workdir, "delete")
    assert proc.wait(timeout=60) == -signal.SIGKILL
    fsck(workdir / ".stepstone")  # the duplicates are harmless
    with stepstone.open_run("loop") as run:
        before = dict(run.decisions)
        assert before
        for i in range(40):  # the next merges take the leftovers in
            run.decide(f"e{i}", "x", "more")
    fsck(workdir / ".stepstone")
    with stepstone.open_run("loop", drive=False) as reader:
        assert {k: v for k, v in reader.decisions.items() if k in before} == before


@pytest.mark.fault
def test_kill_at_random_instants_during_pack_merges_never_loses_an_object(workdir: Path):
    rng = random.Random(99)
    for _ in range(10):
        proc = _merge_loop(workdir, "random")
        _wait_for(workdir / "ready", proc)
        time.sleep(rng.uniform(0.01, 0.2))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        fsck(workdir / ".stepstone")
        with stepstone.open_run("loop", drive=False) as reader:
            assert len(reader.decisions) == 7  # every record of the tip reads back


def test_kills_while_the_step_index_is_saved_leave_reads_equal_to_git(workdir: Path):
    """The step index is derived data a driver rewrites as it goes: after kills at random
    instants, a read through it says exactly what a read of every record from Git says."""
    rng = random.Random(7)
    for _ in range(6):
        proc = subprocess.Popen([sys.executable, LOOPS, "indexed"], cwd=workdir)
        time.sleep(rng.uniform(0.8, 2.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        cached = stepstone.open_run("long", drive=False).status()
        full = stepstone.open_run("long", drive=False, cached=False).status()
        assert cached == full
        assert json.loads(cached.json_text()) == full.to_json()
    done = subprocess.run([sys.executable, LOOPS, "indexed"], cwd=workdir, timeout=120)
    assert done.returncode == 0
    status = stepstone.open_run("long", drive=False).status()
    assert [s.state for s in status.steps] == ["verified"] * 400
    fsck(workdir / ".stepstone")
