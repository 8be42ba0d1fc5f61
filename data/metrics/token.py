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


# The inference engine's log-prob of each response token, as the trainers that keep it beside their own name
# it: NeMo-RL's generation_logprobs (its train_data_step dumps), veRL's and OpenRLHF's rollout_log_probs (their
# batches / experiences, as hand-written loggers dump them), prime-rl's inference_logprobs (its trainer's
# batches). The first a response has is the one its gap is taken against.
INFERENCE_LOGPROB_FIELDS = ("generation_logprobs", "rollout_log_probs", "inference_logprobs")
# |trainer − inference log-prob| above which a token counts as mismatched in :func:`infer_gap_summary` (nats).
INFER_GAP_THRESHOLD = 0.1


def inference_field(names) -> str | None:
    """The inference engine's log-prob field among a response's per-token fields of the trainer's own
    (``names``): the first of :data:`INFERENCE_LOGPROB_FIELDS` there, else None."""
    return next((f for f in INFERENCE_LOGPROB_FIELDS if f in names), None)


# The trainer's loss mask among a response's per-token fields of its own, and the value that drops a position
# from the loss: miles' loss_mask (miles/utils/types.py, Sample.loss_mask: 1 trained, 0 not, such as a tool's
# result inside a multi-turn response) and NeMo-RL's token_loss_mask (1 trained); prime-rl's is_masked
# (prime_rl/trainer/rl/annotations.py: true where the loss masked the token out), kept as 1 / 0 by its
# dialect. The first of these a response has is the one the token page shows.
LOSS_MASK_FIELDS = {"loss_mask": 0.0, "token_loss_mask": 0.0, "is_masked": 1.0}


def loss_mask_field(names) -> str | None:
    """The loss mask among a response's per-token fields of the trainer's own (``names``): the first of
    :data:`LOSS_MASK_FIELDS` there, else None."""
    return next((f for f in LOSS_MASK_FIELDS if f in names), None)


def masked_expr(field: str | None) -> pl.Expr:
    """True at the positions the loss mask ``field`` (a :data:`LOSS_MASK_FIELDS` name, in a token frame as
    ``file_column(field)``) drops from the loss; False elsewhere, where it has no value, and without one."""
    if field is None:
        return pl.lit(False)
    return (pl.col(file_column(field)) == LOSS_MASK_FIELDS[field]).fill_null(False)


def file_column(name: str) -> str:
    """The column of a per-token field of the trainer's own in a token frame (apart from the metrics')."""
    return f"file:{name}"


def _k3(log_ratio: pl.Expr) -> pl.Expr:
    """k3 of the module docstring from the log-ratio x = logprob − ref_logprob (r = −x exactly)."""
    return (-log_ratio).exp() - 1.0 + log_ratio


def token_metrics(long: pl.DataFrame) -> pl.DataFrame:
    """Add the per-token metrics of the module docstring to an :func:`explode_tokens` frame, and
    ``infer_gap = logprob − inference log-prob`` where the frame has an inference engine's log-prob column
    (``file_column`` of one of :data:`INFERENCE_LOGPROB_FIELDS`; null without one), with what the trainers
    derive from it: ``imp_ratio = exp(infer_gap)`` (miles' imp_ratio) and ``mismatch_kl = imp_ratio −
    infer_gap − 1`` (prime-rl's mismatch_kl). Like the log-ratio it is
    the plain difference: a NaN or infinite side gives a NaN or infinite gap, left to the summaries to skip."""
    # Suffix sum within each response; positions without a token reward have no return.
    suffix = pl.col("token_reward").fill_null(0.0).reverse().cum_sum().reverse().over("row")
    inference = inference_field(
        [c[len(file_column("")) :] for c in long.columns if c.startswith(file_column(""))]
    )
    gap = pl.col("logprob") - pl.col(file_column(inference)) if inference else pl.lit(None, dtype=pl.Float64)
    return (
        long.with_columns(
            (pl.col("logprob") - pl.col("ref_logprob")).alias("log_ratio"),
            gap.cast(pl.Float64).alias("infer_gap"),
            pl.col("logprob").exp().alias("prob"),
            pl.col("ref_logprob").exp().alias("ref_prob"),
            pl.when(pl.col("token_reward").is_not_null()).then(suffix).alias("return"),
        )
        .with_columns(
            _k3(pl.col("log_ratio")).alias("kl"),
            (pl.col("value") - pl.col("return")).alias("value_error"),
            pl.col("infer_gap").exp().alias("imp_ratio"),
            (pl.col("infer_gap").exp() - pl.col("infer_gap") - 1.0).alias("mismatch_kl"),
        )
        .with_columns(
            (
                pl.col("log_ratio").is_not_null() & pl.col("log_ratio").is_finite() & pl.col("kl").is_finite()
            ).alias("kl_valid"),
        )
    )


def infer_gap_summary(long: pl.DataFrame) -> dict | None:
    """The inference–trainer mismatch of one response from the ``pos`` and ``infer_gap`` of its
    :func:`token_metrics` frame, over the positions where the gap is finite: ``n`` (those positions),
    ``mean_abs`` (mean |gap|), ``max_abs`` (largest |gap|), ``max_pos`` (its position; the first on a tie),
    ``over`` (share of them with |gap| > :data:`INFER_GAP_THRESHOLD`). None when no position has one."""
    if "infer_gap" not in long.columns:
        return None
    g = long.select("pos", pl.col("infer_gap").cast(pl.Float64))
    g = g.filter(pl.col("infer_gap").is_not_null() & pl.col("infer_gap").is_finite())
    if g.height == 0:
        return None
    g = g.with_columns(pl.col("infer_gap").abs().alias("abs")).sort(["abs", "pos"], descending=[True, False])
    return {
        "n": g.height,
        "mean_abs": g.get_column("abs").mean(),
        "max_abs": g.item(0, "abs"),
        "max_pos": g.item(0, "pos"),
        "over": (g.get_column("abs") > INFER_GAP_THRESHOLD).mean(),
    }


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
