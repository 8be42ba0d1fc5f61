"""Waiting in tests: on a condition, with a deadline, never a fixed sleep (a loaded machine is slower than
any guess, an idle one faster)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T], timeout: float, what: str | Callable[[], str], interval: float = 0.05
) -> T:
    """Call ``predicate`` until it returns something truthy and return that value; past ``timeout``
    seconds raise ``TimeoutError`` saying what was awaited (``what``, or ``what()`` then, e.g. with a
    server's log tail) and the last value seen. The timeout only bounds the wait (a condition met early
    returns at once), so make it generous: a minute or more for a server or an ingest on a loaded machine."""
    deadline = time.monotonic() + timeout
    while True:
        got = predicate()
        if got:
            return got
        if time.monotonic() >= deadline:
            said = what() if callable(what) else what
            raise TimeoutError(f"waited {timeout:g} s for {said}; last seen: {got!r}")
        time.sleep(interval)
