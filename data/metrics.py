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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import polars as pl
import pyarrow as pa

from data.prompts import group_step_summary

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


# ---- per response --------------------------------------------------------------------------------------


def strip_pads(expr: pl.Expr, pad_tokens: tuple[str, ...]) -> pl.Expr:
    """Text with every pad token removed (literal match)."""
    for tok in pad_tokens:
        expr = expr.str.replace_all(tok, "", literal=True)
    return expr


def prompt_key_text(pad_tokens: tuple[str, ...]) -> pl.Expr:
    """The text that identifies a prompt for grouping: pads removed, surrounding whitespace stripped."""
    return strip_pads(pl.col("prompt"), pad_tokens).str.strip_chars()


AGGREGATE_COLUMNS = {
    "response_length": pl.Int64,
    "n_kl_tokens": pl.Int64,
    "log_ratio_sum": pl.Float64,
    "kl_sum": pl.Float64,
    "log_ratio_mean": pl.Float64,
    "kl_mean": pl.Float64,
    "value_error_mean": pl.Float64,
    "value_error_abs_mean": pl.Float64,
    "token_reward_sum": pl.Float64,
}


class _Flat(NamedTuple):
    """A list column as one flat array: each row's length (0 for a null list) and where its elements start."""

    lens: np.ndarray  # int64, one per row
    starts: np.ndarray  # int64, one per row
    values: np.ndarray  # the list's float type (null -> NaN; no copy without nulls) or, for token
    # strings, whether the token is not a pad; arithmetic on them is done in float64
    present: np.ndarray | None  # bool: the element is not null (None: no element is null)

    @property
    def segments(self) -> _Segments:
        return _Segments(self.lens, self.starts)

    def where_present(self, idx: np.ndarray | slice = slice(None)) -> np.ndarray | None:
        return None if self.present is None else self.present[idx]


def _starts(lens: np.ndarray) -> np.ndarray:
    starts = np.zeros(len(lens), np.int64)
    np.cumsum(lens[:-1], out=starts[1:])
    return starts


def _flat(df: pl.DataFrame, c: str, pad_tokens: tuple[str, ...] = ()) -> _Flat:
    if c not in df.columns:  # an absent field: every array null
        zeros = np.zeros(df.height, np.int64)
        return _Flat(zeros, zeros, np.zeros(0, bool if c == "response_tokens" else np.float64), None)
    s = df.get_column(c)
    lens = s.list.len().fill_null(0).cast(pl.Int64).to_numpy()
    flat = s.explode(empty_as_null=False, keep_nulls=False)
    present = flat.is_not_null().to_numpy() if flat.null_count() else None
    if c == "response_tokens":
        values = (~flat.is_in(list(pad_tokens))).fill_null(False).to_numpy()
    else:
        values = flat.to_numpy()
    return _Flat(lens, _starts(lens), values, present)


def _both(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    return b if a is None else a if b is None else a & b


class _Segments(NamedTuple):
    """Consecutive runs of a flat array, one per row (possibly empty), summed with :meth:`sum`."""

    lens: np.ndarray
    starts: np.ndarray

    def sum(self, values: np.ndarray, keep: np.ndarray | None = None) -> np.ndarray:
        """Per row: the sum of ``values`` where ``keep`` (everywhere when None); 0 for a row with none.
        Booleans are counted."""
        if keep is not None and not keep.all():
            values = np.where(keep, values, False if values.dtype == bool else 0.0)
        out = np.zeros(len(self.lens), np.int64 if values.dtype == bool else np.float64)
        full = self.lens > 0
        if full.any():  # each non-empty run ends where the next one starts
            out[full] = np.add.reduceat(values, self.starts[full], dtype=out.dtype)
        return out


def _pair(a: _Flat, b: _Flat) -> tuple[_Segments, np.ndarray | slice, np.ndarray | slice]:
    """The positions both arrays of a row have (aligned from the first, each pair cut to its shorter
    array): their segments, and the index of each into ``a`` and into ``b``."""
    if np.array_equal(a.lens, b.lens):  # the common case: the same layout
        return a.segments, slice(None), slice(None)
    n = np.minimum(a.lens, b.lens)
    first = _starts(n)
    rows = np.repeat(np.arange(len(n)), n)
    pos = np.arange(len(rows)) - first[rows]
    return _Segments(n, first), a.starts[rows] + pos, b.starts[rows] + pos


def _suffix_sums(f: _Flat) -> np.ndarray:
    """Per element: the sum of it and the elements after it in its row, nulls counted as 0 (a return with
    gamma = 1). Summed from the end of each row, as the definition does, where NaN or infinities occur."""
    x = f.values if f.present is None else np.where(f.present, f.values, 0.0)
    c = np.zeros(len(x) + 1)
    np.cumsum(x, dtype=np.float64, out=c[1:])
    if np.isfinite(c[-1]) and np.isfinite(x).all():  # no NaN, infinity or overflow
        # One pass over all rows: the suffix sum at j is (sum up to the row's end) - (sum before j). Its
        # rounding error grows with the running total of the chunk, not of the row: on the 500 MB
        # benchmark run the value errors differ from per-row sums by at most 1.2e-13.
        out = np.repeat(c[f.starts + f.lens], f.lens)
        out -= c[:-1]
        return out
    out = np.empty(len(x))
    for s, n in zip(f.starts.tolist(), f.lens.tolist(), strict=True):
        out[s : s + n] = np.cumsum(x[s : s + n][::-1], dtype=np.float64)[::-1]
    return out


def _nulls_where(values: np.ndarray, mask: np.ndarray) -> pa.Array:
    return pa.array(values, mask=mask)


def response_list_aggregates(df: pl.DataFrame, pad_tokens: tuple[str, ...]) -> pl.DataFrame:
    """:func:`response_token_aggregates` computed on the list columns directly, without one row per token.

    Same definitions and values (a test compares the two on random arrays); ingest uses this one because
    exploding every token and grouping them again costs about four times as much. Each list column is taken
    as one flat array, positions are matched as in :func:`explode_tokens` (aligned from the first; a pair
    of arrays is cut to its shorter one), and each response's sums are sums over its run of the flat
    array. Returns the columns of ``AGGREGATE_COLUMNS`` for the rows of ``df``, in order; null for a
    response without token arrays.
    """
    lp, ref, val, tr = (_flat(df, c) for c in ("logprobs", "ref_logprobs", "values", "token_rewards"))
    tok = _flat(df, "response_tokens", pad_tokens)
    with np.errstate(all="ignore"):
        # Log-ratio and k3 (the formula of _k3, on arrays) where both log-probs are present and finite (k3
        # is not finite where the log-ratio is not). In place: each fresh array of this size costs its page
        # faults.
        seg, ia, ib = _pair(lp, ref)
        lr = np.subtract(lp.values[ia], ref.values[ib], dtype=np.float64)
        kl = np.negative(lr)
        np.exp(kl, out=kl)
        kl -= 1.0
        kl += lr
        valid = _both(_both(lp.where_present(ia), ref.where_present(ib)), np.isfinite(kl))
        n_kl = seg.sum(valid)
        lr_sum, kl_sum = seg.sum(lr, valid), seg.sum(kl, valid)
        # Value error against the return (the suffix sum of the token rewards) where both are present.
        seg_v, iv, it = _pair(val, tr)
        ve = np.subtract(val.values[iv], _suffix_sums(tr)[it], dtype=np.float64)
        ve_ok = _both(_both(val.where_present(iv), tr.where_present(it)), np.isfinite(ve))
        n_ve = seg_v.sum(ve_ok)
        ve_sum = seg_v.sum(ve, ve_ok)
        ve_abs = seg_v.sum(np.abs(ve, out=ve), ve_ok)
        n_tr = tr.segments.sum(np.ones(len(tr.values), bool), tr.present)
        tr_sum = tr.segments.sum(tr.values, tr.present)
        # Length: tokens present and not pads; for a response without token strings, its log-probs.
        n_tok = tok.segments.sum(np.ones(len(tok.values), bool), tok.present)
        n_kept = tok.segments.sum(tok.values, tok.present)
        n_lp = lp.segments.sum(np.ones(len(lp.values), bool), lp.present)
        length = np.where(n_tok > 0, n_kept, n_lp)
        lr_mean, kl_mean = lr_sum / n_kl, kl_sum / n_kl
        ve_mean, ve_abs_mean = ve_sum / n_ve, ve_abs / n_ve
    none = np.maximum.reduce([f.lens for f in (lp, ref, val, tr, tok)]) == 0
    return pl.from_arrow(
        pa.table(
            {
                "response_length": _nulls_where(length, none),
                "n_kl_tokens": _nulls_where(n_kl, none),
                "log_ratio_sum": _nulls_where(lr_sum, none),
                "kl_sum": _nulls_where(kl_sum, none),
                "log_ratio_mean": _nulls_where(lr_mean, n_kl == 0),
                "kl_mean": _nulls_where(kl_mean, n_kl == 0),
                "value_error_mean": _nulls_where(ve_mean, n_ve == 0),
                "value_error_abs_mean": _nulls_where(ve_abs_mean, n_ve == 0),
                "token_reward_sum": _nulls_where(tr_sum, n_tr == 0),
            }
        )
    ).cast(AGGREGATE_COLUMNS)


CLEAN_RESPONSE = "__response_clean"


def derive_response_metrics(
    df: pl.DataFrame, pad_tokens: tuple[str, ...], keep_clean: bool = False
) -> pl.DataFrame:
    """Add the per-response metric columns to a conformed chunk (with ``keep_clean``, also the response
    text without pads as ``CLEAN_RESPONSE``, for the caller to use and drop)."""
    agg = response_list_aggregates(df, pad_tokens)
    out = pl.concat([df, agg], how="horizontal").with_columns(
        strip_pads(pl.col("response"), pad_tokens).alias(CLEAN_RESPONSE)
    )
    out = out.with_columns(
        (pl.col("reward") - pl.col("ref_reward")).alias("reward_gain"),
        pl.col(CLEAN_RESPONSE).str.len_chars().cast(pl.Int64).alias("response_chars"),
    )
    return out if keep_clean else out.drop(CLEAN_RESPONSE)


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
            *_dist("response_chars"),
            pl.col("value_error_abs_mean").mean().alias("value_error_abs_mean"),
            pl.col("value_error_mean").mean().alias("value_error_mean"),
        )
        .join(group_step_summary(scalars), on="step", how="left")  # n_groups, zero_spread_share
        .sort("step")
    )
