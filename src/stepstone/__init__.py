"""stepstone: long notebook tasks that resume after any interruption.

Each completed step commits its record, with evidence, to a Git repository;
resume re-verifies that evidence before it skips a step.
"""

from typing import Any as _Any

from .errors import (
    CheckFailed,
    DecisionConflict,
    Diverged,
    EffectChanged,
    EffectRenamed,
    EffectTimedOut,
    InvalidInput,
    LeaseHeld,
    LeaseLost,
    PlanError,
    RecordError,
    RunFinished,
    RunLocked,
    RunNotFound,
    SchemaTooNew,
    StepOrderError,
    StepstoneError,
    StepstoneWarning,
    StoreError,
    UnknownCheck,
    UnresolvedEffect,
)
from .notebook.failures import CellFailed
from .rules.checks import check
from .rules.status import RunStatus, StepStatus
from .run import Run, StepResult, answer, decided, effect, fence_token, note, open_run
from .run import finishing as _finishing

__version__ = "0.1.0"

__all__ = [
    "CellFailed",
    "CheckFailed",
    "DecisionConflict",
    "Diverged",
    "EffectChanged",
    "EffectRenamed",
    "EffectTimedOut",
    "InvalidInput",
    "LeaseHeld",
    "LeaseLost",
    "PlanError",
    "RecordError",
    "Run",
    "RunFinished",
    "RunLocked",
    "RunNotFound",
    "RunStatus",
    "SchemaTooNew",
    "StepOrderError",
    "StepResult",
    "StepStatus",
    "StepstoneError",
    "StepstoneWarning",
    "StoreError",
    "UnknownCheck",
    "UnresolvedEffect",
    "__version__",
    "answer",
    "check",
    "decided",
    "effect",
    "execute_notebook",
    "fence_token",
    "load_ipython_extension",
    "note",
    "open_run",
    "unload_ipython_extension",
]


def _summary(status: RunStatus) -> str:
    from .present.render import summary  # presentation: imported once a run is finished

    return summary(status)


_finishing.write_summary_with(_summary)


def load_ipython_extension(ipython: _Any) -> None:
    """Register the stepstone magics (`%load_ext stepstone`)."""
    from .kernel.magics import register

    register(ipython)


def unload_ipython_extension(ipython: _Any) -> None:
    """Let go of the run the magics hold."""
    from .kernel.magics import unregister

    unregister(ipython)


def execute_notebook(
    input_path: _Any, output_path: _Any, parameters: _Any = None, **kwargs: _Any
) -> _Any:
    """papermill's `execute_notebook`, resuming: run the notebook at `input_path` with
    `parameters`, write the executed notebook to `output_path` (None: not written) and
    return it; run it again after an interruption or a failure and it resumes. A cell
    that raised is marked as papermill marks it, then `CellFailed` is raised. Takes
    papermill's arguments (`kernel_name`, `cwd`, `log_output`, `progress_bar`,
    `report_mode`, `prepare_only`, `execution_timeout`...) and stepstone's (`run_id`,
    `repo`, `cells`); see `stepstone.notebook.headless.execute_notebook`."""
    from .notebook.headless import execute_notebook as execute

    return execute(input_path, output_path, parameters, **kwargs)
