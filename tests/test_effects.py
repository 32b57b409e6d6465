"""Effects against a real loopback receiver, with the driver killed at each boundary."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import effect_key, fsck, git
from conftest import stepstone_cli as _cli
from receiver import Receiver

import stepstone
from stepstone.effects.effectkeys import derive_key, fingerprint
from stepstone.effects.redaction import redact

DRIVER = str(Path(__file__).resolve().parent / "drivers" / "effect_driver.py")

POINTS = ["before-intent", "before-request", "in-flight", "after-commit", "after-confirm"]
# where a blind receiver leaves the outcome unknown, and whether the write had landed
BLIND_UNKNOWN = {"before-request": 0, "in-flight": 0, "after-commit": 1}


def _driver(workdir: Path, receiver: Receiver, kind: str, pause: str = "") -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPSTONE_")}
    env.update(RECEIVER=receiver.url, KIND=kind, PAUSE=pause)
    return subprocess.Popen(
        [sys.executable, DRIVER],
        cwd=workdir,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait(proc: subprocess.Popen, ready) -> None:
    deadline = time.monotonic() + 60
    while not ready():
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline
        time.sleep(0.01)


def _effect_records(workdir: Path) -> list[dict]:
    store = workdir / ".stepstone"
    paths = [
        p
        for p in git("ls-tree", "-r", "--name-only", "fx", cwd=store).split()
        if p.startswith("effects/")
    ]
    return [json.loads(git("show", f"fx:{p}", cwd=store)) for p in paths]


@pytest.mark.fault
@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("kind", ["keyed", "lookup", "blind"])
def test_kill_at_each_boundary_never_duplicates_an_effect(workdir: Path, kind, point):
    with Receiver(workdir / "receiver.db") as receiver:
        proc = _driver(workdir, receiver, kind, point)
        ready = {
            "in-flight": receiver.in_flight.is_set,
            "after-commit": receiver.committed.is_set,
        }.get(point, lambda: (workdir / "paused").exists())
        _wait(proc, ready)
        proc.send_signal(signal.SIGKILL)
        proc.communicate()

        resumed = _driver(workdir, receiver, kind)
        _, err = resumed.communicate(timeout=120)
        key = effect_key("fx", "notify", {"msg": "hello"})
        if kind == "blind" and point in BLIND_UNKNOWN:
            assert resumed.returncode == 1
            assert "UnresolvedEffect" in err and f"stepstone resolve {key}" in err
            status = json.loads(_cli("status", "--json", cwd=workdir).stdout)
            assert [(e["key"], e["state"]) for e in status["effects"]] == [(key, "unresolved")]
            landed = receiver.applied("blind").get(key, 0)
            assert landed == BLIND_UNKNOWN[point]
            # a person checks the receiver and settles it
            answer = (
                ["--happened", "--receipt", '{"id": 1}']
                if landed
                else ["--not-happened", "--why", "receiver has no such message"]
            )
            settled = _cli("resolve", key, *answer, cwd=workdir)
            assert settled.returncode == 0, settled.stderr
            resumed = _driver(workdir, receiver, kind)
            _, err = resumed.communicate(timeout=120)
        assert resumed.returncode == 0, err
        assert receiver.applied(kind) == {key: 1}
    for record in _effect_records(workdir):
        assert record["state"] == "confirmed" and record["receipt"] is not None
    fsck(workdir / ".stepstone")


def test_a_confirmed_effect_returns_its_receipt_and_is_never_performed_again(workdir: Path):
    calls: list[str] = []

    def send() -> dict:
        return stepstone.effect(
            "send", lambda key: calls.append(key) or {"id": 7}, payload={"to": "a@example.org"}
        )

    with stepstone.open_run("demo") as run:
        run.step("mail", send)
    Path("touched").write_text("")
    with stepstone.open_run("demo") as run:
        # the step runs again (forced stale by a plan change) but the effect does not
        run.set_plan([{"name": "mail", "checks": ["file:touched"]}])
        assert run.step("mail", send).value == {"id": 7}
    assert len(calls) == 1


def test_a_changed_payload_under_the_same_name_is_refused(workdir: Path):
    with stepstone.open_run("demo") as run:
        run.step("mail", lambda: stepstone.effect("send", lambda k: 1, payload={"n": 1}))
        run.set_plan([{"name": "mail", "checks": ["expr:True"]}])
    with (
        stepstone.open_run("demo") as run,
        pytest.raises(stepstone.EffectChanged, match="already happened") as caught,
    ):
        run.step("mail", lambda: stepstone.effect("send", lambda k: 1, payload={"n": 2}))
    # a new name would charge twice: the message says to record a correction instead
    assert "correction" in str(caught.value) and "second time" in str(caught.value)


def test_a_failed_request_stays_submitted_with_its_error(workdir: Path):
    def boom(key: str) -> None:
        raise ConnectionError("token=abc123secret refused")

    with stepstone.open_run("demo") as run:
        with pytest.raises(ConnectionError):
            run.step("mail", lambda: stepstone.effect("send", boom))
        (record,) = run.effects.values()
        assert record.state == "submitted" and "ConnectionError" in record.error
        assert "abc123secret" not in record.error
        # blind receiver: the failed request may have landed, so the next try is unresolved
        with pytest.raises(stepstone.UnresolvedEffect, match="stepstone resolve"):
            run.step("mail", lambda: stepstone.effect("send", boom), force=True)


def test_effects_in_a_loop_get_one_key_each(workdir: Path):
    keys: list[str] = []

    def send_all() -> None:
        for user in ("u1", "u2", "u3"):
            stepstone.effect(f"email/{user}", lambda key: keys.append(key) or key)

    with stepstone.open_run("demo") as run:
        run.step("emails", send_all)
        assert len(set(keys)) == 3 and len(run.effects) == 3
    assert all(len(k) <= 40 and k.replace("-", "").isalnum() for k in keys)


def test_keys_are_stable_and_distinct():
    assert derive_key("L1", "e", None) == derive_key("L1", "e", None)
    keys = {
        derive_key("L1", "e", None),
        derive_key("L1", "f", None),  # another name
        derive_key("L2", "e", None),  # another lineage
        derive_key("L1", "e", fingerprint({"n": 1})),  # another payload
        derive_key("L1", "e", fingerprint({"n": 2})),
    }
    assert len(keys) == 5


def test_two_runs_of_one_id_in_two_stores_do_not_share_keys(tmp_path: Path):
    keys = []
    for project in ("a", "b"):
        with stepstone.open_run("nightly", repo=tmp_path / project / ".stepstone") as run:
            run.step("pay", lambda: stepstone.effect("charge", lambda k: {"key": k}))
            keys.append(next(iter(run.effects)))
    assert keys[0] != keys[1]


def test_credentials_never_reach_a_record(workdir: Path):
    payload = {
        "to": "x@example.org",
        "api_key": "sk_live_PLANTED1",
        "headers": {"Authorization": "Bearer PLANTED2"},
        "note": "password=PLANTED3",
    }
    with stepstone.open_run("demo") as run:
        run.step(
            "mail",
            lambda: stepstone.effect(
                "send",
                lambda key: {"id": 1, "token": "PLANTED4", "echo": "Bearer PLANTED5"},
                payload=payload,
            ),
        )
    objects = git("rev-list", "--objects", "--all", cwd=workdir / ".stepstone").split()
    dump = "".join(
        subprocess.run(
            ["git", "cat-file", "-p", o], cwd=workdir / ".stepstone", capture_output=True, text=True
        ).stdout
        for o in objects
        if len(o) == 40
    )
    for planted in ("PLANTED1", "PLANTED2", "PLANTED3", "PLANTED4", "PLANTED5"):
        assert planted not in dump
    assert "[redacted]" in dump


def test_redaction_and_fingerprints():
    assert redact({"password": "x", "n": [{"Token": "y"}]}) == {
        "password": "[redacted]",
        "n": [{"Token": "[redacted]"}],
    }
    assert fingerprint({"a": 1, "b": 2}) == fingerprint({"b": 2, "a": 1})
    assert fingerprint(None) is None


def test_an_effect_outside_a_step_is_refused(workdir: Path):
    with (
        stepstone.open_run("demo"),
        pytest.raises(stepstone.StepstoneError, match="outside a step"),
    ):
        stepstone.effect("x", lambda k: 1)
