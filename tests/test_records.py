"""Hand-edited, corrupt or newer records: a clear error, and nothing overwritten."""

import json
import subprocess
from pathlib import Path

import pytest
from conftest import git

import stepstone
from stepstone.model.models import SCHEMA_VERSION, StepRecord, dump, load


def _commit_edit(store: Path, path: str, content: str) -> str:
    """Edit one file of the run's tree with plain git, as a person would, and commit it."""
    blob = subprocess.run(
        ["git", "hash-object", "-w", "--stdin"],
        input=content,
        cwd=store,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    env_tree = subprocess.run(
        ["git", "read-tree", "HEAD"],
        cwd=store,
        capture_output=True,
        text=True,
        env={"GIT_INDEX_FILE": str(store / "tmp-index"), "PATH": "/usr/bin:/bin"},
        check=True,
    )
    assert env_tree.returncode == 0
    env = {
        "GIT_INDEX_FILE": str(store / "tmp-index"),
        "PATH": "/usr/bin:/bin",
        "GIT_AUTHOR_NAME": "a",
        "GIT_AUTHOR_EMAIL": "a@x",
        "GIT_COMMITTER_NAME": "a",
        "GIT_COMMITTER_EMAIL": "a@x",
    }
    subprocess.run(
        ["git", "update-index", "--cacheinfo", f"100644,{blob},{path}"],
        cwd=store,
        env=env,
        check=True,
    )
    tree = subprocess.run(
        ["git", "write-tree"], cwd=store, env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    commit = subprocess.run(
        ["git", "commit-tree", tree, "-p", "HEAD", "-m", "hand edit"],
        cwd=store,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    git("update-ref", "HEAD", commit, cwd=store)
    (store / "tmp-index").unlink()
    return commit


@pytest.fixture
def recorded(workdir: Path) -> Path:
    run = stepstone.open_run("demo")
    run.step("one", lambda: 1)
    run.close()
    return workdir / ".stepstone"


def test_invalid_json_in_a_record_names_the_file_and_changes_nothing(recorded: Path):
    path = git("ls-tree", "-r", "--name-only", "HEAD", cwd=recorded).split()
    step_file = next(p for p in path if p.startswith("steps/"))
    tip = _commit_edit(recorded, step_file, "{ not json")
    with pytest.raises(stepstone.RecordError) as caught:
        stepstone.open_run("demo")
    assert step_file in str(caught.value) and "not valid JSON" in str(caught.value)
    assert git("rev-parse", "HEAD", cwd=recorded).strip() == tip


def test_a_record_that_fails_validation_is_reported_field_by_field(recorded: Path):
    raw = json.loads(git("show", "HEAD:run.json", cwd=recorded))
    raw["seq"] = "many"
    _commit_edit(recorded, "run.json", json.dumps(raw))
    with pytest.raises(stepstone.RecordError, match=r"run\.json.*seq"):
        stepstone.open_run("demo")


def test_a_record_from_a_newer_schema_asks_for_an_upgrade(recorded: Path):
    raw = json.loads(git("show", "HEAD:run.json", cwd=recorded))
    raw["schema_version"] = SCHEMA_VERSION + 1
    tip = _commit_edit(recorded, "run.json", json.dumps(raw))
    with pytest.raises(stepstone.SchemaTooNew, match="upgrade stepstone"):
        stepstone.open_run("demo")
    assert git("rev-parse", "HEAD", cwd=recorded).strip() == tip


def test_a_reader_reports_a_corrupt_record_and_still_shows_the_rest(recorded: Path):
    _commit_edit(recorded, "run.json", "[]")
    status = stepstone.open_run("demo", drive=False).status()
    assert any("run.json" in n and "expected a JSON object" in n for n in status.notes)
    assert [s.name for s in status.steps] == ["one"]
    with pytest.raises(stepstone.RecordError):
        stepstone.open_run("demo")  # a driver never writes over it


def test_a_record_that_uses_no_newer_field_stays_readable_by_earlier_versions(workdir: Path):
    (workdir / "model.txt").write_text("made")
    with stepstone.open_run("compat") as run:
        run.step("plain", lambda: 1)
        run.step("keeps", lambda: None, checks=["keep:model.txt"])
        plain, keeps = run.records["plain"], run.records["keeps"]
    raw = json.loads(dump(plain))
    assert "kept" not in raw and "unsaved" not in raw and raw["schema_version"] == 1
    newer = json.loads(dump(keeps))
    assert newer["schema_version"] == 2 and "model.txt" in newer["kept"]  # "upgrade", earlier
    assert load(StepRecord, dump(keeps), "x") == keeps.model_copy(update={"schema_version": 2})
