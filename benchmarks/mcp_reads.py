"""How long `stepstone mcp`'s reading tools take as the MCP SDK's client sees them
(`Client.call_tool`, request to result), on a run of N steps; and the first `status`
after another process commits to the run.

    python benchmarks/mcp_reads.py                        # 1,000 steps, 15 calls a tool
    python benchmarks/mcp_reads.py --steps 1000 --repeat 10
    python benchmarks/mcp_reads.py --folder /tmp/mcpbench/run   # build once, reuse

The run is made with the Python API (`stepstone.open_run`, then `run.step` N times,
one commit a step, each step writing a small file its `file:` check hashes), in a
folder with its store `.stepstone`; no notebook (so `status` reads none). The server
is `stepstone mcp` started in that folder by the SDK's stdio client, and warmed (each
tool called once). Then:

- warm: each tool is called `--repeat` times, in turns; nothing changes in between, so
  these are the server's kept answers (agent/warm.py) plus the round trip through the
  SDK (the client checks the structuredContent against the tool's outputSchema);
- first call after a commit: `--repeat` times, another process commits a decision to
  the run (`stepstone decide bench-kN vN --why ...`, not timed), then the next `status`
  call is timed (the run's tip moved: the server opens the run again and makes the
  answer anew).

Quoted: median, p90 and min in ms. The issue's goal: a read's median at most 50 ms, the
first call after a commit at most 100 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

GOAL_READ_MS = 50.0
GOAL_AFTER_COMMIT_MS = 100.0


def step_name(n: int) -> str:
    return f"s{n:04d}"


def calls(steps: int) -> dict[str, tuple[str, dict[str, Any]]]:
    """Each reading tool timed, by its label, with its arguments (`show`: the middle
    step); `every=true` and `limit=0` are the whole answers an agent may ask for."""
    return {
        "status": ("status", {}),
        "status every=true": ("status", {"every": True}),
        "verify": ("verify", {}),
        "brief": ("brief", {}),
        "log": ("log", {}),
        "log limit=0": ("log", {"limit": 0}),
        "show": ("show", {"step": step_name(max(1, steps // 2))}),
        "runs": ("runs", {}),
    }


def clean_env() -> dict[str, str]:
    """This process's environment without STEPSTONE_* variables."""
    return {k: v for k, v in os.environ.items() if not k.startswith("STEPSTONE_")}


def build(folder: Path, steps: int) -> None:
    """A run of `steps` confirmed steps in `folder` (store `.stepstone`), one commit a
    step; each step writes out/<step>.txt and its `file:` check hashes it."""
    import stepstone

    out = folder / "out"
    out.mkdir(parents=True, exist_ok=True)
    with stepstone.open_run("bench", repo=folder / ".stepstone", workdir=folder) as run:
        run.set_plan([step_name(n) for n in range(1, steps + 1)])
        for n in range(1, steps + 1):
            name = step_name(n)
            write = functools.partial(_write, out / f"{name}.txt", str(n))
            run.step(name, write, checks=[f"file:out/{name}.txt"])


def _write(path: Path, text: str) -> None:
    path.write_text(text)


def commit_from_elsewhere(folder: Path, n: int) -> None:
    """A new commit to the run by another process: a decision by the command line."""
    done = subprocess.run(
        # a key of its own each time: deciding a value already decided commits nothing
        [
            sys.executable,
            "-m",
            "stepstone",
            "decide",
            f"bench-k{n}-{time.time_ns()}",
            "v",
            "--why",
            "bench",
        ],
        cwd=folder,
        env=clean_env(),
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        sys.exit(f"stepstone decide failed:\n{done.stderr}")


async def measure(
    folder: Path, steps: int, repeat: int
) -> tuple[dict[str, list[float]], dict[str, int], list[float]]:
    """(ms of each warm call by tool, each answer's size in bytes, ms of each first
    `status` after a commit)."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "stepstone", "mcp"], cwd=str(folder), env=clean_env()
    )
    timed = calls(steps)
    warm: dict[str, list[float]] = {name: [] for name in timed}
    sizes: dict[str, int] = {}
    after_commit: list[float] = []
    async with Client(params, read_timeout_seconds=600) as client:

        async def call(label: str, name: str, arguments: dict[str, Any]) -> float:
            start = time.perf_counter()
            result = await client.call_tool(name, arguments)
            taken = (time.perf_counter() - start) * 1000
            if result.is_error:
                sys.exit(f"{name}: {getattr(result.content[0], 'text', result.content)}")
            sizes[label] = len(json.dumps(result.structured_content, separators=(",", ":")))
            return taken

        for label, (name, arguments) in timed.items():  # warm: imports, caches, schemas
            await call(label, name, arguments)
        for _ in range(repeat):
            for label, (name, arguments) in timed.items():
                warm[label].append(await call(label, name, arguments))
        for n in range(repeat):
            await asyncio.to_thread(commit_from_elsewhere, folder, n)
            after_commit.append(await call("status", "status", {}))
    return warm, sizes, after_commit


def quantile(taken: list[float], q: float) -> float:
    ordered = sorted(taken)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def row(label: str, taken: list[float], goal: float, size: int | None) -> str:
    med = statistics.median(taken)
    said = f"{size / 1000:.1f} kB" if size is not None else "-"
    met = "yes" if med <= goal else "no"
    return (
        f"| {label} | {med:.1f} | {quantile(taken, 0.9):.1f} | {min(taken):.1f} | {said} "
        f"| ≤ {goal:.0f}: {met} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000, help="steps in the run")
    parser.add_argument("--repeat", type=int, default=15, help="calls a tool")
    parser.add_argument(
        "--folder", type=Path, help="build the run here once and reuse it (default: a new temp)"
    )
    args = parser.parse_args()
    folder = args.folder or Path(tempfile.mkdtemp(prefix="stepstone-mcp-reads-"))
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / ".stepstone").exists():
        started = time.perf_counter()
        build(folder, args.steps)
        print(f"built a run of {args.steps:,} steps in {time.perf_counter() - started:.1f} s")
    warm, sizes, after_commit = asyncio.run(measure(folder, args.steps, args.repeat))
    print(
        f"\n`stepstone mcp`, {args.steps:,} steps, {args.repeat} calls each, "
        f"MCP SDK client over stdio, request to result (ms)\n"
    )
    print("| call | median | p90 | min | structuredContent | goal (median ms) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, taken in warm.items():
        print(row(f"{name} (warm)", taken, GOAL_READ_MS, sizes.get(name)))
    print(row("status, first after a commit", after_commit, GOAL_AFTER_COMMIT_MS, sizes["status"]))


if __name__ == "__main__":
    main()
