"""The per-run summary table of the compare page: one row of headline figures per run, from its per-step
summary (see :func:`data.compare.curves.run_frame`)."""

from __future__ import annotations

import math

import polars as pl

# The length trend compares the mean response length over the first and over the last tenth of the
# run's steps (at least one step each): "length, first 10 %" → "length, last 10 %".
TREND_SHARE = 0.1

# Column -> label, as the table shows them; KINDS: how each is formatted (``text``, ``int`` a count,
# ``step``, ``num``, ``share``).
COLUMNS = {
    "run": "run",
    "steps": "steps",
    "first_step": "first step",
    "last_step": "last step",
    "responses": "responses",
    "reward_last": "reward, last step (mean)",
    "reward_best": "reward, best step (mean)",
    "reward_best_step": "best step",
    "kl_last": "KL per token (k3), last step",
    "length_first": "length, first 10 % of steps",
    "length_last": "length, last 10 % of steps",
    "length_unit": "length unit",
    "zero_spread_share": "share of zero-spread groups",
}
KINDS = {
    "run": "text",
    "steps": "int",
    "first_step": "step",
    "last_step": "step",
    "responses": "int",
    "reward_best_step": "step",
    "length_unit": "text",
    "zero_spread_share": "share",
}


def _num(v) -> float | None:
    return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else float(v)


def _mean(frame: pl.DataFrame, col: str) -> float | None:
    if col not in frame.columns or frame.height == 0:
        return None
    vals = frame.get_column(col).cast(pl.Float64)
    vals = vals.filter(vals.is_finite())
    return _num(vals.mean()) if vals.len() else None


def summary_row(run: str, frame: pl.DataFrame) -> dict:
    """One run's row: ``steps`` (count), ``first_step`` / ``last_step``, ``responses`` (all steps),
    ``reward_last`` (the mean reward of the last step), ``reward_best`` and ``reward_best_step`` (the
    highest per-step mean reward and its step; the first on a tie), ``kl_last`` (KL per token (k3) at the
    last step that has one; None without log-probs), ``length_first`` / ``length_last`` (see
    :data:`TREND_SHARE`; tokens, else characters: ``length_unit``), ``zero_spread_share`` (zero-spread
    groups / groups of 2+ responses over the whole run; None without groups)."""
    f = frame.sort("step")
    row = dict.fromkeys(COLUMNS)
    row["run"] = run
    row["steps"] = f.height
    if f.height == 0:
        row["responses"] = 0
        return row
    row["first_step"] = int(f.item(0, "step"))
    row["last_step"] = int(f.item(f.height - 1, "step"))
    row["responses"] = int(f.get_column("n").sum())
    rewards = f.select("step", pl.col("reward_mean").cast(pl.Float64)).filter(
        pl.col("reward_mean").is_finite()
    )
    if rewards.height:
        row["reward_last"] = _num(f.item(f.height - 1, "reward_mean"))
        best = rewards.sort("reward_mean", "step", descending=[True, False]).row(0)
        row["reward_best_step"], row["reward_best"] = int(best[0]), float(best[1])
    if "kl_token_mean" in f.columns:
        kl = f.get_column("kl_token_mean").cast(pl.Float64)
        kl = kl.filter(kl.is_finite())
        row["kl_last"] = float(kl[-1]) if kl.len() else None
    k = max(1, math.ceil(f.height * TREND_SHARE))
    for col, unit in (("response_length_mean", "tokens"), ("response_chars_mean", "characters")):
        if _mean(f, col) is not None:
            row["length_first"], row["length_last"] = _mean(f.head(k), col), _mean(f.tail(k), col)
            row["length_unit"] = unit
            break
    if "n_groups" in f.columns and "zero_spread_share" in f.columns:
        g = f.select(pl.col("n_groups").cast(pl.Float64), pl.col("zero_spread_share").cast(pl.Float64))
        g = g.filter(pl.col("n_groups") > 0)
        total = g.get_column("n_groups").sum()
        if total:
            zero = (g.get_column("n_groups") * g.get_column("zero_spread_share").fill_null(0.0)).sum()
            row["zero_spread_share"] = float(zero / total)
    return row


def summary_table(frames: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """:func:`summary_row` of each run, in the given order, as one frame with the :data:`COLUMNS`."""
    rows = [summary_row(run, f) for run, f in frames.items()]
    schema = {
        "run": pl.String,
        "steps": pl.Int64,
        "first_step": pl.Int64,
        "last_step": pl.Int64,
        "responses": pl.Int64,
        "reward_last": pl.Float64,
        "reward_best": pl.Float64,
        "reward_best_step": pl.Int64,
        "kl_last": pl.Float64,
        "length_first": pl.Float64,
        "length_last": pl.Float64,
        "length_unit": pl.String,
        "zero_spread_share": pl.Float64,
    }
    return pl.DataFrame(rows, schema=schema)
