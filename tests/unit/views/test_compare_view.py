"""The compare page's query: runs the board may not read are named as such, not as unknown."""

from __future__ import annotations

from data.views.compare import CompareView


def test_compare_view001_unreadable_run_named():
    """A run= naming a folder the board may not read says so and why; a name that is no folder is unknown;
    the readable run is kept."""
    view, notes = CompareView.from_query(
        {"run": ["a", "closed", "nope"]}, ["a"], {"closed": "permission denied"}
    )
    assert view.runs == ("a",)
    assert notes == [
        "Run 'closed' cannot be read: permission denied. The runs page says what to do.",
        "Unknown run 'nope': it is not one of the runs under the rollout root.",
    ]


def test_compare_view002_gap_limit_in_the_url():
    """gap= is the pairing's gap limit in steps: kept through the URL; a negative or non-number value is
    ignored with a notice (the default limit then applies)."""
    view, msgs = CompareView.from_query({"run": ["a", "b"], "gap": "4"}, ["a", "b"])
    assert view.gap == 4.0 and msgs == [] and view.to_query() == "?run=a&run=b&gap=4"
    for bad, said in (("-1", "the gap limit is a number of steps, 0 or more"), ("x", "not a number")):
        view, msgs = CompareView.from_query({"run": ["a", "b"], "gap": bad}, ["a", "b"])
        assert view.gap is None and len(msgs) == 1 and said in msgs[0]
