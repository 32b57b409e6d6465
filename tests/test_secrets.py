"""Credentials planted everywhere never reach the repository; foreign artifacts are checked."""

from pathlib import Path

import pytest
from conftest import all_objects, git, stepstone_cli
from IPython.core.interactiveshell import InteractiveShell
from test_records import _commit_edit

import stepstone


def _all_objects_text(store: Path) -> str:
    return all_objects(store).decode(errors="replace")


def test_planted_credentials_appear_in_no_object(workdir: Path, monkeypatch, capsys):
    monkeypatch.setenv("SERVICE_TOKEN", "PLANTED-ENV-7f3a")
    import os

    def leaky() -> None:
        raise RuntimeError(
            f"login failed for {os.environ['SERVICE_TOKEN']}, password=PLANTED-EXC-91b2"
        )

    with stepstone.open_run("s") as run:
        with pytest.raises(RuntimeError):
            run.step("leaky", leaky)
        run.step(
            "leaky",
            lambda: stepstone.effect(
                "send",
                lambda key: {"id": 1, "session_id": "PLANTED-RECEIPT-c0de"},
                keyed=True,
                payload={"api_key": "PLANTED-PAYLOAD-5e5e", "to": "ops"},
            ),
        )
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "stepstone")
    try:
        ip.run_line_magic("resume", "--run cells")
        shout = (
            "import os\nprint('token: PLANTED-OUTPUT-a11c')\nprint(os.environ['SERVICE_TOKEN'])\n"
            "print('the report is ready')"
        )
        ip.run_cell_magic("step", "shout", shout)
    finally:
        ip.run_line_magic("unload_ext", "stepstone")
    assert "PLANTED-OUTPUT-a11c" in capsys.readouterr().out  # shown as it ran
    text = _all_objects_text(workdir / ".stepstone")
    for planted in (
        "PLANTED-ENV-7f3a",
        "PLANTED-EXC-91b2",
        "PLANTED-RECEIPT-c0de",
        "PLANTED-PAYLOAD-5e5e",
        "PLANTED-OUTPUT-a11c",
    ):
        assert planted not in text, planted
    assert "RuntimeError" in text  # the failure itself is recorded, redacted
    assert "the report is ready" in text  # what the cell printed is kept, redacted


class Opaque:
    """A value only pickle can save."""

    def __init__(self, n: int) -> None:
        self.n = n


def test_pickled_outputs_load_only_where_written_or_trusted(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
):
    with stepstone.open_run("p") as run:
        run.step("make", lambda: Opaque(5))
    clone = workdir / "elsewhere.git"
    git("clone", "-q", "--mirror", str(workdir / ".stepstone"), str(clone), cwd=workdir)
    with stepstone.open_run("p", repo=clone) as run:  # the same user: its own values
        assert run.step("make", lambda: pytest.fail("must be restored")).value.n == 5
    monkeypatch.setenv("STEPSTONE_CONFIG", str(workdir / "another-user"))
    with stepstone.open_run("p", repo=clone) as run:
        status = run.status()
        assert status.steps[0].state == "stale" and "stepstone trust" in status.steps[0].reason
        start = run.begin("make")
        assert not start.skip and "pickle written elsewhere" in start.reason
    other = {"STEPSTONE_CONFIG": str(workdir / "another-user")}
    done = stepstone_cli("trust", "--repo", str(clone), cwd=workdir, **other)
    assert done.returncode == 0, done.stderr
    with stepstone.open_run("p", repo=clone) as run:
        result = run.step("make", lambda: pytest.fail("must be restored"))
        assert result.skipped and result.value.n == 5


def test_an_artifact_that_does_not_match_its_hash_is_never_restored(workdir: Path):
    calls = []
    with stepstone.open_run("h") as run:
        run.step("make", lambda: calls.append(1) or {"rows": 3})
    store = workdir / ".stepstone"
    path = next(
        p
        for p in git("ls-tree", "-r", "--name-only", "h", cwd=store).split()
        if p.startswith("artifacts/")
    )
    _commit_edit(store, path, '{"rows": 999}')
    with stepstone.open_run("h") as run:
        result = run.step("make", lambda: calls.append(2) or {"rows": 3})
    assert not result.skipped and calls == [1, 2] and result.value == {"rows": 3}
