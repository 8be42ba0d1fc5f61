"""Per-token metrics (see :mod:`data.metrics`): the long frame of one response's tokens, the metrics of each
token, and the per-response aggregates defined from them (the definition the fast path is tested
against)."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

# Long (one row per token) column names, from the list fields of the contract.
TOKEN_COLUMNS = {
    "response_tokens": "token",
    "logprobs": "logprob",
    "ref_logprobs": "ref_logprob",
    "values": "value",
    "token_rewards": "token_reward",
}


def explode_tokens(df: pl.DataFrame, pad_tokens: tuple[str, ...], extras: Sequence[str] = ()) -> pl.DataFrame:
    """One row per (response, position): ``row, pos, token, logprob, ref_logprob, value, token_reward, is_pad``.

    ``df`` has a ``row`` column and the contract's list columns (possibly null). Arrays of unequal
    lengths are aligned from the first token: a position beyond a shorter array is null there, never
    shifted. A response with no token fields has no rows. ``extras``: per-token fields of the trainer's
    own (lists of numbers) aligned the same way, as Float64 columns named ``file_column(name)``.
    """
    lists = [c for c in TOKEN_COLUMNS if c in df.columns]
    names = {**{c: TOKEN_COLUMNS[c] for c in lists}, **{c: file_column(c) for c in extras}}
    lengths = [pl.col(c).list.len().fill_null(0) for c in names]
    n = pl.max_horizontal(*lengths) if lengths else pl.lit(0)
    base = df.select("row", *names).with_columns(n.cast(pl.Int64).alias("__n")).filter(pl.col("__n") > 0)
    idx = pl.int_ranges(0, pl.col("__n"))
    aligned = [
        pl.col(c).fill_null(pl.lit([], dtype=df.schema[c])).list.gather(idx, null_on_oob=True).alias(short)
        for c, short in names.items()
    ]
    long = base.select("row", idx.alias("pos"), *aligned).explode(["pos", *names.values()])
    long = long.with_columns(pl.col(file_column(c)).cast(pl.Float64) for c in extras)
    for c, short in TOKEN_COLUMNS.items():
        if short not in long.columns:
            dtype = pl.String if c == "response_tokens" else pl.Float32
            long = long.with_columns(pl.lit(None, dtype=dtype).alias(short))
    pads = list(pad_tokens)
    return long.with_columns(
        pl.col("logprob", "ref_logprob", "value", "token_reward").cast(pl.Float64),
        pl.col("token").is_in(pads).fill_null(False).alias("is_pad"),
    )


def file_column(name: str) -> str:
    """The column of a per-token field of the trainer's own in a token frame (apart from the metrics')."""
    return f"file:{name}"


def _k3(log_ratio: pl.Expr) -> pl.Expr:
    """k3 of the module docstring from the log-ratio x = logprob − ref_logprob (r = −x exactly)."""
    return (-log_ratio).exp() - 1.0 + log_ratio


def token_metrics(long: pl.DataFrame) -> pl.DataFrame:
    """Add the per-token metrics of the module docstring to an :func:`explode_tokens` frame."""
    # Suffix sum within each response; positions without a token reward have no return.
    suffix = pl.col("token_reward").fill_null(0.0).reverse().cum_sum().reverse().over("row")
    return (
        long.with_columns(
            (pl.col("logprob") - pl.col("ref_logprob")).alias("log_ratio"),
            pl.col("logprob").exp().alias("prob"),
            pl.col("ref_logprob").exp().alias("ref_prob"),
            pl.when(pl.col("token_reward").is_not_null()).then(suffix).alias("return"),
        )
        .with_columns(
            _k3(pl.col("log_ratio")).alias("kl"),
            (pl.col("value") - pl.col("return")).alias("value_error"),
        )
        .with_columns(
            (
                pl.col("log_ratio").is_not_null() & pl.col("log_ratio").is_finite() & pl.col("kl").is_finite()
            ).alias("kl_valid"),
        )
    )


def response_token_aggregates(long: pl.DataFrame) -> pl.DataFrame:
    """Per-response aggregates of a :func:`token_metrics` frame, one row per ``row``: the definition.

    ``response_length`` counts positions that have a token string that is not a pad; for responses
    without ``response_tokens`` it counts the log-prob positions instead. Ingest computes the same values
    with :func:`response_list_aggregates` (faster); tests hold the two equal.
    """
    valid = pl.col("kl_valid")
    n_kl = valid.sum()
    ve = pl.col("value_error")
    return long.group_by("row").agg(
        pl.when(pl.col("token").is_not_null().any())
        .then((pl.col("token").is_not_null() & ~pl.col("is_pad")).sum())
        .otherwise(pl.col("logprob").is_not_null().sum())
        .cast(pl.Int64)
        .alias("response_length"),
        n_kl.cast(pl.Int64).alias("n_kl_tokens"),
        pl.col("log_ratio").filter(valid).sum().alias("log_ratio_sum"),
        pl.col("kl").filter(valid).sum().alias("kl_sum"),
        pl.col("log_ratio").filter(valid).mean().alias("log_ratio_mean"),
        pl.col("kl").filter(valid).mean().alias("kl_mean"),
        ve.filter(ve.is_not_null() & ve.is_finite()).mean().alias("value_error_mean"),
        ve.filter(ve.is_not_null() & ve.is_finite()).abs().mean().alias("value_error_abs_mean"),
        pl.when(pl.col("token_reward").is_not_null().any())
        .then(pl.col("token_reward").sum())
        .alias("token_reward_sum"),
    )
