"""Per-step summary (see :mod:`data.metrics`): one row per step, kept beside the store."""

from __future__ import annotations

import polars as pl

from data.metrics import reference
from data.metrics.group import group_step_summary

QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


def _dist(col: str) -> list[pl.Expr]:
    c = pl.col(col).filter(pl.col(col).is_finite())
    out = [
        c.mean().alias(f"{col}_mean"),
        c.std().alias(f"{col}_std"),
        c.min().alias(f"{col}_min"),
        c.max().alias(f"{col}_max"),
    ]
    out += [c.quantile(q, "linear").alias(f"{col}_p{int(q * 100):02d}") for q in QUANTILES]
    return out


def _token_mean(sum_col: str) -> pl.Expr:
    """Σ sum_col / Σ n_kl_tokens over a group: a mean over all its tokens (null when it has none)."""
    n = pl.col("n_kl_tokens").sum()
    return pl.when(n > 0).then(pl.col(sum_col).sum() / n)


def step_summary(scalars: pl.LazyFrame) -> pl.LazyFrame:
    """One row per step, sorted by step: counts, reward / ref reward / gain distributions, win rate, KL, length.

    ``n_both`` counts the responses compared with their reference, ``win_rate`` / ``tie_rate`` /
    ``loss_rate`` are the shares of wins / ties / losses among them (see :mod:`data.metrics.reference`);
    ``kl_token_mean`` is Σ kl_sum / Σ n_kl_tokens over the step (a mean over all its tokens), while
    ``kl_mean_mean`` averages the per-response means.
    """
    return (
        scalars.group_by("step")
        .agg(
            pl.len().alias("n"),
            *_dist("reward"),
            *_dist("ref_reward"),
            *_dist("reward_gain"),
            pl.col("ref_reward").is_not_null().sum().alias("n_ref"),
            reference.compared().sum().alias("n_both"),
            reference.rate(reference.win().sum(), reference.compared().sum()).alias("win_rate"),
            reference.rate(reference.tie().sum(), reference.compared().sum()).alias("tie_rate"),
            reference.rate(reference.loss().sum(), reference.compared().sum()).alias("loss_rate"),
            _token_mean("kl_sum").alias("kl_token_mean"),
            _token_mean("log_ratio_sum").alias("log_ratio_token_mean"),
            pl.col("kl_mean").mean().alias("kl_mean_mean"),
            pl.col("kl_sum").mean().alias("kl_sum_mean"),
            pl.col("log_ratio_sum").mean().alias("log_ratio_sum_mean"),
            pl.col("n_kl_tokens").sum().alias("n_kl_tokens"),
            *_dist("response_length"),
            *_dist("response_chars"),
            pl.col("value_error_abs_mean").mean().alias("value_error_abs_mean"),
            pl.col("value_error_mean").mean().alias("value_error_mean"),
        )
        .join(group_step_summary(scalars), on="step", how="left")  # n_groups, zero_spread_share
        .sort("step")
    )
