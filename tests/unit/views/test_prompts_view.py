"""The prompts page's view state (data/views/prompts.py): its URL round trip and fallbacks, header sorting
and the view after the list's controls."""

from __future__ import annotations

from data.views.codec import parse_search
from data.views.prompts import PromptsView


def test_prompts014_view_state_round_trip():
    """A view survives to_query/from_query; defaults are left out; bad values fall back with notices."""
    view = PromptsView(
        run="r", view="never", trend="regressed", q="a+b", min_steps=3, sort="win_rate", order="desc", page=2
    )
    back, msgs = PromptsView.from_query(parse_search(view.to_query()), ["r"])
    assert msgs == [] and back == view
    assert PromptsView(run="r").to_query() == "?run=r"
    bad, msgs = PromptsView.from_query(
        {
            "run": "nope",
            "prompt": "xyz",
            "view": "odd",
            "sort": "zzz",
            "page": "0",
            "min_steps": "-1",
            "q": "(",
        },
        ["r"],
    )
    assert bad == PromptsView(run="r")
    assert len(msgs) == 7


def test_prompts015_header_click_sorting():
    """A header click sorts by that column in its natural order; a second click flips it; page resets."""
    view = PromptsView(run="r", page=4)
    by_win = view.sorted_by("win_rate")
    assert (by_win.sort, by_win.order, by_win.page) == ("win_rate", "desc", 1)
    assert by_win.sorted_by("win_rate").order == "asc"
    assert view.sorted_by("first_step").order == "desc"  # already the sort column: flips


def test_prompts026_view_after_the_list_controls():
    """The list's controls give the next view back on page 1; the same values change nothing."""
    view = PromptsView(run="r", page=3, trend="flat")
    assert view.from_controls("all", "flat", None, "") is view
    assert view.from_controls("never", "flat", 2.0, " x ") == PromptsView(
        run="r", view="never", trend="flat", min_steps=2, q="x"
    )
    assert view.from_controls("bogus", None, 0, None) == PromptsView(run="r")
