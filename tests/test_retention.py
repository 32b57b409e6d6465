"""Idempotency retention: a keyed retry later than the receiver keeps keys is a new
request, so an intent that old is not retried with its key; it is surfaced instead.

A real driver is killed after the loopback receiver committed the write and before
the confirmation was recorded; the receiver then forgets keys older than a day
(its clock moved on), and the run is resumed with a clock as far on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from conftest import stepstone_cli
from receiver import Receiver, find, send

import stepstone
from stepstone.errors import UnresolvedEffect
from stepstone.present import render
from stepstone.settings import Settings

DRIVER = str(Path(__file__).resolve().parent / "drivers" / "effect_driver.py")
DAY = 86_400.0


def _killed_after_the_receiver_committed(workdir: Path, receiver: Receiver, kind: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPSTONE_")}
    env.update(RECEIVER=receiver.url, KIND=kind, PAUSE="after-commit")
    proc = subprocess.Popen([sys.executable, DRIVER], cwd=workdir, env=env)
    deadline = time.monotonic() + 60
    while not receiver.committed.is_set():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def _post(url: str, kind: str, key: str) -> Any:
    headers = {"Idempotency-Key": key} if kind == "keyed" else {}
    return send(url, kind, {"ref": key, "msg": "hello"}, headers)


def _resume(receiver: Receiver, kind: str, *, later: float, **options: Any) -> None:
    """The driver's run, resumed in this process with a clock `later` seconds on."""
    at = datetime.now(timezone.utc) + timedelta(seconds=later)

    def notify() -> Any:
        return stepstone.effect(
            "notify",
            lambda key: _post(receiver.url, kind, key),
            keyed=kind == "keyed",
            lookup=(lambda key: find(receiver.url, "lookup", key)) if kind == "lookup" else None,
            payload={"msg": "hello"},
            **options,
        )

    with stepstone.open_run("fx", settings=Settings.from_env(clock=lambda: at)) as run:
        run.step("prepare", lambda: 1)
        run.step("notify", notify)
        run.step("after", lambda: 2)


@pytest.fixture
def forgetful(tmp_path: Path):
    """A keyed receiver that forgets keys after a day, as Stripe's does."""
    with Receiver(tmp_path / "receiver.db", key_retention=DAY) as receiver:
        yield receiver


def test_a_late_keyed_retry_with_no_retention_applies_the_effect_twice(
    workdir: Path, forgetful: Receiver
):
    _killed_after_the_receiver_committed(workdir, forgetful, "keyed")
    forgetful.advance(3 * DAY)
    _resume(forgetful, "keyed", later=3 * DAY, retention=float("inf"))  # what it used to do
    assert list(forgetful.applied("keyed").values()) == [2]


def test_a_keyed_intent_older_than_the_retention_is_surfaced_not_sent_again(
    workdir: Path, forgetful: Receiver
):
    _killed_after_the_receiver_committed(workdir, forgetful, "keyed")
    forgetful.advance(3 * DAY)
    with pytest.raises(UnresolvedEffect, match=r"forgets keys after 24 h; this intent is 3 days"):
        _resume(forgetful, "keyed", later=3 * DAY)
    assert list(forgetful.applied("keyed").values()) == [1]
    status = stepstone.open_run("fx", drive=False).status()
    (effect,) = status.to_json()["effects"]
    assert effect["state"] == "unresolved"
    intent = datetime.fromisoformat(effect["intent"].replace("Z", "+00:00"))
    assert datetime.fromisoformat(effect["expires"].replace("Z", "+00:00")) == intent + timedelta(
        days=1
    )
    assert "the receiver forgets keys after 24 h" in render.status_text(status)


def test_a_keyed_intent_within_the_retention_is_retried_with_its_key(
    workdir: Path, forgetful: Receiver
):
    _killed_after_the_receiver_committed(workdir, forgetful, "keyed")
    status = stepstone.open_run("fx", drive=False).status()
    (effect,) = status.to_json()["effects"]
    assert effect["state"] == "submitted" and effect["expires"]
    assert f"key kept by the receiver until {effect['expires']}" in render.status_text(status)
    brief = stepstone_cli("brief", cwd=workdir).stdout
    assert "## Effects in doubt" in brief and effect["expires"] in brief
    shown = json.loads(stepstone_cli("status", "--json", cwd=workdir).stdout)
    assert shown["effects"][0]["expires"] == effect["expires"]
    forgetful.advance(DAY / 2)
    _resume(forgetful, "keyed", later=DAY / 2)
    assert list(forgetful.applied("keyed").values()) == [1]


def test_a_retention_given_with_the_effect_overrides_the_default(
    workdir: Path, forgetful: Receiver
):
    _killed_after_the_receiver_committed(workdir, forgetful, "keyed")
    with pytest.raises(UnresolvedEffect, match="forgets keys after 1 h; this intent is 2 h"):
        _resume(forgetful, "keyed", later=2 * 3600, retention=timedelta(hours=1))
    assert list(forgetful.applied("keyed").values()) == [1]


@pytest.mark.parametrize(("kind", "state"), [("lookup", "confirmed"), ("blind", "unresolved")])
def test_receivers_without_keys_settle_a_late_intent_as_before(
    workdir: Path, forgetful: Receiver, kind: str, state: str
):
    _killed_after_the_receiver_committed(workdir, forgetful, kind)
    forgetful.advance(3 * DAY)
    if kind == "blind":
        with pytest.raises(UnresolvedEffect):
            _resume(forgetful, kind, later=3 * DAY)
    else:
        _resume(forgetful, kind, later=3 * DAY)  # the lookup finds the write: confirmed
    assert list(forgetful.applied(kind).values()) == [1]
    (effect,) = stepstone.open_run("fx", drive=False).status().to_json()["effects"]
    assert effect["state"] == state and effect.get("expires") is None
