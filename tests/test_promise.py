"""The promise across agents, threads and names (the second trial of the Python API and
hand-off): real stores, real remotes, real processes, a loopback receiver."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import clean_env, fsck, git
from conftest import stepstone_cli as cli
from receiver import Receiver

import stepstone
from stepstone import remote
from stepstone.store import GitStore

DRIVERS = Path(__file__).resolve().parent / "drivers"


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[Receiver]:
    with Receiver(tmp_path / "receiver.db") as r:
        yield r


@pytest.fixture
def origin(tmp_path: Path) -> str:
    path = tmp_path / "remote.git"
    git("init", "-q", "--bare", str(path), cwd=tmp_path)
    return str(path)


def post(url: str, kind: str, key: str) -> dict[str, int]:
    body = json.dumps({"ref": key}).encode()
    headers = {"Idempotency-Key": key} if kind == "keyed" else {}
    request = urllib.request.Request(f"{url}/{kind}", data=body, headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        return dict(json.load(response))


def find(url: str, key: str) -> dict[str, int] | None:
    try:
        with urllib.request.urlopen(f"{url}/lookup/{key}", timeout=30) as response:
            return dict(json.load(response))
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


def publish(url: str) -> object:
    return stepstone.effect(
        "publish", lambda k: post(url, "lookup", k), lookup=lambda k: find(url, k)
    )


def announce(url: str) -> object:
    return stepstone.effect("announce", lambda k: post(url, "blind", k))


def as_agent(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv("STEPSTONE_AGENT", name)


def two_copies(tmp_path: Path, origin: str) -> tuple[Path, Path]:
    """Copy A made the run and pushed it; copy B is a clone of the remote."""
    a, b = tmp_path / "a" / ".stepstone", tmp_path / "b" / ".stepstone"
    with stepstone.open_run("job", repo=a, workdir=a.parent) as run:
        run.step("start", lambda: 0)
        remote.set_remote(run.store, origin)
        remote.push(run.store, "job")
    remote.clone(origin, b)
    return a, b


# -- effects sent twice ---------------------------------------------------------------


def test_a_copy_behind_the_remote_brings_it_in_before_it_drives(
    tmp_path: Path, origin: str, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
):
    a, b = two_copies(tmp_path, origin)
    as_agent(monkeypatch, "agent-b")
    with stepstone.open_run("job", repo=b, workdir=b.parent) as run:
        run.step("publish", lambda: publish(receiver.url))
    handed = cli("handoff", "--repo", str(b), cwd=tmp_path, STEPSTONE_AGENT="agent-b")
    assert handed.returncode == 0, handed.stderr

    as_agent(monkeypatch, "agent-a")  # A never pulled, and runs its script again
    with stepstone.open_run("job", repo=a, workdir=a.parent) as run:
        assert any("brought in" in note for note in run.notes)
        assert run.step("publish", lambda: publish(receiver.url)).skipped
    assert list(receiver.applied("lookup").values()) == [1]


def diverged_copies(
    tmp_path: Path,
    origin: str,
    monkeypatch: pytest.MonkeyPatch,
    work_on_a: Callable[[stepstone.Run], object],
) -> tuple[Path, Path]:
    """Agent B advances the run on the remote while agent A, cut off from it, does
    `work_on_a`; A's remote is reachable again afterwards."""
    a, b = two_copies(tmp_path, origin)
    as_agent(monkeypatch, "agent-b")
    with stepstone.open_run("job", repo=b, workdir=b.parent) as run:
        run.step("from-b", lambda: 2)
        remote.push(run.store, "job")
    store_a = GitStore(a)
    remote.set_remote(store_a, str(tmp_path / "unreachable.git"))
    as_agent(monkeypatch, "agent-a")
    with (
        pytest.warns(stepstone.StepstoneWarning),
        stepstone.open_run("job", repo=a, workdir=a.parent) as run,
    ):
        work_on_a(run)
    remote.set_remote(store_a, origin)
    return a, b


def test_a_copy_that_diverged_from_the_remote_is_not_driven(
    tmp_path: Path, origin: str, monkeypatch: pytest.MonkeyPatch
):
    a, b = diverged_copies(tmp_path, origin, monkeypatch, lambda run: run.step("from-a", lambda: 1))
    with pytest.raises(stepstone.Diverged, match="--keep"):
        stepstone.open_run("job", repo=a, workdir=a.parent)
    # refused before anything: the run is not held, its lease is free again
    with stepstone.open_run("job", repo=b, workdir=b.parent) as run:
        assert run.driving


def test_pull_keep_remote_carries_over_the_effects_of_the_side_not_kept(
    tmp_path: Path, origin: str, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("STEPSTONE_OFFLINE", "1")  # A writes effects without the lease
    a, _ = diverged_copies(  # A's announce happened
        tmp_path,
        origin,
        monkeypatch,
        lambda run: run.step("announce", lambda: announce(receiver.url)),
    )
    monkeypatch.delenv("STEPSTONE_OFFLINE")
    kept = cli("pull", "--repo", str(a), "--keep", "remote", cwd=tmp_path)
    assert kept.returncode == 0, kept.stderr
    assert "carried over" in kept.stdout
    seq = "--format=%(trailers:key=Stepstone-Seq,valueonly)"
    every = [int(n) for n in git("log", "--all", seq, cwd=a).split()]
    carried = int(git("log", "-1", seq, "job", cwd=a))  # numbered after both histories
    assert carried == max(every) and every.count(carried) == 1

    with stepstone.open_run("job", repo=a, workdir=a.parent) as run:
        run.step("from-b", lambda: 2)
        run.step("announce", lambda: announce(receiver.url))  # runs again, sends nothing
    assert list(receiver.applied("blind").values()) == [1]


def test_a_copy_opened_offline_writes_no_effect_until_it_holds_the_lease(
    tmp_path: Path, origin: str, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
):
    def blocked(run: stepstone.Run) -> None:
        with pytest.raises(stepstone.StoreError, match="nothing was sent"):
            run.step("announce", lambda: announce(receiver.url))

    diverged_copies(tmp_path, origin, monkeypatch, blocked)
    assert receiver.applied("blind") == {}


def test_a_driver_whose_lease_was_lost_records_nothing_more(
    tmp_path: Path, origin: str, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
):
    a, b = two_copies(tmp_path, origin)
    as_agent(monkeypatch, "agent-a")
    with stepstone.open_run("job", repo=a, workdir=a.parent) as run:
        run.step("one", lambda: 1)
        as_agent(monkeypatch, "agent-b")
        with stepstone.open_run("job", repo=b, workdir=b.parent, steal="a is stuck") as thief:
            thief.step("two", lambda: announce(receiver.url))
        for _ in range(2):  # asked again in the same process: still refused
            with pytest.raises(stepstone.LeaseLost):
                run.step(f"three-{_}", lambda: announce(receiver.url), force=True)
    assert list(receiver.applied("blind").values()) == [1]


CAROL = str(DRIVERS / "carol.py")


def test_a_steal_starts_from_the_newest_history_and_fences_the_old_holder(
    tmp_path: Path, origin: str, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
):
    a, b = two_copies(tmp_path, origin)  # B is cloned now: behind Carol's coming work
    ready, go = tmp_path / "ready", tmp_path / "go"
    carol = subprocess.Popen(
        [sys.executable, CAROL, str(a), receiver.url, str(ready), str(go)],
        env=clean_env(STEPSTONE_AGENT="carol"),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert carol.poll() is None, carol.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        as_agent(monkeypatch, "dave")
        with stepstone.open_run("job", repo=b, workdir=b.parent, steal="carol is stuck") as run:
            run.step("publish", lambda: publish(receiver.url))  # found by lookup, not sent
            run.step("announce", lambda: announce(receiver.url))
        go.write_text("")
        out, err = carol.communicate(timeout=60)
    finally:
        carol.kill()
        carol.wait()
    assert carol.returncode == 3, out + err
    assert "LOST" in out and "dave" in out
    assert list(receiver.applied("lookup").values()) == [1]
    assert list(receiver.applied("blind").values()) == [1]


def test_pull_of_a_run_only_on_the_remote_brings_it_in_whole(
    tmp_path: Path, origin: str, monkeypatch: pytest.MonkeyPatch
):
    a, b = two_copies(tmp_path, origin)
    with stepstone.open_run("second", repo=a, workdir=a.parent) as run:
        run.step("one", lambda: 1)
        remote.push(run.store, "second")
    pulled = cli("pull", "--repo", str(b), "--run", "second", cwd=tmp_path)
    assert pulled.returncode == 0, pulled.stderr
    assert "created" in pulled.stdout
    runs = {
        r["run"]: r
        for r in json.loads(cli("runs", "--json", "--repo", str(b), cwd=tmp_path).stdout)
    }
    assert runs["second"]["confirmed"] == runs["second"]["steps"] == 1


def test_the_lease_ref_does_not_grow_with_each_open_and_keeps_each_steal(
    tmp_path: Path, origin: str, monkeypatch: pytest.MonkeyPatch
):
    a, _ = two_copies(tmp_path, origin)
    for _ in range(3):
        stepstone.open_run("job", repo=a, workdir=a.parent).close()
    lease = "refs/stepstone/leases/job"
    assert git("rev-list", "--count", lease, cwd=Path(origin)).strip() == "1"
    remote.LeaseKeeper(GitStore(a), "job", "agent-x@far-away pid 4242").take()
    stepstone.open_run("job", repo=a, workdir=a.parent, steal="agent-x is gone").close()
    stepstone.open_run("job", repo=a, workdir=a.parent).close()
    history = git("log", "--format=%s", lease, cwd=Path(origin)).splitlines()
    assert len(history) == 2 and "steal" in history[1]


def test_a_zombie_holder_does_not_keep_the_lease(
    tmp_path: Path, origin: str, monkeypatch: pytest.MonkeyPatch
):
    a, b = two_copies(tmp_path, origin)
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while Path(f"/proc/{zombie.pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    try:
        holder = f"agent-z@{os.uname().nodename} pid {zombie.pid}"
        remote.LeaseKeeper(GitStore(a), "job", holder).take()
        as_agent(monkeypatch, "agent-b")
        with stepstone.open_run("job", repo=b, workdir=b.parent) as run:
            assert run.driving
    finally:
        zombie.wait()


def test_git_log_works_on_a_bare_remote_after_the_first_push(tmp_path: Path, origin: str):
    two_copies(tmp_path, origin)
    assert "step 1 start: confirmed" in git("log", "--format=%s", cwd=Path(origin))


# -- names met twice, lookups, payloads ------------------------------------------------


def test_a_step_name_met_twice_in_one_process_is_an_error(workdir: Path):
    done = []
    with stepstone.open_run("job") as run:
        run.step("convert", lambda: done.append("a.csv"))
        with pytest.raises(stepstone.InvalidInput, match="own name"):
            run.step("convert", lambda: done.append("b.csv"))
    assert done == ["a.csv"]


def test_an_effect_name_met_twice_in_one_step_is_an_error_and_sends_once(
    workdir: Path, receiver: Receiver
):
    def welcome() -> None:
        for _ in ("ann", "bob", "cat"):
            stepstone.effect("welcome-email", lambda k: post(receiver.url, "blind", k))

    with stepstone.open_run("job") as run, pytest.raises(stepstone.InvalidInput, match="recipient"):
        run.step("welcome", welcome)
    assert list(receiver.applied("blind").values()) == [1]


def test_a_lookup_that_answers_false_never_confirms_a_missing_effect(
    workdir: Path, receiver: Receiver
):
    def refused(key: str) -> None:
        raise ConnectionError("receiver unreachable")

    with stepstone.open_run("job") as run, pytest.raises(ConnectionError):
        run.step("pay", lambda: stepstone.effect("charge", refused, lookup=lambda k: False))
    with stepstone.open_run("job") as run:
        result = run.step(
            "pay",
            lambda: stepstone.effect(
                "charge", lambda k: post(receiver.url, "lookup", k), lookup=lambda k: False
            ),
        )
    assert result.value["id"] >= 1 and list(receiver.applied("lookup").values()) == [1]


def test_a_lookup_that_answers_an_empty_receipt_is_refused(workdir: Path, receiver: Receiver):
    def refused(key: str) -> None:
        raise ConnectionError("receiver unreachable")

    with stepstone.open_run("job") as run, pytest.raises(ConnectionError):
        run.step("pay", lambda: stepstone.effect("charge", refused, lookup=lambda k: 0))
    with stepstone.open_run("job") as run, pytest.raises(stepstone.InvalidInput, match="None"):
        run.step("pay", lambda: stepstone.effect("charge", refused, lookup=lambda k: 0))
        assert run.effects[next(iter(run.effects))].state == "submitted"


SET_PAYLOAD = str(DRIVERS / "set_payload.py")


def test_a_payload_with_a_set_has_one_fingerprint_in_every_process(workdir: Path):
    for seed in ("1", "2", "3", "4"):
        done = subprocess.run(
            [sys.executable, SET_PAYLOAD],
            cwd=workdir,
            env=clean_env(PYTHONHASHSEED=seed),
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr


def test_a_payload_of_no_stable_form_is_refused_clearly(workdir: Path):
    with stepstone.open_run("job") as run, pytest.raises(stepstone.InvalidInput, match="JSON-like"):
        run.step(
            "x", lambda: stepstone.effect("x", lambda k: 1, payload={"lock": threading.Lock()})
        )
    assert run.effects == {}


# -- threads, hangs, nesting ----------------------------------------------------------


def test_a_second_thread_cannot_drive_a_step_while_one_runs(workdir: Path):
    errors: list[BaseException] = []
    started = threading.Event()

    def slow() -> int:
        started.set()
        time.sleep(1)
        return 1

    with stepstone.open_run("job") as run:

        def second() -> None:
            started.wait()
            try:
                run.step("b", lambda: 2, force=True)
            except stepstone.StepstoneError as exc:
                errors.append(exc)

        other = threading.Thread(target=second)
        other.start()
        run.step("a", slow)
        other.join()
        run.step("b", lambda: 2)
    assert len(errors) == 1 and "another thread" in str(errors[0])
    fsck(workdir / ".stepstone")
    assert cli("verify", cwd=workdir).returncode == 0


def test_effects_of_one_step_may_be_performed_from_many_threads(workdir: Path, receiver: Receiver):
    from concurrent.futures import ThreadPoolExecutor

    def send_all() -> list[object]:
        with ThreadPoolExecutor(8) as pool:
            return list(
                pool.map(
                    lambda n: stepstone.effect(
                        f"email/{n}", lambda k: post(receiver.url, "keyed", k), keyed=True
                    ),
                    range(24),
                )
            )

    with stepstone.open_run("job") as run:
        receipts = run.step("mail", send_all).value
        assert len(receipts) == 24
        assert all(e.state == "confirmed" for e in run.effects.values())
    assert len(receiver.applied("keyed")) == 24
    fsck(workdir / ".stepstone")
    assert cli("verify", cwd=workdir).returncode == 0


def test_a_hanging_cmd_check_blocks_neither_status_nor_verify(workdir: Path):
    Path("ok").write_text("")
    check = "cmd:test -f ok && (test ! -f hang || sleep 60)"
    with stepstone.open_run("job") as run:
        run.step("s", lambda: None, checks=[check])
    Path("hang").write_text("")
    began = time.monotonic()
    status = cli("status", cwd=workdir)
    assert status.returncode == 0 and time.monotonic() - began < 20
    assert "not re-run" in status.stdout
    began = time.monotonic()
    verify = cli("verify", cwd=workdir, STEPSTONE_CHECK_TIMEOUT="1")
    assert verify.returncode == 1 and time.monotonic() - began < 20
    assert "did not finish within 1 s" in verify.stdout


def test_a_hanging_write_is_bounded_and_left_in_doubt(workdir: Path):
    def hangs(key: str) -> None:
        time.sleep(30)

    began = time.monotonic()
    with stepstone.open_run("job") as run:
        with pytest.raises(stepstone.EffectTimedOut):
            run.step("s", lambda: stepstone.effect("x", hangs, timeout=0.5))
        assert time.monotonic() - began < 10
        assert [e.state for e in run.effects.values()] == ["submitted"]


def test_a_nested_step_is_refused_and_leaves_the_plan_alone(workdir: Path):
    with stepstone.open_run("job") as run:

        def outer() -> None:
            run.step("inner", lambda: 1)

        with pytest.raises(stepstone.StepstoneError, match="do not nest"):
            run.step("outer", outer)
        assert run.steps.names == ["outer"]


# -- smaller ------------------------------------------------------------------------


def test_an_expr_check_names_the_return_value_result(workdir: Path):
    with stepstone.open_run("job") as run:
        run.step("count", lambda: 3, checks=["expr:result == 3"])
    with stepstone.open_run("job") as run:
        assert run.step(
            "count", lambda: pytest.fail("verified"), checks=["expr:result == 3"]
        ).skipped


def test_an_unsaveable_return_value_is_explained_for_the_python_api(workdir: Path):
    with stepstone.open_run("job") as run, pytest.raises(stepstone.InvalidInput) as caught:
        run.step("lock", lambda: threading.Lock())
    assert "return value" in str(caught.value) and "--out" not in str(caught.value)


def test_an_effect_belongs_to_the_run_whose_step_is_running(workdir: Path):
    with stepstone.open_run("one") as first, stepstone.open_run("two", repo="other"):
        receipt = first.step("s", lambda: stepstone.effect("x", lambda k: {"ok": 1})).value
        assert receipt == {"ok": 1} and [e.step for e in first.effects.values()] == ["s"]


def test_log_of_a_step_lists_its_effect_commits(workdir: Path):
    with stepstone.open_run("job") as run:
        run.step("s", lambda: stepstone.effect("x", lambda k: {"ok": 1}))
    log = cli("log", "--step", "s", "--json", cwd=workdir)
    subjects = [e["subject"] for e in json.loads(log.stdout)]
    assert "effect x: submitted" in subjects and "effect x: confirmed" in subjects


def test_verify_and_repair_find_what_a_driver_refuses(workdir: Path):
    with stepstone.open_run("job") as run:
        for name in ("a", "b", "c"):
            run.step(name, lambda: 1)
    store = workdir / ".stepstone"
    good = git("rev-parse", "job", cwd=store).strip()
    tree = git("ls-tree", "-r", "job", cwd=store)
    kept = "".join(line + "\n" for line in tree.splitlines() if "plan/0000/00/00000002" not in line)
    index = {"GIT_INDEX_FILE": str(workdir / "hand-index")}
    subprocess.run(
        ["git", "read-tree", "--empty"], cwd=store, env={**os.environ, **index}, check=True
    )
    subprocess.run(
        ["git", "update-index", "--index-info"],
        input=kept.replace("\t", "\t"),
        text=True,
        cwd=store,
        env={**os.environ, **index},
        check=True,
    )
    new_tree = subprocess.run(
        ["git", "write-tree"],
        cwd=store,
        env={**os.environ, **index},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    bad = git("commit-tree", new_tree, "-p", good, "-m", "a plan entry lost", cwd=store).strip()
    git("update-ref", "refs/heads/job", bad, cwd=store)

    with pytest.raises(stepstone.RecordError, match="plan has no step 2"):
        stepstone.open_run("job")
    verify = cli("verify", cwd=workdir)
    assert verify.returncode == 2 and "stepstone repair" in verify.stderr
    repaired = cli("repair", cwd=workdir)
    assert repaired.returncode == 0, repaired.stderr
    assert git("rev-parse", "job", cwd=store).strip() == good
    with stepstone.open_run("job") as run:
        assert [s.state for s in run.status().steps] == ["verified"] * 3


def test_status_of_a_run_with_many_effects_counts_them(workdir: Path):
    def send() -> None:
        for n in range(40):
            stepstone.effect(f"mail/{n}", lambda k: {"ok": 1})

    def fails(key: str) -> None:
        raise ConnectionError("down")

    with stepstone.open_run("job") as run:
        run.step("send", send)
        with pytest.raises(ConnectionError):
            run.step("late", lambda: stepstone.effect("late", fails))
    text = cli("status", cwd=workdir).stdout
    assert len(text.splitlines()) < 12
    assert "40 confirmed" in text and "late" in text
    every = cli("status", "--all", cwd=workdir).stdout
    assert every.count("\n  effect ss-") == 41
    assert "next: settle the in doubt effect" in every  # sent blind, and it raised
    assert len(json.loads(cli("status", "--json", cwd=workdir).stdout)["effects"]) == 41
