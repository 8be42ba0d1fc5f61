"""components/controls.py: the responses page's step picker options of a long run."""

from __future__ import annotations

from components.controls import step_options

ALL = "all"


def _values(options: list[dict]) -> list:
    return [o["value"] for o in options]


def test_controls001_every_step_up_to_the_limit():
    """A run of at most ``limit`` steps lists them all, after "all steps", and no hint."""
    opts = step_options([1, 2, 3], ALL, 2, limit=3)
    assert _values(opts) == [ALL, 1, 2, 3]
    assert opts[1] == {"label": "step 1", "value": 1}


def test_controls002_a_long_run_lists_every_kth_step_the_chosen_one_and_a_hint():
    """25 steps (0..24), limit 10: every 3rd step (0, 3, …, 24), the chosen 5 in its place, and the hint."""
    opts = step_options(list(range(25)), ALL, 5, limit=10)
    assert _values(opts) == [ALL, 0, 3, 5, 6, 9, 12, 15, 18, 21, 24, "__hint__"]
    assert opts[-1] == {
        "label": "type a step number to find any of 25",
        "value": "__hint__",
        "disabled": True,
    }


def test_controls003_typed_digits_find_the_steps_that_start_with_them():
    """Typing "1" in a run of steps 0..24 finds 1 and 10-19 (at most ``limit``: 1, 10, 11, …, 17), plus
    the chosen step 24; a value that is no step is left out."""
    opts = step_options(list(range(25)), ALL, 24, "1", limit=9)
    assert _values(opts) == [ALL, 1, 10, 11, 12, 13, 14, 15, 16, 17, 24, "__hint__"]
    assert _values(step_options(list(range(25)), ALL, 99, "step 2", limit=9)) == [
        ALL,
        2,
        20,
        21,
        22,
        23,
        24,
        "__hint__",
    ]
