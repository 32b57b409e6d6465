"""Named fault points: a test arms one (`STEPSTONE_FAULT=NAME`, or `NAME:N` for the Nth
time it is reached) and the process kills itself there with SIGKILL, as a power cut or
`kill -9` would, at an exact place and with no timing involved (DBOS's
`debug_trigger_point` does the same). Unarmed, a point costs one comparison.

The points, in the order a commit reaches them:

- `commit.objects-written`: the commit's objects are written and flushed, its ref not
  moved yet;
- `commit.ref-moved`: the ref moved and was flushed, the upkeep after it not done;
- `effect.submitted`: an effect's intent is committed, its write not sent yet;
- `effect.sent`: the write returned its receipt, the confirmation not committed yet.
"""

from __future__ import annotations

import os
import signal

from .settings import fault_point

POINTS = frozenset(
    {"commit.objects-written", "commit.ref-moved", "effect.submitted", "effect.sent"}
)

_armed: str | None = None
_left = 0


def arm(spec: str | None) -> None:
    """Arm the point `spec` names (`NAME` or `NAME:N`); None disarms."""
    global _armed, _left
    if spec is None:
        _armed, _left = None, 0
        return
    name, _, count = spec.partition(":")
    if name not in POINTS:
        raise ValueError(f"no fault point {name!r}; the points: {', '.join(sorted(POINTS))}")
    _armed, _left = name, int(count or 1)


def reached(name: str) -> None:
    """Die here if this point is armed and reached for the armed time."""
    global _left
    if _armed != name:
        return
    _left -= 1
    if _left == 0:
        os.kill(os.getpid(), signal.SIGKILL)


arm(fault_point())
