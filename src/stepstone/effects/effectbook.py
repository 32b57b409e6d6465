"""A run's effect records, indexed for the questions `effects.perform` asks.

An effect is its name and its payload within the run's lineage: the book finds the
record of an effect by that identity, whichever step asked for it and under whichever
key. Before a new effect is written, `perform` asks whether it looks like one that
happened (or may have) under another identity: a name made from a clock (a retry of
the same step on the same inputs asks for a new one), a payload made from a clock, an
effect renamed together with its step. The book answers each question from its
indexes, so a run that sends thousands of effects keeps a flat cost per effect.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

from ..model.models import EffectRecord

MAYBE_HAPPENED = ("submitted", "confirmed", "unresolved")
IN_DOUBT = ("submitted", "unresolved")
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


def settles(record: EffectRecord, other: EffectRecord) -> bool:
    """Whether `record` says, by a person's resolution made after `other`'s intent, that
    the effect did not happen: then `other`'s doubt is settled by it (the same effect,
    in another history of the lineage). The intent the person settled is settled by
    what it is, not by when the clocks say (one ahead dates an intent in the future)."""
    resolution = record.resolution
    return (
        record.state == "planned"
        and resolution is not None
        and not resolution.happened
        and other.state in IN_DOUBT
        and (other.intent <= resolution.time or other.intent == record.settled)
    )


def tells_more(found: EffectRecord, mine: EffectRecord | None) -> bool:
    """Whether `found` (the effect's record in another history) says more of it than
    `mine` (this run's, or None): it happened (confirmed); it may have (in doubt) where
    this run holds nothing, or only an attempt of its own that did not go out; or a
    person found it did not happen after this run's intent in doubt (`settles`)."""
    if mine is not None and mine.state == "confirmed":
        return False
    if found.state == "confirmed":
        return True
    if found.state in IN_DOUBT:
        if mine is None:
            return True
        if mine.state in IN_DOUBT:
            return rank(found.state) > rank(mine.state)
        return not settles(mine, found)  # mine planned: unless a person settled that one
    return mine is not None and settles(found, mine)


def family(name: str) -> str | None:
    """`email` for `email/ann`: effects named in a loop share it."""
    return name.rpartition("/")[0] or None


def same_basis(record: EffectRecord, basis: str) -> bool:
    """Whether `record` was asked for on the inputs `basis` says (a record made before
    bases were recorded is taken to be: the guards stay as strict as they were)."""
    return record.basis is None or record.basis == basis


class EffectBook:
    """Effect records by key, with indexes by identity (name and payload), by step and by
    name, and what the running step has asked for so far."""

    def __init__(self, records: Iterable[EffectRecord] = ()) -> None:
        self.records: dict[str, EffectRecord] = {}
        self._by_identity: dict[tuple[str, str | None], dict[str, EffectRecord]] = {}
        self._by_step: dict[str, dict[str, EffectRecord]] = {}
        self._by_name: dict[str, dict[str, EffectRecord]] = {}
        self._by_payload: dict[str, dict[str, EffectRecord]] = {}
        self._asked: set[str] = set()  # keys the running step asked for
        self._returned: set[str] = set()  # names the running step got a receipt for
        self._not_asked: dict[str, EffectRecord] | None = None  # of its earlier effects
        self._step: str | None = None  # the identity of the running step
        self._asked_ever: set[str] = set()  # keys any step of this process asked for
        for record in records:
            self.put(record)

    def put(self, record: EffectRecord) -> None:
        """Add or replace a record (its key, step, name and payload never change)."""
        self.records[record.key] = record
        identity = (record.name, record.payload_sha256)
        self._by_identity.setdefault(identity, {})[record.key] = record
        self._by_step.setdefault(record.step, {})[record.key] = record
        self._by_name.setdefault(record.name, {})[record.key] = record
        if record.payload_sha256 is not None:
            self._by_payload.setdefault(record.payload_sha256, {})[record.key] = record

    def steps(self) -> list[str]:
        """The identities of the steps that have effect records."""
        return list(self._by_step)

    def of_step(self, identity: str) -> list[EffectRecord]:
        """The records of the effects the step keyed by `identity` asked for."""
        return list(self._by_step.get(identity, {}).values())

    def find(
        self, name: str, payload: str | None, before: Callable[[], str | None]
    ) -> EffectRecord | None:
        """The record of effect `name` with payload fingerprint `payload` that got
        furthest, whichever step asked for it, or None; a record made before 2026-12
        is matched by the fingerprint then taken (`before()`)."""
        found = list(self._by_identity.get((name, payload), {}).values())
        if not found and payload is not None:
            older = [r for r in self._by_name.get(name, {}).values() if r.basis is None]
            if older:
                then = before()
                found = [r for r in older if r.payload_sha256 == then]
        return max(found, key=lambda r: rank(r.state), default=None)

    # -- one run of a step ----------------------------------------------------------

    def step_begun(self, identity: str) -> None:
        """A step of this identity runs (or is skipped) in this process now."""
        self._asked = set()
        self._returned = set()
        self._not_asked = None
        self._step = identity

    def asked(self, record: EffectRecord | str) -> None:
        """The running step asks for the effect of `record` (or of that key)."""
        key = record if isinstance(record, str) else record.key
        self._asked.add(key)
        self._asked_ever.add(key)
        if self._step is not None:
            self._earlier(self._step).pop(key, None)

    def named_twice(self, name: str) -> bool:
        """Whether the running step already got a receipt for an effect called `name` (a
        name stands for one write)."""
        return name in self._returned

    def returned(self, name: str) -> None:
        """The running step got the receipt of its effect `name`."""
        self._returned.add(name)

    # -- what a new effect may be ---------------------------------------------------

    def _earlier(self, identity: str) -> dict[str, EffectRecord]:
        """The effects earlier runs of this step performed (or may have) that this run
        has not asked for yet: made once per run of a step, then kept up to date."""
        if self._not_asked is None:
            self._not_asked = {
                key: record
                for key, record in self._by_step.get(identity, {}).items()
                if record.state in MAYBE_HAPPENED and key not in self._asked
            }
        return self._not_asked

    def in_doubt_named(self, name: str, payload: str | None) -> EffectRecord | None:
        """An effect called `name` with another payload whose outcome is not known: it is
        settled before this one is written."""
        for record in self._by_name.get(name, {}).values():
            if record.state in IN_DOUBT and record.payload_sha256 != payload:
                return record
        return None

    def changed_payload(
        self, identity: str, name: str, basis: str, payload: str | None
    ) -> EffectRecord | None:
        """An effect called `name` that an earlier run of this step, on the same inputs,
        performed (or may have) with another payload: a payload made from a clock or a
        random number, new at each try."""
        for record in self._by_name.get(name, {}).values():
            if (
                record.step == identity
                and record.state in MAYBE_HAPPENED
                and record.payload_sha256 != payload
                and same_basis(record, basis)
            ):
                return record
        return None

    def lone_member(self, identity: str, name: str, basis: str) -> EffectRecord | None:
        """For a new member `name` of a family (`alert/...`): the first member an earlier
        run of this step on the same inputs performed (or may have) that this run has not
        asked for again yet. Asked on the same inputs, the same members come in the same
        order (a thread pool's aside): a new one before them is made from a clock or a
        random id. On other inputs (a revised decision, a changed file) new members are
        what the change asks for."""
        kin = family(name)
        if kin is None:
            return None
        earlier = [
            r
            for r in self._earlier(identity).values()
            if family(r.name) == kin and same_basis(r, basis)
        ]
        return min(earlier, key=lambda r: r.intent) if earlier else None

    def not_asked_again(
        self, identity: str, name: str, basis: str, payload: str | None
    ) -> EffectRecord | None:
        """An effect an earlier run of this step performed (or may have) that this run has
        not asked for yet, and that `name` may be under another name: asked on the same
        inputs (then every effect comes again, in the same order), or with the same
        payload (or neither has one). Members of `name`'s family are `lone_member`'s."""
        kin = family(name)
        candidates = [
            r for r in self._earlier(identity).values() if kin is None or family(r.name) != kin
        ]
        for record in sorted(candidates, key=lambda r: r.intent):
            if same_basis(record, basis) or record.payload_sha256 == payload:
                return record
        return None

    def left_behind(
        self, identity: str, plan: set[str], left: set[str], payload: str | None
    ) -> EffectRecord | None:
        """For a new effect of a step that never asked for one (`identity`): an effect that
        happened (or may have) in a step that is no longer in the plan (`plan`: the
        identities of its steps), not asked for again by this process, with the same
        payload; or, when neither has a payload, in a step that left the plan in its
        latest change (`left`). The step and its effect may have been renamed together."""
        if self._by_step.get(identity):
            return None
        if payload is not None:
            pool: Iterable[EffectRecord] = self._by_payload.get(payload, {}).values()
        else:
            pool = (r for step in left for r in self._by_step.get(step, {}).values())
        for record in pool:
            if (
                record.step not in plan
                and record.state in MAYBE_HAPPENED
                and record.key not in self._asked_ever
                and record.payload_sha256 == payload
            ):
                return record
        return None

    def plan_changed(self) -> None:
        """Steps may have left the plan (nothing is cached about the plan)."""
