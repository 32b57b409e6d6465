"""A step's cost while another process keeps writing to the same file system.

The other process writes 4 MB chunks to a file without ever flushing (a data job
saving its output, say), rewriting it from the start every `--writer-mb` MB, so the
page cache always holds dirty data of someone else's. In turns, with a 30 ms pause
between samples: the floor (an atomic write of a 300-byte record: write, fsync,
rename, folder fsync), a Python-API step flushed by one `syncfs`
(`STEPSTONE_SYNC=syncfs`) and one flushed by an fsync of each file it wrote and
their folders, all at once (the default). First idle, then under that load. Medians in ms, and the
ratio to the floor measured beside it.

    python benchmarks/step_under_load.py [--samples 60] [--writer-mb 1024]
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import stepstone
from stepstone.settings import Settings
from stepstone.store.durable import write_atomic

RECORD = b'{"step": 1, "status": "confirmed", "x": "' + b"a" * 250 + b'"}\n'


def _writer(path: str, limit_mb: int) -> None:
    chunk = os.urandom(4 << 20)
    with open(path, "wb") as out:
        written = 0
        while True:
            out.write(chunk)
            written += len(chunk)
            if written >= limit_mb << 20:
                out.seek(0)
                written = 0


def _samplers(tmp: Path, total: int) -> tuple[dict[str, Callable[[int], object]], list]:
    runs = []
    samplers: dict[str, Callable[[int], object]] = {
        "floor: atomic write + fsync + rename + dir fsync": lambda i: write_atomic(
            tmp / f"floor-{i % 50}.json", RECORD
        )
    }
    for label, each in (
        ("one syncfs (STEPSTONE_SYNC=syncfs)", False),
        ("fsync of its own files at once (default)", True),
    ):
        name = "each" if each else "syncfs"
        settings = dataclasses.replace(Settings.from_env(), sync_each=each)
        run = stepstone.open_run(name, repo=tmp / name, workdir=tmp, settings=settings)
        run.set_plan([f"s{i}" for i in range(total)])
        runs.append(run)
        samplers[f"stepstone step, {label}"] = lambda i, run=run: run.step(f"s{i}", lambda: None)
    return samplers, runs


def _measure(samplers: dict[str, Callable[[int], object]], start: int, n: int) -> dict:
    out: dict[str, list[float]] = {label: [] for label in samplers}
    for i in range(start, start + n):
        for label, one in samplers.items():
            time.sleep(0.03)
            began = time.perf_counter()
            one(i)
            out[label].append((time.perf_counter() - began) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=60)
    parser.add_argument("--writer-mb", type=int, default=1024)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="stepstone-load-", dir=os.environ.get("BENCH_DIR")))
    n = args.samples
    samplers, runs = _samplers(tmp, 2 * n + 10)
    try:
        _measure(samplers, 0, 5)  # warm up
        idle = _measure(samplers, 5, n)
        writer = multiprocessing.Process(
            target=_writer, args=(str(tmp / "other.bin"), args.writer_mb), daemon=True
        )
        writer.start()
        time.sleep(2.0)  # let dirty data pile up
        loaded = _measure(samplers, 5 + n, n)
        writer.terminate()
        writer.join()
    finally:
        for run in runs:
            run.close()
        shutil.rmtree(tmp, ignore_errors=True)
    floor_label = next(iter(samplers))
    idle_floor = statistics.median(idle[floor_label])
    load_floor = statistics.median(loaded[floor_label])
    print(f"{n} samples each, in turns, 30 ms apart; another process writes {args.writer_mb} MB")
    print("| what | idle ms | × floor | under load ms | × floor |")
    print("| --- | --- | --- | --- | --- |")
    for label in samplers:
        a, b = statistics.median(idle[label]), statistics.median(loaded[label])
        print(f"| {label} | {a:.2f} | {a / idle_floor:.1f} | {b:.2f} | {b / load_floor:.1f} |")


if __name__ == "__main__":
    main()
