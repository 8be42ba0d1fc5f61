"""Live-run decisions of the app shell (data/live.py) and the reload button's text (components/live.py)."""

from __future__ import annotations

from components.live import new_steps_label
from data.live import RunSnapshot, live_decision, live_in_search, run_from_search

A = RunSnapshot(run="r", version="r-1:3", steps=5, last_step=5)
B = RunSnapshot(run="r", version="r-1:4", steps=7, last_step=7)


def test_live101_query_helpers():
    """run= and live= are read from a query string; live accepts 1/true/on only."""
    assert run_from_search("?run=a%2Fb&live=1") == "a/b"
    assert run_from_search("") is None and run_from_search(None) is None
    assert live_in_search("?run=r&live=1") and live_in_search("?live=on")
    assert not live_in_search("?run=r") and not live_in_search("?live=0") and not live_in_search("?live=x")


def test_live102_navigation_remembers_the_current_snapshot():
    """A page load or URL change remembers what the view shows; nothing is offered."""
    d = live_decision("navigate", None, A, auto=False)
    assert d.seen == A.to_dict() and not d.offer and not d.reload


def test_live103_new_version_offers_a_reload_with_the_step_count():
    """A poll that finds a new version offers a reload (2 new steps) and keeps the loaded snapshot."""
    d = live_decision("tick", A.to_dict(), B, auto=False)
    assert d.offer and not d.reload and d.new_steps == 2 and d.seen == A.to_dict()
    assert live_decision("tick", A.to_dict(), A, auto=False).offer is False


def test_live104_auto_refresh_reloads():
    """With auto-refresh a new version reloads at once."""
    d = live_decision("tick", A.to_dict(), B, auto=True)
    assert d.reload and not d.offer and d.seen == B.to_dict()


def test_live105_unknown_or_other_run():
    """No snapshot (unknown run, nothing committed) hides everything; another run's snapshot is replaced."""
    d = live_decision("tick", A.to_dict(), None, auto=True)
    assert d.seen is None and not d.offer and not d.reload
    other = RunSnapshot(run="s", version="s-1:1", steps=1, last_step=0)
    d = live_decision("tick", A.to_dict(), other, auto=True)
    assert d.seen == other.to_dict() and not d.reload


def test_live106_button_label():
    """The button counts new steps when there are some, and says so generically otherwise."""
    assert new_steps_label(1)[1] == "1 new step available · reload"
    assert new_steps_label(3)[1] == "3 new steps available · reload"
    assert new_steps_label(0)[1] == "New steps available · reload"


def test_live107_the_page_snapshot_is_the_baseline():
    """The snapshot a page was rendered from is the baseline: one older than the first poll's offers the
    steps it lacks (before, the first poll's snapshot was taken as the page's: no offer, ever); another
    run's snapshot is not."""
    d = live_decision("navigate", None, B, auto=False, shown=A.to_dict())
    assert d.offer and d.new_steps == 2 and d.seen == A.to_dict()
    d = live_decision("shown", B.to_dict(), B, auto=False, shown=A.to_dict())
    assert d.offer and d.new_steps == 2
    assert not live_decision("tick", A.to_dict(), B, auto=False, shown=B.to_dict()).offer
    other = RunSnapshot(run="s", version="s-1:1", steps=1, last_step=0).to_dict()
    assert live_decision("navigate", None, B, auto=False, shown=other).seen == B.to_dict()


def test_live108_a_page_with_nothing_to_show_reloads_once_something_is_committed():
    """A page rendered while the run's first read had committed nothing reloads itself at the first
    commit (no click needed), and waits while there is none."""
    pending = RunSnapshot(run="r", version=None, steps=0, last_step=None).to_dict()
    d = live_decision("tick", pending, A, auto=False, shown=pending)
    assert d.reload and not d.offer and d.new_steps == 5
    d = live_decision("tick", pending, None, auto=False, shown=pending)
    assert not d.reload and not d.offer and d.seen == pending
