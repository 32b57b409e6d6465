"""Random-kill soak: SIGKILL at random instants, resume, again, until the run finishes."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from conftest import fsck, git
from nbformat.v4 import new_code_cell, new_notebook
from receiver import Receiver

import stepstone

pytestmark = pytest.mark.soak

HERE = Path(__file__).resolve().parent


def _env(receiver: Receiver, run: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPSTONE_")}
    env.update(RECEIVER=receiver.url, SOAK_RUN=run, PYTHONPATH=str(HERE))
    return env


def _settle_unresolved(workdir: Path, run_id: str, receiver: Receiver) -> int:
    """Resolve unresolved effects the way a person would: look at the receiver."""
    settled = 0
    with stepstone.open_run(run_id) as run:
        for key, effect in list(run.effects.items()):
            if effect.state != "unresolved":
                continue
            landed = receiver.applied("blind").get(key, 0)
            run.resolve_effect(
                key,
                happened=bool(landed),
                receipt={"seen": landed},
                why="checked the receiver's log",
            )
            settled += 1
    return settled


def _check_invariants(workdir: Path, run_id: str, receiver: Receiver) -> None:
    if not (workdir / ".stepstone").exists():
        return  # killed before the store was made
    fsck(workdir / ".stepstone")
    try:
        reader = stepstone.open_run(run_id, drive=False)
    except stepstone.RunNotFound:
        return  # killed before the run was created
    for record in reader.records.values():
        if record.status == "confirmed":
            assert record.evidence, record
    for kind in ("keyed", "lookup", "blind"):
        assert all(n == 1 for n in receiver.applied(kind).values()), (kind, receiver.applied(kind))


def test_random_kills_never_duplicate_an_effect_or_lose_more_than_a_step(
    workdir: Path, soak_kills: int
):
    rng = random.Random(20261130)
    kills = 0
    runs = 0
    started = time.monotonic()
    with Receiver(workdir / "receiver.db") as receiver:
        while kills < soak_kills:
            run_id = f"soak-{runs}"
            runs += 1
            interruptions = 0
            while not (workdir / f"{run_id}.finished").exists():
                proc = subprocess.Popen(
                    [sys.executable, str(HERE / "soak_driver.py")],
                    cwd=workdir,
                    env=_env(receiver, run_id),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                try:
                    # a loaded machine gets further per attempt, so every run finishes
                    patience = 1 + interruptions // 10
                    _, err = proc.communicate(timeout=rng.uniform(0.25, 0.9) * patience)
                except subprocess.TimeoutExpired:
                    proc.send_signal(signal.SIGKILL)
                    proc.communicate()
                    kills += 1
                    interruptions += 1
                else:
                    if proc.returncode != 0:
                        # an unknown outcome stops the run: also an interruption of a step
                        assert "UnresolvedEffect" in err, err
                        assert _settle_unresolved(workdir, run_id, receiver) >= 1
                        interruptions += 1
                _check_invariants(workdir, run_id, receiver)
                assert interruptions < 80, "the run never finishes"
            executions = (workdir / f"{run_id}.executions").read_text().split()
            repeated = sum(executions.count(f"s{i}") - 1 for i in range(12))
            assert repeated <= interruptions, (
                repeated,
                interruptions,
            )  # kills and unresolved stops
            summary = git("show", f"stepstone/{run_id}:summary.md", cwd=workdir / ".stepstone")
            assert all(f"| s{i} |" in summary for i in range(12))
    assert kills >= soak_kills
    print(f"{kills} kills over {runs} runs in {time.monotonic() - started:.0f} s")


def test_random_kills_of_stepstone_run_with_its_kernel(workdir: Path):
    rng = random.Random(7)
    cells = [new_code_cell("%load_ext stepstone\n%resume")]
    for i in range(4):
        cells.append(
            new_code_cell(
                f"%%step s{i} --check file:s{i}.txt --out v{i}\n"
                f"import time\nwith open('executions.log', 'a') as f:\n    f.write('s{i}\\n')\n"
                f"time.sleep(0.3)\nv{i} = {i}\nopen('s{i}.txt', 'w').write(str(v{i}))"
            )
        )
    nbformat.write(new_notebook(cells=cells), str(workdir / "soak.ipynb"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPSTONE_")}
    kills = 0
    while True:
        proc = subprocess.Popen(
            [sys.executable, "-m", "stepstone", "run", "soak.ipynb"],
            cwd=workdir,
            env=env,
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            said, _ = proc.communicate(timeout=rng.uniform(1.0, 4.0) if kills < 8 else 120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the command and its kernel
            proc.communicate()
            kills += 1
            continue
        assert proc.returncode == 0, said
        break
    executions = (workdir / "executions.log").read_text().split()
    assert sum(executions.count(f"s{i}") - 1 for i in range(4)) <= kills
    status = json.loads(
        subprocess.run(
            [sys.executable, "-m", "stepstone", "status", "--json"],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert [s["state"] for s in status["steps"]] == ["verified"] * 4
    fsck(workdir / ".stepstone")
