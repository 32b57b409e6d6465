"""A store crafted by someone else (or damaged) gets a clear error and bounded memory:
a record whose object inflates to more than a reader holds, a tree nested deeper than
any stepstone writes, a record claiming an artifact of 10 GB. Nothing is written
outside the work folder (paths in records: tests/test_keep.py)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from conftest import clean_env, git
from conftest import stepstone_cli as cli

import stepstone
from stepstone.store.objects import MAX_BLOB, MAX_DEPTH


def _three_steps(workdir: Path) -> Path:
    with stepstone.open_run("job") as run:
        for name in ("a", "b", "c"):
            run.step(name, lambda: {"n": 1})
    return workdir / ".stepstone"


def _commit_with(store: Path, entries: dict[str, str]) -> str:
    """A commit on the run's tip with `entries` (path -> blob id) added, made by hand
    (its message keeps the tip's trailers, so it reads as the run's), and the run's
    ref moved to it."""
    index = store / "crafted-index"
    env = clean_env(GIT_INDEX_FILE=str(index))
    git("read-tree", "job", cwd=store, env=env)
    for path, blob in entries.items():
        git("update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", cwd=store, env=env)
    tree = git("write-tree", cwd=store, env=env).strip()
    message = git("log", "-1", "--format=%B", "job", cwd=store)
    commit = git("commit-tree", tree, "-p", "job", "-m", message, cwd=store, env=env).strip()
    git("update-ref", "refs/heads/job", commit, cwd=store)
    index.unlink()
    return commit


def _bomb(store: Path, size: int) -> str:
    """A loose blob of `size` zero bytes: a few MB on disk, `size` bytes inflated."""
    header = f"blob {size}\0".encode()
    digest = hashlib.sha1(header)
    squeeze = zlib.compressobj(1)
    chunk = bytes(64 << 20)
    parts = [squeeze.compress(header)]
    left = size
    while left:
        piece = chunk[: min(left, len(chunk))]
        digest.update(piece)
        parts.append(squeeze.compress(piece))
        left -= len(piece)
    parts.append(squeeze.flush())
    oid = digest.hexdigest()
    path = store / "objects" / oid[:2] / oid[2:]
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(b"".join(parts))
    return oid


def _status_with_peak_memory(workdir: Path) -> tuple[subprocess.CompletedProcess[str], int]:
    """`stepstone status` in a process of its own, and its peak resident memory (bytes)."""
    probe = (
        "import json, resource, subprocess, sys\n"
        "done = subprocess.run([sys.executable, '-m', 'stepstone', 'status'], "
        "capture_output=True, text=True)\n"
        "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024\n"
        "print(json.dumps([done.returncode, done.stdout, done.stderr, peak]))\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", probe], cwd=workdir, env=clean_env(), capture_output=True, text=True
    )
    code, out, err, peak = json.loads(ran.stdout)
    return subprocess.CompletedProcess([], code, out, err), peak


@pytest.mark.slow
def test_a_record_that_inflates_past_the_bound_is_refused_in_bounded_memory(workdir: Path):
    store = _three_steps(workdir)
    good = git("rev-parse", "job", cwd=store).strip()
    before = sorted(p.name for p in workdir.parent.iterdir())
    bomb = _bomb(store, MAX_BLOB + (16 << 20))  # 1 GiB and 16 MiB of zeros, 1 MB stored
    _commit_with(store, {"steps/0/0/0/bomb.json": bomb})

    status, peak = _status_with_peak_memory(workdir)
    assert status.returncode == 2, status.stdout + status.stderr
    assert "would inflate to 1,090,519,040 bytes" in status.stderr
    assert "stepstone repair --run job" in status.stderr
    assert peak < 400 << 20, f"status held {peak / 2**20:.0f} MiB"

    repaired = cli("repair", cwd=workdir)
    assert repaired.returncode == 0, repaired.stderr
    assert git("rev-parse", "job", cwd=store).strip() == good
    assert cli("status", cwd=workdir).returncode == 0
    assert sorted(p.name for p in workdir.parent.iterdir()) == before  # nothing outside


def test_a_tree_nested_deeper_than_stepstone_writes_is_refused(workdir: Path):
    store = _three_steps(workdir)
    blob = git("hash-object", "-w", "--stdin", cwd=store, input="{}").strip()
    deep = "steps/" + "d/" * (MAX_DEPTH + 8) + "x.json"
    _commit_with(store, {deep: blob})
    status = cli("status", cwd=workdir)
    assert status.returncode == 2
    assert f"nested over {MAX_DEPTH} folders deep" in status.stderr
    assert "stepstone repair --run job" in status.stderr


def test_a_record_claiming_an_artifact_of_10_gb_runs_its_step_again(workdir: Path):
    store = _three_steps(workdir)
    path = next(
        p for p in git("ls-tree", "-r", "--name-only", "job", cwd=store).split() if "/b.json" in p
    )
    record = json.loads(git("show", f"job:{path}", cwd=store))
    record["outputs"]["return"]["size"] = 10 << 30
    blob = git("hash-object", "-w", "--stdin", cwd=store, input=json.dumps(record)).strip()
    _commit_with(store, {path: blob})

    ran = []
    with stepstone.open_run("job") as run:
        for name in ("a", "b", "c"):
            result = run.step(name, lambda name=name: ran.append(name) or {"n": 1})
            assert result.value == {"n": 1}
    assert "b" in ran and "a" not in ran
