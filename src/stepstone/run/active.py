"""Which run a bare `stepstone.effect(...)`, `decided(...)` or `answer(...)` belongs to: the
run whose step runs in this context, else the run this process drives now."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidInput, StepstoneError
from ..model.models import Asking
from .filetrace import FileTrace, Watch, tracing

# Runs are held as objects: this module sits below the `Run` it keeps track of (the
# module-level API, `opening`, types what it gets back)
_driven: list[object] = []  # the run this process drives now (opened last, not closed)
_stepping: ContextVar[object | None] = ContextVar("stepstone_stepping", default=None)


@dataclass
class Trace:
    """What the step running in a context wrote and read as it ran."""

    notes: list[str] = field(default_factory=list)
    decisions: dict[str, str | None] = field(default_factory=dict)  # key -> value read
    unknowns: set[str] = field(default_factory=set)  # the questions whose answer it read
    files: FileTrace = field(default_factory=FileTrace)  # the files it opened


_trace: ContextVar[Trace | None] = ContextVar("stepstone_trace", default=None)
_asking: ContextVar[tuple[object, Asking] | None] = ContextVar("stepstone_asking", default=None)
_CARRIED: tuple[ContextVar[Any], ...] = (_stepping, _trace, _asking)


def active_run() -> object:
    """The run whose step is running in this context, else the run this process drives
    now (opened last and not closed)."""
    stepping = _stepping.get()
    if stepping is not None:
        return stepping
    if not _driven:
        raise StepstoneError(
            "no run is open in this process: call stepstone.open_run(...) or run %resume first"
        )
    return _driven[-1]


def driven_run() -> object | None:
    """The run this process drives now, if any."""
    return _driven[-1] if _driven else None


def now_driving(run: object) -> None:
    """`run` is the one this process drives now."""
    _driven[:] = [run]


def let_go(run: object) -> None:
    """`run` was closed: it is no longer the one driven."""
    if _driven and _driven[-1] is run:
        _driven.clear()


@contextmanager
def stepping_in(
    run: object, trace: Trace, asking: Asking, watch: Watch | None = None
) -> Iterator[None]:
    """While the body runs, this context's steps and effects belong to `run` and the step
    `asking`, and what it writes and reads is kept in `trace` (what code other than
    Python's opens too, seen by `watch`); so do those of the threads
    and pool tasks it starts (`carry_into_threads`). When it ends, `asking` has ended:
    an effect asked for afterwards, from a thread or task that outlived it, is refused."""
    carry_into_threads()
    token, traced, asked = _stepping.set(run), _trace.set(trace), _asking.set((run, asking))
    try:
        with tracing(trace.files, watch):
            yield
    finally:
        asking.ended = True
        _asking.reset(asked)
        _trace.reset(traced)
        _stepping.reset(token)


def asking_here(run: object) -> Asking | None:
    """The step of `run` that asks for effects in this context (a step's body, or a thread
    or task it started), or None."""
    found = _asking.get()
    return found[1] if found is not None and found[0] is run else None


_carrying = False


def carry_into_threads() -> None:
    """Make the threads and thread-pool tasks started while a step runs belong to that
    step, as asyncio's tasks do (they copy the context): `threading.Thread.start` and
    `ThreadPoolExecutor.submit` carry this module's context variables, and only those,
    into what they start (the user's own context variables stay as Python has them)."""
    global _carrying
    if _carrying:
        return
    _carrying = True
    start, submit = threading.Thread.start, ThreadPoolExecutor.submit

    def start_carrying(self: threading.Thread) -> None:
        values = _values()
        if values is not None:
            self.run = functools.partial(_carried, values, self.run)  # type: ignore[method-assign]
        start(self)

    def submit_carrying(
        self: ThreadPoolExecutor, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> Future[Any]:
        values = _values()
        if values is not None:
            fn = functools.partial(_carried, values, fn)
        return submit(self, fn, *args, **kwargs)

    threading.Thread.start = start_carrying  # type: ignore[method-assign]
    ThreadPoolExecutor.submit = submit_carrying  # type: ignore[method-assign,assignment]


def _values() -> list[Any] | None:
    values = [var.get() for var in _CARRIED]
    return values if any(v is not None for v in values) else None


def _carried(values: list[Any], fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    tokens = [var.set(value) for var, value in zip(_CARRIED, values, strict=True)]
    try:
        return fn(*args, **kwargs)
    finally:
        for var, token in zip(reversed(_CARRIED), reversed(tokens), strict=True):
            var.reset(token)


def write_note(text: str) -> None:
    """Add `text` to the notes of the step running in this context."""
    trace = _trace.get()
    if trace is None:
        raise StepstoneError(
            "stepstone.note was called outside a step: call it inside a %%step cell or a "
            "function run by run.step"
        )
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput(f"a note is text saying what the step found, not {text!r}")
    trace.notes.append(text.strip())


def read_decision(run: object, key: str, value: str | None) -> None:
    """A step of `run` running in this context read decision `key` as `value`."""
    trace = _trace.get()
    if trace is not None and _stepping.get() is run:
        trace.decisions.setdefault(key, value)


def read_answer(run: object, unknown_id: str) -> None:
    """A step of `run` running in this context read the answer to `unknown_id`."""
    trace = _trace.get()
    if trace is not None and _stepping.get() is run:
        trace.unknowns.add(unknown_id)
