"""The commit message of a run's commit: a subject line and `Stepstone-*` trailers.

Every commit stepstone makes is described by one `CommitMessage`; `git log` readers,
`repair`, the remote and the CLI parse it back with `CommitMessage.parse`. No other
module spells a trailer's name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .models import Decision, EffectRecord, Evidence, StepRecord, Unknown

    Entry = StepRecord | Decision | Unknown | EffectRecord

RUN = "Stepstone-Run"
SEQ = "Stepstone-Seq"
HOLDER = "Stepstone-Holder"
STATUS = "Stepstone-Status"
STEP = "Stepstone-Step"
EVIDENCE = "Stepstone-Evidence"
ERROR = "Stepstone-Error"
KEY = "Stepstone-Key"
EFFECT = "Stepstone-Effect"
PLAN = "Stepstone-Plan"
DECISION = "Stepstone-Decision"
UNKNOWN = "Stepstone-Unknown"
WHY = "Stepstone-Why"
FROM = "Stepstone-From"
VIA = "Stepstone-Via"
COMMANDS = ("cli", "mcp")  # the Stepstone-Via of a command's one change (not a driver's)
LEASE_EPOCH = "Stepstone-Lease-Epoch"  # the lease a commit was made under (a fencing token)


def one_line(text: object) -> str:
    """`text` with every run of whitespace (newlines included) made one space."""
    return " ".join(str(text).split())


@dataclass(frozen=True)
class CommitMessage:
    """A subject and ordered `(name, value)` trailers; `str()` is the message text."""

    subject: str
    trailers: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    def __str__(self) -> str:
        lines = [f"{name}: {one_line(value)}" for name, value in self.trailers]
        return f"{self.subject}\n\n" + "\n".join(lines) + "\n"

    @classmethod
    def parse(cls, text: str) -> CommitMessage:
        """The subject and trailers of `text` (trailers: `Key: value` lines of the last
        paragraph, when there is more than one paragraph)."""
        paragraphs = text.strip().split("\n\n")
        subject = paragraphs[0].splitlines()[0] if paragraphs and paragraphs[0] else ""
        found: list[tuple[str, str]] = []
        if len(paragraphs) >= 2:
            for line in paragraphs[-1].splitlines():
                key, sep, value = line.partition(": ")
                if sep and key and " " not in key:
                    found.append((key, value.strip()))
        return cls(subject, tuple(found))

    def with_trailers(self, *trailers: tuple[str, str]) -> CommitMessage:
        """This message with `trailers` added at the end."""
        return CommitMessage(self.subject, (*self.trailers, *trailers))

    def all(self, name: str) -> list[str]:
        """Every value of trailer `name`, in order."""
        return [value for key, value in self.trailers if key == name]

    def get(self, name: str, default: str = "") -> str:
        """The first value of trailer `name`, else `default`."""
        return next((value for key, value in self.trailers if key == name), default)

    def as_dict(self) -> dict[str, list[str]]:
        """Trailer name -> its values."""
        found: dict[str, list[str]] = {}
        for key, value in self.trailers:
            found.setdefault(key, []).append(value)
        return found

    @property
    def run(self) -> str | None:
        """The run the commit belongs to (its `Stepstone-Run`), or None when the commit
        was not made by stepstone."""
        return self.get(RUN) or None

    @property
    def seq(self) -> int:
        """The run's sequence number after this commit (0 when not recorded)."""
        value = self.get(SEQ, "0")
        return int(value) if value.isdigit() else 0

    @property
    def status(self) -> str:
        """What the commit recorded (`confirmed`, `planned`, `submitted`...)."""
        return self.get(STATUS)

    @property
    def step(self) -> str:
        """The step the commit is about, as `N name`, or ``""``."""
        return self.get(STEP)

    @property
    def keys(self) -> list[str]:
        """The effect keys whose records the commit wrote."""
        return self.all(KEY)


def run_commit(
    run: str,
    subject: str,
    trailers: list[tuple[str, str]],
    *,
    seq: int,
    holder: str,
    via: str | None = None,
    epoch: int | None = None,
) -> CommitMessage:
    """The message of a commit to `run` by `holder` (reaching it `via` the command line
    or the MCP server, or as a driver started `via` one of them, a notebook...; under
    lease `epoch` of its remote), `seq` its sequence number."""
    end = (
        (SEQ, str(seq)),
        (HOLDER, holder),
        *([(VIA, via)] if via else []),
        *([(LEASE_EPOCH, str(epoch))] if epoch is not None else []),
    )
    return CommitMessage(subject, ((RUN, run), *trailers, *end))


def entry(
    records: Sequence[Entry],
    label: Callable[[str], str],
    *,
    was: Entry | None = None,
    detail: str | None = None,
) -> tuple[str, list[tuple[str, str]]]:
    """The subject and trailers of the commit that appends `records` to a run (one
    record, or the step records a rerun marks), each said by its type and state, and
    a decision by what it changes of `was` (the record it replaces); `label` names a
    step as `N name`, `detail` is said after an effect's state."""
    from .models import Decision, EffectRecord, StepRecord, Unknown

    first = records[0]
    if isinstance(first, StepRecord) and first.rerun is not None:
        said = ", ".join(r.name for r in records if isinstance(r, StepRecord))
        steps = [(STEP, label(r.name)) for r in records if isinstance(r, StepRecord)]
        return f"rerun {said}: {one_line(first.rerun)[:60]}", [(STATUS, "rerun"), *steps]
    if len(records) != 1:
        raise ValueError("one record a commit, but for the steps a rerun marks")
    if isinstance(first, StepRecord):
        step = label(first.name)
        if first.status == "confirmed":
            lines = [(EVIDENCE, _evidence_line(ev)) for ev in first.evidence]
            return f"step {step}: confirmed", [(STEP, step), (STATUS, "confirmed"), *lines]
        error = first.error.splitlines()[-1][:200] if first.error else first.status
        return f"step {step}: {first.status}", [
            (STEP, step),
            (STATUS, first.status),
            (ERROR, error),
        ]
    if isinstance(first, Decision):
        if not isinstance(was, Decision):
            subject = f"decide {first.key}={one_line(first.value)[:60]}"
        elif was.value != first.value:
            old, new = one_line(was.value)[:30], one_line(first.value)[:30]
            subject = f"revise {first.key}: {old} -> {new}"
        elif was.why != first.why:
            subject = f"reason for {first.key}: {one_line(first.why)[:60]}"
        else:  # what stands over the notebook's line, as first met
            subject = f"keep {first.key}"
        return subject, [(STATUS, "decided"), (DECISION, first.key), (WHY, first.why)]
    if isinstance(first, Unknown):
        if first.state == "resolved":
            why = [(WHY, first.why)] if first.why else []
            return f"answer {first.id}: {one_line(first.answer)[:60]}", [
                (STATUS, "resolved"),
                (UNKNOWN, first.id),
                *why,
            ]
        return f"unknown {first.id}: {one_line(first.question)[:60]}", [
            (STATUS, "unknown"),
            (UNKNOWN, first.id),
        ]
    assert isinstance(first, EffectRecord)
    subject = f"effect {first.name}: {first.state}" + (f", {detail}" if detail else "")
    settled = first.resolution
    why = [(WHY, settled.why)] if detail and settled is not None and settled.why else []
    return subject, [
        (STEP, label(first.step)),
        (STATUS, first.state),
        (KEY, first.key),
        (EFFECT, first.name),
        *why,
    ]


def _evidence_line(ev: Evidence) -> str:
    if ev.kind == "completed":
        return "completed"
    if ev.kind == "note":
        return "note (weak evidence)"
    value = f"sha256={ev.value}" if ev.kind in ("file", "sha256") else f"{ev.value}"
    return f"{ev.check} {value}"
