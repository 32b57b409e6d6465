"""A run's effect records, indexed for the questions the rename guards ask.

An effect's key comes from its step's first name and its own name, so a
renamed step or effect would get a new key. Before a new effect is written,
`effects.perform` asks whether one that happened (or may have) looks like it
under another key; this book answers each question without a scan of every
record, so a run that sends thousands of effects keeps a flat cost per effect.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from ..model.models import EffectRecord

MAYBE_HAPPENED = ("submitted", "confirmed", "unresolved")
_RANK = {"planned": 0, "submitted": 1, "unresolved": 2, "confirmed": 3}


def rank(state: str) -> int:
    """How far an effect in `state` got: planned 0, submitted 1, unresolved 2, confirmed
    3 (-1 for a state no version of stepstone writes)."""
    return _RANK.get(state, -1)


def state_rank(data: bytes) -> int:
    """How far an effect's stored record says it got (see `rank`; -1 for a record that
    cannot be read)."""
    try:
        state = json.loads(data).get("state")
    except (ValueError, AttributeError):
        return -1
    return rank(state) if isinstance(state, str) else -1


def _family(name: str) -> str | None:
    """`email` for `email/ann`: effects named in a loop share it."""
    return name.rpartition("/")[0] or None


class EffectBook:
    """Effect records by key, with indexes by step and by name, and what the running
    step has asked for so far."""

    def __init__(self, records: Iterable[EffectRecord] = ()) -> None:
        self.records: dict[str, EffectRecord] = {}
        self._by_step: dict[str, dict[str, EffectRecord]] = {}
        self._by_name: dict[str, dict[str, EffectRecord]] = {}
        self._asked: set[str] = set()  # keys the running step asked for
        self._returned: set[str] = set()  # ... and got a receipt for
        self._not_replayed: dict[str, EffectRecord] | None = None
        self._replayed_families: set[str] = set()  # of the running step's earlier members
        self._step: str | None = None  # the identity of the running step
        self._orphans: dict[str, list[EffectRecord]] | None = None
        self._begun: set[str] = set()  # step identities begun by this process
        self._unmet: set[str] | None = None
        for record in records:
            self.put(record)

    def put(self, record: EffectRecord) -> None:
        """Add or replace a record (its key, step and name never change)."""
        self.records[record.key] = record
        self._by_step.setdefault(record.step, {})[record.key] = record
        self._by_name.setdefault(record.name, {})[record.key] = record
        if self._unmet is not None and record.step not in self._begun:
            self._unmet.add(record.step)

    def steps(self) -> list[str]:
        """The identities of the steps that have effect records."""
        return list(self._by_step)

    def of_step(self, identity: str) -> list[EffectRecord]:
        """The records of the step keyed by `identity`."""
        return list(self._by_step.get(identity, {}).values())

    # -- one run of a step ----------------------------------------------------------

    def step_begun(self, identity: str) -> None:
        """A step of this identity runs (or is skipped) in this process now."""
        self._asked = set()
        self._returned = set()
        self._not_replayed = None
        self._replayed_families = set()
        self._step = identity
        self._begun.add(identity)
        if self._unmet is not None:
            self._unmet.discard(identity)

    def ask(self, key: str) -> bool:
        """Note that the running step asks for effect `key`; whether it already got a
        receipt for it in this run of the step (the same name used twice)."""
        if self._step is not None:
            earlier = self._earlier(self._step).pop(key, None)
            if earlier is not None and (family := _family(earlier.name)) is not None:
                self._replayed_families.add(family)
        self._asked.add(key)
        return key in self._returned

    def returned(self, key: str) -> None:
        """The running step got effect `key`'s receipt."""
        self._returned.add(key)

    # -- what a new effect may be ---------------------------------------------------

    def _earlier(self, identity: str) -> dict[str, EffectRecord]:
        """The effects earlier runs of this step performed (or may have) that this run
        has not asked for yet: made once per run of a step, then kept up to date."""
        if self._not_replayed is None:
            self._not_replayed = {
                key: record
                for key, record in self._by_step.get(identity, {}).items()
                if record.state in MAYBE_HAPPENED and key not in self._asked
            }
        return self._not_replayed

    def not_replayed(self, identity: str, name: str) -> EffectRecord | None:
        """An effect an earlier run of this step performed (or may have) that this run has
        not asked for yet, and that is not of `name`'s family (`email/...`, asked for
        in another order this time): `name` may be it, renamed."""
        family = _family(name)
        earlier = [
            r
            for r in self._earlier(identity).values()
            if family is None or _family(r.name) != family
        ]
        return min(earlier, key=lambda r: r.intent) if earlier else None

    def lone_member(self, identity: str, name: str) -> EffectRecord | None:
        """For a new effect `name` of a family (`alert/...`): an effect of that family an
        earlier run of this step performed (or may have), when this run has asked for
        none of those again. Then `name` is likely made from a clock or a random id: new
        at every try, it would send the effect again. None when `name` has no family,
        the family has no earlier member, or one of them was asked again (the names
        repeat: a thread pool or a set asks them in another order)."""
        family = _family(name)
        if family is None or family in self._replayed_families:
            return None
        earlier = [r for r in self._earlier(identity).values() if _family(r.name) == family]
        return min(earlier, key=lambda r: r.intent) if earlier else None

    def orphan_named(self, name: str, plan: set[str]) -> EffectRecord | None:
        """An effect called `name` that happened (or may have) in a step no longer in the
        plan (`plan`: the identities of its steps)."""
        if self._orphans is None:
            self._orphans = {}
            for record in self.records.values():
                if record.state in MAYBE_HAPPENED and record.step not in plan:
                    self._orphans.setdefault(record.name, []).append(record)
        return next((r for r in self._orphans.get(name, ()) if r.step not in plan), None)

    def unmet_named(self, name: str, identity: str) -> EffectRecord | None:
        """An effect called `name` that happened (or may have) in another step that this
        process has not begun: in a plan that only grows, a renamed step leaves its old
        name behind unmet."""
        if self._unmet is None:
            self._unmet = {step for step in self._by_step if step not in self._begun}
        for step in self._unmet:
            if step == identity:
                continue
            for record in self._by_step[step].values():
                if record.name == name and record.state in MAYBE_HAPPENED:
                    return record
        return None

    def plan_changed(self) -> None:
        """Steps may have left the plan."""
        self._orphans = None
