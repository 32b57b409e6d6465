"""Damaged stores: detected, reported with what to do, recovered where safe, nothing deleted."""

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import git
from conftest import stepstone_cli as cli

import stepstone
from stepstone.store.packs import read_index


def _three_steps(workdir: Path, *, effect: bool = False) -> None:
    with stepstone.open_run("job") as run:
        run.step("a", lambda: 1)
        run.step("b", lambda: 2)
        run.step(
            "c",
            (lambda: stepstone.effect("ping", lambda k: {"id": 1}, keyed=True))
            if effect
            else (lambda: 3),
        )


def _damage_object(store: Path, oid: str) -> Path:
    """Zero the stored bytes of object `oid`, as a torn write can; the file it is in.

    A loose object is truncated to nothing. In a pack, only that object's entry
    is overwritten, so the other objects of the same commit stay readable.
    """
    loose = store / "objects" / oid[:2] / oid[2:]
    if loose.exists():
        os.chmod(loose, 0o644)
        loose.write_bytes(b"")
        return loose
    for index in (store / "objects" / "pack").glob("*.idx"):
        entries = sorted(read_index(index.read_bytes()), key=lambda e: e[2])
        for k, (found, _, offset) in enumerate(entries):
            if found.hex() != oid:
                continue
            pack = index.with_suffix(".pack")
            data = bytearray(pack.read_bytes())
            end = entries[k + 1][2] if k + 1 < len(entries) else len(data) - 20
            header = offset
            while data[header] & 0x80:  # the entry's type-and-size header
                header += 1
            data[header + 1 : end] = bytes(end - header - 1)
            os.chmod(pack, 0o644)
            pack.write_bytes(bytes(data))
            return pack
    raise AssertionError(f"object {oid} is nowhere")


def _damage_record_of_tip(store: Path, suffix: str = "/c.json") -> Path:
    """Damage a record's blob in the tip of run `job`."""
    path = next(
        p
        for p in git("ls-tree", "-r", "--name-only", "job", cwd=store).split()
        if p.endswith(suffix) or p.startswith(suffix)
    )
    oid = git("rev-parse", f"job:{path}", cwd=store).strip()
    return _damage_object(store, oid)


def test_a_damaged_object_is_reported_and_repaired_to_the_last_good_commit(workdir: Path):
    _three_steps(workdir)
    store = workdir / ".stepstone"
    old_tip = git("rev-parse", "job", cwd=store).strip()
    damaged = _damage_record_of_tip(store)
    status = cli("status", cwd=workdir)
    assert status.returncode == 2 and "stepstone repair --run job" in status.stderr
    done = cli("repair", cwd=workdir)
    assert done.returncode == 0, done.stderr
    assert damaged.exists()  # nothing deleted
    notes = list((store / "stepstone" / "damaged").iterdir())
    assert old_tip in notes[0].read_text()
    with stepstone.open_run("job") as run:
        states = {s.name: s.state for s in run.status().steps}
        assert states == {"a": "verified", "b": "verified"}  # c (planned in its commit) runs again
        run.step("c", lambda: 3)


def test_verify_reads_past_the_read_caches_and_finds_a_damaged_record(workdir: Path):
    with stepstone.open_run("job") as run:  # large enough for the step index to be kept
        run.set_plan([f"s{i}" for i in range(250)])
        for i in range(5):
            run.step(f"s{i}", lambda: None)
    assert (workdir / ".stepstone" / "stepstone" / "cache" / "job.index").exists()
    _damage_record_of_tip(workdir / ".stepstone", suffix="/s4.json")
    # status reads the saved index (derived from the records before the damage)...
    assert cli("status", cwd=workdir).returncode == 0
    # ...verify reads every record from Git and sends the user to repair
    checked = cli("verify", cwd=workdir)
    assert checked.returncode == 2 and "stepstone repair --run job" in checked.stderr


def test_a_zero_length_pack_loses_its_whole_commit_and_repair_needs_force(workdir: Path):
    _three_steps(workdir)
    store = workdir / ".stepstone"
    tip = git("rev-parse", "job", cwd=store).strip()
    pack = next(
        index.with_suffix(".pack")
        for index in (store / "objects" / "pack").glob("*.idx")
        if any(oid.hex() == tip for oid, _, _ in read_index(index.read_bytes()))
    )
    os.chmod(pack, 0o644)
    pack.write_bytes(b"")  # as a power loss could leave it, were the flush order broken
    assert cli("status", cwd=workdir).returncode == 2
    refused = cli("repair", cwd=workdir)
    assert refused.returncode == 2 and "the tip" in refused.stderr and "--force" in refused.stderr
    done = cli("repair", "--force", cwd=workdir)
    assert done.returncode == 0, done.stderr
    assert "1 commit(s) dropped" in done.stdout  # the unreadable tip counts
    with stepstone.open_run("job") as run:
        states = {s.name: s.state for s in run.status().steps}
        assert states == {"a": "verified", "b": "verified"}  # c was planned in its commit


def test_repair_refuses_to_forget_an_effect(workdir: Path):
    _three_steps(workdir, effect=True)
    store = workdir / ".stepstone"
    # damage the effect's confirmed record: the confirmation commit cannot be read
    _damage_record_of_tip(store, "effects/")
    refused = cli("repair", cwd=workdir)
    assert refused.returncode == 2 and "recorded effect" in refused.stderr
    assert cli("repair", "--force", cwd=workdir).returncode == 0


def test_a_ref_pointing_at_a_missing_commit_is_reported_and_repairable(workdir: Path):
    _three_steps(workdir)
    store = workdir / ".stepstone"
    (store / "refs" / "heads" / "job").write_text("1" * 40 + "\n")
    status = cli("status", cwd=workdir)
    assert status.returncode == 2 and "repair" in status.stderr
    refused = cli("repair", cwd=workdir)
    assert refused.returncode == 2 and "cannot be read" in refused.stderr
    assert cli("repair", "--force", cwd=workdir).returncode == 0
    with stepstone.open_run("job") as run:
        assert [s.state for s in run.status().steps] == ["verified"] * 3


def test_a_held_index_lock_in_the_project_repository_is_neither_needed_nor_touched(workdir: Path):
    git("init", "-q", cwd=workdir)
    lock = workdir / ".git" / "index.lock"
    lock.write_text("held by someone's git add")
    with stepstone.open_run("job", repo=workdir) as run:
        run.step("a", lambda: 1)
    assert lock.read_text() == "held by someone's git add"


@pytest.fixture
def small_fs(tmp_path: Path):
    """A 1 MB tmpfs mounted for the test (needs root; skipped elsewhere)."""
    mount = tmp_path / "fs"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_read_only_store_is_refused_for_driving_and_still_readable(small_fs: Path):
    store = small_fs / "store"
    with stepstone.open_run("job", repo=store, workdir=small_fs) as run:
        run.step("a", lambda: 1)
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    try:
        with pytest.raises(stepstone.StoreError, match="Read-only file system"):
            stepstone.open_run("job", repo=store, workdir=small_fs)
        reader = stepstone.open_run("job", repo=store, workdir=small_fs, drive=False)
        assert reader.status().steps[0].state == "verified"
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_fs)], check=True)
    with stepstone.open_run("job", repo=store, workdir=small_fs) as run:
        assert run.step("a", lambda: 2).skipped


def test_a_full_disk_fails_the_commit_cleanly_and_loses_nothing(small_fs: Path):
    store = small_fs / "store"
    with stepstone.open_run("job", repo=store, workdir=small_fs) as run:
        run.step("a", lambda: 1)
        tip = run.store.refs.tip("job")
        filler = small_fs / "filler"
        with pytest.raises(stepstone.StoreError, match="space"):
            # fill the disk, then try to record a big output
            with filler.open("wb") as handle:
                try:
                    while True:
                        handle.write(b"\0" * 65536)
                except OSError:
                    pass
            run.step("b", lambda: os.urandom(200_000).hex())
        assert run.store.refs.tip("job") == tip
    filler.unlink()
    git("fsck", cwd=store)
    with stepstone.open_run("job", repo=store, workdir=small_fs) as run:
        assert run.step("a", lambda: 9).skipped
        assert run.step("b", lambda: "small").value == "small"


def test_a_head_lock_left_by_a_killed_driver_does_not_stop_the_next_open(workdir: Path):
    with stepstone.open_run("one") as run:
        run.step("a", lambda: 1)
    with stepstone.open_run("two") as run:
        run.step("a", lambda: 2)
    store = workdir / ".stepstone"
    (store / "HEAD.lock").write_text("ref: refs/heads/two\n")  # killed while moving HEAD
    with stepstone.open_run("one") as run:
        assert run.step("a", lambda: pytest.fail("verified")).skipped
    assert git("symbolic-ref", "HEAD", cwd=store).strip() == "refs/heads/one"


def test_a_tag_lock_left_by_a_driver_killed_while_finishing_does_not_stop_the_next(
    workdir: Path,
):
    with stepstone.open_run("job") as run:
        run.step("a", lambda: 1)
        summary = run.finish()
    store = workdir / ".stepstone"
    git("tag", "-d", "stepstone/job", cwd=store)  # killed after the finish commit, mid-tag
    (store / "refs" / "tags" / "stepstone").mkdir(parents=True, exist_ok=True)
    (store / "refs" / "tags" / "stepstone" / "job.lock").write_text("")
    with stepstone.open_run("job") as run:
        assert run.finish() == summary
    assert git("tag", "--list", "stepstone/*", cwd=store).split() == ["stepstone/job"]


def test_a_pack_torn_by_a_power_cut_is_set_aside_by_the_first_reader_after_the_reboot(
    workdir: Path,
):
    """A pack under its final name with its end never written (a power cut before the
    commit's flush: no ref needs it) stops `git fsck`; the first status after the
    reboot sets it aside."""
    _three_steps(workdir)
    store = workdir / ".stepstone"
    folder = store / "objects" / "pack"
    index = next(folder.glob("*.idx"))
    torn = "pack-" + "ab" * 20
    (folder / f"{torn}.idx").write_bytes(index.read_bytes())
    (folder / f"{torn}.pack").write_bytes(index.with_suffix(".pack").read_bytes()[:-100])
    broken = subprocess.run(["git", "fsck", "--strict"], cwd=store, capture_output=True)
    assert broken.returncode != 0
    assert cli("status", cwd=workdir).returncode == 0  # the same boot: packs are not read
    assert (folder / f"{torn}.pack").exists()
    (store / "stepstone" / "checked-boot").unlink()  # as after the reboot a power cut means

    status = cli("status", "--json", cwd=workdir)
    assert status.returncode == 0, status.stderr
    (note,) = [n for n in json.loads(status.stdout)["notes"] if "torn pack" in n]
    assert torn in note and "set aside" in note
    assert not (folder / f"{torn}.pack").exists()
    assert (store / "stepstone" / "damaged" / "packs" / f"{torn}.pack").exists()  # kept
    git("fsck", "--strict", cwd=store)
    with stepstone.open_run("job") as run:
        assert [s.state for s in run.status().steps] == ["verified"] * 3
