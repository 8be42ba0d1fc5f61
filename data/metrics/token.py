"""Per-token metrics (see :mod:`data.metrics`): the long frame of one response's tokens, the metrics of each
token, and the per-response aggregates defined from them (the definition the fast path is tested
against)."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from data.metrics.critic import RETURN_FIELD
from data.metrics.families import INFER_GAP_TAIL

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
    schema = df.collect_schema()  # a DataFrame, or a LazyFrame (the token filter runs it in a helper)
    lists = [c for c in TOKEN_COLUMNS if c in schema]
    names = {**{c: TOKEN_COLUMNS[c] for c in lists}, **{c: file_column(c) for c in extras}}
    lengths = [pl.col(c).list.len().fill_null(0) for c in names]
    n = pl.max_horizontal(*lengths) if lengths else pl.lit(0)
    base = df.select("row", *names).with_columns(n.cast(pl.Int64).alias("__n")).filter(pl.col("__n") > 0)
    idx = pl.int_ranges(0, pl.col("__n"))
    aligned = [
        pl.col(c).fill_null(pl.lit([], dtype=schema[c])).list.gather(idx, null_on_oob=True).alias(short)
        for c, short in names.items()
    ]
    long = base.select("row", idx.alias("pos"), *aligned).explode(["pos", *names.values()])
    long = long.with_columns(pl.col(file_column(c)).cast(pl.Float64) for c in extras)
    have = long.collect_schema()
    for c, short in TOKEN_COLUMNS.items():
        if short not in have:
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
# A loss mask of the response's tokens (1 where the loss counts them, 0 where not), as trainers name it: miles'
# loss_mask, NeMo-RL's token_loss_mask (its dialect already cuts the arrays to mask 1), veRL's response_mask,
# OpenRLHF's action_mask. The first a response has decides which of its positions the gap counts.
LOSS_MASK_FIELDS = ("loss_mask", "token_loss_mask", "response_mask", "action_mask")


def loss_mask_field(names) -> str | None:
    """The loss mask among a response's per-token fields of the trainer's own (``names``), else None."""
    return next((f for f in LOSS_MASK_FIELDS if f in names), None)


def inference_field(names) -> str | None:
    """The inference engine's log-prob field among a response's per-token fields of the trainer's own
    (``names``): the first of :data:`INFERENCE_LOGPROB_FIELDS` there, else None."""
    return next((f for f in INFERENCE_LOGPROB_FIELDS if f in names), None)


# prime-rl's is_masked (prime_rl/trainer/rl/annotations.py: true where its loss masked a token out, such as a
# ratio outside its bounds), kept as 1 / 0 by its dialect. Not one of LOSS_MASK_FIELDS: its masking follows from
# the gap, so the gap is not counted under it; the token strip marks it as dropped all the same.
IS_MASKED = "is_masked"
# What the token strip marks as dropped from the loss, and the value that drops a position: a loss mask of
# LOSS_MASK_FIELDS at 0 (miles' loss_mask on a tool's result inside a multi-turn response), prime-rl's
# is_masked at 1. The first a response has is the one the legend names.
DROPPED_AT = {**dict.fromkeys(LOSS_MASK_FIELDS, 0.0), IS_MASKED: 1.0}


def dropped_field(names) -> str | None:
    """The field the token strip's marks come from among a response's per-token fields of the trainer's own
    (``names``): the first of :data:`DROPPED_AT` there, else None."""
    return next((f for f in DROPPED_AT if f in names), None)


def dropped_expr(names) -> pl.Expr:
    """True at the positions of a :func:`token_metrics` frame dropped from the loss: where its loss mask does
    not keep them (``loss_kept``, the positions the gap leaves out), or where prime-rl's is_masked is 1
    (``names``: the response's per-token fields of the trainer's own)."""
    out = ~pl.col("loss_kept")
    if IS_MASKED in names:
        out = out | (pl.col(file_column(IS_MASKED)) == DROPPED_AT[IS_MASKED]).fill_null(False)
    return out


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
    # The return: the trainer's own (its `returns`, a field of the file) where the response has one, else the
    # suffix sum within the response (γ = 1), where positions without a token reward have no return.
    suffix = pl.col("token_reward").fill_null(0.0).reverse().cum_sum().reverse().over("row")
    names = long.collect_schema().names()  # a LazyFrame's too, resolved once
    own = [c[len(file_column("")) :] for c in names if c.startswith(file_column(""))]
    inference = inference_field(own)
    gamma1 = pl.when(pl.col("token_reward").is_not_null()).then(suffix)
    given = pl.lit(False)
    ret = gamma1
    if file_column(RETURN_FIELD) in names:
        given = pl.col(file_column(RETURN_FIELD)).is_not_null().any().over("row")
        ret = pl.when(given).then(pl.col(file_column(RETURN_FIELD))).otherwise(gamma1)
    gap = pl.col("logprob") - pl.col(file_column(inference)) if inference else pl.lit(None, dtype=pl.Float64)
    return (
        long.with_columns(
            (pl.col("logprob") - pl.col("ref_logprob")).alias("log_ratio"),
            gap.cast(pl.Float64).alias("infer_gap"),
            _loss_kept(loss_mask_field(own)).alias("loss_kept"),
            pl.col("logprob").exp().alias("prob"),
            pl.col("ref_logprob").exp().alias("ref_prob"),
            ret.cast(pl.Float64).alias("return"),
            given.alias("return_from_file"),
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
            (pl.col("infer_gap").is_finite().fill_null(False) & pl.col("loss_kept")).alias("gap_valid"),
        )
    )


def _loss_kept(mask: str | None) -> pl.Expr:
    """Whether the loss mask keeps each position: where the response has a mask (any position of it present),
    a position whose mask is present and not 0; everywhere for a response without one."""
    if mask is None:
        return pl.lit(True)
    m = pl.col(file_column(mask))
    return ~m.is_not_null().any().over("row") | (m.is_not_null() & (m != 0)).fill_null(False)


def infer_gap_summary(long: pl.DataFrame) -> dict | None:
    """The inference–trainer mismatch of one response from the ``pos``, ``infer_gap`` and ``gap_valid`` of
    its :func:`token_metrics` frame, over the positions the gap counts (``gap_valid``: finite, kept by the
    loss mask): ``n`` (those positions), ``mean_abs`` (mean |gap|), ``max_abs`` (largest |gap|), ``max_pos``
    (its position; the first on a tie), ``over`` (share of them with |gap| > :data:`data.metrics.families.INFER_GAP_TAIL`, the tail).
    None when no position has one."""
    if "infer_gap" not in long.columns:
        return None
    valid = pl.col("gap_valid") if "gap_valid" in long.columns else pl.col("infer_gap").is_finite()
    g = long.filter(valid.fill_null(False)).select("pos", pl.col("infer_gap").cast(pl.Float64))
    if g.height == 0:
        return None
    g = g.with_columns(pl.col("infer_gap").abs().alias("abs")).sort(["abs", "pos"], descending=[True, False])
    return {
        "n": g.height,
        "mean_abs": g.get_column("abs").mean(),
        "max_abs": g.item(0, "abs"),
        "max_pos": g.item(0, "pos"),
        "over": (g.get_column("abs") > INFER_GAP_TAIL).mean(),
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
    gap = pl.col("infer_gap").filter(pl.col("gap_valid"))
    tail = pl.col("gap_valid") & (pl.col("infer_gap").abs() > INFER_GAP_TAIL)
    n_gap = pl.col("gap_valid").sum()
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
        *_critic_sums(),
        # The inference–trainer gap (data.metrics.registry: infer_gap_*), null without a position it counts.
        pl.when(n_gap > 0).then(n_gap).cast(pl.Int64).alias("infer_gap_n"),
        pl.when(n_gap > 0).then(tail.sum()).cast(pl.Int64).alias("infer_gap_tail_n"),
        gap.abs().mean().alias("infer_gap_abs_mean"),
        gap.abs().max().alias("infer_gap_abs_max"),
        pl.when(n_gap > 0).then(tail.sum() / n_gap).alias("infer_gap_tail_share"),
        pl.col("pos").filter(tail).min().cast(pl.Int64).alias("infer_gap_first_tail"),
        gap.mean().alias("infer_gap_mean"),
        gap.max().alias("infer_gap_max"),
    )


def _critic_sums() -> list[pl.Expr]:
    """The critic's sums of one response over its positions where the value error is finite (see
    ``critic_n`` … ``value_error_abs_sum`` in the registry); null for a response without one."""
    ve = pl.col("value_error")
    ok = ve.is_not_null() & ve.is_finite()
    n = ok.sum()
    r, e = pl.col("return").filter(ok), ve.filter(ok)
    sums = {
        "critic_n": n.cast(pl.Int64),
        "critic_file_n": pl.col("return_from_file").filter(ok).sum().cast(pl.Int64),
        "return_sum": r.sum(),
        "return_sq_sum": (r * r).sum(),
        "value_error_sum": e.sum(),
        "value_error_sq_sum": (e * e).sum(),
        "value_error_abs_sum": e.abs().sum(),
    }
    return [pl.when(n > 0).then(x).alias(k) for k, x in sums.items()]
