"""One run as a page sees it: its committed store, its steps, and the one rule that turns the step a URL
asks for into the step shown (the same on every page, in the navbar, in ``/export`` and the CLI).

:func:`data.service.open_run` builds a :class:`RunContext` from a URL's run; :func:`context_of` from a store.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from data.cache import StoreKey, shared
from data.store import RunStore


def step_at_or_before(steps: Sequence[int], asked: int) -> int | None:
    """The one rule: ``asked`` when the run has it, else the nearest step before it, else the run's first
    step; None for a run without steps. ``steps``: ascending."""
    if not steps:
        return None
    i = bisect_right(steps, asked)
    return steps[i - 1] if i else steps[0]


def step_notice(run: str | None, asked: int, shown: int) -> str:
    """The notice of a step the run lacks (``asked``) shown as ``shown``, worded once for every page."""
    if shown < asked:
        return f"Run {run} has no step {asked}: showing step {shown}, the nearest step before it."
    return f"Run {run} has no step {asked}: showing step {shown}, its first step."


@dataclass(frozen=True)
class RunContext:
    """A run as one request sees it: ``run`` (None: no run shown), its last committed ``store`` (None: not
    read yet), its ``steps`` ascending (None while nothing is committed) and the ``notices`` of opening it
    (e.g. an unknown run asked for)."""

    run: str | None
    store: RunStore | None = None
    steps: tuple[int, ...] | None = None
    notices: tuple[str, ...] = ()

    def step(self, asked: int | None) -> tuple[int | None, list[str]]:
        """``(step shown, notices)`` for the step a URL asks for (:func:`step_at_or_before`, with one
        :func:`step_notice` when it differs). ``asked`` None: the run's last step. Before anything is
        committed the step asked for is kept as is: there is nothing to hold it against."""
        steps = self.steps
        if steps is None:
            return asked, []
        if asked is None:
            return (steps[-1] if steps else None), []
        shown = step_at_or_before(steps, asked)
        if shown is None:
            return None, [f"Run {self.run} has no steps yet."]
        return shown, ([] if shown == asked else [step_notice(self.run, asked, shown)])

    @property
    def step_list(self) -> list[int]:
        """The run's steps as a list ([] while nothing is committed)."""
        return list(self.steps or ())


def context_of(run: str | None, store: RunStore | None, notices: Sequence[str] = ()) -> RunContext:
    """The context of ``run`` read from its committed ``store`` (None: nothing committed yet)."""
    steps = None if store is None else steps_of(store)
    return RunContext(run, store, steps, tuple(notices))


def steps_of(store: RunStore) -> tuple[int, ...]:
    """The committed ``store``'s steps, ascending: the one step list every page, the navbar, the curves, the
    table and the live check use (read once per store version and process, before any page asks)."""
    return _steps(StoreKey(store))


# The summary's step column alone: the whole summary (118 columns at 5,000 steps) takes ~9 ms to read cold
# against ~4 for the column, and the navbar has read it by the time the page asks.
@shared(32, disk=False)
def _steps(key: StoreKey) -> tuple[int, ...]:
    scan = key.store.steps_scan()
    if "step" not in scan.collect_schema().names():  # an empty summary
        return ()
    return tuple(sorted(int(s) for s in scan.select("step").collect().get_column("step").to_list()))
