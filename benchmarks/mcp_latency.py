"""How long each reading tool of `stepstone mcp` takes on a warm server, on a run of
1,000 steps, over stdio with the MCP SDK's own client (as an agent's client calls it).

    python benchmarks/mcp_latency.py                   # 1,000 steps, 25 calls a tool
    python benchmarks/mcp_latency.py --steps 200 --samples 51
    python benchmarks/mcp_latency.py --keep /tmp/mcp-bench   # build once, reuse

The run is made by `stepstone run` of a notebook of N `%%step` cells, each writing a
small file its `file:` check hashes (a few minutes for 1,000 steps the first time).
The server is started once and warmed (one call of every tool); then each tool is
called `--samples` times in turns. The table gives, for each tool, the median and p95
wall time of

- `wire`: a JSON-RPC `tools/call` written to the server's stdin until its answer's
  line is read from its stdout (the server's answer, serialized, through the pipe);
- `SDK`: the same call by the MCP SDK's `Client.call_tool`, which also checks the
  structuredContent against the tool's outputSchema with `jsonschema` in the client
  (a cost that grows with the answer: `status` of 1,000 steps is about 270 kB);

and the size of the answer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
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


def measure_wire(folder: Path, samples: int) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Each call's time on the wire: request written, answer line read (no client)."""
    server = subprocess.Popen(
        [sys.executable, "-m", "stepstone", "mcp"],
        cwd=folder,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    assert server.stdin is not None and server.stdout is not None
    ids = iter(range(1, 1_000_000))

    def ask(method: str, params: dict[str, Any]) -> tuple[float, str]:
        assert server.stdin is not None and server.stdout is not None
        number = next(ids)
        line = json.dumps({"jsonrpc": "2.0", "id": number, "method": method, "params": params})
        start = time.perf_counter()
        server.stdin.write(line + "\n")
        server.stdin.flush()
        while True:
            answer = server.stdout.readline()
            if not answer:
                sys.exit(f"the server ended during {method}")
            if json.loads(answer).get("id") == number:
                return (time.perf_counter() - start) * 1000, answer

    try:
        hello = {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "mcp_latency", "version": "1"},
        }
        ask("initialize", hello)
        server.stdin.write('{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        server.stdin.flush()
        times: dict[str, list[float]] = {name: [] for name in CALLS}
        sizes: dict[str, int] = {}
        for name, arguments in CALLS.items():  # warm
            _, answer = ask("tools/call", {"name": name, "arguments": arguments})
            if json.loads(answer)["result"].get("isError"):
                sys.exit(f"{name}: {answer}")
            sizes[name] = len(answer)
        for _ in range(samples):
            for name, arguments in CALLS.items():
                taken, _ = ask("tools/call", {"name": name, "arguments": arguments})
                times[name].append(taken)
        return times, sizes
    finally:
        server.stdin.close()
        server.wait(timeout=60)


def _median_p95(taken: list[float]) -> str:
    ordered = sorted(taken)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"{statistics.median(taken):.1f} | {p95:.1f}"


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
    wire, sizes = measure_wire(folder, args.samples)
    sdk = asyncio.run(measure(folder, args.samples))
    print(f"\n{args.steps:,} steps, {args.samples} calls a tool, warm server (ms)\n")
    print("| tool | wire median | wire p95 | SDK median | SDK p95 | answer |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in CALLS:
        size = f"{sizes[name] / 1000:.1f} kB"
        print(f"| {name} | {_median_p95(wire[name])} | {_median_p95(sdk[name])} | {size} |")


if __name__ == "__main__":
    main()
