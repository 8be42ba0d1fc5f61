"""Which run a page shows for its URL's run, and the notice when it is not the one asked for."""

from __future__ import annotations

from data.views import paths
from data.views.paths import shown_run, unknown_run_notice

RUNS = ["a", "b"]


def test_paths001_unknown_run_notices():
    """An unknown run: the reward and prompts pages show the first run and say so; the responses and token
    pages list the runs; the run asked for, or none, gives no notice."""
    assert shown_run(paths.REWARD, "zz", RUNS) == "a" and shown_run(paths.RESPONSES, "zz", RUNS) is None
    assert unknown_run_notice(paths.REWARD, "zz", "a", RUNS) == (
        "Unknown run 'zz': it is not one of the runs under the rollout root. Showing 'a'."
    )
    assert unknown_run_notice(paths.RESPONSES, "zz", None, RUNS) == "Unknown run 'zz': choose one of a, b."
    assert unknown_run_notice(paths.REWARD, "b", "b", RUNS) is None
    assert unknown_run_notice(paths.REWARD, None, "a", RUNS) is None


def test_paths002_unreadable_run_is_named_with_its_reason():
    """A run asked for that is a folder the board may not read is named as such, with the reason and the
    runs page to go to, on every page (with the run shown instead where the page falls back)."""
    closed = {"c": "permission denied"}
    assert unknown_run_notice(paths.REWARD, "c", "a", RUNS, closed) == (
        "Run 'c' cannot be read: permission denied. The runs page says what to do. Showing 'a'."
    )
    assert unknown_run_notice(paths.TOKENS, "c", None, RUNS, closed) == (
        "Run 'c' cannot be read: permission denied. The runs page says what to do."
    )
    assert (
        unknown_run_notice(paths.TOKENS, "zz", None, RUNS, closed) == "Unknown run 'zz': choose one of a, b."
    )
