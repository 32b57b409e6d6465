"""Settings, resolved once: arguments, then `STEPSTONE_*` variables, then a store's Git
config, then defaults.

`Settings.from_env()` reads the process environment; a store adds what its Git config
says with `with_config`. Code is handed a `Settings` and reads its fields; tests build
one with the fields they need (`dataclasses.replace`) instead of patching modules.

This module is the one reader of the environment (tests/test_architecture.py checks
it): besides `Settings`, `config_dir` (this user's configuration folder),
`credential_values` (what redaction hides) and `child_environment` (what a child
process is started with) read it. The names of the variables are defined here once.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TypeVar

STORE_ENV = "STEPSTONE_REPO"  # the store's path
RUN_ENV = "STEPSTONE_RUN"  # the run's id
AGENT_ENV = "STEPSTONE_AGENT"  # who drives, in locks, commits and records
SYNC_ENV = "STEPSTONE_SYNC"  # "syncfs": one syncfs a commit instead of an fsync of each file
OFFLINE_ENV = "STEPSTONE_OFFLINE"  # "1": write effects without the lease of a remote
STEAL_ENV = "STEPSTONE_STEAL"  # a reason: take a live lease from another agent
DIVERGE_ENV = "STEPSTONE_DIVERGE"  # "1": drive a copy taken while driven as a new lineage
CHECK_TIMEOUT_ENV = "STEPSTONE_CHECK_TIMEOUT"  # seconds a cmd: or call: check may take
EFFECT_TIMEOUT_ENV = "STEPSTONE_EFFECT_TIMEOUT"  # seconds an effect's write may take
FOLLOW_INPUTS_ENV = "STEPSTONE_FOLLOW_INPUTS"  # "1": cells may follow their inputs
CELLS_ENV = "STEPSTONE_CELLS"  # "1": every code cell is a step (`stepstone run --cells`)
CONFIG_ENV = "STEPSTONE_CONFIG"  # this user's configuration folder (values/trust.py)
# What `stepstone run` hands the kernel it starts, besides the run, store, steal, diverge:
NOTEBOOK_ENV = "STEPSTONE_NOTEBOOK"  # the notebook the kernel runs
PARAMETERS_ENV = "STEPSTONE_PARAMETERS"  # the parameters' canonical JSON, for `%resume`
VIA_ENV = "STEPSTONE_VIA"  # who started the notebook's run: `cli run`, `mcp run`
UNWATCHED_ENV = "STEPSTONE_UNWATCHED"  # files the command that started the kernel writes
# as it runs (--stdout-file, --stderr-file): no step wrote them (os.pathsep between)
EVENTS_ENV = "STEPSTONE_EVENTS"  # a file the kernel appends the run's events to (JSON Lines)
FAULT_ENV = "STEPSTONE_FAULT"  # tests: NAME[:N], kill the process at a fault point (faults.py)
CLOCK_SKEW_ENV = "STEPSTONE_CLOCK_SKEW"  # tests: seconds this process's clock is ahead (or behind)
JUPYTER_SESSION_ENV = "JPY_SESSION_NAME"  # a Jupyter server's: the notebook, from its root

AUTOPUSH_KEY = "stepstone.autopush"
LEASE_SECONDS_KEY = "stepstone.leaseSeconds"
RETENTION_KEY = "stepstone.effectRetention"
FOLLOW_INPUTS_KEY = "stepstone.followInputs"
REDACT_KEY = "stepstone.redact"  # more credential field names, comma-separated
GC_AUTO_KEY = "gc.auto"
GC_PACK_LIMIT_KEY = "gc.autoPackLimit"

LIVE_ENV = (OFFLINE_ENV, CHECK_TIMEOUT_ENV, EFFECT_TIMEOUT_ENV)  # take effect when changed


@dataclass(frozen=True)
class Settings:
    """Everything that changes how stepstone behaves, with its default."""

    store: str | None = None
    """The store's path (`STEPSTONE_REPO`); None: `.stepstone` in the current folder."""
    run: str | None = None
    """The run's id (`STEPSTONE_RUN`); None: the store's only run, or the notebook's."""
    agent: str | None = None
    """Who drives (`STEPSTONE_AGENT`, else `GIT_AUTHOR_NAME`); None: Git's `user.name`,
    else the login name."""
    agent_email: str | None = None
    """The email that signs the store's commits (`GIT_AUTHOR_EMAIL`); None: Git's
    `user.email`, else `NAME@host`."""
    sync_each: bool = True
    """fsync each file a commit writes, all at once (the default), instead of one
    `syncfs` of the whole file system (`STEPSTONE_SYNC=syncfs`)."""
    via: str | None = None
    """How a command reaches the run for its one change, written in a trailer of its
    commit: `cli`, `mcp` (None: a driver, see `origin`)."""
    origin: str | None = None
    """How a driver came to drive the run, written in the same trailer of each of its
    commits: `cli run`, `mcp run` (a kernel that `stepstone run` or the MCP server's
    `run` tool started, `STEPSTONE_VIA`), `python run` (`stepstone.execute_notebook`),
    `notebook` (a kernel Jupyter started); None: the Python API."""
    offline: bool = False
    """Write effects without the lease of an unreachable remote (`STEPSTONE_OFFLINE=1`)."""
    steal: str | None = None
    """A reason to take a live lease from another agent (`STEPSTONE_STEAL`)."""
    diverge: bool = False
    """Drive a store copied while its run was driven as a new lineage (`STEPSTONE_DIVERGE=1`)."""
    check_timeout: float = 300.0
    """Seconds a `cmd:` or `call:` check may take (`STEPSTONE_CHECK_TIMEOUT`)."""
    effect_timeout: float = 600.0
    """Seconds an effect's write may take (`STEPSTONE_EFFECT_TIMEOUT`)."""
    autopush: bool = False
    """Push each commit to the remote in the background (`git config stepstone.autopush`)."""
    lease_seconds: int = 600
    """How long a lease lasts unrenewed (`git config stepstone.leaseSeconds`)."""
    gc_auto: int = 6700
    """Loose objects before `git gc --auto` is started (`gc.auto`, as in git)."""
    gc_pack_limit: int = 50
    """Packs before `git gc --auto` is started (`gc.autoPackLimit`, as in git)."""
    index_every: int = 10_000
    """Commits between saves of a run's step index by its driver."""
    effect_retention: float = 86_400.0
    """Seconds a keyed receiver keeps idempotency keys (`git config
    stepstone.effectRetention`; `inf`: for ever): an intent older is not retried."""
    follow_inputs: bool = False
    """Let cells that pass results only through files and decisions follow their
    recorded inputs (`STEPSTONE_FOLLOW_INPUTS=1`, `git config stepstone.followInputs
    true`; experimental, see docs/dependencies.md); else every step keeps the
    conservative rule."""
    cells: bool = False
    """Every code cell of the notebook is a step, as `stepstone run --cells` runs it
    (`STEPSTONE_CELLS=1`; `%resume --cells`)."""
    notebook: str | None = None
    """The notebook a kernel runs, as `stepstone run` names it (`STEPSTONE_NOTEBOOK`)."""
    jupyter_session: str | None = None
    """The notebook a Jupyter server started this kernel for, relative to the server's
    root (`JPY_SESSION_NAME`)."""
    parameters: str | None = None
    """The parameters `stepstone run -p` gives the run, as canonical JSON
    (`STEPSTONE_PARAMETERS`); None: none were given."""
    events: str | None = None
    """A file the kernel appends the run's events to, for the `stepstone run` that
    started it (`STEPSTONE_EVENTS`; `model/events.py`)."""
    redact_fields: frozenset[str] = frozenset()
    """Field names whose values are credentials, besides the well-known ones (`git config
    stepstone.redact "pin,card_number"`): replaced in stored receipts and errors."""
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(timezone.utc))
    """The time now, timezone-aware (tests move it on, or set `STEPSTONE_CLOCK_SKEW`)."""
    seen_env: tuple[str | None, ...] | None = field(default=None, repr=False, compare=False)
    """The `LIVE_ENV` variables as they were when these settings were read from them."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **fields: Any) -> Settings:
        """Defaults, overridden by `STEPSTONE_*` variables, overridden by `fields`."""
        env = os.environ if environ is None else environ
        found: dict[str, Any] = {
            "store": env.get(STORE_ENV) or None,
            "run": env.get(RUN_ENV) or None,
            "agent": env.get(AGENT_ENV) or env.get("GIT_AUTHOR_NAME") or None,
            "agent_email": env.get("GIT_AUTHOR_EMAIL") or None,
            "sync_each": env.get(SYNC_ENV) != "syncfs",
            "steal": env.get(STEAL_ENV) or None,
            "diverge": env.get(DIVERGE_ENV) == "1",
            "follow_inputs": env.get(FOLLOW_INPUTS_ENV) == "1",
            "cells": env.get(CELLS_ENV) == "1",
            "notebook": env.get(NOTEBOOK_ENV),
            "jupyter_session": env.get(JUPYTER_SESSION_ENV),
            "parameters": env.get(PARAMETERS_ENV),
            "events": env.get(EVENTS_ENV) or None,
            "origin": env.get(VIA_ENV) or None,
            **_skewed(env),
            **_live(env),
            "seen_env": tuple(env.get(var) for var in LIVE_ENV),
        }
        return cls(**{**found, **fields})

    def now(self, environ: Mapping[str, str] | None = None) -> Settings:
        """These settings with the `LIVE_ENV` variables set since they were read (a
        notebook's `%env STEPSTONE_OFFLINE=1` takes effect at the next effect)."""
        env = os.environ if environ is None else environ
        seen = tuple(env.get(var) for var in LIVE_ENV)
        if self.seen_env is None or seen == self.seen_env:
            return self
        return replace(self, **_live(env), seen_env=seen)

    def with_config(self, get: Callable[[str], str | None]) -> Settings:
        """These settings with what a store's Git config says (`get(key)`: its value,
        or None when unset); an unreadable value keeps the default."""
        found: dict[str, Any] = {}
        autopush = _git_bool(get(AUTOPUSH_KEY))
        if autopush is not None:
            found["autopush"] = autopush
        for name, key in (
            ("lease_seconds", LEASE_SECONDS_KEY),
            ("gc_auto", GC_AUTO_KEY),
            ("gc_pack_limit", GC_PACK_LIMIT_KEY),
        ):
            value = _number(get(key), int)
            if value is not None:
                found[name] = value
        if _git_bool(get(FOLLOW_INPUTS_KEY)):
            found["follow_inputs"] = True
        retention = _number(get(RETENTION_KEY), float)
        if retention is not None and retention > 0:
            found["effect_retention"] = retention
        redacted = get(REDACT_KEY)
        if redacted:
            found["redact_fields"] = frozenset(
                name.strip().lower().replace("-", "_")
                for name in redacted.split(",")
                if name.strip()
            )
        return replace(self, **found)


def fault_point() -> str | None:
    """The fault point a test armed (`STEPSTONE_FAULT`), as the process started."""
    return os.environ.get(FAULT_ENV) or None


def config_dir() -> Path:
    """This user's stepstone configuration folder: `$STEPSTONE_CONFIG`, else
    `$XDG_CONFIG_HOME/stepstone`, else `~/.config/stepstone`."""
    chosen = os.environ.get(CONFIG_ENV)
    if chosen:
        return Path(chosen)
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "stepstone"


def credential_values(looks_secret: Callable[[str], bool]) -> list[str]:
    """The values, 6 characters or longer, of the environment variables whose names
    `looks_secret` (read anew each call: a cell may set one)."""
    return [value for name, value in os.environ.items() if len(value) >= 6 and looks_secret(name)]


def child_environment(
    extra: Mapping[str, str] | None = None, *, unless_set: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment to start a child process with (a kernel, git): this process's,
    with `extra` set, and `unless_set` where this process has no such variable."""
    return {**(unless_set or {}), **os.environ, **(extra or {})}


_N = TypeVar("_N", int, float)


def _skewed(env: Mapping[str, str]) -> dict[str, Any]:
    """A clock `STEPSTONE_CLOCK_SKEW` seconds ahead (a test's process with a wrong clock)."""
    skew = _number(env.get(CLOCK_SKEW_ENV), float)
    if not skew:
        return {}
    ahead = timedelta(seconds=skew)
    return {"clock": lambda: datetime.now(timezone.utc) + ahead}


def _live(env: Mapping[str, str]) -> dict[str, Any]:
    """The settings `LIVE_ENV` gives (the defaults where a variable is unset)."""
    return {
        "offline": env.get(OFFLINE_ENV) == "1",
        "check_timeout": _number(env.get(CHECK_TIMEOUT_ENV), float) or Settings.check_timeout,
        "effect_timeout": _number(env.get(EFFECT_TIMEOUT_ENV), float) or Settings.effect_timeout,
    }


def _git_bool(text: str | None) -> bool | None:
    """A Git config boolean as git reads it (true/yes/on, false/no/off, a number), or
    None when unset or unreadable."""
    if text is None:
        return None
    word = text.strip().lower()
    if word in ("true", "yes", "on"):
        return True
    if word in ("false", "no", "off", ""):
        return False
    number = _number(word, int)
    return None if number is None else number != 0


def _number(text: str | None, kind: Callable[[str], _N]) -> _N | None:
    if text is None:
        return None
    try:
        return kind(text.strip())
    except ValueError:
        return None


def unwatched() -> tuple[str, ...]:
    """The files the command that started this kernel writes as the cells run
    (`UNWATCHED_ENV`: `--stdout-file`, `--stderr-file`): no step's writing."""
    return tuple(p for p in os.environ.get(UNWATCHED_ENV, "").split(os.pathsep) if p)
