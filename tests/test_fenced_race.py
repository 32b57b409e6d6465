"""Fenced hand-offs: eight agents, each with its own clone, race to drive one run over
one remote (`git daemon` on loopback) while the test kills them (SIGKILL) and pauses
them (SIGSTOP for longer than the lease, then SIGCONT) at random. Every commit carries
its lease's epoch; each step's effect goes to a receiver that refuses a lower epoch
than it has seen (`stepstone.fence_token()`).

What must hold: each effect applied exactly once; the run on the remote finishes
with every step confirmed; its history is one line whose lease epochs never go down
(a paused driver landed nothing after its lease was taken); a copy that committed
after losing its lease kept the remote's history and set its own aside.

CI races for a few seconds; the long mode is
`python -m pytest tests/test_fenced_race.py --race-seconds 120`."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import clean_env, git
from receiver import Receiver

import stepstone
from stepstone import remote
from stepstone.store import GitStore

pytestmark = pytest.mark.soak

AGENT = Path(__file__).parent / "drivers" / "fenced_agent.py"
AGENTS = 8
STEPS = 16
LEASE_SECONDS = 2
MIN_EPOCHS = 3  # leases effects must have landed under before the chaos may stop


@pytest.fixture
def race_seconds(request: pytest.FixtureRequest) -> float:
    return float(request.config.getoption("--race-seconds"))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _git_daemon(base: Path) -> tuple[subprocess.Popen[bytes], str]:
    """`git daemon` serving the bare repositories under `base`, pushes allowed."""
    port = _free_port()
    daemon = subprocess.Popen(
        [
            "git",
            "daemon",
            "--reuseaddr",
            "--export-all",
            "--enable=receive-pack",
            f"--base-path={base}",
            "--listen=127.0.0.1",
            f"--port={port}",
            str(base),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # `git daemon` runs git-daemon as a child: stop the group
    )
    url = f"git://127.0.0.1:{port}/origin.git"
    deadline = time.monotonic() + 20
    while subprocess.run(["git", "ls-remote", url], capture_output=True).returncode != 0:
        assert daemon.poll() is None and time.monotonic() < deadline, "git daemon did not start"
        time.sleep(0.1)
    return daemon, url


def _seed(folder: Path, url: str, steps: int) -> None:
    """The run, planned, on the remote."""
    store = folder / ".stepstone"
    with stepstone.open_run("race", repo=store, workdir=folder) as run:
        run.set_plan([f"s{i}" for i in range(steps)], goal="fenced race")
        remote.set_remote(run.store, url)
        remote.push(run.store, "race")


def _agent_folder(tmp_path: Path, url: str, i: int) -> Path:
    folder = tmp_path / f"agent{i}"
    folder.mkdir()
    remote.clone(url, folder / ".stepstone")
    store = GitStore(folder / ".stepstone")
    store.set_config(remote.LEASE_SECONDS_KEY, LEASE_SECONDS)
    store.set_config("stepstone.autopush", True)
    return folder


def _driving(log: Path) -> int | None:
    """The agent that ran the latest step, from the executions log."""
    try:
        last = log.read_text().splitlines()[-1]
    except (OSError, IndexError):
        return None
    return int(last.split()[0].removeprefix("agent"))


def _epochs_applied(receiver: Receiver) -> set[int]:
    """The lease epochs under which the receiver applied effects (their fence tokens)."""
    return {
        int(body["fence"].rpartition(":")[2])
        for kind, body in receiver.bodies()
        if kind == "fenced" and body.get("fence")
    }


def _epochs_along(store: Path, ref: str) -> list[int]:
    """The lease epochs of the commits of `ref`, oldest first (0: made without a lease),
    less the commits by which `pull --keep remote` carried a set-aside copy's effect
    records onto the run (made outside a run's lease, pushed under the next one's)."""
    out = git("log", "--first-parent", "--reverse", "--format=%H %P%n%B%x00", ref, cwd=store)
    epochs = []
    for entry in filter(str.strip, out.split("\0")):
        head, _, body = entry.strip().partition("\n")
        assert len(head.split()) <= 2, f"a merge on the remote: {head}"
        if "Stepstone-Status: carried" in body.splitlines():
            continue
        found = [line.split(": ", 1)[1] for line in body.splitlines() if "Lease-Epoch: " in line]
        epochs.append(int(found[0]) if found else 0)
    return epochs


def test_eight_agents_racing_with_kills_and_pauses_send_each_effect_once(
    tmp_path: Path, race_seconds: float
):
    served = tmp_path / "served"
    served.mkdir()
    git("init", "-q", "--bare", str(served / "origin.git"), cwd=tmp_path)
    daemon, url = _git_daemon(served)
    rng = random.Random(19)
    log = tmp_path / "executions.log"
    agents: dict[int, subprocess.Popen[bytes]] = {}
    paused: dict[int, float] = {}  # agent -> when to wake it
    counts = {"kills": 0, "pauses": 0, "lost": 0, "starts": 0}
    steps = max(STEPS, round(STEPS * race_seconds / 12))  # a longer race, a longer run
    try:
        _seed(tmp_path / "seed", url, steps)
        folders = [_agent_folder(tmp_path, url, i) for i in range(AGENTS)]
        with Receiver(tmp_path / "receiver.db") as receiver:
            env = {"RECEIVER": receiver.url, "RACE_LOG": str(log), "RACE_STEPS": str(steps)}

            def start(i: int) -> None:
                agents[i] = subprocess.Popen(
                    [sys.executable, str(AGENT)],
                    cwd=folders[i],
                    env=clean_env(STEPSTONE_AGENT=f"agent{i}", **env),
                )
                counts["starts"] += 1

            for i in range(AGENTS):
                start(i)
            finished = False
            chaos_until = time.monotonic() + race_seconds
            deadline = chaos_until + 120
            while not finished:
                assert time.monotonic() < deadline, f"the run did not finish: {counts}"
                now = time.monotonic()
                for i, wake in list(paused.items()):
                    if now >= wake:
                        os.kill(agents[i].pid, signal.SIGCONT)
                        del paused[i]
                for i, agent in list(agents.items()):
                    code = agent.poll()
                    if code == 0:
                        finished = True
                    elif code is not None:
                        counts["lost"] += code == 3
                        assert code in (3, -signal.SIGKILL), f"agent{i} failed ({code})"
                        start(i)
                # the chaos goes on past its time until effects landed under a few leases;
                # from half its time, while they have not, it goes for the driver harder (a
                # run that ends first has hardly been raced)
                covered = len(_epochs_applied(receiver)) >= MIN_EPOCHS
                pressing = not covered and now >= chaos_until - race_seconds / 2
                if now < chaos_until or not covered:
                    driving = _driving(log)  # mostly the agent that is driving now
                    i = (
                        driving
                        if driving is not None and rng.random() < (0.95 if pressing else 0.7)
                        else rng.randrange(AGENTS)
                    )
                    if i not in paused and agents[i].poll() is None:
                        roll = rng.random() * (0.6 if pressing else 1.0)
                        if roll < 0.25:
                            agents[i].kill()
                            counts["kills"] += 1
                        elif roll < 0.45:
                            os.kill(agents[i].pid, signal.SIGSTOP)
                            paused[i] = now + LEASE_SECONDS + rng.uniform(0.5, 2.0)
                            counts["pauses"] += 1
                time.sleep(rng.uniform(0.2, 0.6))
            applied = receiver.applied("fenced")
            counts["refused"] = receiver.refused
            leases = _epochs_applied(receiver)
        check = tmp_path / "check"
        remote.clone(url, check / ".stepstone")  # what the remote holds now
    finally:
        for agent in agents.values():
            if agent.poll() is None:
                os.kill(agent.pid, signal.SIGCONT)
                agent.kill()
            agent.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(daemon.pid, signal.SIGKILL)
        daemon.wait()

    keys = sorted(applied)
    assert len(keys) == steps, applied
    assert set(applied.values()) == {1}, applied  # no effect twice, none lost
    with stepstone.open_run("race", repo=check / ".stepstone", drive=False) as run:
        status = run.status()
    assert status.finished
    assert [s.state for s in status.steps] == ["verified"] * steps
    counts["set aside"] = sum(
        len(git("for-each-ref", "refs/stepstone/diverged", cwd=f / ".stepstone").splitlines())
        for f in folders
    )
    epochs = _epochs_along(check / ".stepstone", "race")
    assert epochs == sorted(epochs), epochs  # nothing landed under an older lease
    print(counts, "epochs:", sorted(set(epochs)), "effects under", sorted(leases), steps)
    # what the chaos waits for: effects sent under several leases (the commits that
    # recorded them may have landed under fewer, when a killed driver's work was confirmed
    # by the next one)
    assert counts["kills"] + counts["pauses"] >= 3 and len(leases) >= MIN_EPOCHS, (
        "the race hardly tested anything",
        counts,
        leases,
    )
