from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import hypothesis
import pytest

import stepstone.run


@pytest.fixture(autouse=True)
def user_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's user configuration folder (the key that signs one's own values, the
    stores one trusts), inherited by the processes it starts."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "user-config"))
    return tmp_path / "user-config" / "stepstone"


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh folder as the current directory, with no stepstone variables set."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("STEPSTONE_RUN", raising=False)
    monkeypatch.delenv("STEPSTONE_REPO", raising=False)
    yield tmp_path
    driven = stepstone.run.active.driven_run()
    if driven is not None:
        driven.close()


def git(
    *args: str, cwd: Path | str, env: dict[str, str] | None = None, input: str | None = None
) -> str:
    """Run plain git and return its output (fails the test on a non-zero exit)."""
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, input=input, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _gc_running(store: Path) -> bool:
    try:
        pid = int((store / "gc.pid").read_text().split()[0])
        os.kill(pid, 0)
    except (OSError, ValueError, IndexError):
        return False
    return True


def fsck(store: Path | str) -> None:
    """`git fsck --strict` on a store, once any background `git gc` there is done.

    A `git gc --auto` that stepstone started may still be packing loose objects;
    fsck lists them, gc removes them, and fsck reports them missing. So wait for
    gc's `gc.pid` to go, and retry a failure that names a missing loose object
    (gc may lock between fsck's start and its read). Real damage fails every try.
    """
    store = Path(store)
    stderr = ""
    for _ in range(5):
        deadline = time.monotonic() + 60
        while _gc_running(store) and time.monotonic() < deadline:
            time.sleep(0.05)
        done = subprocess.run(
            ["git", "fsck", "--strict"], cwd=store, capture_output=True, text=True, check=False
        )
        if done.returncode == 0:
            return
        stderr = done.stderr
        if "unable to mmap" not in stderr:
            break
        time.sleep(0.5)
    raise AssertionError(stderr)


def all_objects(store: Path | str) -> bytes:
    """Every object of a Git repository, as `git cat-file --batch` prints them."""
    return subprocess.run(
        ["git", "cat-file", "--batch-all-objects", "--batch"],
        cwd=store,
        capture_output=True,
        check=True,
    ).stdout


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without STEPSTONE_* variables, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPSTONE_")}
    env.update(extra)
    return env


def stepstone_cli(*args: str, cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    """Run the real `stepstone` command line in a subprocess (extra: environment)."""
    return subprocess.run(
        [sys.executable, "-m", "stepstone", *args],
        cwd=cwd,
        env=clean_env(**extra),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def mcp_session(workdir: Path, script: Any, *, read_timeout: float = 60, **env: str) -> Any:
    """Run `script(call, read)` against `stepstone mcp` started in `workdir` (with the
    environment variables `env`), through the MCP SDK's own client: `call(tool, **args)`
    gives a tool's structured result (a list unwrapped), or `{"error": TEXT}` when it is
    refused; `read(uri)` a resource's text."""
    import asyncio

    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "stepstone", "mcp"],
        cwd=str(workdir),
        env=clean_env(**env),
    )

    async def main() -> Any:
        async with Client(params, read_timeout_seconds=read_timeout) as client:

            async def call(tool: str, **arguments: Any) -> Any:
                result = await client.call_tool(tool, arguments)
                if result.is_error:
                    return {"error": result.content[0].text}
                found = result.structured_content
                return found["result"] if set(found) == {"result"} else found

            async def read(uri: str) -> str:
                return (await client.read_resource(uri)).contents[0].text

            return await script(call, read)

    return asyncio.run(main())


def killed_when(argv: list[str], *, cwd: Path, ready: Any, timeout: float = 120) -> None:
    """Start `argv` in a session of its own, and once `ready()` is true kill it and every
    process it started at once (`kill -9`, as a machine that dies: nothing records it)."""
    import psutil

    started = subprocess.Popen(
        argv,
        cwd=cwd,
        env=clean_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + timeout
    while not ready() and time.monotonic() < deadline:
        time.sleep(0.05)
    family = psutil.Process(started.pid)
    for process in [family, *family.children(recursive=True)]:
        process.kill()
    started.wait()


def run_python(
    code: str, *, cwd: Path, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run a Python snippet in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
        timeout=120,
    )
    if check:
        assert done.returncode == 0, done.stderr
    return done


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak-kills",
        type=int,
        default=50,
        help="how many SIGKILLs the random-kill soak delivers (long mode: 1000)",
    )
    parser.addoption(
        "--everything-kills",
        type=int,
        default=15,
        help="how many SIGKILLs tests/test_soak_everything.py delivers (long mode: 200)",
    )
    parser.addoption(
        "--power-states",
        type=int,
        default=300,
        help="how many distinct power-loss states tests/test_power_loss.py checks "
        "(long mode: 10000)",
    )
    parser.addoption(
        "--adversary-actions",
        type=int,
        default=30,
        help="how many random user actions tests/test_adversary.py takes (long mode: 5000)",
    )
    parser.addoption(
        "--adversary-seed",
        default=None,
        help="run only the case of this seed in tests/test_adversary.py",
    )
    parser.addoption(
        "--generated-actions",
        type=int,
        default=36,
        help="how many actions tests/test_generated.py takes on generated notebooks "
        "(long mode: 5000)",
    )
    parser.addoption(
        "--generated-per-case",
        type=int,
        default=12,
        help="how many actions each generated notebook of tests/test_generated.py goes through",
    )
    parser.addoption(
        "--generated-no-shrink",
        action="store_true",
        help="report a failing case of tests/test_generated.py without shrinking its script",
    )
    parser.addoption(
        "--generated-seed",
        default=None,
        help="run only the case of this seed in tests/test_generated.py",
    )
    parser.addoption(
        "--oracle-seed",
        type=int,
        default=None,
        help="run only the generated notebook of this seed in tests/test_oracle.py",
    )
    parser.addoption(
        "--oracle-actions",
        type=int,
        default=3,
        help="how many runs (each maybe after an edit, maybe killed) a generated notebook "
        "of tests/test_oracle.py goes through before its last run",
    )
    parser.addoption(
        "--race-seconds",
        type=float,
        default=12,
        help="how long tests/test_fenced_race.py kills and pauses its agents (long: 120)",
    )


@pytest.fixture
def soak_kills(request: pytest.FixtureRequest) -> int:
    return int(request.config.getoption("--soak-kills"))


@pytest.fixture
def everything_kills(request: pytest.FixtureRequest) -> int:
    return int(request.config.getoption("--everything-kills"))


SLOW_KINDS = ("kernel", "browser", "soak", "fault")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A kernel, browser, soak or fault test is slow: the inner loop (-m "not slow")
    leaves it out."""
    for item in items:
        if any(item.get_closest_marker(kind) for kind in SLOW_KINDS):
            item.add_marker(pytest.mark.slow)


_RESTORE = """
import resource, numpy as np, pandas as pd, pyarrow, pyarrow.parquet, stepstone
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with stepstone.open_run("big") as run:
    back = run.step("make", lambda: 1 / 0).value
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print((peak - base) * 1024 / back.memory_usage(index=False).sum())
"""


def restore_held(workdir: Path, save: str) -> float:
    """The peak memory a new process held restoring the frame step "make" of run "big"
    saved (by `save`, run first in its own process), as a multiple of the frame."""
    run_python(save, cwd=workdir)
    return float(run_python(_RESTORE, cwd=workdir).stdout.split()[-1])


# generated cases are not timed: the suite must pass on a busy machine as on an idle one
hypothesis.settings.register_profile("stepstone", deadline=None)
hypothesis.settings.load_profile("stepstone")


def cell_text(cell: Any) -> str:
    """What a cell of an executed notebook shows as text: its streams, the text of its
    displays, and what stepstone said in it (kept in its metadata by `stepstone run`)."""
    shown = [
        o.get("text", "")
        if o.get("output_type") == "stream"
        else o.get("data", {}).get("text/plain", "")
        for o in cell.get("outputs", [])
    ]
    said = (cell.get("metadata") or {}).get("stepstone", {}).get("said", [])
    return "".join("".join(t) if isinstance(t, list) else str(t) for t in [*shown, *said])


def effect_key(run: str, name: str, payload: Any = None, repo: Path | str | None = None) -> str:
    """The key a new effect `name` with `payload` gets in run `run` (its lineage's)."""
    from stepstone.effects.effectkeys import fingerprint

    reader = stepstone.open_run(run, repo=repo, drive=False)
    try:
        return reader.state.effect_key(name, fingerprint(payload))
    finally:
        reader.close()
