"""The one step rule (data/run_context.py): a step the run lacks becomes the nearest step at or before it,
else the run's first step, with one notice worded once."""

from __future__ import annotations

import random

import pytest

from data.run_context import RunContext, step_at_or_before, step_notice

STEPS = (1, 2, 5, 9)


def _naive(steps: list[int], asked: int) -> int | None:
    """The rule as written in words: the largest step not after ``asked``, else the smallest."""
    before = [s for s in steps if s <= asked]
    return max(before) if before else (min(steps) if steps else None)


@pytest.mark.parametrize(
    ("asked", "shown"), [(1, 1), (2, 2), (4, 2), (5, 5), (8, 5), (9, 9), (100, 9), (0, 1), (-3, 1)]
)
def test_runctx001_rule_on_steps_1_2_5_9(asked, shown):
    """A step the run has is itself; one it lacks is the nearest before it, else the first."""
    assert step_at_or_before(STEPS, asked) == shown


def test_runctx002_rule_matches_its_definition_on_random_steps():
    """The bisecting rule agrees with the naive definition on random step lists (gaps, negatives, one
    step, none) and random asked steps around them."""
    rng = random.Random(32)
    for _ in range(2000):
        steps = sorted(rng.sample(range(-20, 60), rng.randint(0, 12)))
        asked = rng.randint(-30, 70)
        assert step_at_or_before(steps, asked) == _naive(steps, asked), (steps, asked)


def test_runctx003_one_notice_worded_once():
    """The context's step: itself without a notice, else the step shown and the one notice; None asked is
    the run's last step."""
    ctx = RunContext("R", None, STEPS)
    assert ctx.step(5) == (5, [])
    assert ctx.step(4) == (2, ["Run R has no step 4: showing step 2, the nearest step before it."])
    assert ctx.step(0) == (1, ["Run R has no step 0: showing step 1, its first step."])
    assert ctx.step(None) == (9, [])
    assert step_notice("R", 4, 2) == ctx.step(4)[1][0]


def test_runctx004_before_anything_is_committed():
    """Nothing committed (steps None): the step asked for is kept, with nothing to say; a run read with no
    step at all shows none and says so."""
    assert RunContext("R").step(4) == (4, []) and RunContext("R").step(None) == (None, [])
    assert RunContext("R", None, ()).step(4) == (None, ["Run R has no steps yet."])
    assert RunContext("R", None, ()).step_list == [] and RunContext("R", None, STEPS).step_list == [*STEPS]
