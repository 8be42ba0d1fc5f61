"""Live runs: what the app shell polls to tell a user that the run they look at has new steps.

A trainer keeps appending to a run's files; the board re-reads them at most every
``RLBOARD_REFRESH_SECONDS`` (in the background) and each commit changes the store's version. The shell
compares the version a view was rendered from (each page says so, see :func:`shown`) to the current one
and offers a reload, or reloads by itself when the URL says ``live=1`` or the view had nothing to show yet.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from data.run_context import steps_of
from data.service import UnknownRun, board
from data.store import open_store
from data.views.codec import first, parse_search

LIVE_KEY = "live"


@dataclass(frozen=True)
class RunSnapshot:
    """The committed state of a run as the shell shows it: store version, number of steps, last step."""

    run: str
    version: str | None  # None: nothing committed yet (the page shows the run's first read under way)
    steps: int
    last_step: int | None

    def to_dict(self) -> dict:
        return asdict(self)


def run_from_search(search: str | None) -> str | None:
    """The ``run`` named in a query string (``?run=R&…``), or None."""
    return first(parse_search(search), "run")


def live_in_search(search: str | None) -> bool:
    """True when the query string asks for auto-refresh (``live=1``)."""
    return (first(parse_search(search), LIVE_KEY) or "").lower() in ("1", "true", "yes", "on")


def _snapshot(run: str, store) -> RunSnapshot:
    if store is None:
        return RunSnapshot(run=run, version=None, steps=0, last_step=None)
    steps = steps_of(store)
    return RunSnapshot(
        run=run, version=store.version, steps=len(steps), last_step=steps[-1] if steps else None
    )


def run_version(run: str | None) -> RunSnapshot | None:
    """Current committed state of ``run`` (a background re-check of its files is started when due).

    None for a name that is not a run under the root, and for a run with nothing committed yet. Never
    waits for an ingest.
    """
    if not isinstance(run, str) or not run:
        return None
    b = board()
    try:
        b.refresh(run)
        store = open_store(b.store_dir(run))
    except UnknownRun:
        return None
    return None if store is None else _snapshot(run, store)


def shown(run: str | None, store=None) -> dict | None:
    """The state of ``run`` that a page was rendered from, for the shell's poll to compare with: ``store``
    (the ``RunStore`` the page used), or the run's last commit when the page did not keep it; a snapshot
    without a version when nothing is committed (the page shows the first read under way). None without
    a run."""
    if not isinstance(run, str) or not run:
        return None
    if store is None:
        try:
            store = open_store(board().store_dir(run))
        except UnknownRun:
            return None
    return _snapshot(run, store).to_dict()


@dataclass(frozen=True)
class LiveDecision:
    """What the shell does after one poll: the snapshot to remember, whether to offer or do a reload."""

    seen: dict | None
    offer: bool
    reload: bool
    new_steps: int = 0


def live_decision(
    event: str, seen: dict | None, current: RunSnapshot | None, auto: bool, shown: dict | None = None
) -> LiveDecision:
    """Decide after ``event`` ("navigate": the view changed; "shown": a page said what it shows; "tick": a
    poll). A click on the offer reloads the page in the browser.

    ``shown`` is the snapshot the page was rendered from (see :func:`shown`); it is the baseline whenever
    it names the current run, so a page rendered from an older commit than the first poll saw (a run
    opened during its first read) still learns that it is stale. Without it, ``seen`` (kept in the
    browser) is: a navigation remembers the current snapshot. A poll that finds another version (of the
    same run) offers a reload, or reloads at once when ``auto`` or when the page had nothing to show.
    """
    cur = current.to_dict() if current is not None else None
    if shown is not None and (cur is None or shown.get("run") == cur["run"]):
        baseline = shown
    elif event != "tick" or cur is None or seen is None or seen.get("run") != cur["run"]:
        return LiveDecision(seen=cur, offer=False, reload=False)
    else:
        baseline = seen
    if cur is None or baseline.get("version") == cur["version"]:
        return LiveDecision(seen=baseline, offer=False, reload=False)
    new_steps = max(0, cur["steps"] - int(baseline.get("steps") or 0))
    if auto or baseline.get("version") is None:
        return LiveDecision(seen=cur, offer=False, reload=True, new_steps=new_steps)
    # Keep the snapshot the view shows: the offer stands until the user reloads.
    return LiveDecision(seen=baseline, offer=True, reload=False, new_steps=new_steps)
