"""Hand-off across machines: a bare remote, two working copies, a process each."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from conftest import clean_env, git, stepstone_cli
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

import stepstone
from stepstone import remote
from stepstone.store import GitStore


def _env(agent: str, **extra: str) -> dict[str, str]:
    return clean_env(STEPSTONE_AGENT=agent, **extra)


def cli(*args: str, cwd: Path, agent: str = "agent-a", **extra: str):
    return stepstone_cli(*args, cwd=cwd, STEPSTONE_AGENT=agent, **extra)


@pytest.fixture
def origin(tmp_path: Path) -> str:
    path = tmp_path / "remote.git"
    git("init", "-q", "--bare", str(path), cwd=tmp_path)
    return str(path)


def _notebook(folder: Path) -> Path:
    cells = [new_markdown_cell("# Hand-off demo"), new_code_cell("%load_ext stepstone\n%resume")]
    for i in (1, 2, 3):
        cells.append(
            new_code_cell(
                f'%%step s{i} --out v{i} --check "expr:v{i} == {i}"\n'
                f"with open('executions.log', 'a') as f:\n    f.write('s{i}\\n')\nv{i} = {i}"
            )
        )
    cells.append(
        new_code_cell(
            "%%step s4 --out v4\nimport os\n"
            "assert os.environ.get('STEPSTONE_AGENT') == 'agent-b', 'only agent B has the key'\n"
            "with open('executions.log', 'a') as f:\n    f.write('s4\\n')\nv4 = v1 + v2 + v3"
        )
    )
    cells.append(
        new_code_cell(
            "%%step s5 --out v5\nwith open('executions.log', 'a') as f:\n    f.write('s5\\n')\n"
            "v5 = v4 * 2"
        )
    )
    path = folder / "job.ipynb"
    nbformat.write(new_notebook(cells=cells), str(path))
    return path


@pytest.mark.kernel
def test_round_trip_agent_a_hands_off_and_agent_b_finishes(tmp_path: Path, origin: str):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    nb = _notebook(a)
    first = cli("run", str(nb), cwd=a)
    assert first.returncode == 1 and "step s4 failed" in first.stderr
    assert cli("push", "--remote", origin, cwd=a).returncode == 0
    handed = cli("handoff", cwd=a)
    assert handed.returncode == 0, handed.stderr
    assert "stepstone clone" in handed.stdout and "s4" in handed.stdout

    (b / "job.ipynb").write_bytes(nb.read_bytes())
    assert cli("clone", origin, cwd=b, agent="agent-b").returncode == 0
    done = cli("run", "job.ipynb", cwd=b, agent="agent-b")
    assert done.returncode == 0, done.stderr
    assert (b / "executions.log").read_text().split() == ["s4", "s5"]  # 1-3 skipped, restored
    assert cli("push", cwd=b, agent="agent-b").returncode == 0

    log = git(
        "log",
        "--reverse",
        "--format=%s|%(trailers:key=Stepstone-Holder,valueonly)",
        "job",
        cwd=Path(origin),
    ).splitlines()
    confirmed = [line for line in log if ": confirmed" in line]
    assert [c.split("|")[0] for c in confirmed] == [
        f"step {i} s{i}: confirmed" for i in range(1, 6)
    ]
    assert all("agent-a@" in c for c in confirmed[:3])
    assert all("agent-b@" in c for c in confirmed[3:])


def test_file_evidence_that_did_not_travel_runs_again(tmp_path: Path, origin: str):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    os.chdir(a)
    with stepstone.open_run("job", repo=a / ".stepstone", workdir=a) as run:
        run.step(
            "make", lambda: Path("data.txt").write_text("x") and None, checks=["file:data.txt"]
        )
        remote.set_remote(run.store, origin)
        remote.push(run.store, "job")
    remote.clone(origin, b / ".stepstone")
    with stepstone.open_run("job", repo=b / ".stepstone", workdir=b) as run:
        assert run.status().steps[0].state == "stale"
        os.chdir(b)
        assert not run.step(
            "make", lambda: Path("data.txt").write_text("x") and None, checks=["file:data.txt"]
        ).skipped


HOLD = str(Path(__file__).resolve().parent / "drivers" / "holder.py")


def _holder(tmp_path: Path, store: Path, agent: str, step: str) -> subprocess.Popen:
    ready = tmp_path / f"{agent}.ready"
    proc = subprocess.Popen(
        [sys.executable, HOLD, "job", str(ready), "--repo", str(store), "--step", step],
        env=_env(agent),
        cwd=tmp_path,
    )
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    return proc


def _two_copies(tmp_path: Path, origin: str, lease_seconds: int = 600) -> tuple[Path, Path]:
    a, b = tmp_path / "a" / ".stepstone", tmp_path / "b" / ".stepstone"
    with stepstone.open_run("job", repo=a, workdir=a.parent) as run:
        run.step("start", lambda: 0)
        remote.set_remote(run.store, origin)
        run.store.set_config(remote.LEASE_SECONDS_KEY, lease_seconds)
        remote.push(run.store, "job")
    remote.clone(origin, b)
    GitStore(b).set_config(remote.LEASE_SECONDS_KEY, lease_seconds)
    return a, b


def test_a_second_agent_is_refused_with_the_holders_name_and_expiry(tmp_path, origin):
    a, b = _two_copies(tmp_path, origin)
    holder = _holder(tmp_path, a, "agent-a", "work")
    try:
        with pytest.raises(stepstone.LeaseHeld) as caught:
            stepstone.open_run("job", repo=b, workdir=b.parent)
        assert "agent-a@" in str(caught.value) and "lease until" in str(caught.value)
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.kernel
def test_an_expired_lease_can_be_taken(tmp_path, origin):
    a, b = _two_copies(tmp_path, origin, lease_seconds=2)
    # an agent on another machine takes the lease, then its machine goes away
    remote.LeaseKeeper(GitStore(a), "job", "agent-x@far-away pid 4242").take()
    with pytest.raises(stepstone.LeaseHeld, match="agent-x@far-away"):
        stepstone.open_run("job", repo=b, workdir=b.parent)
    time.sleep(2.5)
    with stepstone.open_run("job", repo=b, workdir=b.parent) as run:
        assert run.driving


def test_a_lease_left_by_a_dead_process_on_this_host_is_taken_at_once(tmp_path, origin):
    a, b = _two_copies(tmp_path, origin)
    holder = _holder(tmp_path, a, "agent-a", "work")
    os.kill(holder.pid, signal.SIGKILL)  # dies holding the lease: no release
    holder.wait()
    with stepstone.open_run("job", repo=b, workdir=b.parent) as run:
        assert run.driving


def test_steal_takes_a_live_lease_and_records_why(tmp_path, origin):
    a, b = _two_copies(tmp_path, origin)
    holder = _holder(tmp_path, a, "agent-a", "work")
    try:
        with stepstone.open_run("job", repo=b, workdir=b.parent, steal="agent-a is stuck"):
            pass
    finally:
        holder.kill()
        holder.wait()
    history = git("log", "--format=%B", "refs/stepstone/leases/job", cwd=Path(origin))
    assert "steal" in history and "agent-a is stuck" in history and "agent-a@" in history


def test_divergence_is_detected_shown_and_nothing_is_lost(tmp_path, origin):
    a, b = _two_copies(tmp_path, origin)
    with stepstone.open_run("job", repo=b, workdir=b.parent) as run:
        run.step("from-b", lambda: 2)
        remote.push(run.store, "job")
    store_a = GitStore(a)
    # agent A worked offline meanwhile (its lease could not be checked)
    remote.set_remote(store_a, str(tmp_path / "unreachable.git"))
    with (
        pytest.warns(stepstone.StepstoneWarning, match="without its lease"),
        stepstone.open_run("job", repo=a, workdir=a.parent) as run,
    ):
        assert any("unreachable" in n for n in run.notes)
        run.step("from-a", lambda: 1)
    old_a = store_a.refs.tip("job")
    remote.set_remote(store_a, origin)
    with pytest.raises(stepstone.Diverged, match="pull"):
        remote.push(store_a, "job")
    refused = cli("pull", "--repo", str(a), cwd=tmp_path)
    assert refused.returncode == 2
    assert "from-a" in refused.stderr and "from-b" in refused.stderr and "--keep" in refused.stderr
    kept = cli("pull", "--repo", str(a), "--keep", "remote", cwd=tmp_path)
    assert kept.returncode == 0, kept.stderr
    preserved = kept.stdout.split("kept at ")[1].strip()
    assert git("rev-parse", preserved, cwd=a).strip() == old_a  # A's work is still there
    assert "from-b" in git("log", "--format=%s", "job", cwd=a)


def test_an_unreachable_remote_leaves_the_run_usable_and_the_next_push_catches_up(tmp_path, origin):
    a, _ = _two_copies(tmp_path, origin)
    store = GitStore(a)
    remote.set_remote(store, str(tmp_path / "gone.git"))
    store.set_config("stepstone.autopush", True)
    with (
        pytest.warns(stepstone.StepstoneWarning, match="cannot be reached"),
        stepstone.open_run("job", repo=a, workdir=a.parent) as run,
    ):
        run.step("offline", lambda: 1)
    failed = cli("push", "--repo", str(a), cwd=tmp_path)
    assert failed.returncode == 2 and "gone.git" in failed.stderr
    assert "Traceback" not in failed.stderr
    assert cli("push", "--repo", str(a), "--remote", origin, cwd=tmp_path).returncode == 0
    assert "offline" in git("log", "--format=%s", "job", cwd=Path(origin))


def test_autopush_pushes_each_commit_in_the_background(tmp_path, origin):
    a, _ = _two_copies(tmp_path, origin)
    GitStore(a).set_config("stepstone.autopush", True)
    with stepstone.open_run("job", repo=a, workdir=a.parent) as run:
        run.step("auto", lambda: 1)
    assert "step 2 auto: confirmed" in git("log", "--format=%s", "job", cwd=Path(origin))
    status = json.loads(cli("status", "--json", "--repo", str(a), cwd=tmp_path).stdout)
    assert status["steps"][-1]["state"] == "verified"


def test_each_take_of_the_lease_has_a_higher_epoch_that_its_commits_carry(tmp_path, origin):
    a, b = _two_copies(tmp_path, origin)
    tokens = []
    for copy in (a, b, a):
        stepstone.open_run("job", repo=copy, workdir=copy.parent).close()  # pull, take, release
    with stepstone.open_run("job", repo=b, workdir=b.parent) as run:
        run.step("fenced", lambda: tokens.append(stepstone.fence_token()))
    assert tokens == ["job:4"]
    message = git("log", "-1", "--format=%B", "job", cwd=b)
    assert "Stepstone-Lease-Epoch: 4" in message
    assert "Stepstone-Lease-Epoch" not in git("log", "--format=%B", "job~1", cwd=a)
