"""Values a failed attempt of a `%%step` cell changed, put back before the cell runs
again in the same kernel: a retry starts from what the failed attempt started from, as
a run that was never interrupted would.

Only arrays, frames and Series are told apart (by their fingerprints, see `namespace`),
and only those whose fingerprint the last step took (it saved, restored or read them)
when no other cell ran since (by IPython's cell count): otherwise the change may not be
the attempt's, and the value is left as it is, with a warning.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, MutableMapping
from typing import Any

from .errors import StepstoneError
from .namespace import Seen, fingerprint

Load = Callable[[str, list[str]], dict[str, Any]]  # (step, names) -> the values it saved


class Retries:
    """What the kernel's failed step attempts left changed, by step."""

    def __init__(self, seen: Seen) -> None:
        self._seen = seen
        self._saved_by: dict[str, str] = {}  # name -> the step whose record holds its value
        self._fresh: set[str] = set()  # the names whose fingerprint the last step took
        self._after: int | None = None  # the cell number of the last step (or clean failure)
        self._left: dict[str, dict[str, str]] = {}  # step -> name -> print as left

    def stepped(
        self, step: str, saved: Collection[str], seen: Collection[str], cell_number: int
    ) -> None:
        """Step `step` was confirmed or skipped in cell `cell_number`: its record holds
        the values of `saved`, and the fingerprints of `seen` were taken as they are."""
        self._saved_by.update(dict.fromkeys(saved, step))
        self._fresh = set(seen)
        self._after = cell_number
        self._left.pop(step, None)

    def failed(self, step: str, read: Mapping[str, Any], cell_number: int) -> str:
        """After the code of `step`'s cell ran and the step failed: which of the values
        it may have changed in place (`read`) differ from what was saved, in a sentence
        ('' when none). When the last step took their fingerprints and no other cell ran
        since, they are the attempt's changes: `put_back` undoes them before the step's
        next attempt."""
        changed: dict[str, str] = {}
        for name, value in read.items():
            seen = self._seen.prints.get(name)
            if seen is not None and name in self._saved_by:
                now = fingerprint(value)
                if now is not None and now != seen:
                    changed[name] = now
        if not changed:
            return ""
        listed = ", ".join(sorted(changed))
        ours = self._after is not None and cell_number <= self._after + 1
        if ours and self._fresh.issuperset(changed):
            self._left[step] = changed
            self._after = cell_number  # its retry, next, starts from what is known
            return (
                f"it changed {listed} in place, which the cell's next run first puts back as saved"
            )
        return (
            f"{listed} differ from what the steps before saved (this attempt or another "
            "cell changed them): run again now, the cell starts from them as they are; "
            "restart the kernel and run all to start from the saved values"
        )

    def put_back(
        self, step: str, namespace: MutableMapping[str, Any], load: Load
    ) -> tuple[list[str], list[str]]:
        """Before `step`'s cell runs again: put back the values its failed attempt
        changed and that are still as it left them, each as the step that saved it has
        it (`load`). The names put back, and those that could not be, each said with why."""
        done: list[str] = []
        missed: list[str] = []
        for name, print_left in sorted(self._left.get(step, {}).items()):
            if name not in namespace or fingerprint(namespace[name]) != print_left:
                continue  # changed again since the failure: that change is the user's
            by = self._saved_by[name]
            try:
                value = load(by, [name]).get(name)
            except StepstoneError as exc:  # not loadable here (an untrusted pickle...)
                missed.append(f"{name} ({exc})")
                continue
            if value is None or fingerprint(value) != self._seen.prints.get(name):
                missed.append(f"{name} (step {by} no longer holds it as it was)")
                continue
            namespace[name] = value
            done.append(f"{name} (saved by step {by})")
        self._left.pop(step, None)
        return done, missed
