"""Saving and restoring a big array and a big DataFrame: `%%step --out` against the
native calls (`np.save`/`np.load`, `to_parquet`/`read_parquet`), time and memory.

Each measurement runs in a fresh process, in turns (native, stepstone, native, ...),
`--rounds` times; the value is made before the clock starts. Saving is timed to
the end of the step's commit (native: the file written and fsynced); restoring is
a new process's skip of the same `%%step` in a real IPython shell (native: the load).
"extra memory" is the highest resident size seen while the call ran (sampled every
2 ms) above the resident size before it, as a multiple of the value's size.

joblib's `dump`/`load` (what `joblib.Memory` stores a result with; `pip install -e
".[bench]"`) is measured beside them when installed.

A "strframe" is a frame as people have them: int ids, floats, unique string labels
and a city from 8 values (pandas 3 gives the strings its Arrow-backed `str` dtype).
Feather (Arrow IPC, uncompressed) is measured beside Parquet for frames.

    python benchmarks/big_values.py [--mb 200] [--rounds 3] [--huge-mb 1024]
        [--what array,frame,strframe]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * PAGE


class _PeakRss:
    def __enter__(self) -> _PeakRss:
        self.base = _rss()
        self.peak = self.base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, _rss())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())


def _make(what: str, mb: int) -> Any:
    import numpy as np

    rng = np.random.default_rng(0)
    n = mb * (1 << 20) // 8
    if what == "array":
        return rng.random(n)
    import pandas as pd

    if what == "strframe":  # ids, floats, unique labels and a city of 8: ~56 bytes a row
        rows = mb * (1 << 20) // 56
        cities = np.array(["Paris", "Lyon", "Berlin", "Madrid", "Rome", "Oslo", "Lima", "Quito"])
        return pd.DataFrame(
            {
                "id": np.arange(rows, dtype=np.int64),
                "value": rng.random(rows),
                "label": [f"label-{i:010d}" for i in range(rows)],
                "city": cities[rng.integers(0, 8, rows)],
            }
        )
    return pd.DataFrame({f"c{i}": rng.random(n // 5) for i in range(5)})


def _nbytes(value: Any) -> int:
    return int(value.nbytes if hasattr(value, "nbytes") else value.memory_usage().sum())


def _child(kind: str, what: str, mb: int, folder: Path) -> dict[str, float]:
    os.chdir(folder)
    import numpy as np
    import pandas as pd

    native = folder / ("value.npy" if what == "array" else "value.parquet")
    if kind.startswith("feather"):
        return _feather(kind, what, mb, folder)
    if kind.startswith("joblib"):
        return _joblib(kind, what, mb, folder)
    value = _make(what, mb) if kind.endswith("save") else None
    size = _nbytes(value) if value is not None else mb << 20
    if kind.startswith("stepstone"):
        from IPython.core.interactiveshell import InteractiveShell

        ip = InteractiveShell.instance()
        ip.run_line_magic("load_ext", "stepstone")
        quiet = contextlib.redirect_stdout(io.StringIO())
        with quiet:
            ip.run_line_magic("resume", "--run bench")
        ip.user_ns["src"] = value
    with _PeakRss() as rss:
        start = time.perf_counter()
        if kind == "native-save" and what == "array":
            with open(native, "wb") as handle:
                np.save(handle, value)
                handle.flush()
                os.fsync(handle.fileno())
        elif kind == "native-save":
            value.to_parquet(native)
            fd = os.open(native, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        elif kind == "native-load":
            back = np.load(native) if what == "array" else pd.read_parquet(native)
            size = _nbytes(back)
        else:
            with quiet:
                ip.run_cell_magic("step", "big --out a", "a = src")
            if kind == "stepstone-load":
                size = _nbytes(ip.user_ns["a"])
        seconds = time.perf_counter() - start
    if kind.startswith("stepstone"):
        magics = ip.magics_manager.registry["StepstoneMagics"]
        record = magics.session.run.records["big"]
        skipped = kind == "stepstone-load"
        assert "a" in record.outputs, "the step saved no value"
        if skipped:
            assert ip.user_ns["a"] is not None
        magics.close()
    return {"seconds": seconds, "extra": (rss.peak - rss.base) / size}


def _joblib(kind: str, what: str, mb: int, folder: Path) -> dict[str, float]:
    """joblib, the peer for outputs: `joblib.dump` and `joblib.load` of the value, what
    `joblib.Memory` does with a cached function's result (no compression, its default)."""
    import joblib

    return _peer(kind, what, mb, folder / f"{what}.joblib", joblib.dump, joblib.load)


def _feather(kind: str, what: str, mb: int, folder: Path) -> dict[str, float]:
    """Arrow IPC (Feather v2, uncompressed), the other native format of a frame."""
    import pandas as pd

    def dump(value: Any, path: Path) -> None:
        value.to_feather(path, compression="uncompressed")

    return _peer(kind, what, mb, folder / f"{what}.feather", dump, pd.read_feather)


def _peer(
    kind: str,
    what: str,
    mb: int,
    path: Path,
    dump: Callable[[Any, Path], Any],
    load: Callable[[Path], Any],
) -> dict[str, float]:
    """A peer's save (`dump`, then the file fsynced) or load of the value, timed."""
    value = _make(what, mb) if kind.endswith("-save") else None
    with _PeakRss() as rss:
        start = time.perf_counter()
        if value is not None:
            dump(value, path)
            fd = os.open(path, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        else:
            value = load(path)
        seconds = time.perf_counter() - start
    return {"seconds": seconds, "extra": (rss.peak - rss.base) / _nbytes(value)}


def _run_child(kind: str, what: str, mb: int, folder: Path) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", kind, "--what", what, "--mb", str(mb), str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{kind} {what} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _measure(what: str, mb: int, rounds: int) -> dict[str, list[dict[str, float]]]:
    results: dict[str, list[dict[str, float]]] = {}
    for _ in range(rounds):
        folder = Path(tempfile.mkdtemp(prefix="stepstone-big-", dir=os.getcwd()))
        kinds = ["native-save", "stepstone-save", "native-load", "stepstone-load"]
        if _has_joblib():
            kinds[2:2] = ["joblib-save"]
            kinds.append("joblib-load")
        if what != "array":
            kinds[2:2] = ["feather-save"]
            kinds.append("feather-load")
        for kind in kinds:
            results.setdefault(kind, []).append(_run_child(kind, what, mb, folder))
        subprocess.run(["rm", "-rf", str(folder)], check=True)
    return results


def _has_joblib() -> bool:
    try:
        import joblib  # noqa: F401
    except ImportError:
        return False
    return True


def _row(
    label: str, results: dict[str, list[dict[str, float]]], op: str, who: str = "stepstone"
) -> str:
    ours = results[f"{who}-{op}"]
    theirs = results[f"native-{op}"]
    t_ours = statistics.median(r["seconds"] for r in ours)
    t_theirs = statistics.median(r["seconds"] for r in theirs)
    m_ours = max(r["extra"] for r in ours)
    m_theirs = max(r["extra"] for r in theirs)
    return (
        f"| {label} {op} | {t_ours:.3f} | {t_theirs:.3f} | {t_ours / t_theirs:.2f} "
        f"| {m_ours:.2f} | {m_theirs:.2f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--huge-mb", type=int, default=1024, help="0: skip the 1 GB rows")
    parser.add_argument("--child")
    parser.add_argument("--what", default="array,frame,strframe", help="which values")
    parser.add_argument("folder", nargs="?")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, args.what, args.mb, Path(args.folder))))
        return
    print(f"median of {args.rounds} rounds in turns, each call in a fresh process")
    print("| value, operation | this s | native s | ratio | extra memory × value | native × |")
    print("| --- | --- | --- | --- | --- | --- |")
    values = args.what.split(",")
    for what in values:
        results = _measure(what, args.mb, args.rounds)
        for op in ("save", "load"):
            print(_row(f"{args.mb} MB {what}", results, op), flush=True)
            for peer, label in (("feather", "to_feather/read_feather"), ("joblib", "joblib")):
                if f"{peer}-{op}" in results:
                    print(_row(f"  peer {label}: {what}", results, op, peer), flush=True)
    if args.huge_mb:
        for what in values:
            results = _measure(what, args.huge_mb, 1)
            for op in ("save", "load"):
                print(_row(f"{args.huge_mb} MB {what}", results, op), flush=True)


if __name__ == "__main__":
    main()
