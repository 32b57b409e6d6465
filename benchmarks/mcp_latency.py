"""How long each reading tool of `stepstone mcp` takes on a warm server, on a run of
1,000 steps, over stdio with the MCP SDK's own client (as an agent's client calls it).

    python benchmarks/mcp_latency.py                   # 1,000 steps, 25 calls a tool
    python benchmarks/mcp_latency.py --steps 200 --samples 51
    python benchmarks/mcp_latency.py --keep /tmp/mcp-bench   # build once, reuse

The run is made by `stepstone run` of a notebook of N `%%step` cells, each writing a
small file its `file:` check hashes (a few minutes for 1,000 steps the first time).
The server is started once and warmed (one call of every tool); then each tool is
called `--samples` times in turns, and the table gives the median and p95 wall time of
a call as the client sees it (request, answer, and the structuredContent's check
against the tool's outputSchema by the SDK).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CALLS: dict[str, dict[str, Any]] = {
    "status": {},
    "brief": {},
    "show": {"step": "s0500"},
    "outputs": {"step": "s0500"},
    "log": {"step": "s0500"},
    "runs": {},
    "verify": {},
    "show_cells": {},
    "schema": {},
}


def build(folder: Path, steps: int) -> None:
    """A notebook of `steps` step cells in `folder`, run once by `stepstone run`."""
    import nbformat

    cells = [nbformat.v4.new_code_cell("%load_ext stepstone\n%resume")]
    for n in range(1, steps + 1):
        cells.append(
            nbformat.v4.new_code_cell(
                f"%%step s{n:04d} --check file:out/s{n:04d}.txt\n"
                f"import pathlib\npathlib.Path('out').mkdir(exist_ok=True)\n"
                f"pathlib.Path('out/s{n:04d}.txt').write_text('{n}')"
            )
        )
    nb = nbformat.v4.new_notebook(cells=cells)
    nbformat.write(nb, str(folder / "bench.ipynb"))
    done = subprocess.run(
        [sys.executable, "-m", "stepstone", "run", "bench.ipynb", "--no-progress-bar"],
        cwd=folder,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        sys.exit(f"stepstone run failed:\n{done.stderr}")


async def measure(folder: Path, samples: int) -> dict[str, list[float]]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "stepstone", "mcp"], cwd=str(folder)
    )
    times: dict[str, list[float]] = {name: [] for name in CALLS}
    async with Client(params, read_timeout_seconds=600) as client:
        for name, arguments in CALLS.items():  # warm: imports, caches, the schemas
            result = await client.call_tool(name, arguments)
            if result.is_error:
                sys.exit(f"{name}: {result.content[0].text}")
        for _ in range(samples):
            for name, arguments in CALLS.items():
                start = time.perf_counter()
                await client.call_tool(name, arguments)
                times[name].append((time.perf_counter() - start) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=25)
    parser.add_argument("--keep", type=Path, help="build the run here once, and reuse it")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="stepstone-mcp-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / ".stepstone").exists():
        started = time.perf_counter()
        build(folder, args.steps)
        print(f"built a run of {args.steps:,} steps in {time.perf_counter() - started:.0f} s")
    times = asyncio.run(measure(folder, args.samples))
    print(f"\n{args.steps:,} steps, {args.samples} calls a tool, warm server (ms)\n")
    print("| tool | median | p95 |")
    print("| --- | --- | --- |")
    for name, taken in times.items():
        ordered = sorted(taken)
        p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
        print(f"| {name} | {statistics.median(taken):.1f} | {p95:.1f} |")


if __name__ == "__main__":
    main()
