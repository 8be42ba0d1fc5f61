"""A response against its reference response: a win, a tie or a loss, defined once.

A response is compared with its reference when its reward and its reference reward are both finite
numbers: a missing, NaN or infinite reward is no comparison (as the reward gain leaves it out; Polars
orders NaN above every number, so a NaN reward would otherwise count as a win). The win rate is the
share of wins among the compared responses (null when none is compared), and so are the tie and loss
rates; the three add up to 1.
"""

from __future__ import annotations

import polars as pl


def compared() -> pl.Expr:
    """True for a response whose reward and reference reward are both finite."""
    return (pl.col("reward").is_finite() & pl.col("ref_reward").is_finite()).fill_null(False)


def win() -> pl.Expr:
    """1 for a win (reward > reference reward), 0 for a tie or a loss, null when not compared."""
    return pl.when(compared()).then((pl.col("reward") > pl.col("ref_reward")).cast(pl.Int64))


def tie() -> pl.Expr:
    """1 for a tie (reward = reference reward), 0 otherwise, null when not compared."""
    return pl.when(compared()).then((pl.col("reward") == pl.col("ref_reward")).cast(pl.Int64))


def loss() -> pl.Expr:
    """1 for a loss (reward < reference reward), 0 otherwise, null when not compared."""
    return pl.when(compared()).then((pl.col("reward") < pl.col("ref_reward")).cast(pl.Int64))


def rate(count: pl.Expr, n: pl.Expr) -> pl.Expr:
    """``count / n`` as a share; null when ``n`` is 0."""
    return pl.when(n > 0).then(count.cast(pl.Float64) / n)
