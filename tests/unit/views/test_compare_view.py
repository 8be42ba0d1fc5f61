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
