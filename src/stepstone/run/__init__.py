"""Runs: opening one, driving its steps, reading it.

`open_run` gives a `Run`, a small facade over the parts in this package: `state`
(what the run holds, read from its latest commit), `ledger` (the one writer),
`planning`, `checking` (evidence and status), `stepping` (the step protocol),
`link` (the remote's lease), `questions` (decisions and unknowns), `finishing`.
"""

from .active import active_run
from .checking import RETURN
from .copies import run_lock
from .facade import Run
from .history import rolled_back_effects
from .layout import plan_path, source_hash, step_path
from .opening import (
    answer,
    decided,
    effect,
    fence_token,
    holding,
    note,
    open_run,
    problems_at,
)
from .stepping import Attempt, StepResult, StepStart

__all__ = [
    "RETURN",
    "Attempt",
    "Run",
    "StepResult",
    "StepStart",
    "active_run",
    "answer",
    "decided",
    "effect",
    "fence_token",
    "holding",
    "note",
    "open_run",
    "plan_path",
    "problems_at",
    "rolled_back_effects",
    "run_lock",
    "source_hash",
    "step_path",
]
