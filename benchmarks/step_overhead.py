"""Per-step overhead of stepstone beside the durable-write floor, measured in one run.

    python benchmarks/step_overhead.py            # 10,000 steps (about a minute)
    python benchmarks/step_overhead.py --steps 2000 --no-gc

Prints one table: the floor (an atomic fsync'd write of a 300-byte record),
raw Git bindings committing one small file (the measurement behind the choice
of pygit2), and stepstone's step (record + commit) at 0, 1,000 and N steps,
with each figure's ratio to the floor, then the repository size.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import stepstone
from stepstone.atomic import write_atomic

RECORD = b'{"step": 1, "status": "confirmed", ' + b'"x": "' + b"a" * 250 + b'"}\n'


def timed(fn: Callable[[int], object], n: int, warmup: int = 10) -> list[float]:
    for i in range(warmup):
        fn(-1 - i)
    out = []
    for i in range(n):
        start = time.perf_counter()
        fn(i)
        out.append((time.perf_counter() - start) * 1000)
    return out


def summary(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(len(ordered) * 0.95) - 1]


def floor(tmp: Path, n: int) -> list[float]:
    folder = tmp / "floor"
    return timed(lambda i: write_atomic(folder / f"r{i % 50}.json", RECORD), n)


def pygit2_commit(tmp: Path, n: int) -> list[float]:
    import pygit2

    pygit2.option(pygit2.enums.Option.ENABLE_FSYNC_GITDIR, 1)
    repo = pygit2.init_repository(str(tmp / "pygit2"), bare=True)
    sig = pygit2.Signature("bench", "bench@localhost")
    parent: list[pygit2.Oid] = []

    def one(i: int) -> None:
        blob = repo.create_blob(RECORD + str(i).encode())
        builder = repo.TreeBuilder()
        builder.insert("record.json", blob, pygit2.enums.FileMode.BLOB)
        commit = repo.create_commit("refs/heads/main", sig, sig, "m", builder.write(), parent)
        parent[:] = [commit]

    return timed(one, n)


def dulwich_commit(tmp: Path, n: int) -> list[float] | None:
    try:
        from dulwich.objects import Blob, Commit, Tree
        from dulwich.repo import Repo
    except ImportError:
        return None
    path = tmp / "dulwich"
    path.mkdir()
    repo = Repo.init_bare(str(path))
    store = repo.object_store
    if hasattr(store, "fsync_object_files"):
        store.fsync_object_files = True
    parent: list[bytes] = []

    def one(i: int) -> None:
        blob = Blob.from_string(RECORD + str(i).encode())
        tree = Tree()
        tree.add(b"record.json", 0o100644, blob.id)
        commit = Commit()
        commit.tree = tree.id
        commit.parents = list(parent)
        commit.author = commit.committer = b"bench <bench@localhost>"
        commit.commit_time = commit.author_time = int(time.time())
        commit.commit_timezone = commit.author_timezone = 0
        commit.message = b"m"
        for obj in (blob, tree, commit):
            store.add_object(obj)
        repo.refs[b"refs/heads/main"] = commit.id
        parent[:] = [commit.id]

    return timed(one, n)


def git_cli_commit(tmp: Path, n: int) -> list[float]:
    path = tmp / "cli"
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "b",
        "GIT_AUTHOR_EMAIL": "b@x",
        "GIT_COMMITTER_NAME": "b",
        "GIT_COMMITTER_EMAIL": "b@x",
    }
    subprocess.run(["git", "-C", str(path), "config", "core.fsync", "all"], check=True)

    def one(i: int) -> None:
        (path / "record.json").write_bytes(RECORD + str(i).encode())
        subprocess.run(["git", "-C", str(path), "add", "record.json"], check=True, env=env)
        subprocess.run(
            ["git", "-C", str(path), "commit", "-qm", "m", "--allow-empty"], check=True, env=env
        )

    return timed(one, n, warmup=3)


def stepstone_steps(tmp: Path, total: int, window: int) -> tuple[dict[int, list[float]], Path]:
    store = tmp / "stepstone"
    run = stepstone.open_run("bench", repo=store, workdir=tmp)
    run.set_plan([f"s{i}" for i in range(total)])
    marks = sorted({0, min(1000, total - window), total - window})
    samples: dict[int, list[float]] = {m: [] for m in marks}
    for i in range(total):
        start = time.perf_counter()
        run.step(f"s{i}", lambda: None)
        elapsed = (time.perf_counter() - start) * 1000
        for mark in marks:
            if mark <= i < mark + window:
                samples[mark].append(elapsed)
        if i and i % 2000 == 0:
            print(f"  ... {i} steps", file=sys.stderr)
    run.close()
    return samples, store


def stepstone_effects(tmp: Path, n: int) -> tuple[list[float], list[float]]:
    """One effect (intent + confirmation commits) and one decision, each timed."""
    run = stepstone.open_run("effects", repo=tmp / "effects", workdir=tmp)
    effect_ms: list[float] = []

    def many() -> None:
        for i in range(n + 10):
            start = time.perf_counter()
            stepstone.effect(f"e/{i}", lambda key: {"id": key}, keyed=True)
            if i >= 10:
                effect_ms.append((time.perf_counter() - start) * 1000)

    run.step("effects", many)
    decision_ms = timed(lambda i: run.decide(f"d{i % 20}", str(i), "bench", revise=True), n)
    run.close()
    return effect_ms, decision_ms


def disk_usage(path: Path) -> int:
    return sum(f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--no-gc", action="store_true", help="skip `git gc` at the end")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="stepstone-bench-", dir=os.environ.get("BENCH_DIR")))
    try:
        rows: list[tuple[str, list[float] | None]] = [
            ("floor: atomic write + fsync + rename + dir fsync", floor(tmp, args.samples)),
            ("pygit2 blob+tree+commit, fsync on", pygit2_commit(tmp, args.samples)),
            ("dulwich blob+tree+commit, fsync objects", dulwich_commit(tmp, args.samples)),
            ("git add + git commit, core.fsync=all", git_cli_commit(tmp, args.samples // 4)),
        ]
        effect_ms, decision_ms = stepstone_effects(tmp, args.samples)
        rows.append(("stepstone effect (intent + confirmation commits)", effect_ms))
        rows.append(("stepstone decision (one commit)", decision_ms))
        window = min(args.samples, max(10, args.steps // 10))
        steps, store = stepstone_steps(tmp, args.steps, window)
        for mark, samples in steps.items():
            rows.append((f"stepstone step (record + commit) at {mark:,} steps", samples))
        base = summary(rows[0][1] or [1.0])[0]
        print(
            f"\nstepstone {stepstone.__version__}, Python {sys.version.split()[0]}, "
            f"{os.cpu_count()} cores, {args.steps:,} steps\n"
        )
        print(f"| {'what':<58} | median ms | p95 ms | × floor |")
        print(f"| {'-' * 58} | --------- | ------ | ------- |")
        for label, samples in rows:
            if samples is None:
                print(f"| {label:<58} | not installed |")
                continue
            med, p95 = summary(samples)
            print(f"| {label:<58} | {med:9.2f} | {p95:6.2f} | {med / base:7.1f} |")
        size = disk_usage(store)
        print(f"\nrepository after {args.steps:,} steps: {size / 1e6:.1f} MB on disk")
        if not args.no_gc:
            start = time.perf_counter()
            subprocess.run(["git", "-C", str(store), "gc", "-q"], check=True)
            print(
                f"after git gc: {disk_usage(store) / 1e6:.1f} MB "
                f"(gc took {time.perf_counter() - start:.1f} s)"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
