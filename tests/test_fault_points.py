"""A process killed at each named fault point (stepstone/faults.py), then run again:
deterministic crashes, no timing involved. At most one step repeats, the store stays
sound, and no effect is applied twice (an effect whose outcome cannot be known is
surfaced, not sent again)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import effect_key, fsck
from receiver import Receiver

import stepstone
from stepstone import faults

pytestmark = pytest.mark.fault

DRIVERS = Path(__file__).resolve().parent / "drivers"


def _run(driver: str, cwd: Path, fault: str | None = None, **env: str):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("STEPSTONE_")}
    environ.update(env)
    if fault:
        environ["STEPSTONE_FAULT"] = fault
    return subprocess.run(
        [sys.executable, str(DRIVERS / driver)],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("point", ["commit.objects-written", "commit.ref-moved"])
@pytest.mark.parametrize("nth", [1, 2, 4, 6])
def test_a_kill_at_a_commit_point_repeats_at_most_one_step(workdir: Path, point: str, nth: int):
    (workdir / "resumed").write_text("")  # five_steps.py's step 3 does not wait for a kill
    killed = _run("five_steps.py", workdir, f"{point}:{nth}")
    assert killed.returncode == -9, killed.stderr
    done = _run("five_steps.py", workdir)
    assert done.returncode == 0, done.stderr
    ran = (workdir / "executions.log").read_text().split()
    assert sorted(set(ran)) == [f"step{i}" for i in range(1, 6)]
    assert len(ran) - len(set(ran)) <= 1, ran  # at most the step the kill was in, again
    fsck(workdir / ".stepstone")
    status = stepstone.open_run("five", drive=False).status()
    assert [s.state for s in status.steps] == ["verified"] * 5


@pytest.mark.parametrize("point", ["effect.submitted", "effect.sent"])
@pytest.mark.parametrize("kind", ["keyed", "blind"])
def test_a_kill_at_an_effect_point_never_applies_it_twice(workdir: Path, point: str, kind: str):
    with Receiver(workdir / "receiver.db") as receiver:
        killed = _run("effect_driver.py", workdir, point, RECEIVER=receiver.url, KIND=kind)
        assert killed.returncode == -9, killed.stderr
        resumed = _run("effect_driver.py", workdir, RECEIVER=receiver.url, KIND=kind)
        key = effect_key("fx", "notify", {"msg": "hello"})
        landed = receiver.applied(kind).get(key, 0)
        if kind == "blind":  # its outcome cannot be known: surfaced, never sent again
            assert resumed.returncode == 1 and "UnresolvedEffect" in resumed.stderr
            assert landed == (1 if point == "effect.sent" else 0)
        else:  # the receiver's key catches a second send
            assert resumed.returncode == 0, resumed.stderr
            assert landed == 1
    fsck(workdir / ".stepstone")


def test_an_unknown_fault_point_is_refused_with_the_list():
    with pytest.raises(ValueError, match=r"commit\.ref-moved"):
        faults.arm("commit.typo")
    faults.arm(None)
