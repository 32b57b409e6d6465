"""stepstone's costs beside the durable-write floor and its peers, measured in one run.

    python benchmarks/bench.py                      # sizes 0, 1,000, 10,000 (a few minutes)
    python benchmarks/bench.py --sizes 0,1000,10000,100000
    python benchmarks/bench.py --steps 10000        # also time 10,000 real steps in a row
    python benchmarks/bench.py --planned            # %%step after a %%plan of names
    python benchmarks/bench.py --no-history         # %%step with IPython's history off

Prints two tables. The first: the floor (an atomic fsync'd write of a 300-byte
record), SQLite's durable insert, raw Git bindings committing one small file
(the measurement behind the choice of pygit2), the peers where they are
installed (`pip install -e ".[bench]"`: DBOS, LangGraph's SQLite checkpointer),
and stepstone's step, skip path, effect and decision, each with its ratio to
the floor; with `--steps N`, N real steps in a row in one run, timed at step 0,
1,000 and the end in turns with a step of a fresh store and the floor (this
disk slows down under sustained writes, so only figures taken in turns compare),
then again after the run is reopened. The second: at each run size, the
per-step cost, the time to open and resume the run, `stepstone status --json`,
its peak memory, and the repository size before and after `git gc`. Runs of 1,000 steps and more are
built with 1,000 step records per commit (the tree is the same as step by step;
the history is shorter), then 100 real steps are timed on top.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import stepstone
from stepstone.settings import Settings
from stepstone.store.durable import batch_sync, write_atomic

RECORD = b'{"step": 1, "status": "confirmed", ' + b'"x": "' + b"a" * 250 + b'"}\n'


Sampler = Callable[[int], "float | None"]  # one operation; may report its own time


def interleave(
    samplers: dict[str, Sampler | None],
    n: int,
    warmup: int = 10,
    every: dict[str, int] | None = None,
) -> dict[str, list[float] | None]:
    """n samples of each, taken in turns: this disk's throughput drifts with recent I/O
    (it looks rate-limited), so one method measured after another would be compared
    across different states of the disk."""
    every = every or {}
    out: dict[str, list[float] | None] = {k: None if v is None else [] for k, v in samplers.items()}
    for r in range(-warmup, n):
        for label, one in samplers.items():
            if one is None or r % every.get(label, 1):
                continue
            start = time.perf_counter()
            reported = one(r)
            elapsed = (time.perf_counter() - start) * 1000 if reported is None else reported
            if r >= 0:
                out[label].append(elapsed)  # type: ignore[union-attr]
    return out


class Driven:
    """A sampler whose operations must run inside a loop another framework owns (a DBOS
    workflow, a stepstone step): `body(measure)` runs in a thread and calls
    `measure(op)` in its loop; each call performs `op(i)` for one sample, timed there."""

    def __init__(self, body: Callable[[Callable[[Callable[[int], object]], bool]], object]):
        self._go: queue.Queue[int | None] = queue.Queue()
        self._done: queue.Queue[float | BaseException] = queue.Queue()
        self._thread = threading.Thread(target=self._main, args=(body,), daemon=True)
        self._thread.start()

    def _main(self, body: Callable[[Callable[[Callable[[int], object]], bool]], object]) -> None:
        try:
            body(self._measure)
        except BaseException as exc:  # handed to the measuring thread
            self._done.put(exc)

    def _measure(self, op: Callable[[int], object]) -> bool:
        i = self._go.get()
        if i is None:
            return False
        start = time.perf_counter()
        op(i)
        self._done.put((time.perf_counter() - start) * 1000)
        return True

    def __call__(self, i: int) -> float:
        self._go.put(i)
        item = self._done.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        self._go.put(None)
        self._thread.join()


def summary(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(len(ordered) * 0.95) - 1]


def floor(tmp: Path) -> Sampler:
    folder = tmp / "floor"
    folder.mkdir(parents=True)
    return lambda i: write_atomic(folder / f"r{i % 50}.json", RECORD)


def pygit2_commit(tmp: Path) -> Sampler:
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

    return one


def dulwich_commit(tmp: Path) -> Sampler | None:
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

    return one


def git_cli_commit(tmp: Path) -> Sampler:
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

    return one


def stepstone_steps(
    tmp: Path, total: int, window: int, *, auto_gc: bool = True
) -> dict[str, list[float]]:
    """`total` real steps in a row in one run. At step 0, 1,000 and the end, `window`
    steps are timed in turns with a step of a fresh store and the floor, so that a
    slower disk late in a long run is told apart from a slower run; after the last
    step, the run is closed and reopened and `window` more steps are timed."""
    store = tmp / "stepstone"
    tmp.mkdir(exist_ok=True)
    run = stepstone.open_run("bench", repo=store, workdir=tmp)
    if not auto_gc:
        run.store.set_config("gc.auto", 0)
    run.set_plan([f"s{i}" for i in range(total + 4 * window)])
    marks = sorted({0, min(1000, total - window), total - window})
    out: dict[str, list[float]] = {}
    done = 0

    def long_step(i: int) -> None:
        nonlocal done
        run.step(f"s{done}", lambda: None)
        done += 1

    while done < total:
        mark = next((m for m in marks if m == done), None)
        if mark is None:
            long_step(0)
            if done % 5000 == 0:
                print(f"  ... {done} steps", file=sys.stderr)
            continue
        fresh, close = stepstone_step(tmp / f"fresh{mark}", window + 20)
        measured = interleave(
            {"long": long_step, "fresh": fresh, "floor": floor(tmp / f"floor{mark}")}, window
        )
        close()
        for label, samples in measured.items():
            out[f"{label} {mark}"] = samples or []
    run.close()
    wait_for_gc(store)
    run = stepstone.open_run("bench", repo=store, workdir=tmp)
    out["reopened"] = interleave({"reopened": long_step}, window)["reopened"] or []
    run.close()
    wait_for_gc(store)
    return out


def wait_for_gc(store: Path) -> None:
    """Wait while a `git gc --auto` that a run started is still busy with `store`,
    so that it does not slow what is measured next."""
    pid_file = store / "gc.pid"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        try:
            os.kill(int(pid_file.read_text().split()[0]), 0)
        except (OSError, ValueError, IndexError):
            return
        time.sleep(0.2)


def stepstone_step(tmp: Path, total: int) -> tuple[Sampler, Callable[[], None]]:
    run = stepstone.open_run("bench", repo=tmp / "steps", workdir=tmp)
    run.set_plan([f"s{i}" for i in range(total)])
    offset = 10  # the 10 warm-up samples have numbers -10 to -1
    return (lambda i: run.step(f"s{i + offset}", lambda: None) and None), run.close


def stepstone_incremental(tmp: Path) -> tuple[Sampler, Callable[[], None]]:
    """A Python-API step in a run with no plan given: the plan grows a step at a time."""
    run = stepstone.open_run("incremental", repo=tmp / "incremental", workdir=tmp)
    return (lambda i: run.step(f"s{i + 10}", lambda: None) and None), run.close


def stepstone_magic(
    tmp: Path, planned: int = 0, history: bool = True
) -> tuple[Sampler, Callable[[], None]]:
    """What `%%step` adds to a cell in a real IPython shell, no notebook file (so the
    plan is incremental, or, with `planned`, a `%%plan` listing that many names): a
    `%%step NAME` cell of `x = 1  # cell i` less the same plain cell, the two timed in
    turns (each cell's code its own, as in a notebook); in ms. `history`: IPython's
    history database on (its thread writes each cell while the next runs)."""
    import io

    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    folder = tmp / ("planned" if planned else "magic")
    folder.mkdir()
    config = Config()
    config.HistoryManager.enabled = history
    ip = InteractiveShell.instance(config=config)
    ip.run_line_magic("load_ext", "stepstone")
    quiet = contextlib.redirect_stdout(io.StringIO())
    with quiet:
        name = "planned" if planned else "magic"
        ip.run_line_magic("resume", f"--run {name} --repo {folder / 'store'}")
        if planned:
            names = [f"m{i + 10}" for i in range(planned)]
            ip.run_cell_magic("plan", "", json.dumps(names))

    def one(i: int) -> float:
        with quiet:
            start = time.perf_counter()
            ip.run_cell(f"x = 1  # cell {i}", store_history=True)
            plain = time.perf_counter() - start
            start = time.perf_counter()
            ip.run_cell(f"%%step m{i + 10}\nx = 1  # cell {i}", store_history=True)
            stepped = time.perf_counter() - start
        return (stepped - plain) * 1000

    def close() -> None:
        ip.magics_manager.registry["StepstoneMagics"].close()

    return one, close


def stepstone_effect(tmp: Path) -> tuple[Driven, Callable[[], None]]:
    """One effect (intent + confirmation commits) of a step that performs many."""
    run = stepstone.open_run("effects", repo=tmp / "effects", workdir=tmp)

    def body(measure: Callable[[Callable[[int], object]], bool]) -> None:
        def perform(i: int) -> None:
            run.effect(f"e/{i}", lambda key: {"id": key}, keyed=True)

        def many() -> None:
            while measure(perform):
                pass

        run.step("effects", many)

    driven = Driven(body)

    def close() -> None:
        driven.close()
        run.close()

    return driven, close


def stepstone_decision(tmp: Path) -> tuple[Sampler, Callable[[], None]]:
    run = stepstone.open_run("decisions", repo=tmp / "decisions", workdir=tmp)
    return (lambda i: run.decide(f"d{i % 20}", str(i), "bench", revise=True) and None), run.close


def sqlite_insert(tmp: Path) -> Sampler:
    import sqlite3

    con = sqlite3.connect(tmp / "floor.sqlite", isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    con.execute("CREATE TABLE r (i INTEGER, body BLOB)")
    return lambda i: con.execute("INSERT INTO r VALUES (?, ?)", (i, RECORD)) and None


def dbos_step(tmp: Path) -> tuple[Driven | None, Callable[[], None]]:
    try:
        from dbos import DBOS
    except ImportError:
        return None, lambda: None
    import logging

    logging.getLogger("dbos").setLevel(logging.WARNING)
    DBOS(
        config={
            "name": "bench",
            "system_database_url": f"sqlite:///{tmp}/dbos.sqlite",
            "run_admin_server": False,
        }
    )

    @DBOS.step()
    def step(i: int) -> int:
        return i

    @DBOS.workflow()
    def workflow() -> None:
        while measure_holder[0](step):
            pass

    measure_holder: list[Callable[[Callable[[int], object]], bool]] = []

    def body(measure: Callable[[Callable[[int], object]], bool]) -> None:
        measure_holder.append(measure)
        workflow()

    DBOS.launch()
    driven = Driven(body)

    def close() -> None:
        driven.close()
        DBOS.destroy()

    return driven, close


def langgraph_put(tmp: Path) -> Sampler | None:
    try:
        from langgraph.checkpoint.base import empty_checkpoint
        from langgraph.checkpoint.sqlite import SqliteSaver
    except ImportError:
        return None
    import sqlite3

    con = sqlite3.connect(tmp / "langgraph.sqlite", check_same_thread=False)
    saver = SqliteSaver(con)
    saver.setup()
    con.execute("PRAGMA synchronous=FULL")
    config: dict = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}

    def put(i: int) -> None:
        nonlocal config
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"i": i}
        config = saver.put(config, checkpoint, {"step": i}, {})  # type: ignore[arg-type]

    return put


def langgraph_step(tmp: Path) -> tuple[Sampler | None, Callable[[], None]]:
    """What LangGraph adds to a step of a graph checkpointed by SqliteSaver
    (synchronous=FULL, durability="sync": each step's checkpoint is written before the
    next step starts): a node that loops on itself, timed from the end of one node's
    body to the start of the next. The peer of what `%%step` adds to a cell."""
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, StateGraph
    except ImportError:
        return None, lambda: None
    import sqlite3
    from typing import TypedDict

    class State(TypedDict):
        i: int

    go: queue.Queue[bool] = queue.Queue()
    entered: queue.Queue[float | BaseException] = queue.Queue()  # ms since the last body ended
    body_ended = [time.perf_counter()]

    def work(state: State) -> State:
        entered.put((time.perf_counter() - body_ended[0]) * 1000)
        going = go.get()
        body_ended[0] = time.perf_counter()  # both ends timed in the graph's own thread
        return {"i": state["i"] + 1} if going else {"i": -1}

    graph = StateGraph(State)
    graph.add_node("work", work)
    graph.add_edge(START, "work")
    graph.add_conditional_edges("work", lambda state: END if state["i"] < 0 else "work")
    con = sqlite3.connect(tmp / "langgraph-graph.sqlite", check_same_thread=False)
    con.execute("PRAGMA synchronous=FULL")
    app = graph.compile(checkpointer=SqliteSaver(con))

    def drive() -> None:
        try:
            app.invoke(
                {"i": 0},
                {"configurable": {"thread_id": "t"}, "recursion_limit": 10**9},
                durability="sync",
            )
        except BaseException as exc:  # handed to the measuring thread
            entered.put(exc)

    thread = threading.Thread(target=drive, daemon=True)
    thread.start()
    first = entered.get()
    if isinstance(first, BaseException):
        raise first

    def one(i: int) -> float:
        go.put(True)
        item = entered.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def close() -> None:
        go.put(False)
        thread.join()

    return one, close


def stepstone_skip(tmp: Path, total: int) -> tuple[Sampler, Callable[[], None]]:
    """The skip path: a verified step's evidence re-checked and its value restored."""
    store = tmp / "skip"
    (tmp / "skip.json").write_text('{"rows": 3}')
    offset = 10
    with stepstone.open_run("skip", repo=store, workdir=tmp) as run:
        for i in range(total):
            run.step(f"s{i}", lambda: {"rows": 3}, checks=["file:skip.json"])
    run = stepstone.open_run("skip", repo=store, workdir=tmp)

    def one(i: int) -> None:
        result = run.step(f"s{i + offset}", lambda: None, checks=["file:skip.json"])
        assert result.skipped

    return one, run.close


def disk_usage(path: Path) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(FileNotFoundError):  # removed while we walked
                total += os.stat(os.path.join(folder, name)).st_blocks * 512
    return total


def build_run(store: Path, workdir: Path, size: int) -> None:
    """A run of `size` confirmed steps, 1,000 step records per commit."""
    from stepstone.model.models import Evidence, StepRecord, dump, now
    from stepstone.run import step_path

    with stepstone.open_run("sized", repo=store, workdir=workdir) as run:
        run.store.set_config("gc.auto", 0)  # measure before and after an explicit gc
        run.set_plan([f"s{i}" for i in range(size + 200)])
        for batch in range(0, size, 1000):
            writes: dict[str, bytes | None] = {}
            for i in range(batch, min(size, batch + 1000)):
                record = StepRecord(
                    number=i + 1,
                    name=f"s{i}",
                    status="confirmed",
                    started=now(),
                    finished=now(),
                    seq=run.seq + 1,
                    evidence=(Evidence(check="completed", kind="completed", value=True),),
                )
                writes[step_path(f"s{i}")] = dump(record)
            subject = f"bench: steps {batch + 1}-{batch + len(writes)}"
            run.ledger.commit(writes, subject, [], verbatim=True)


def measure_size(tmp: Path, size: int, gc: bool) -> dict[str, str]:
    folder = tmp / f"size{size}"
    folder.mkdir()
    store = folder / ".stepstone"
    build_run(store, folder, size)
    start = time.perf_counter()
    run = stepstone.open_run("sized", repo=store, workdir=folder)
    run.status()
    open_ms = (time.perf_counter() - start) * 1000
    steps = []
    for i in range(size, size + 100):
        t = time.perf_counter()
        run.step(f"s{i}", lambda: None)
        steps.append((time.perf_counter() - t) * 1000)
    run.close()
    start = time.perf_counter()
    stepstone.open_run("sized", repo=store, workdir=folder).status()
    reopen_ms = (time.perf_counter() - start) * 1000
    cli_ms, peak = [], 0
    # VmHWM, not ru_maxrss: a child's ru_maxrss starts from this (large) process's
    probe = (
        "import sys; from stepstone.cli import main\n"
        "sys.argv = ['stepstone', 'status', '--json']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')),"
        " file=sys.stderr)"
    )
    for _ in range(5):
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", probe], cwd=folder, capture_output=True, text=True, check=True
        )
        cli_ms.append((time.perf_counter() - start) * 1000)
        peak = max(peak, int(done.stderr.strip().splitlines()[-1]))
    before = disk_usage(store)
    after = "-"
    if gc:
        subprocess.run(["git", "-C", str(store), "gc", "-q"], check=True)
        after = f"{disk_usage(store) / 1e6:.1f}"
    med, p95 = summary(steps)
    return {
        "steps": f"{size:,}",
        "step median ms": f"{med:.2f}",
        "step p95 ms": f"{p95:.2f}",
        "open+resume ms (cold / cached)": f"{open_ms:.0f} / {reopen_ms:.0f}",
        "status --json ms": f"{statistics.median(cli_ms):.0f}",
        "status peak MB": f"{peak / 1024:.0f}",
        "repo MB (before / after gc)": f"{before / 1e6:.1f} / {after}",
    }


def print_table(rows: list[dict[str, str]]) -> None:
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |")
    print("| " + " | ".join("---" for _ in keys) + " |")
    for row in rows:
        print("| " + " | ".join(row[k] for k in keys) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="0,1000,10000", help="run sizes, comma-separated")
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument(
        "--steps", type=int, default=0, help="also time this many real steps in a row in one run"
    )
    parser.add_argument("--no-gc", action="store_true", help="skip `git gc` of the sized runs")
    parser.add_argument(
        "--planned", action="store_true", help="the %%step row after a %%plan that lists names"
    )
    parser.add_argument(
        "--no-history",
        action="store_true",
        help="the %%step row with IPython's history database off (stepstone's own cost)",
    )
    parser.add_argument(
        "--no-auto-gc",
        action="store_true",
        help="no background `git gc --auto` during the steps in a row (gc.auto=0)",
    )
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="stepstone-bench-", dir=os.environ.get("BENCH_DIR")))
    n = args.samples
    try:
        closers: list[Callable[[], None]] = []
        step, close = stepstone_step(tmp, n + 40)
        closers.append(close)
        skip, close = stepstone_skip(tmp, n + 40)
        closers.append(close)
        effect, close = stepstone_effect(tmp)
        closers.append(close)
        decision, close = stepstone_decision(tmp)
        closers.append(close)
        dbos, close = dbos_step(tmp)
        closers.append(close)
        incremental, close = stepstone_incremental(tmp)
        closers.append(close)
        magic, close = stepstone_magic(
            tmp, planned=n + 10 if args.planned else 0, history=not args.no_history
        )
        closers.append(close)
        graph_step, close = langgraph_step(tmp)
        closers.append(close)
        samplers: dict[str, Sampler | None] = {
            "floor: atomic write + fsync + rename + dir fsync": floor(tmp),
            "SQLite WAL insert, synchronous=FULL": sqlite_insert(tmp),
            "pygit2 blob+tree+commit, fsync on": pygit2_commit(tmp),
            "dulwich blob+tree+commit, fsync objects": dulwich_commit(tmp),
            "git add + git commit, core.fsync=all": git_cli_commit(tmp),
            "peer: DBOS step on SQLite": dbos,
            "peer: LangGraph SqliteSaver.put, synchronous=FULL": langgraph_put(tmp),
            "peer: LangGraph adds to a graph's step (SqliteSaver, sync)": graph_step,
            "stepstone step (record + commit)": step,
            "stepstone step, incremental plan (no plan given)": incremental,
            "stepstone %%step adds to an IPython cell "
            + ("(after a %%plan of names)" if args.planned else "(incremental plan)")
            + (", IPython's history off" if args.no_history else ""): magic,
            "stepstone skip path (verify file check + restore value)": skip,
            "stepstone effect (intent + confirmation commits)": effect,
            "stepstone decision (one commit)": decision,
        }
        os.sync()  # start from a clean page cache
        measured = interleave(samplers, n, every={"git add + git commit, core.fsync=all": 4})
        for close in closers:
            close()
        rows = list(measured.items())
        if args.steps:
            window = min(n, max(10, args.steps // 10))
            long = stepstone_steps(tmp / "long", args.steps, window, auto_gc=not args.no_auto_gc)
            for key, samples in long.items():
                what, _, mark = key.partition(" ")
                label = {
                    "long": f"stepstone step, {args.steps:,} in a row, at step {int(mark or 0):,}",
                    "fresh": "  in turns with it: a step of a fresh store",
                    "floor": "  in turns with it: the floor",
                    "reopened": f"stepstone step, the {args.steps:,}-step run reopened",
                }[what]
                rows.append((label, samples))
        base = summary(rows[0][1] or [1.0])[0]
        print(
            f"\nstepstone {stepstone.__version__}, Python {sys.version.split()[0]}, "
            f"{os.cpu_count()} cores, commits flushed by "
            f"{'syncfs' if batch_sync(Settings.from_env()) else 'fsync of each object'}\n"
        )
        print(f"| {'what':<60} | median ms | p95 ms | × floor |")
        print(f"| {'-' * 60} | --------- | ------ | ------- |")
        for label, samples in rows:
            if samples is None:
                print(f"| {label:<60} | not installed | | |")
                continue
            med, p95 = summary(samples)
            print(f"| {label:<60} | {med:9.2f} | {p95:6.2f} | {med / base:7.1f} |")
        print()
        sized = []
        for size in (int(x) for x in args.sizes.split(",")):
            os.sync()
            print(f"  ... run of {size:,} steps", file=sys.stderr)
            sized.append(measure_size(tmp, size, gc=not args.no_gc))
        print_table(sized)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
