"""A store received from someone else runs none of their code through stepstone's git."""

import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import stepstone_cli

import stepstone


def _sent_store(sender: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(sender)
    with stepstone.open_run("job") as run:
        run.step("a", lambda: 1)


def test_a_copied_stores_hooks_do_not_run_when_it_is_pushed_and_pulled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    sender, receiver, marker = tmp_path / "a", tmp_path / "b", tmp_path / "MARKER"
    sender.mkdir()
    _sent_store(sender, monkeypatch)
    hooks = sender / ".stepstone" / "hooks"
    for hook in ("reference-transaction", "pre-auto-gc", "post-checkout"):
        (hooks / hook).write_text(f"#!/bin/sh\ntouch {marker}\n")
        (hooks / hook).chmod(0o755)
    shutil.copytree(sender, receiver)  # cp -r: the hooks come along
    subprocess.run(["git", "init", "-q", "--bare", str(tmp_path / "remote.git")], check=True)
    pushed = stepstone_cli("push", "--remote", str(tmp_path / "remote.git"), cwd=receiver)
    assert pushed.returncode == 0, pushed.stderr
    pulled = stepstone_cli("pull", cwd=receiver)
    assert pulled.returncode == 0, pulled.stderr
    assert not marker.exists()  # plain git would have run reference-transaction


def test_a_copied_stores_command_settings_are_refused_until_it_is_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    sender, receiver, marker = tmp_path / "a", tmp_path / "b", tmp_path / "MARKER"
    sender.mkdir()
    _sent_store(sender, monkeypatch)
    store = sender / ".stepstone"
    subprocess.run(
        ["git", "--git-dir", str(store), "config", "core.sshCommand", f"touch {marker}; true"],
        check=True,
    )
    shutil.copytree(sender, receiver)
    pushed = stepstone_cli("push", "--remote", "ssh://example.invalid/x.git", cwd=receiver)
    assert pushed.returncode != 0 and not marker.exists()
    assert "core.sshcommand" in pushed.stderr and "stepstone trust --repo" in pushed.stderr
    assert "config --unset-all core.sshcommand" in pushed.stderr
    status = stepstone_cli("status", cwd=receiver)  # reading runs nothing and still works
    assert status.returncode == 0 and not marker.exists()
    assert stepstone_cli("trust", cwd=receiver).returncode == 0
    # now git may use the setting (the refused push set nothing: the same command again)
    trusted = stepstone_cli("push", "--remote", "ssh://example.invalid/x.git", cwd=receiver)
    assert marker.exists(), trusted.stderr
