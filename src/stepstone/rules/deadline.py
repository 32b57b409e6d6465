"""A time bound for user code that runs in the caller's thread (effects' writes, checks).

The code keeps its thread (database connections and clients are often bound to
the thread that made them), so the bound is an interval timer: on the main
thread, when no other timer is set, `SIGALRM` interrupts the code with an
exception that `except Exception` does not catch. Elsewhere the code runs
unbounded, as it would without stepstone.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class Expired(BaseException):
    """Raised inside code that ran past its bound (a BaseException, so that the code's
    own `except Exception` handlers let it through)."""


def can_bound() -> bool:
    """Whether code run now can be bounded: the main thread, with no timer of its own set."""
    return (
        hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
        and signal.getitimer(signal.ITIMER_REAL)[0] == 0
        and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, signal.SIG_IGN, None)
    )


def call_within(seconds: float | None, fn: Callable[..., T], *args: Any) -> tuple[bool, T | None]:
    """`(True, fn(*args))`, or `(False, None)` when it ran past `seconds` and was
    interrupted. Exceptions of `fn` propagate. No bound when `seconds` is None or not
    positive, or where `can_bound()` is false."""
    if seconds is None or seconds <= 0 or not can_bound():
        return True, fn(*args)

    def expire(signum: int, frame: object) -> None:
        raise Expired

    previous = signal.signal(signal.SIGALRM, expire)
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            return True, fn(*args)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except Expired:
        return False, None
    finally:
        signal.signal(signal.SIGALRM, previous)
