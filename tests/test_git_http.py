"""A real Git server as the remote: `git http-backend` behind lighttpd on loopback, with
basic auth whose credentials come from a Git credential helper (tests/gitserver.py).

Push, pull, clone, the lease and the fence over it; the credentials land in no store,
record, commit or log line; a 401 and a connection dropped partway through a push are
one clear error each and lose nothing.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import all_objects, fsck, git, stepstone_cli
from gitserver import PASSWORD, GitServer

import stepstone
from stepstone import remote
from stepstone.store import GitStore

pytestmark = pytest.mark.skipif(
    not GitServer.available(), reason="needs Debian's lighttpd (.ci/run installs it)"
)


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[GitServer]:
    with GitServer(tmp_path / "server") as running:
        for key, value in running.env().items():
            monkeypatch.setenv(key, value)
        running.bare("store.git")
        yield running


def _cli(*args: str, cwd: Path, server: GitServer) -> subprocess.CompletedProcess[str]:
    return stepstone_cli(*args, cwd=cwd, **server.env())


def _everything_in(store: Path) -> bytes:
    """Every object of a repository, and every file of its Git directory, as bytes."""
    files = b"".join(p.read_bytes() for p in store.rglob("*") if p.is_file())
    return all_objects(store) + files


def test_push_clone_lease_and_fence_over_http_with_basic_auth(tmp_path: Path, server: GitServer):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    sent: list[tuple[str, str | None]] = []

    def notify(run: stepstone.Run, name: str) -> None:
        def send() -> None:
            token = stepstone.fence_token()
            stepstone.effect(name, lambda key: sent.append((key, token)) or {"ok": 1})

        run.step(name, send)

    with stepstone.open_run("job", repo=a / ".stepstone", workdir=a) as run:
        run.step("start", lambda: 1)
        remote.set_remote(run.store, server.url("store.git"))
    with stepstone.open_run("job", repo=a / ".stepstone", workdir=a) as run:
        assert run.ledger.epoch is not None  # the lease, taken over HTTP
        notify(run, "first")  # its intent pushed with the lease before the write
    pushed = _cli("push", "--repo", str(a / ".stepstone"), cwd=tmp_path, server=server)
    assert pushed.returncode == 0, pushed.stderr
    done = _cli(
        "clone", server.url("store.git"), str(b / ".stepstone"), cwd=tmp_path, server=server
    )
    assert done.returncode == 0, done.stderr
    with stepstone.open_run("job", repo=b / ".stepstone", workdir=b) as run:
        assert run.records["first"].status == "confirmed"
        notify(run, "second")
    assert (
        _cli("push", "--repo", str(b / ".stepstone"), cwd=tmp_path, server=server).returncode == 0
    )
    pulled = _cli("pull", "--repo", str(a / ".stepstone"), cwd=tmp_path, server=server)
    assert pulled.returncode == 0, pulled.stderr
    with stepstone.open_run("job", repo=a / ".stepstone", workdir=a, drive=False) as reader:
        assert [n for n in reader.steps.names if reader.records.get(n)] == [
            "start",
            "first",
            "second",
        ]
    assert len(sent) == 2 and all(token and token.startswith("job:") for _, token in sent)
    assert int(sent[1][1].split(":")[1]) > int(sent[0][1].split(":")[1])  # a later lease
    for store in (a / ".stepstone", b / ".stepstone", server.repos / "store.git"):
        fsck(store)
        assert PASSWORD.encode() not in _everything_in(store), store
    log = _cli("log", "--repo", str(a / ".stepstone"), cwd=tmp_path, server=server)
    assert log.returncode == 0 and PASSWORD not in log.stdout + log.stderr
    assert GitStore(a / ".stepstone").config.remote_url("origin") == server.url("store.git")


def test_a_refused_login_is_one_clear_error_and_loses_nothing(tmp_path: Path, server: GitServer):
    a = tmp_path / "a"
    with stepstone.open_run("job", repo=a / ".stepstone", workdir=a) as run:
        run.step("start", lambda: 1)
    tip = GitStore(a / ".stepstone").refs.tip("job")
    server.login("not-the-password")
    refused = _cli("push", "--remote", server.url("store.git"), cwd=a, server=server)
    assert refused.returncode == 2
    said = refused.stderr.strip()
    assert said.count("\n") == 0 and "Authentication failed" in said
    assert "credential helper" in said and PASSWORD not in said
    # nothing lost: the run as it was, and the record that it travels through a remote
    now = GitStore(a / ".stepstone").refs.tip("job")
    added = git("log", "--format=%s", f"{tip}..{now}", cwd=a / ".stepstone").splitlines()
    assert [line.split(":")[1].strip() for line in added] == [
        "shared through its remote; its drivers take turns by the lease"
    ]
    fsck(a / ".stepstone")
    server.login(PASSWORD)
    assert _cli("push", cwd=a, server=server).returncode == 0


def test_a_push_cut_partway_is_one_clear_error_and_the_next_one_lands(
    tmp_path: Path, server: GitServer
):
    import os

    a = tmp_path / "a"
    with stepstone.open_run("job", repo=a / ".stepstone", workdir=a) as run:
        run.step("big", lambda: os.urandom(1 << 20).hex())  # a pack of a few MB to cut
    server.drop_after(256 * 1024)
    cut = _cli("push", "--remote", server.url("store.git"), cwd=a, server=server)
    assert server.proxy is not None and server.proxy.dropped.is_set()
    assert cut.returncode == 2, cut.stdout
    assert "connection to the remote failed" in cut.stderr and "run the same command" in cut.stderr
    fsck(a / ".stepstone")
    fsck(server.repos / "store.git")
    assert git("for-each-ref", cwd=server.repos / "store.git").strip() == ""  # nothing half-made
    again = _cli("push", cwd=a, server=server)
    assert again.returncode == 0, again.stderr
    assert git("rev-parse", "job", cwd=server.repos / "store.git").strip() == GitStore(
        a / ".stepstone"
    ).refs.tip("job")
