"""What a run's Git history says for its report: every attempt of every step (its
record as of the commit that wrote it), the attempts a driver left without a record
(interrupted), the run's other events, and each decision's revisions.

Only reads: the commits (newest first, up to a limit) and, for the steps and decisions
the report shows, their record files as of those commits.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from ...errors import StepstoneError
from ...model import message, models
from ...run.layout import decision_path, step_path

if TYPE_CHECKING:
    from ...run.view import RunView
    from ...store.objects import CommitInfo

HISTORY_LIMIT = 5000  # commits read for the timeline and the revisions, newest first
_RENAMED = re.compile(r"renamed (\S+) -> ")  # in a plan commit's subject: the old name
_RECORDS = ("confirmed", "failed")  # the statuses of a commit that wrote a step record
_EVENTS = {
    "created": "run created",
    "decided": "decision",
    "unknown": "question asked",
    "resolved": "question answered",
    "rerun": "re-run asked",
    "finished": "run finished",
    "reopened": "run reopened",
    "carried": "effects carried over",
}


def seconds(stamp: str | None) -> float | None:
    """An ISO 8601 time of a record (`...Z`) as seconds since the epoch, or None."""
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclass
class Attempt:
    """One attempt at a step: a bar of the timeline."""

    step: str  # the step's name in the plan now (its name then, if it left the plan)
    status: str  # confirmed, failed or interrupted
    started: float
    finished: float
    number: int | None = None  # the record's attempt counter
    commit: str = ""
    holder: str = ""
    said: str = ""  # the error, or what is known of an interruption


@dataclass
class Event:
    """A commit of the run that is not a step's attempt: a tick on the timeline."""

    time: float
    kind: str
    text: str


@dataclass
class Revision:
    """A decision's value as one commit set it."""

    value: str
    why: str
    time: str
    via: str = ""


@dataclass
class History:
    """What the report draws from the run's commits."""

    commits: list[CommitInfo]  # newest first
    complete: bool  # whether `commits` goes back to the run's first commit
    attempts: list[Attempt] = field(default_factory=list)  # oldest first
    events: list[Event] = field(default_factory=list)
    revisions: dict[str, list[Revision]] = field(default_factory=dict)  # by key, oldest first

    def attempts_of(self, step: str) -> list[Attempt]:
        """The attempts of `step`, oldest first."""
        return [a for a in self.attempts if a.step == step]


def read_commits(view: RunView, limit: int = HISTORY_LIMIT) -> tuple[list[CommitInfo], bool]:
    """The run's newest `limit` commits, newest first, and whether they are all of them."""
    commits: list[CommitInfo] = []
    for commit in view.store.history(view.id):
        if len(commits) >= limit:
            return commits, False
        commits.append(commit)
    return commits, True


def read_history(
    view: RunView,
    commits: list[CommitInfo],
    complete: bool,
    wanted: Collection[str] | None = None,
) -> History:
    """What `commits` (newest first) say: the attempts of the steps in `wanted` (None:
    every step), the run's events, and the revisions of every decision."""
    return _read(view, commits, complete, wanted)


def _first(commit: CommitInfo, name: str) -> str:
    return (commit.trailers.get(name) or [""])[0]


def _read(
    view: RunView, commits: list[CommitInfo], complete: bool, wanted: Collection[str] | None
) -> History:
    history = History(commits, complete)
    steps = steps_named(view, commits)
    legacy = view.state.legacy_layout
    for commit in reversed(commits):  # oldest first
        status = _first(commit, message.STATUS)
        label = _first(commit, message.STEP)
        at = float(commit.time)
        if _is_record(commit):
            name = label.partition(" ")[2] or label
            step = steps[commit.id]
            if wanted is None or step in wanted:
                attempt = _attempt(view, commit, name, step, status, legacy)
                history.attempts.append(attempt)
        elif status in _EVENTS:
            text = commit.subject
            if status == "decided":
                key = _first(commit, message.DECISION)
                revision = _decision_at(view, commit, key)
                if revision is not None:
                    history.revisions.setdefault(key, []).append(revision)
            history.events.append(Event(at, _EVENTS[status], text))
    history.attempts.extend(_interrupted(commits, history.attempts, steps, wanted))
    history.attempts.sort(key=lambda a: a.started)
    return history


def steps_named(view: RunView, commits: list[CommitInfo]) -> dict[str, str]:
    """The step each commit that names one is of, by its name in the plan now: a step's
    earlier name means it until the plan commit that renamed it away, and after that
    the step that took the name, if one did."""
    names = view.steps.names
    aliases = {
        old: names[number - 1]
        for number, extra in view.steps.extras.items()
        for old in extra[4]
        if number <= len(names)
    }
    taken = set(aliases) & set(names)
    away: set[str] = set()
    steps = {}
    for commit in reversed(commits):  # oldest first
        if taken and commit.subject.startswith("plan: "):
            away.update(_RENAMED.findall(commit.subject))
        label = _first(commit, message.STEP)
        name = label.partition(" ")[2] or label
        if name:
            steps[commit.id] = name if name in taken and name in away else aliases.get(name, name)
    return steps


def _attempt(
    view: RunView, commit: CommitInfo, name: str, step: str, status: str, legacy: bool
) -> Attempt:
    """The attempt a step-record commit wrote, from its record as of that commit (from
    the commit alone if the record cannot be read)."""
    at = float(commit.time)
    holder = _first(commit, message.HOLDER)
    record = _record_at(view, commit.id, step_path(name, legacy=legacy))
    if record is None:
        said = _first(commit, message.ERROR) if status == "failed" else ""
        return Attempt(step, status, at, at, None, commit.id, holder, said)
    started = seconds(record.started) or at
    finished = seconds(record.finished) or at
    lines = (record.error or "").strip().splitlines() if record.status == "failed" else []
    return Attempt(
        step,
        record.status,
        started,
        max(finished, started),
        record.attempt,
        commit.id,
        holder or record.holder,
        lines[-1] if lines else "",
    )


def _tree(view: RunView, commit: str) -> str | None:
    try:
        return view.store.reader.head(view.id, at=commit).tree
    except StepstoneError:
        return None


def _record_at(view: RunView, commit: str, path: str) -> models.StepRecord | None:
    tree = _tree(view, commit)
    try:
        data = view.store.blob(tree, path) if tree else None
        return models.load(models.StepRecord, data, path) if data else None
    except StepstoneError:
        return None


def _decision_at(view: RunView, commit: CommitInfo, key: str) -> Revision | None:
    tree = _tree(view, commit.id)
    path = decision_path(key)
    try:
        data = view.store.blob(tree, path) if tree and key else None
        item = models.load(models.Decision, data, path) if data else None
    except StepstoneError:
        return None
    if item is None:
        return None
    return Revision(item.value, item.why, item.time, _first(commit, message.VIA))


def _interrupted(
    commits: list[CommitInfo],
    attempts: list[Attempt],
    steps: dict[str, str],
    wanted: Collection[str] | None,
) -> list[Attempt]:
    """The attempts a driver began and left without a record: a driver session (its
    commits, one holder, in a row) whose next step record, made by a later driver, is
    of a step the session did not record, when the session did not end on a failure or
    the run's finish. Its effect commits for that step, if any, show how far it got."""
    sessions: list[tuple[str, list[CommitInfo]]] = []
    for commit in reversed(commits):
        holder = _first(commit, message.HOLDER)
        if sessions and sessions[-1][0] == holder:
            sessions[-1][1].append(commit)
        else:
            sessions.append((holder, [commit]))
    found: list[Attempt] = []
    ends = {a.commit: a.finished for a in attempts}
    done: set[str] = set()  # the steps confirmed before the session
    for index, (holder, session) in enumerate(sessions):
        before, done = (
            done,
            done
            | {_step_of(c, steps) for c in session if _first(c, message.STATUS) == "confirmed"},
        )
        if _first(session[0], message.VIA) in message.COMMANDS or not holder:
            continue  # a command's one change, not a driver at work
        records = [c for c in session if _is_record(c)]
        recorded = {_step_of(c, steps) for c in records}
        last = session[-1]
        if _first(last, message.STATUS) in ("failed", "finished"):
            continue
        following = _next_record(sessions[index + 1 :], holder)
        if following is None:
            continue
        step = _step_of(following, steps)
        if step in recorded or (wanted is not None and step not in wanted):
            continue
        effects = [c for c in session if _step_of(c, steps) == step and _first(c, message.KEY)]
        # a step done before is run by a later driver also when the session ended well
        # (its steps skipped) and the step was edited or made stale since: only effect
        # commits for it, or its being the step after the session's last record, show
        # that the session stopped in it
        after_last = bool(records) and _number(following) == _number(records[-1]) + 1
        if step in before and not after_last and not effects:
            continue
        start = max([float(last.time)] + [ends.get(c.id, 0.0) for c in session])
        if effects:
            start = min(start, float(effects[0].time))
        said = (
            f"the driver {holder} stopped after its last commit without recording this step"
            + (f" ({len(effects)} effect commit(s) made for it)" if effects else "")
            + "; the next driver ran it again"
        )
        found.append(Attempt(step, "interrupted", start, start, None, last.id, holder, said))
    return found


def _is_record(commit: CommitInfo) -> bool:
    """Whether `commit` wrote a step's record (an effect's commits name the step too)."""
    return (
        _first(commit, message.STATUS) in _RECORDS
        and bool(_first(commit, message.STEP))
        and not _first(commit, message.KEY)
    )


def _number(commit: CommitInfo) -> int:
    """The plan number a commit's step label gives (`N name`), or 0."""
    number = _first(commit, message.STEP).partition(" ")[0]
    return int(number) if number.isdigit() else 0


def _step_of(commit: CommitInfo, steps: dict[str, str]) -> str:
    return steps.get(commit.id, "")


def _next_record(later: list[tuple[str, list[CommitInfo]]], holder: str) -> CommitInfo | None:
    """The first step record made after a session by another driver."""
    for other, session in later:
        if other == holder:
            return None
        for commit in session:
            if _is_record(commit):
                return commit
    return None
