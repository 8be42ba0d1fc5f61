"""The metrics the app names: key, exact UI label, description, sign and level (token, response, step)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    """How a metric is named in the UI; ``signed`` metrics get a diverging colour scale centred at 0."""

    key: str
    label: str
    description: str
    signed: bool = False
    level: str = "response"  # "token", "response" or "step"


METRICS: dict[str, Metric] = {
    m.key: m
    for m in [
        # Per token
        Metric(
            "token_reward",
            "token reward",
            "per-token reward used in training (KL penalty + reward)",
            True,
            "token",
        ),
        Metric("value", "critic value", "critic value at the token", True, "token"),
        Metric("prob", "probability (policy)", "exp(logprob)", False, "token"),
        Metric("ref_prob", "probability (reference)", "exp(ref_logprob)", False, "token"),
        Metric("logprob", "log-prob (policy)", "policy log-probability of the token", False, "token"),
        Metric(
            "ref_logprob", "log-prob (reference)", "reference log-probability of the token", False, "token"
        ),
        Metric("log_ratio", "log-ratio log π − log π_ref", "logprob − ref_logprob", True, "token"),
        Metric("kl", "KL (k3)", "exp(r) − 1 − r, r = ref_logprob − logprob", False, "token"),
        Metric("return", "return (γ = 1)", "sum of token rewards from this token to the end", True, "token"),
        Metric(
            "value_error", "value error (value − return)", "critic value minus return (γ = 1)", True, "token"
        ),
        # Per response
        Metric("reward", "reward", "sequence reward from the reward model / verifier", True),
        Metric("ref_reward", "reference reward", "reward of the reference model's response", True),
        Metric("reward_gain", "reward gain (reward − ref reward)", "reward − ref_reward", True),
        Metric("response_length", "response length (tokens, pads excluded)", "tokens without pad tokens"),
        Metric(
            "response_chars", "response length (characters, pads excluded)", "characters without pad tokens"
        ),
        Metric("log_ratio_sum", "log-ratio sum", "Σ_t (logprob_t − ref_logprob_t)", True),
        Metric("log_ratio_mean", "log-ratio mean per token", "mean_t (logprob_t − ref_logprob_t)", True),
        Metric("kl_sum", "KL sum (k3)", "Σ_t k3_t", False),
        Metric("kl_mean", "KL mean per token (k3)", "mean_t k3_t", False),
        Metric("value_error_mean", "value error mean (value − return)", "mean_t (value_t − return_t)", True),
        Metric(
            "value_error_abs_mean", "value error mean |value − return|", "mean_t |value_t − return_t|", False
        ),
        Metric("token_reward_sum", "token reward sum", "Σ_t token_reward_t", True),
        Metric(
            "repetition",
            "repetition (share of repeated word 3-grams)",
            "1 − distinct word 3-grams / word 3-grams of the response (see data/metrics/degeneration.py)",
        ),
        Metric(
            "length_ratio",
            "length ÷ step median",
            "response length over the median length of its step (tokens, else characters)",
        ),
        # Against the reference (per step and per prompt; see data/metrics/reference.py)
        Metric(
            "win_rate",
            "win rate (reward > reference reward)",
            "share of the responses compared with their reference (both rewards finite) whose reward is higher",
            False,
            "step",
        ),
        Metric(
            "tie_rate",
            "tie rate (reward = reference reward)",
            "share of the responses compared with their reference (both rewards finite) whose reward is equal",
            False,
            "step",
        ),
    ]
}


def label(key: str) -> str:
    """The exact UI label of a metric (falls back to the key for extra columns)."""
    m = METRICS.get(key)
    return m.label if m else key
