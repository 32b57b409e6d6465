"""Settings: resolved once at open, except the variables a notebook sets as it goes."""

from pathlib import Path

import pytest
from conftest import git

import stepstone
from stepstone.errors import CheckFailed
from stepstone.settings import CHECK_TIMEOUT_ENV, OFFLINE_ENV, Settings
from stepstone.store import GitStore


def test_a_check_timeout_set_after_the_run_opened_applies_to_the_next_check(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.delenv(CHECK_TIMEOUT_ENV, raising=False)
    with stepstone.open_run("job") as run:
        monkeypatch.setenv(CHECK_TIMEOUT_ENV, "0.3")  # `%env` in a notebook, after %resume
        with pytest.raises(CheckFailed, match=r"did not finish within 0\.3 s"):
            run.step("slow", lambda: None, checks=["cmd:sleep 5"])


def test_explicit_settings_stand_until_the_variable_changes():
    env = {OFFLINE_ENV: "1"}
    given = Settings.from_env(env, check_timeout=7.0)
    assert given.now(env) is given and given.now(env).check_timeout == 7.0
    changed = given.now({OFFLINE_ENV: "1", CHECK_TIMEOUT_ENV: "2.5"})
    assert changed.check_timeout == 2.5 and changed.offline
    assert not given.now({}).offline  # `%env STEPSTONE_OFFLINE=` turns it off again


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, True), ("yes", True), ("2", True), ("-1", True), ("off", False), ("0", False)],
)
def test_a_stores_git_booleans_read_as_git_reads_them(
    workdir: Path, value: str | None, expected: bool
):
    store = GitStore(workdir / "store")
    config = store.git_dir / "config"
    line = "\tautopush\n" if value is None else f"\tautopush = {value}\n"
    config.write_text(config.read_text() + "[stepstone]\n" + line)
    assert GitStore(workdir / "store").settings.autopush is expected
    if value is not None:
        assert git("config", "--bool", "stepstone.autopush", cwd=store.git_dir).strip() == (
            "true" if expected else "false"
        )


def test_a_stores_effect_retention_comes_from_its_git_config(workdir: Path):
    store = GitStore(workdir / "store")
    assert store.settings.effect_retention == 86_400.0  # a day, as Stripe keeps keys
    store.set_config("stepstone.effectRetention", "3600")
    assert GitStore(workdir / "store").settings.effect_retention == 3600.0


def test_following_inputs_is_off_unless_a_store_or_the_environment_asks(workdir: Path):
    store = GitStore(workdir / "store")
    assert not store.settings.follow_inputs
    assert Settings.from_env({"STEPSTONE_FOLLOW_INPUTS": "1"}).follow_inputs
    git("config", "stepstone.followInputs", "true", cwd=store.git_dir)
    assert GitStore(workdir / "store").settings.follow_inputs
