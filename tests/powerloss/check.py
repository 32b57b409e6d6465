"""What must hold in every state a power cut can leave (tests/test_power_loss.py).

Each state is made in a folder of its own and opened as a user would, with the
command line (in-process, through click's runner, for speed):

1. `stepstone status` works, or exits 2 naming `stepstone repair`; then `repair`
   (with `--force` only if it asks for it, counted) and `status` works;
   a state before the run's first durable commit may have no run at all.
2. No confirmed work is forgotten: every step whose `run.step` had returned
   (`step:NAME` marked before the cut) still has its record, and the decision made
   before the cut is still there.
3. No effect the receiver could have seen is forgotten: every key whose write had
   left (`sent:KEY` marked before the cut) has its intent or its confirmation.
4. No step is reported without its record: `stepstone verify` reads every record and
   artifact from Git and does not find one missing or damaged (exit 2).
5. The next driver opens the run (as a resume would: it sets aside torn packs), and
   then `git fsck --strict` passes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from click.testing import CliRunner

from .states import Cut, Event, state_of

RUN = "power"
NO_RUN = ("does not exist; run a notebook", "no run 'power'", "not found")


@dataclass
class Outcome:
    violations: list[str] = field(default_factory=list)
    kind: str = ""  # opened, repaired, forced, no-run


def _cli(args: list[str]) -> tuple[int, str]:
    from stepstone.cli import main

    result = CliRunner().invoke(main, args, catch_exceptions=True)
    said = result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        said += f"\nraised {type(result.exception).__name__}: {result.exception}"
        return 99, said
    return result.exit_code, said


def check_state(folder: Path, marks: list[str]) -> Outcome:
    """Open the state in `folder` (the traced folder's copy) as a user would."""
    outcome = Outcome()
    # a power cut means a new boot: the boot id a driver recorded is not this one's
    (folder / ".stepstone" / "stepstone" / "checked-boot").unlink(missing_ok=True)
    here = os.getcwd()
    os.chdir(folder)  # the notebook's folder: the store is .stepstone here
    try:
        _open_and_check(outcome, marks)
    finally:
        os.chdir(here)
    store = folder / ".stepstone"
    if store.is_dir() and not outcome.violations:
        fsck = subprocess.run(
            ["git", "--git-dir", str(store), "fsck", "--strict", "--no-progress"],
            capture_output=True,
            text=True,
        )
        if fsck.returncode != 0:
            outcome.violations.append(f"git fsck: {fsck.stdout}{fsck.stderr}".strip())
    return outcome


def _open_and_check(outcome: Outcome, marks: list[str]) -> None:
    code, said = _cli(["status", "--run", RUN, "--json"])
    if code == 2 and any(n in said for n in NO_RUN):
        outcome.kind = "no-run"
        committed = [m for m in marks if m.startswith(("step:", "sent:", "decided:"))]
        if committed:
            outcome.violations.append(f"no run, after {committed[0]}: {said.strip()}")
        else:  # the next resume starts the run
            _open_as_the_next_driver(outcome, create=True)
        return
    outcome.kind = "opened"
    if code == 2 and "stepstone repair" in said:
        outcome.kind = "repaired"
        code, repaired = _cli(["repair", "--run", RUN])
        if code != 0 and "--force" in repaired:
            outcome.kind = "forced"
            code, repaired = _cli(["repair", "--run", RUN, "--force"])
        if code != 0:
            outcome.violations.append(f"repair failed ({code}): {repaired.strip()}")
            return
        code, said = _cli(["status", "--run", RUN, "--json"])
    if code != 0:
        outcome.violations.append(f"status failed ({code}): {said.strip()}")
        return
    status = json.loads(said[said.index("{") :])
    if any("torn pack" in note for note in status["notes"]):
        outcome.kind += "+torn"
    if any("rebuilt the index" in note for note in status["notes"]):
        outcome.kind += "+index rebuilt"
    steps = {s["name"]: s["state"] for s in status["steps"]}
    effects = {e["key"] for e in status["effects"]}
    decisions = {d["key"] for d in status["decisions"]}
    for mark in marks:
        what, _, name = mark.partition(":")
        if what == "step" and steps.get(name, "pending") == "pending":
            outcome.violations.append(f"step {name} returned before the cut, now pending")
        elif what == "sent" and name not in effects:
            outcome.violations.append(f"effect {name} was sent before the cut, now unknown")
        elif what == "decided" and name not in decisions:
            outcome.violations.append(f"decision {name} made before the cut, now gone")
    code, said = _cli(["verify", "--run", RUN])
    if code not in (0, 1):  # 1: evidence changed (files lost with the cut): steps rerun
        outcome.violations.append(f"verify ({code}): {said.strip()}")
    _open_as_the_next_driver(outcome)


def _open_as_the_next_driver(outcome: Outcome, *, create: bool = False) -> None:
    """What a resume does first: take the run (setting aside what a power cut left)."""
    import stepstone

    try:
        with stepstone.open_run(RUN, create=create) as run:
            if any("torn pack" in note for note in run.notes):
                outcome.kind += "+torn"
    except stepstone.StepstoneError as exc:
        outcome.violations.append(f"the next driver could not open the run: {exc}")


_TRACE: list[Event] = []
_ROOT = ""


def set_trace(events: list[Event], root: str) -> None:
    """A worker's trace, once: `check_cut` makes its states from it."""
    global _TRACE, _ROOT
    _TRACE, _ROOT = events, root


def check_cut(job: tuple[Cut, str]) -> tuple[Cut, Outcome]:
    """Make the state of `cut` in folder `into` and check it (in a worker)."""
    cut, into = job
    marks = [e.label for e in _TRACE[: cut.at] if e.kind == "mark"]
    state_of(_TRACE, cut).write(_ROOT, Path(into))
    return cut, check_and_remove(Path(into), marks)


def check_and_remove(folder: Path, marks: list[str]) -> Outcome:
    outcome = check_state(folder, marks)
    if not outcome.violations or not os.environ.get("STEPSTONE_KEEP_VIOLATIONS"):
        shutil.rmtree(folder, ignore_errors=True)
    return outcome
