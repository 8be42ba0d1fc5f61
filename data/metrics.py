"""Every metric the app shows, defined once: per token, per response and per step.

Per token t (pi = policy, pi_ref = reference), following DESIGN.md:
  log_ratio_t = logprob_t - ref_logprob_t
  kl_t        = exp(r) - 1 - r with r = ref_logprob_t - logprob_t   (k3 estimator of KL(pi || pi_ref), >= 0)
  prob_t      = exp(logprob_t), ref_prob_t = exp(ref_logprob_t)
  return_t    = sum_{k >= t} token_reward_k   (gamma = 1)
  value_error_t = value_t - return_t
Per response: sums and means over valid positions (both log-probs present and finite: the trainer's arrays
say which positions were scored, so a pad-looking token such as an eos that carries log-probs counts),
length in tokens without pads, reward gain = reward - ref_reward.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from data.prompts import group_step_summary
from data.schema import FLOAT_LIST_FIELDS

# Long (one row per token) column names, from the list fields of the contract.
TOKEN_COLUMNS = {
    "response_tokens": "token",
    "logprobs": "logprob",
    "ref_logprobs": "ref_logprob",
    "values": "value",
    "token_rewards": "token_reward",
}


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
            "1 − distinct word 3-grams / word 3-grams of the response (see data/degeneration.py)",
        ),
        Metric(
            "length_ratio",
            "length ÷ step median",
            "response length over the median length of its step (tokens, else characters)",
        ),
    ]
}


def label(key: str) -> str:
    """The exact UI label of a metric (falls back to the key for extra columns)."""
    m = METRICS.get(key)
    return m.label if m else key


# ---- per token ---------------------------------------------------------------------------------------


def explode_tokens(df: pl.DataFrame, pad_tokens: tuple[str, ...]) -> pl.DataFrame:
    """One row per (response, position): ``row, pos, token, logprob, ref_logprob, value, token_reward, is_pad``.

    ``df`` has a ``row`` column and the contract's list columns (possibly null). Arrays of unequal
    lengths are aligned from the first token: a position beyond a shorter array is null there, never
    shifted. A response with no token fields has no rows.
    """
    lists = [c for c in TOKEN_COLUMNS if c in df.columns]
    lengths = [pl.col(c).list.len().fill_null(0) for c in lists]
    n = pl.max_horizontal(*lengths) if lengths else pl.lit(0)
    base = df.select("row", *lists).with_columns(n.cast(pl.Int64).alias("__n")).filter(pl.col("__n") > 0)
    idx = pl.int_ranges(0, pl.col("__n"))
    aligned = [
        pl.col(c)
        .fill_null(pl.lit([], dtype=df.schema[c]))
        .list.gather(idx, null_on_oob=True)
        .alias(TOKEN_COLUMNS[c])
        for c in lists
    ]
    long = base.select("row", idx.alias("pos"), *aligned).explode(["pos", *(TOKEN_COLUMNS[c] for c in lists)])
    for c, short in TOKEN_COLUMNS.items():
        if short not in long.columns:
            dtype = pl.String if c == "response_tokens" else pl.Float32
            long = long.with_columns(pl.lit(None, dtype=dtype).alias(short))
    pads = list(pad_tokens)
    return long.with_columns(
        pl.col("logprob", "ref_logprob", "value", "token_reward").cast(pl.Float64),
        pl.col("token").is_in(pads).fill_null(False).alias("is_pad"),
    )


def token_metrics(long: pl.DataFrame) -> pl.DataFrame:
    """Add the per-token metrics of the module docstring to an :func:`explode_tokens` frame."""
    r = pl.col("ref_logprob") - pl.col("logprob")
    # Suffix sum within each response; positions without a token reward have no return.
    suffix = pl.col("token_reward").fill_null(0.0).reverse().cum_sum().reverse().over("row")
    return long.with_columns(
        (pl.col("logprob") - pl.col("ref_logprob")).alias("log_ratio"),
        (r.exp() - 1.0 - r).alias("kl"),
        pl.col("logprob").exp().alias("prob"),
        pl.col("ref_logprob").exp().alias("ref_prob"),
        pl.when(pl.col("token_reward").is_not_null()).then(suffix).alias("return"),
    ).with_columns(
        (pl.col("value") - pl.col("return")).alias("value_error"),
        (
            pl.col("log_ratio").is_not_null() & pl.col("log_ratio").is_finite() & pl.col("kl").is_finite()
        ).alias("kl_valid"),
    )


def response_token_aggregates(long: pl.DataFrame, has_token_strings: pl.Series | None = None) -> pl.DataFrame:
    """Per-response aggregates of a :func:`token_metrics` frame, one row per ``row``.

    ``response_length`` counts positions that have a token string that is not a pad; for responses
    without ``response_tokens`` it counts the log-prob positions instead.
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


# ---- per response --------------------------------------------------------------------------------------


def strip_pads(expr: pl.Expr, pad_tokens: tuple[str, ...]) -> pl.Expr:
    """Text with every pad token removed (literal match)."""
    for tok in pad_tokens:
        expr = expr.str.replace_all(tok, "", literal=True)
    return expr


def prompt_key_text(pad_tokens: tuple[str, ...]) -> pl.Expr:
    """The text that identifies a prompt for grouping: pads removed, surrounding whitespace stripped."""
    return strip_pads(pl.col("prompt"), pad_tokens).str.strip_chars()


def derive_response_metrics(df: pl.DataFrame, pad_tokens: tuple[str, ...]) -> pl.DataFrame:
    """Add the per-response metric columns to a conformed chunk (needs a ``row`` column)."""
    has_lists = any(
        df.get_column(c).null_count() < df.height for c in FLOAT_LIST_FIELDS + ("response_tokens",)
    )
    if has_lists and df.height:
        agg = response_token_aggregates(token_metrics(explode_tokens(df, pad_tokens)))
        df = df.join(agg, on="row", how="left", maintain_order="left")
    else:
        df = df.with_columns(
            pl.lit(None, dtype=pl.Int64).alias("response_length"),
            pl.lit(None, dtype=pl.Int64).alias("n_kl_tokens"),
            *(
                pl.lit(None, dtype=pl.Float64).alias(c)
                for c in (
                    "log_ratio_sum",
                    "kl_sum",
                    "log_ratio_mean",
                    "kl_mean",
                    "value_error_mean",
                    "value_error_abs_mean",
                    "token_reward_sum",
                )
            ),
        )
    clean_response = strip_pads(pl.col("response"), pad_tokens)
    return df.with_columns(
        (pl.col("reward") - pl.col("ref_reward")).alias("reward_gain"),
        clean_response.str.len_chars().cast(pl.Int64).alias("response_chars"),
    )


# ---- per step ------------------------------------------------------------------------------------------

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

    ``win_rate`` is the share of responses with ``reward > ref_reward`` among those that have both;
    ``kl_token_mean`` is Σ kl_sum / Σ n_kl_tokens over the step (a mean over all its tokens), while
    ``kl_mean_mean`` averages the per-response means.
    """
    both = pl.col("reward").is_not_null() & pl.col("ref_reward").is_not_null()
    return (
        scalars.group_by("step")
        .agg(
            pl.len().alias("n"),
            *_dist("reward"),
            *_dist("ref_reward"),
            *_dist("reward_gain"),
            pl.col("ref_reward").is_not_null().sum().alias("n_ref"),
            both.sum().alias("n_both"),
            (pl.col("reward") > pl.col("ref_reward")).filter(both).mean().alias("win_rate"),
            (pl.col("reward") < pl.col("ref_reward")).filter(both).mean().alias("loss_rate"),
            _token_mean("kl_sum").alias("kl_token_mean"),
            _token_mean("log_ratio_sum").alias("log_ratio_token_mean"),
            pl.col("kl_mean").mean().alias("kl_mean_mean"),
            pl.col("kl_sum").mean().alias("kl_sum_mean"),
            pl.col("log_ratio_sum").mean().alias("log_ratio_sum_mean"),
            pl.col("n_kl_tokens").sum().alias("n_kl_tokens"),
            *_dist("response_length"),
            pl.col("response_chars").mean().alias("response_chars_mean"),
            pl.col("value_error_abs_mean").mean().alias("value_error_abs_mean"),
            pl.col("value_error_mean").mean().alias("value_error_mean"),
        )
        .join(group_step_summary(scalars), on="step", how="left")  # n_groups, zero_spread_share
        .sort("step")
    )
