"""How many of stepstone's modules each of four paths crosses (issue 48): the modules
whose functions run (a module's own body and its class bodies, run at import, aside),
in every process the path starts, for this checkout or another one's `src` folder.

    python benchmarks/paths.py                    # this checkout
    python benchmarks/paths.py /tmp/old/src       # another, beside it

The paths, as docs/architecture.md draws them:

    step cell    a `%%step` cell to its commit, in an IPython shell (the cell alone)
    run          `stepstone run` of an unannotated notebook after its kernel was killed
                 (the command and its kernel)
    effect       `stepstone.effect` from intent to confirmation (the call alone)
    mcp run      an MCP `run` tool call (the server, its `stepstone run`, the kernel)

Modules are counted by a profile hook (`sys.setprofile`, `threading.setprofile`) that
a `sitecustomize` module installs in each process when `PATHS_TRACE` names a file.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

SITECUSTOMIZE = """
import os, sys, threading, atexit
_out = os.environ.get("PATHS_TRACE")
seen = set()
recording = os.environ.get("PATHS_RECORD", "1") == "1"
def _profile(frame, event, arg):
    if event == "call" and recording:
        name = frame.f_globals.get("__name__", "")
        if name.startswith("stepstone") and frame.f_code.co_flags & 1:  # functions only
            seen.add(name)
if _out:
    sys.setprofile(_profile)
    threading.setprofile(_profile)
    def _save():
        with open(_out, "a") as f:
            f.write(json.dumps(sorted(seen)) + "\\n")
    import json
    atexit.register(_save)
"""

STEP_CELL = """
import sitecustomize
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "stepstone")
ip.run_line_magic("resume", "--run paths")
ip.run_cell("%%step warm\\nw = 1")
sitecustomize.recording = True
ip.run_cell("%%step s1\\nx = 1")
sitecustomize.recording = False
ip.run_line_magic("unload_ext", "stepstone")
"""

EFFECT = """
import sitecustomize, stepstone
def step():
    sitecustomize.recording = True
    stepstone.effect("notify", lambda key: {"id": 1}, payload={"to": "ops"})
    sitecustomize.recording = False
with stepstone.open_run("paths") as run:
    run.step("warm", lambda: stepstone.effect("warm", lambda key: 1))
    run.step("send", step)
"""

NOTEBOOK = {
    "cells": [
        {
            "cell_type": "code",
            "metadata": {},
            "execution_count": None,
            "outputs": [],
            "source": "x = 1\nprint(x)",
        },
        {
            "cell_type": "code",
            "metadata": {},
            "execution_count": None,
            "outputs": [],
            "source": "import os, signal\nif os.path.exists('kill'):\n    os.remove('kill')\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\ny = x + 1",
        },
        {
            "cell_type": "code",
            "metadata": {},
            "execution_count": None,
            "outputs": [],
            "source": "print(y)",
        },
    ],
    "metadata": {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
    },
    "nbformat": 4,
    "nbformat_minor": 5,
}

MCP = """
import asyncio, os, sys
from mcp import Client
from mcp.client.stdio import StdioServerParameters
async def main():
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "stepstone", "mcp"], env=dict(os.environ)
    )
    async with Client(params, read_timeout_seconds=120) as client:
        result = await client.call_tool("run", {"notebook": "job.ipynb"})
        assert not result.is_error, result.content
asyncio.run(main())
"""


def modules(
    src: str | None,
    folder: Path,
    code: str | None = None,
    argv: list[str] | None = None,
    record: bool = False,
) -> set[str]:
    """The stepstone modules whose functions ran in the processes of one path."""
    trace = folder / "trace.jsonl"
    trace.unlink(missing_ok=True)
    hooks = folder / "hooks"
    hooks.mkdir(exist_ok=True)
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPSTONE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hooks), src]))
    env["PATHS_TRACE"] = str(trace)
    if code is not None:
        env["PATHS_RECORD"] = "1" if record else "0"  # the script says when, else all
        command = [sys.executable, "-c", code]
    else:
        command = [sys.executable, "-m", "stepstone", *(argv or [])]
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        sys.exit(f"{command} failed:\n{done.stderr[-2000:]}")
    found: set[str] = set()
    for line in trace.read_text().splitlines():
        found.update(json.loads(line))
    return found


def measure(src: str | None) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        for name, code in (("step cell", STEP_CELL), ("effect", EFFECT)):
            folder = base / name.replace(" ", "-")
            folder.mkdir()
            out[name] = modules(src, folder, code=code)
        folder = base / "run"
        folder.mkdir()
        (folder / "job.ipynb").write_text(json.dumps(NOTEBOOK))
        (folder / "kill").write_text("")
        modules(src, folder, argv=["run", "job.ipynb"])  # its kernel killed in cell 2
        out["run"] = modules(src, folder, argv=["run", "job.ipynb"])
        folder = base / "mcp"
        folder.mkdir()
        (folder / "job.ipynb").write_text(json.dumps(NOTEBOOK))
        out["mcp run"] = modules(src, folder, code=MCP, record=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("others", nargs="*", help="other checkouts' src folders")
    parser.add_argument("--list", action="store_true", help="print the modules of each path")
    args = parser.parse_args()
    here = str(Path(__file__).resolve().parent.parent / "src")
    columns = {"this checkout": measure(here)}
    for other in args.others:
        columns[other] = measure(other)
    paths = list(next(iter(columns.values())))
    print("| path | " + " | ".join(columns) + " |")
    print("| --- |" + " --- |" * len(columns))
    for path in paths:
        print(f"| {path} | " + " | ".join(str(len(c[path])) for c in columns.values()) + " |")
    if args.list:
        for label, found in columns.items():
            for path in paths:
                print(f"\n{label}, {path}:\n" + textwrap.fill(", ".join(sorted(found[path])), 100))


if __name__ == "__main__":
    main()
