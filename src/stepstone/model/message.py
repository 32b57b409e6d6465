"""The commit message of a run's commit: a subject line and `Stepstone-*` trailers.

Every commit stepstone makes is described by one `CommitMessage`; `git log` readers,
`repair`, the remote and the CLI parse it back with `CommitMessage.parse`. No other
module spells a trailer's name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
