"""The responses page's view state (data/views/responses.py): its URL round trip, fallbacks with notices,
the filter it selects and the view after its controls."""

from __future__ import annotations

from data.run_context import RunContext
from data.views.codec import parse_search
from data.views.responses import ALL_STEPS, ResponsesView


def test_responses001_defaults_give_empty_query():
    """No parameter: the defaults (last step, reward descending) and an empty query string."""
    view, notices = ResponsesView.from_query({})
    assert view == ResponsesView() and notices == []
    assert view.to_query() == ""
    assert ResponsesView(run="r").to_query() == "?run=r"


def test_responses002_query_round_trip():
    """Every field survives to_query -> parse -> from_query; defaults are left out of the URL."""
    view = ResponsesView(
        run="my run",
        step=ALL_STEPS,
        sort="kl_mean",
        order="asc",
        reward_min=0.5,
        reward_max=1.0,
        gain_min=-1.0,
        gain_max=2.5,
        kl_min=0.001,
        kl_max=1e-05,
        len_min=3.0,
        len_max=40.0,
        q="(?i)the\\s+end",
        loses=True,
        sample="abc-1",
    )
    query = view.to_query()
    back, notices = ResponsesView.from_query(parse_search(query))
    assert back == view and notices == []
    assert "order=desc" not in ResponsesView(run="r", sort="kl_mean").to_query()
    assert ResponsesView(run="r", sort="kl_mean", step=3).to_query() == "?run=r&step=3&sort=kl_mean"


def test_responses003_bad_values_fall_back_with_notices():
    """Malformed values fall back to the default, one readable notice each; unknown keys are noticed."""
    query = {
        "run": ["r"],
        "step": ["x"],
        "order": ["up"],
        "reward_min": ["abc"],
        "kl_max": ["inf"],
        "loses": ["maybe"],
        "sort": ["zzz"],
        "colour": ["red"],
    }
    view, notices = ResponsesView.from_query(
        query, RunContext("r", None, (1, 2)), sortable=["reward", "kl_mean"]
    )
    assert view == ResponsesView(run="r")
    assert len(notices) == 7
    assert "Ignored unknown parameter 'colour'." in notices
    assert ResponsesView.from_query({"run": "r", "live": "1"}) == (ResponsesView(run="r"), [])  # the shell's
    assert any("step='x'" in n for n in notices) and any("sort='zzz'" in n for n in notices)


def test_responses004_step_context_and_aliases():
    """A step the run lacks is resolved by the run's rule (the nearest step before it, else its first), with
    its notice; step=all and sort aliases (kl -> kl_mean) parse."""
    ctx = RunContext("r", None, (1, 2, 5, 9))
    view, notices = ResponsesView.from_query({"step": "4"}, ctx)
    assert view.step == 2 and notices == ["Run r has no step 4: showing step 2, the nearest step before it."]
    assert view.resolved_step([1, 2, 5, 9]) == 2
    view, notices = ResponsesView.from_query({"step": "0"}, ctx)
    assert view.step == 1 and notices == ["Run r has no step 0: showing step 1, its first step."]
    view, _ = ResponsesView.from_query({"step": "ALL", "sort": "kl"}, ctx, sortable=["kl_mean"])
    assert view.step == ALL_STEPS and view.resolved_step([1, 2]) is None and view.sort == "kl_mean"


def test_responses005_invalid_regex_is_kept_but_not_applied():
    """An invalid regex stays in the view (the search box shows it) with a clear notice; the filter drops it."""
    view, notices = ResponsesView.from_query({"q": "(unclosed"})
    assert view.q == "(unclosed"
    assert notices == [
        "invalid regular expression '(unclosed': unclosed group: the text search is not applied."
    ]
    assert view.response_filter([1]).q is None


def test_responses006_filter_key_ignores_selection_and_sort():
    """Selecting a row or sorting does not change the filter key (the grid keeps its rows)."""
    view = ResponsesView(run="r", reward_min=1.0)
    assert view.with_(sample="x", sort="kl_mean", order="asc").filter_key() == view.filter_key()
    assert view.with_(loses=True).filter_key() != view.filter_key()


def test_responses034_view_after_its_controls():
    """Controls give the next view: ranges as numbers (blank: no bound), the last step chosen while the URL
    follows it keeps following it, the grid's sort wins; Clear keeps run, step and sort only."""
    view = ResponsesView(run="r", sort="kl_mean", q="x", reward_min=1.0)
    ranges = {"reward_min": "", "reward_max": 2, "kl_min": None}
    new = view.from_controls([1, 2], 2, ranges, "", True, ("step", "asc"))
    assert new == ResponsesView(run="r", sort="step", order="asc", reward_max=2.0, loses=True)
    assert view.from_controls([1, 2], 1, {}, "x", False, None).step == 1
    assert view.from_controls([1, 2], 1, {}, "x", False, None).sort == "kl_mean"
    assert ResponsesView(run="r", step=2, q="x", loses=True).cleared() == ResponsesView(run="r", step=2)
    assert (view.step_value([1, 2]), view.where([1, 2])) == (2, "at step 2")
    assert ResponsesView(step=ALL_STEPS).where([1, 2]) == "over all steps"


def test_responses037_range_controls_carry_the_views_bounds():
    """Each range filter's input gets the view's bounds and its ids, in the filters' order; the inputs of a
    filter the page does not always show (the KL sum's) are shown while one of its bounds is set."""
    view = ResponsesView(reward_min=0.5, kl_max=0.2, kl_sum_min=3.0)
    keys = ("reward", "kl", "kl_sum", "repetition")
    ids = {f"{k}_{e}": f"{k}-{e}" for k in keys for e in ("min", "max")}
    filters = [("reward", "reward", True), ("kl", "KL", False), ("kl_sum", "KL sum", True)]
    got = view.range_controls([*filters, ("repetition", "rep", True)], ids)
    assert got == [
        ("reward", True, 0.5, None, ("reward-min", "reward-max"), True),
        ("KL", False, None, 0.2, ("kl-min", "kl-max"), True),
        ("KL sum", True, 3.0, None, ("kl_sum-min", "kl_sum-max"), True),
        ("rep", True, None, None, ("repetition-min", "repetition-max"), False),
    ]
