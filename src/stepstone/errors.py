"""Every error stepstone raises, under one root.

    StepstoneError
    ├── InvalidInput            bad names, check specs, plans, magic lines
    │   ├── UnknownCheck        a check kind that does not exist
    │   └── PlanError           a malformed or contradictory plan
    ├── RecordError             a stored file that fails validation
    │   └── SchemaTooNew        written by a newer stepstone
    ├── StoreError              the repository cannot be used as a store
    │   ├── RefMoved            a ref moved under its writer (compare-and-swap failed)
    │   └── GitFailed           a git command against the remote failed
    ├── RunNotFound             no such run in the store
    ├── RunFinished             a finished run would change
    ├── RunLocked               another process drives the run
    │   └── LeaseHeld           another agent holds the run's lease on the remote
    │       └── LeaseLost       this driver's lease was taken: it stops before any write
    ├── Diverged                two copies of a run advanced apart
    ├── StepOrderError          a step's predecessor is not confirmed
    ├── CheckFailed             a step ran but its completion check did not pass
    ├── DecisionConflict        a decision would be reopened
    ├── UnresolvedEffect        an effect's outcome is unknown and cannot be asked
    ├── EffectChanged           a confirmed effect is asked again with another payload
    ├── EffectRenamed           an effect that happened would be sent again under a new key
    └── EffectTimedOut          an effect's write did not return in time (it stays in doubt)

Each error carries structured fields and a message that says what to do next.
"""

from __future__ import annotations


class StepstoneError(Exception):
    """Root of every error stepstone raises."""


class InvalidInput(StepstoneError):
    """Input that stepstone cannot accept: a name, a check, a plan, an option."""


class UnknownCheck(InvalidInput):
    """A completion check whose kind stepstone does not know."""

    def __init__(self, spec: str, known: list[str]) -> None:
        self.spec = spec
        self.known = known
        super().__init__(
            f"unknown check {spec!r}: a check is KIND:ARGUMENT with KIND one of "
            f"{', '.join(known)} (for example file:out/data.csv)"
        )


class PlanError(InvalidInput):
    """A plan that is malformed or contradicts itself."""


class RecordError(StepstoneError):
    """A record file in the store that fails validation; it is never overwritten."""

    def __init__(self, where: str, problem: str) -> None:
        self.where = where
        self.problem = problem
        super().__init__(
            f"corrupt record {where}: {problem}. Nothing was changed; fix the file in a new "
            f"commit or reset the run's ref to the last good commit (see `git log`)"
        )


class SchemaTooNew(RecordError):
    """A record written by a newer version of stepstone."""

    def __init__(self, where: str, found: int, supported: int) -> None:
        self.found = found
        self.supported = supported
        StepstoneError.__init__(
            self,
            f"{where} has schema version {found}, newer than this stepstone reads "
            f"({supported}): upgrade stepstone (pip install -U stepstone) to use this run",
        )
        self.where = where
        self.problem = f"schema version {found} > {supported}"


class StoreError(StepstoneError):
    """The repository at a path cannot be used as a stepstone store."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"store {path}: {problem}")


class NothingToRepair(StoreError):
    """`repair` was asked to move a run whose tip reads fine."""


class RefMoved(StoreError):
    """A ref no longer points where its writer expected: another process moved it, and
    the compare-and-swap refused to overwrite its work."""

    def __init__(self, path: str, ref: str, current: str | None, expected: str | None) -> None:
        self.ref = ref
        self.current = current
        self.expected = expected
        super().__init__(
            path,
            f"{self.detail}: another process moved it and nothing was overwritten; reopen "
            f"the run (or `stepstone pull`) and try again",
        )

    @property
    def detail(self) -> str:
        """Where the ref is and where its writer expected it."""
        return f"{self.ref} is at {self.current}, expected {self.expected}"


class GitFailed(StoreError):
    """A git command against the remote failed (unreachable, refused, rejected)."""

    def __init__(self, path: str, problem: str, stderr: str = "") -> None:
        super().__init__(path, problem)
        self.stderr = stderr


class RunNotFound(StepstoneError):
    """No run of that id exists in the store."""

    def __init__(self, run: str, path: str, known: list[str]) -> None:
        self.run = run
        self.path = path
        self.known = known
        listing = ", ".join(known) if known else "none"
        super().__init__(f"no run {run!r} in store {path} (runs there: {listing})")


class RunFinished(StepstoneError):
    """A finished run would change: a step would run, or a record would be written."""

    def __init__(self, run: str, finished: str) -> None:
        self.run = run
        self.finished = finished
        super().__init__(
            f"run {run!r} was finished at {finished} (tag stepstone/{run}) and is not changed "
            f"any more. To go on with it, `stepstone reopen --run {run} --why REASON` (recorded); "
            f"to do it all again as a new run, whose effects are sent again, use a new run id "
            f"(--run {run}-2)"
        )


class RunLocked(StepstoneError):
    """Another live process drives the run."""

    def __init__(self, run: str, holder: str) -> None:
        self.run = run
        self.holder = holder
        super().__init__(
            f"run {run!r} is driven by {holder}: wait for it to finish or stop that process; "
            f"readers such as `stepstone status` work meanwhile"
        )


class StepOrderError(StepstoneError):
    """A step was started before its predecessor was confirmed."""

    def __init__(self, run: str, step: str, predecessor: str) -> None:
        self.run = run
        self.step = step
        self.predecessor = predecessor
        super().__init__(
            f"step {step!r} cannot run yet: its predecessor {predecessor!r} is not confirmed. "
            f"Run {predecessor!r} first, or pass --force to run out of order"
        )


class CheckFailed(StepstoneError):
    """A step ran to the end but one of its completion checks did not pass."""

    def __init__(self, step: str, check: str, reason: str) -> None:
        self.step = step
        self.check = check
        self.reason = reason
        super().__init__(
            f"step {step!r} ran but its check {check} did not pass: {reason}. "
            f"The step is recorded as failed; fix it and run it again"
        )


class DecisionConflict(StepstoneError):
    """A decision that was already made would be changed."""

    def __init__(self, key: str, old: str, new: str, why: str) -> None:
        self.key = key
        self.old = old
        self.new = new
        super().__init__(
            f"decision {key!r} was already made as {old!r} ({why}); not reopening it with "
            f"{new!r}. To change it on purpose, pass --revise"
        )


class UnresolvedEffect(StepstoneError):
    """An external effect whose outcome is unknown and cannot be asked of its receiver."""

    def __init__(self, run: str, step: str, key: str, since: str, why: str = "") -> None:
        self.run = run
        self.step = step
        self.key = key
        self.since = since
        self.why = why
        super().__init__(
            f"effect {key} of step {step!r} was submitted at {since} and its outcome is "
            f"unknown{': ' + why if why else ''}. Check the receiver, then run "
            f"`stepstone resolve {key} --run {run} "
            f"--happened [--receipt R]` or `stepstone resolve {key} --run {run} --not-happened`"
        )


class EffectChanged(StepstoneError):
    """An effect already submitted or confirmed is asked again with a different payload."""

    def __init__(self, step: str, name: str, key: str, state: str, receipt: object = None) -> None:
        self.step = step
        self.name = name
        self.key = key
        self.state = state
        self.receipt = receipt
        if state == "confirmed":
            advice = (
                f"already happened (receipt {receipt!r}) and is not performed again. A new "
                f"name would perform it a second time: to change what happened, perform a "
                f"correction (a refund, a follow-up message) as an effect of its own, or "
                f"give this one its original payload back"
            )
        else:
            advice = (
                f"is {state}: it may have happened. Settle it first (`stepstone resolve "
                f"{key} --happened` or `--not-happened`), or give it its original payload back"
            )
        super().__init__(
            f"effect {name!r} of step {step!r} (key {key}) was recorded with a different "
            f"payload; a key stands for one payload. It {advice}"
        )


class EffectRenamed(StepstoneError):
    """An effect that happened (or may have) would be performed again under a new key:
    its step or its name changed."""

    def __init__(self, step: str, name: str, earlier: str, problem: str, advice: str) -> None:
        self.step = step
        self.name = name
        self.earlier = earlier
        super().__init__(f"effect {name!r} of step {step!r} was not performed: {problem}. {advice}")


class EffectTimedOut(StepstoneError):
    """An effect's write did not return within its timeout; its outcome is unknown."""

    def __init__(self, step: str, name: str, key: str, seconds: float) -> None:
        self.step = step
        self.name = name
        self.key = key
        self.seconds = seconds
        super().__init__(
            f"effect {name!r} of step {step!r} (key {key}) did not return within "
            f"{seconds:g} s; it stays submitted, so the next try asks the receiver with the "
            f"same key (or stops as unresolved). Raise the bound with timeout=SECONDS"
        )


class LeaseHeld(RunLocked):
    """Another agent holds the run's lease on the shared remote."""

    def __init__(self, run: str, holder: str, expires: str) -> None:
        self.expires = expires
        StepstoneError.__init__(
            self,
            f"run {run!r} is driven by {holder} (lease until {expires}): wait for its "
            f"hand-off or the expiry, or take it with --steal REASON",
        )
        self.run = run
        self.holder = holder


class Diverged(StepstoneError):
    """Two copies of a run advanced apart; records are never merged silently."""

    def __init__(self, run: str, detail: str) -> None:
        self.run = run
        self.detail = detail
        super().__init__(f"run {run!r}: {detail}")


class LeaseLost(LeaseHeld):
    """Another agent took this driver's lease (or moved the run on the remote): this
    driver stops before its next write."""

    def __init__(self, run: str, holder: str) -> None:
        StepstoneError.__init__(
            self,
            f"run {run!r} is now driven by {holder}: this process lost its lease and stopped "
            f"before performing anything more (nothing was sent). Its work is kept in this "
            f"copy; `stepstone pull` shows how the copies differ",
        )
        self.run = run
        self.holder = holder
        self.expires = ""


class StepstoneWarning(UserWarning):
    """Something the user should see although the run goes on (an unreachable remote)."""
