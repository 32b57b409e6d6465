"""What a step is asked to be: its name and options, as a `%%step` line gives them
(`cellargs.parse_step_line`), a `# step:` line in `--cells` mode, or `Run.step` and
`Run.stepping` in Python. The one spelling of a step's options that the step protocol
(`run/stepping.py`) takes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

Check: TypeAlias = "str | Callable[[], Any]"  # as written (`file:out.csv`), or a function


@dataclass(frozen=True)
class StepSpec:
    """A step as asked for: its name, checks, declared inputs (`file:PATH`, `unknown:U1`)
    and saved outputs (`--out` names); `force` runs it although the step before it is
    not verified; `was` is its earlier name (renamed); `rerun` a reason to run it again,
    once; `source` the code of its cell, when it is one (its edits are noticed)."""

    name: str
    checks: tuple[Check, ...] = ()
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    force: bool = False
    was: str | None = None
    rerun: str | None = None
    source: str | None = None
