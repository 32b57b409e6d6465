import dataclasses
import os
import subprocess
import time
from pathlib import Path

import pytest
from conftest import fsck, git, run_python

import stepstone
from stepstone.model.message import CommitMessage
from stepstone.store import GitStore, durable
from stepstone.store.packs import read_index


def test_each_completed_step_is_one_commit_with_trailers(workdir: Path):
    run = stepstone.open_run("demo")
    run.set_plan([{"name": "fetch", "checks": ["file:a.json"]}, "clean"])
    (workdir / "a.json").write_text("[1, 2]")
    run.step("fetch", lambda: None)  # the plan supplies the check
    run.step("clean", lambda: 3)
    log = git("log", "--format=%s", cwd=workdir / ".stepstone").splitlines()
    assert log[:2] == ["step 2 clean: confirmed", "step 1 fetch: confirmed"]
    body = git("log", "-1", "--skip=1", "--format=%B", cwd=workdir / ".stepstone")
    trailers = CommitMessage.parse(body).as_dict()
    assert trailers["Stepstone-Run"] == ["demo"]
    assert trailers["Stepstone-Step"] == ["1 fetch"]
    assert trailers["Stepstone-Status"] == ["confirmed"]
    assert trailers["Stepstone-Evidence"][0].startswith("file:a.json sha256=")
    # plain git reads the same trailers
    parsed = subprocess.run(
        ["git", "interpret-trailers", "--parse"],
        input=body,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "Stepstone-Step: 1 fetch" in parsed.splitlines()
    fsck(workdir / ".stepstone")


def test_embedded_store_is_bare_and_ignored_by_the_parent_project(workdir: Path):
    stepstone.open_run("demo").close()
    store = workdir / ".stepstone"
    assert git("rev-parse", "--is-bare-repository", cwd=store).strip() == "true"
    git("init", "-q", cwd=workdir)
    assert git("status", "--porcelain", cwd=workdir).strip() == ""


def test_runs_on_a_dedicated_ref_leave_the_users_repository_alone(workdir: Path):
    project = workdir / "project"
    project.mkdir()
    git("init", "-q", "-b", "main", cwd=project)
    (project / "notes.txt").write_text("mine\n")
    git("add", "notes.txt", cwd=project)
    git("-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "first", cwd=project)
    (project / "notes.txt").write_text("mine, edited\n")  # an uncommitted change
    (project / "new.txt").write_text("untracked\n")
    before = (git("rev-parse", "HEAD", cwd=project), git("status", "--porcelain", cwd=project))
    index_before = (project / ".git" / "index").read_bytes()

    run = stepstone.open_run("demo", repo=project)
    run.step("one", lambda: 1)
    run.close()

    assert (
        git("rev-parse", "HEAD", cwd=project),
        git("status", "--porcelain", cwd=project),
    ) == before
    assert (project / ".git" / "index").read_bytes() == index_before
    assert git("branch", "--list", cwd=project).split() == ["*", "main"]
    log = git("log", "--format=%s", "refs/stepstone/runs/demo", cwd=project)
    assert "step 1 one: confirmed" in log


def test_a_store_path_that_is_a_file_is_refused(workdir: Path):
    (workdir / "store").write_text("not a repo")
    with pytest.raises(stepstone.StoreError, match="is a file"):
        stepstone.open_run("demo", repo=workdir / "store")


def test_a_folder_with_other_files_is_not_taken_over(workdir: Path):
    (workdir / "stuff").mkdir()
    (workdir / "stuff" / "keep.txt").write_text("precious")
    with pytest.raises(stepstone.StoreError, match="not a Git repository"):
        stepstone.open_run("demo", repo=workdir / "stuff")
    assert (workdir / "stuff" / "keep.txt").read_text() == "precious"
    assert not (workdir / "stuff" / "objects").exists()


def test_store_from_environment_variable(workdir: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("STEPSTONE_REPO", str(workdir / "elsewhere"))
    monkeypatch.setenv("STEPSTONE_RUN", "envrun")
    run = stepstone.open_run()
    assert run.id == "envrun" and run.store.path == workdir / "elsewhere"
    assert GitStore(workdir / "elsewhere").refs.runs() == ["envrun"]


def test_a_moved_ref_is_never_overwritten(workdir: Path):
    run = stepstone.open_run("demo")
    run.step("one", lambda: 1)
    # someone else moves the ref behind our back (e.g. a hand reset)
    store = workdir / ".stepstone"
    first = git("rev-list", "--max-parents=0", "HEAD", cwd=store).strip()
    git("update-ref", "refs/heads/demo", first, cwd=store)
    with pytest.raises(stepstone.StoreError, match="nothing was recorded"):
        run.step("two", lambda: 2)


def test_a_ref_moved_while_packed_is_never_overwritten(workdir: Path):
    run = stepstone.open_run("demo")
    run.step("one", lambda: 1)
    store = workdir / ".stepstone"
    git("pack-refs", "--all", "--prune", cwd=store)  # as git gc does: no loose ref file
    run.step("two", lambda: 2)  # read from packed-refs, then written loose
    git("pack-refs", "--all", "--prune", cwd=store)
    tip = git("rev-parse", "refs/heads/demo", cwd=store).strip()
    first = git("rev-list", "--max-parents=0", "HEAD", cwd=store).strip()
    packed = store / "packed-refs"
    packed.write_text(packed.read_text().replace(tip, first))  # moved behind our back
    with pytest.raises(stepstone.StoreError, match="nothing was recorded"):
        run.step("three", lambda: 3)
    fsck(store)


def test_each_commit_is_one_pack_and_small_packs_are_merged_as_they_pile_up(workdir: Path):
    with stepstone.open_run("many") as run:
        run.set_plan([f"s{i}" for i in range(300)])
        for i in range(300):
            run.step(f"s{i}", lambda: None)
    store = workdir / ".stepstone"
    loose = [p for p in (store / "objects").iterdir() if len(p.name) == 2]
    assert loose == []
    packs = list((store / "objects" / "pack").glob("*.pack"))
    assert 1 < len(packs) <= 32 + 10  # merged at more than 32, plus about log2(300 commits)
    with stepstone.open_run("many", drive=False) as reader:
        assert len(reader.records) == 300
    fsck(store)


def test_git_gc_repacks_in_the_background_once_packs_pass_gc_auto_pack_limit(workdir: Path):
    with stepstone.open_run("many") as run:
        run.store.set_config("gc.autoPackLimit", 8)
        run.store.settings = dataclasses.replace(run.store.settings, gc_pack_limit=8)
        run.set_plan([f"s{i}" for i in range(12)])
        for i in range(12):
            run.step(f"s{i}", lambda: None)
    store = workdir / ".stepstone"

    def objects_in_largest_pack() -> int:
        try:
            indexes = (store / "objects" / "pack").glob("*.idx")
            return max(len(read_index(index.read_bytes())) for index in indexes)
        except OSError:
            return 0  # gc removed a pack while we looked

    # stepstone itself merges only past 32 packs; one pack holding 9+ commits is gc's
    deadline = time.monotonic() + 60
    while objects_in_largest_pack() < 9 * 5:
        assert time.monotonic() < deadline, "git gc --auto never repacked the store"
        time.sleep(0.05)
    fsck(store)  # also waits for the detached gc to finish
    assert len(list((store / "objects" / "pack").glob("*.pack"))) <= 8
    with stepstone.open_run("many", drive=False) as reader:
        assert len(reader.records) == 12


def _flushes_and_renames(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Every fsync (of the file it flushed) and rename (of the file renamed), in order."""
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        real_fsync(fd)
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        events.append(("rename", str(src)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return events


def test_a_commit_fsyncs_its_own_files_and_folders_before_the_ref_moves(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
):
    run = stepstone.open_run("demo")
    run.set_plan(["one"])
    store = workdir / ".stepstone"
    events = _flushes_and_renames(monkeypatch)
    syncfs = []
    monkeypatch.setattr(durable, "sync_filesystem_of", lambda fd: syncfs.append(fd))
    run.step("one", lambda: 1)
    flushed = [path for kind, path in events if kind == "fsync"]
    ref_moved = events.index(("rename", str(store / "refs" / "heads" / "demo.lock")))
    assert syncfs == []  # nothing but the commit's own files is flushed
    # the pack (its index is derived data: rebuilt after a power cut, see test_power_loss)
    assert next(p for p in flushed if "/objects/pack/pack-" in p).endswith(".pack")
    assert sum(1 for p in flushed if "/objects/pack/pack-" in p) == 1
    assert any(p.endswith("objects/pack") for p in flushed)  # and their folder
    assert any(p.endswith("refs/heads/demo.lock") for p in flushed)
    before = {path for kind, path in events[:ref_moved] if kind == "fsync"}
    assert set(flushed) - before <= {str(store / "refs" / "heads")}  # only the ref's folder after
    run.close()
    fsck(store)


def test_packs_removed_by_merges_are_not_kept_open(workdir: Path):
    def open_packs() -> int:
        fds = Path("/proc/self/fd")
        links = []
        for fd in fds.iterdir():
            try:
                links.append(os.readlink(fd))
            except OSError:
                continue
        here = str(workdir / ".stepstone" / "objects" / "pack")
        return sum(1 for link in links if link.startswith(here))

    with stepstone.open_run("many") as run:
        run.store.writer.objects().packs.pack_limit = 2  # merge every few commits
        run.set_plan([f"s{i}" for i in range(300)])
        for i in range(300):
            run.step(f"s{i}", lambda: None)
            tip = run.store.refs.tip("many")
            tree = run.store.reader.head("many", at=tip).tree or ""
            assert run.store.blob(tree, "run.json")  # a pack
        store_packs = len(list((workdir / ".stepstone" / "objects" / "pack").glob("*.pack")))
        assert open_packs() <= 2 * store_packs + 4  # a .pack and an .idx of each, at most
    fsck(workdir / ".stepstone")


def test_a_big_values_pack_is_fsynced_before_the_ref_moves(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
):
    import numpy as np

    run = stepstone.open_run("demo")
    events = _flushes_and_renames(monkeypatch)
    run.step("one", lambda: np.arange(300_000, dtype=np.float64))  # 2.4 MB: a pack of its own
    store = workdir / ".stepstone"
    ref_moved = events.index(("rename", str(store / "refs" / "heads" / "demo.lock")))
    before = [path for kind, path in events[:ref_moved] if kind == "fsync"]
    assert sum(1 for p in before if "/objects/pack/pack-" in p) == 2  # two packs
    assert all(p.endswith(".pack") for p in before if "/objects/pack/pack-" in p)
    run.close()
    fsck(store)


def test_a_pack_merged_away_before_the_flush_does_not_fail_the_commit(tmp_path: Path):
    gone, kept = tmp_path / "gone.pack", tmp_path / "kept.pack"
    gone.write_bytes(b"x")
    kept.write_bytes(b"y")
    unflushed = durable.Unflushed()
    unflushed.add(str(gone), str(kept))
    gone.unlink()  # a merge or a `git gc` removed it after copying its objects
    unflushed.flush()
    unflushed.flush()  # nothing left over to fail the next commit


def test_an_index_a_power_cut_lost_is_rebuilt_from_its_pack_at_the_first_open_of_a_boot(
    workdir: Path,
):
    made = """
import stepstone
with stepstone.open_run("demo") as run:
    run.step("one", lambda: {"a": 1})
    run.step("two", lambda: list(range(50)))
"""
    run_python(made, cwd=workdir)
    store = workdir / ".stepstone"
    indexes = sorted((store / "objects" / "pack").glob("pack-*.idx"))
    assert indexes
    for index in indexes:  # as a power cut leaves an index never flushed: torn
        index.chmod(0o644)
        index.write_bytes(index.read_bytes()[: len(index.read_bytes()) // 3])
    (store / "stepstone" / "checked-boot").unlink(missing_ok=True)  # a new boot
    opened = """
import stepstone
with stepstone.open_run("demo") as run:
    print(sum("rebuilt the index of pack" in note for note in run.notes))
    print(run.step("two", lambda: 1 / 0).skipped)
"""
    said = run_python(opened, cwd=workdir).stdout.split()
    assert said == [str(len(indexes)), "True"]
    assert not (store / "stepstone" / "damaged").exists()
    fsck(store)
