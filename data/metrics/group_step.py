"""The registry's metrics of more than one response (a step, a group, a prompt of two runs): what the pages
name and draw, never a column of the store. Part of :data:`data.metrics.registry.COLUMNS`, which lists them
after the responses' columns."""

from __future__ import annotations

from data.metrics.metric import Metric

GROUP_STEP_METRICS: list[Metric] = [
    # Against the reference (per step and per prompt; see data/metrics/reference.py)
    Metric(
        "win_rate",
        "win rate (reward > reference reward)",
        "share of the responses compared with their reference (both rewards finite) whose reward is higher",
        False,
        "step",
        fmt="share",
    ),
    Metric(
        "tie_rate",
        "tie rate (reward = reference reward)",
        "share of the responses compared with their reference (both rewards finite) whose reward is equal",
        False,
        "step",
        fmt="share",
    ),
    # Groups (see data/metrics/group.py)
    Metric(
        "learning_signal",
        "learning signal (group rewards differ)",
        "whether the rewards of the response's group (the responses of one step that share a group id, "
        "else a prompt) differ: a group whose rewards are all equal has every advantage 0 and teaches "
        "GRPO / RLOO nothing; none for a group of one",
        level="group",
        fmt="text",
    ),
    Metric(
        "repetition_mean",
        "repetition, step mean (share of repeated 3-grams)",
        "mean repetition of the step's responses of 3 units or more (their units: the summary's repetition_units)",
        False,
        "step",
        fmt="share",
    ),
    Metric(
        "explained_variance",
        "explained variance",
        "1 − Var(return − value) / Var(return), pooled over every position of the step's responses with both "
        "a value and a return (population variances; null under 2 positions or where the returns do not vary)",
        True,
        "step",
    ),
    Metric(
        "value_error_abs_pooled",
        "mean |value − return|",
        "Σ |value_t − return_t| / n over every position of the step's responses with both a value and a return",
        False,
        "step",
    ),
    Metric(
        "kl_top_share",
        "largest response's share of the step's KL",
        "the k3 sum of the step's response with the largest one, over the k3 sum of all the step's positions",
        False,
        "step",
        fmt="share",
    ),
    Metric(
        "truncated_share",
        "truncated (share of responses with no end token)",
        "responses of the step that do not end with an end token, over the step's responses",
        False,
        "step",
        fmt="share",
    ),
    Metric(
        "match_share",
        "share of responses matching the search",
        "responses of the step whose prompt or response the search (q=) matches, over the step's responses",
        False,
        "step",
        fmt="share",
    ),
    Metric(
        "partial_step",
        "partial step",
        "the run's last step when it holds fewer responses than every other step of the run (a run "
        "stopped, or still being written, in the middle of a step; see data/metrics/step.py)",
        False,
        "step",
        fmt="text",
    ),
    # Comparing runs (see data/compare/)
    Metric(
        "samples_seen",
        "responses seen (cumulative)",
        "responses of the run up to and including the step, in step order",
        False,
        "step",
        unit="responses",
        fmt="int",
    ),
    Metric(
        "reward_diff",
        "paired reward difference (A − B)",
        "mean reward of a shared prompt's responses at its paired step in run A minus at its paired step in run B "
        "(the two runs' steps closest to each other: see data.compare.prompts)",
        True,
        "prompt",
    ),
]
