"""What a commit's flushes alone cost beside the durable-write floor: the files and
folders a stepstone commit writes and flushes, with no other work, in turns.

    python benchmarks/commit_io.py                  # in a scratch folder under /work
    python benchmarks/commit_io.py --dir /tmp --samples 500

A stepstone commit writes three new files (the pack, its index, the ref's lock file),
fsyncs them and the pack folder at once, renames the lock over the ref and fsyncs the
ref's folder (`store/durable.py`). The floor writes one file, fsyncs it, renames it and
fsyncs its folder. Each row is a median of new files of the sizes a step's commit
writes; the ratio is to the floor measured in the same rounds. The rows with fewer
files show what each file costs: git's format needs the pack and its index, and the
ref's protocol its lock file.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

PACK, INDEX, REF = 900, 1100, 41  # bytes, about what a step's commit writes


def fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def create(path: str, size: int) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, b"x" * size)
    return fd


def floor(folder: str) -> Callable[[int], None]:
    os.makedirs(folder)

    def write(i: int) -> None:
        fd = create(f"{folder}/tmp{i}", REF)
        os.fsync(fd)
        os.close(fd)
        os.replace(f"{folder}/tmp{i}", f"{folder}/file")
        fsync_path(folder)

    return write


def commit_like(
    folder: str, sizes: tuple[int, ...], pool: ThreadPoolExecutor
) -> Callable[[int], None]:
    """New files of `sizes` in a pack folder, and a ref's lock file, flushed as a
    stepstone commit flushes them."""
    packs = os.path.join(folder, "pack")
    os.makedirs(packs)

    def write(i: int) -> None:
        paths = [f"{packs}/{i}.{k}" for k in range(len(sizes))]
        for path, size in zip(paths, sizes, strict=True):
            os.close(create(path, size))
        lock = create(f"{folder}/ref.lock", REF)
        waiting = [pool.submit(fsync_path, path) for path in [*paths, packs]]
        os.fsync(lock)
        for job in waiting:
            job.result()
        os.close(lock)
        os.replace(f"{folder}/ref.lock", f"{folder}/ref")
        fsync_path(folder)

    return write


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default="/work", help="where the scratch folder is made")
    parser.add_argument("--samples", type=int, default=300)
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="stepstone-commit-io-", dir=args.dir)
    pool = ThreadPoolExecutor(4)
    try:
        methods = {
            "floor: one file, fsync, rename, folder fsync": floor(f"{scratch}/floor"),
            "a commit's files: pack, index, ref lock": commit_like(
                f"{scratch}/three", (PACK, INDEX), pool
            ),
            "without the index: pack, ref lock": commit_like(f"{scratch}/two", (PACK,), pool),
            "the ref lock alone": commit_like(f"{scratch}/one", (), pool),
        }
        times: dict[str, list[float]] = {name: [] for name in methods}
        for i in range(args.samples):
            for name, write in methods.items():
                start = time.perf_counter()
                write(i)
                times[name].append(time.perf_counter() - start)
        base = statistics.median(next(iter(times.values())))
        print(f"| what (median of {args.samples}, in turns) | ms | × floor |")
        print("| --- | --- | --- |")
        for name, samples in times.items():
            median = statistics.median(samples)
            print(f"| {name} | {median * 1000:.2f} | {median / base:.2f} |")
    finally:
        pool.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
