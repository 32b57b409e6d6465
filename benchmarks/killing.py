"""What the kill-and-resume benchmarks share: a child environment free of this
process's `STEPSTONE_*` settings, and `stepstone run` with its kernel killed (`kill -9`)
as its Nth step ends (read from its `[N/M]` progress lines)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import psutil


def clean_env() -> dict[str, str]:
    """This process's environment without `STEPSTONE_*`, debugger warnings quiet."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPSTONE_")}
    env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    return env


def killed_after(args: list[str], cwd: Path, step: int, timeout: float | None = None) -> int:
    """Run `args` (a `stepstone run`) in `cwd`, kill its kernel and every other child as
    its `step`-th step ends; its exit code."""
    with subprocess.Popen(
        args, cwd=cwd, env=clean_env(), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
    ) as proc:
        assert proc.stderr is not None
        for line in proc.stderr:
            if line.startswith(f"[{step}/"):
                for child in psutil.Process(proc.pid).children(recursive=True):
                    child.kill()
        return proc.wait(timeout=timeout)
