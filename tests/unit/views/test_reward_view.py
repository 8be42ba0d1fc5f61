"""The reward page's view state (data/views/reward.py): moving the step and following the run's last one."""

from __future__ import annotations

from data.run_context import RunContext


def test_curves031_step_moves_and_following_the_last_step():
    """Previous / next stay within the run, a slider position or a picked step the run lacks keeps the step
    shown, and a view that follows the last step keeps following it when that step is chosen again."""
    from data.views.reward import RewardView

    steps = [1, 3, 7]
    view = RewardView(run="r", step=3)
    assert (view.moved(steps, 1), view.moved(steps, -1), RewardView(step=7).moved(steps, 1)) == (7, 1, 7)
    assert view.at(steps, 2) == 7 and view.at(steps, 9) == 3 and view.at(steps, None) == 3
    assert view.picked(steps, 1) == 1 and view.picked(steps, 2) == 3
    latest = RewardView(run="r")
    assert latest.shown_step(steps) == 7 and latest.with_step(steps, 7).step is None
    assert latest.with_step(steps, 3, zero=True) == RewardView(run="r", step=3, zero=True)
    assert view.with_step(steps, 7).step == 7


def test_rewardview001_heatmap_window_in_the_url():
    """heatmap=FIRST-LAST is read and written back; a value that is not such a range is ignored, with a
    notice."""
    from data.views.reward import RewardView

    view, msgs = RewardView.from_query({"run": "r", "heatmap": "101-600"}, RunContext("r"))
    assert view.heatmap == (101, 600) and msgs == [] and view.to_query() == "?run=r&heatmap=101-600"
    for bad in ("600-101", "a-b", "5"):
        view, msgs = RewardView.from_query({"run": "r", "heatmap": bad}, RunContext("r"))
        assert view.heatmap is None
        assert msgs == [f"Ignored heatmap={bad!r}: a range of steps, first-last (e.g. heatmap=101-600)."]


def test_rewardview002_a_step_the_run_lacks():
    """step=4 on a run of steps 1, 2, 5, 9 shows step 2 (the nearest before it), step=0 step 1 (the first),
    each with the run's one notice; the run's own notices come first."""
    from data.views.reward import RewardView

    ctx = RunContext("r", None, (1, 2, 5, 9), ("a notice of the run",))
    view, msgs = RewardView.from_query({"run": "r", "step": "4"}, ctx)
    assert view.step == 2
    assert msgs == ["a notice of the run", "Run r has no step 4: showing step 2, the nearest step before it."]
    view, msgs = RewardView.from_query({"run": "r", "step": "0"}, ctx)
    assert view.step == 1 and msgs[1:] == ["Run r has no step 0: showing step 1, its first step."]


def test_rewardview003_heatmap_note_says_when_the_step_is_outside_the_window():
    """The heatmap's note adds that the selected step is not drawn when a window leaves it out."""
    from types import SimpleNamespace

    from data.views.reward import heatmap_note

    cols = SimpleNamespace(window=(101, 600), first=[101], last=[600], note="Steps 101-600.")
    assert heatmap_note(cols, 700) == "Steps 101-600. The selected step, 700, is not among them."
    assert heatmap_note(cols, 300) == heatmap_note(cols, None) == "Steps 101-600."
    assert heatmap_note(SimpleNamespace(window=None, note=""), 700) == ""
