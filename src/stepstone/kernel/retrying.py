"""What a failed attempt of a `%%step` cell changed, put back before the cell runs
again in the same kernel: a retry starts from what the failed attempt started from, as
a run that was never interrupted would (`n = n + 1` stopped partway gives 11 again,
not 12; `items.append(3)` appends once).

When a step's code begins (`Retries.began`), the kernel's bindings are noted (the
objects themselves, at no cost) and the values the cell may change in place are
copied (pickled, in memory), names that share objects together, unless they are large
arrays or frames the store holds as they are. When the attempt fails, what it rebound
and what it changed in place is told from those (`failed`); before the cell's next run
each is put back (`put_back`), unless it was changed again since (that change is the
user's). Large arrays and frames are put back from the store, as the step that saved
them has them, when the last step took their fingerprints and no other cell ran since
(by IPython's cell count): otherwise such a change is only named.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Callable, Collection, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import StepstoneError
from ..notebook.namespace import Seen, fingerprint

Load = Callable[[str, list[str]], dict[str, Any]]  # (step, names) -> the values it saved
COPY_LIMIT = 16 << 20  # bytes copied before a step's code, at most
_GONE = object()  # a name that was not bound


def _dumps(values: Mapping[str, Any]) -> bytes | None:
    try:
        return pickle.dumps(dict(values), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        try:
            import cloudpickle

            return bytes(cloudpickle.dumps(dict(values)))
        except Exception:
            return None


def _print(values: Mapping[str, Any]) -> str | None:
    data = _dumps(values)
    return None if data is None else hashlib.sha256(data).hexdigest()


@dataclass
class Attempt:
    """The kernel as a step's code found it: its bindings, and copies of the values the
    code may change in place (each group of names that share objects, pickled)."""

    bindings: dict[str, Any]
    copies: list[tuple[frozenset[str], bytes]] = field(default_factory=list)
    uncopied: list[str] = field(default_factory=list)  # too large, or unpicklable


@dataclass
class Left:
    """What a failed attempt left: the bindings to give back (name -> the object it was,
    or `_GONE`), with what the attempt left bound; the groups to load back from their
    copies, with the print of what the attempt left."""

    rebound: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    changed: list[tuple[frozenset[str], bytes, str | None]] = field(default_factory=list)
    from_store: dict[str, str] = field(default_factory=dict)  # name -> print as left


class Retries:
    """What the kernel's failed step attempts left changed, by step."""

    def __init__(self, seen: Seen) -> None:
        self._seen = seen
        self._saved_by: dict[str, str] = {}  # name -> the step whose record holds its value
        self._fresh: set[str] = set()  # the names whose fingerprint the last step took
        self._after: int | None = None  # the cell number of the last step (or clean failure)
        self._left: dict[str, Left] = {}
        self._attempt: Attempt | None = None

    def stepped(
        self, step: str, saved: Collection[str], seen: Collection[str], cell_number: int
    ) -> None:
        """Step `step` was confirmed or skipped in cell `cell_number`: its record holds
        the values of `saved`, and the fingerprints of `seen` were taken as they are."""
        self._saved_by.update(dict.fromkeys(saved, step))
        self._fresh = set(seen)
        self._after = cell_number
        self._left.pop(step, None)
        self._attempt = None

    def began(
        self, ns: Mapping[str, Any], names: Iterable[str], groups: Iterable[Collection[str]]
    ) -> None:
        """A step's code is about to run in `ns`, whose names not starting with `_` are
        `names`; `groups`: the names it may change in place, those that share objects in
        one group."""
        attempt = Attempt({n: ns[n] for n in names})
        budget = COPY_LIMIT
        for group in groups:
            values = {n: ns[n] for n in group if n in ns}
            if not values:
                continue
            if all(self._from_store(n, v) for n, v in values.items()):
                continue  # large arrays and frames: the store has them as they are
            data = _dumps(values) if budget > 0 else None
            if data is None or len(data) > budget:
                attempt.uncopied += sorted(values)
                continue
            budget -= len(data)
            attempt.copies.append((frozenset(values), data))
        self._attempt = attempt

    def _from_store(self, name: str, value: Any) -> bool:
        size = getattr(value, "nbytes", None)
        if size is None and hasattr(value, "memory_usage"):
            try:
                size = int(value.memory_usage(index=True).sum())
            except Exception:
                size = None
        return (
            size is not None
            and size > 1 << 20
            and name in self._saved_by
            and self._seen.prints.get(name) is not None
        )

    def failed(
        self,
        step: str,
        read: Mapping[str, Any],
        cell_number: int,
        ns: Mapping[str, Any],
        names: Iterable[str],
    ) -> str:
        """After the code of `step`'s cell ran and the step failed: what it rebound and
        what of the values it may have changed in place (`read`) it changed, in a
        sentence ('' when nothing). `names`: the names of `ns` not starting with `_`, read
        as `began`'s were (a name one reading missed is never taken for one the attempt
        bound). `put_back` undoes those before its next attempt."""
        left, said = Left(), []
        attempt, self._attempt = self._attempt, None
        if attempt is not None:
            now = {n: ns[n] for n in names}
            for name in sorted({*attempt.bindings, *now}):
                was, got = attempt.bindings.get(name, _GONE), now.get(name, _GONE)
                if was is not got:
                    left.rebound[name] = (was, got)
            for names, data in attempt.copies:
                still = {n: ns[n] for n in names if n in ns and n not in left.rebound}
                before = pickle.loads(data)
                if still and _print(still) != _print({n: before[n] for n in still}):
                    left.changed.append((frozenset(still), data, _print(still)))
        copied = {n for names, _ in (attempt.copies if attempt else []) for n in names}
        stored: dict[str, str] = {}
        for name, value in read.items():
            seen = self._seen.prints.get(name)
            if name in copied or name in left.rebound or seen is None:
                continue
            if name in self._saved_by:
                now_print = fingerprint(value)
                if now_print is not None and now_print != seen:
                    stored[name] = now_print
        again = [n for n, (was, _) in left.rebound.items() if was is not _GONE]
        if again:  # (names it bound first are unbound again, silently: the retry binds them)
            said.append(f"it bound {', '.join(again)} anew")
        changed = sorted({n for names, _, _ in left.changed for n in names})
        ours = self._after is not None and cell_number <= self._after + 1
        if stored and ours and self._fresh.issuperset(stored):
            left.from_store = stored
            changed = sorted({*changed, *stored})
            stored = {}
        if changed:
            said.append(f"it changed {', '.join(changed)} in place")
        if left.rebound or left.changed or left.from_store:
            self._left[step] = left
            self._after = cell_number  # its retry, next, starts from what is known
        words = ""
        if said:
            words = f"{' and '.join(said)}, which the cell's next run first puts back"
            words += " as saved" if left.from_store and not left.rebound else ""
        if stored:
            listed = ", ".join(sorted(stored))
            words += "; " if words else ""
            words += (
                f"{listed} differ from what the steps before saved (this attempt or another "
                "cell changed them): run again now, the cell starts from them as they are; "
                "restart the kernel and run all to start from the saved values"
            )
        return words

    def put_back(
        self, step: str, namespace: MutableMapping[str, Any], load: Load
    ) -> tuple[list[str], list[str]]:
        """Before `step`'s cell runs again: put back what its failed attempt rebound or
        changed and that is still as it left it. The names put back, and those that
        could not be, each said with why."""
        done: list[str] = []
        missed: list[str] = []
        left = self._left.pop(step, None)
        if left is None:
            return done, missed
        for name, (was, got) in left.rebound.items():
            if namespace.get(name, _GONE) is not got:
                continue  # bound again since the failure: that binding is the user's
            if was is _GONE:
                namespace.pop(name, None)
            else:
                namespace[name] = was
                done.append(f"{name} (as bound before it)")
        for names, data, print_left in left.changed:
            now = {n: namespace[n] for n in names if n in namespace}
            if set(now) != set(names) or _print(now) != print_left:
                continue  # changed again since the failure
            namespace.update({n: v for n, v in pickle.loads(data).items() if n in names})
            done += [f"{n} (as it was before it)" for n in sorted(names)]
        for name, print_left in sorted(left.from_store.items()):
            if name not in namespace or fingerprint(namespace[name]) != print_left:
                continue
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
        return done, missed
