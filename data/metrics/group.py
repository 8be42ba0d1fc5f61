"""Response groups and prompts across training: group statistics, recomputed advantages, per-prompt
aggregates and trends (the maths the step summary and the prompts page share).

Prompts are grouped by the store's ``prompt_key`` (a hash of the prompt with pad tokens removed and
surrounding whitespace stripped, computed at ingest).
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from data.metrics import reference
from data.metrics.degeneration import length_ratio_from, step_length_medians

# ---- definitions -----------------------------------------------------------------------------------------

# Early vs late: the first and the last quarter of the distinct steps a prompt appears in, rounded up
# (a prompt seen in k steps: ceil(k / 4) steps at each end; k = 2 compares its first and last step).
QUARTER = 0.25
# Trend threshold, in units of the run's reward standard deviation σ (over all responses, ddof = 1):
# late − early > 0.2 σ is "improved", < −0.2 σ "regressed", otherwise "flat" (0.2 is Cohen's "small"
# effect). A prompt whose responses never beat their reference response takes precedence over the three;
# a prompt seen in one step only has no trend.
TREND_EFFECT = 0.2
TRENDS = {
    "improved": "improved",
    "regressed": "regressed",
    "flat": "flat",
    "never": "never beats the reference",
    "single": "one step only",
}
# A group is the responses of one step that share a ``group_id`` (when the run has one) or else a
# prompt; only groups of at least two responses with a finite reward count (a single response has no
# spread). A zero-spread group (every reward equal) gives no learning signal to GRPO / RLOO.
MIN_GROUP = 2
# Recomputed advantages: (reward − group mean) / group std with the sample std (ddof = 1), as TRL's
# GRPO does (it adds 1e-4 to the std; we do not); 0 when the group's std is 0.
ADVANTAGE_DDOF = 1


def finite(col: str) -> pl.Expr:
    return pl.col(col).is_not_null() & pl.col(col).is_finite()


def _ratio(num: pl.Expr, den: pl.Expr) -> pl.Expr:
    return pl.when(den > 0).then(num / den)


# ---- groups ----------------------------------------------------------------------------------------------


def prompt_hash() -> pl.Expr:
    """``prompt_key`` as a 64-bit hash: the in-memory grouping key (integer keys group several times faster
    than strings; a collision among a run's prompts has a probability of about n² / 2^65)."""
    return pl.col("prompt_key").hash(seed=1)


def group_key(names: list[str] | set[str]) -> pl.Expr:
    """Within-step group of a response, as a 64-bit hash: of ``group_id`` when the run has one (falling back
    to the prompt where it is missing), else of the prompt. Null when neither column exists."""
    by_prompt = prompt_hash() if "prompt_key" in names else pl.lit(None, pl.UInt64)
    if "group_id" in names:
        gid = pl.col("group_id")
        return pl.when(gid.is_not_null()).then(gid.cast(pl.String).hash(seed=2)).otherwise(by_prompt)
    return by_prompt


def group_stats(rows: pl.LazyFrame) -> pl.LazyFrame:
    """One row per (step, group): ``group`` (see :func:`group_key`), ``group_n``, ``group_mean``,
    ``group_std``, ``group_min``, ``group_max`` over the finite rewards, ``group_spread`` (max − min) and
    ``zero_spread`` (both only for groups of ``MIN_GROUP``+), ``learning_signal`` (see
    :func:`learning_signal`) and ``__p``, the group's :func:`prompt_hash` (the smallest, as a
    group shares one prompt in practice).

    ``rows`` needs ``step``, ``reward`` and ``prompt_key`` (or ``group_id``).
    """
    names = rows.collect_schema().names()
    r = pl.col("__r")
    p = [pl.col("__p").min()] if "prompt_key" in names else []
    # Mask elementwise, then plain aggregations: a filter inside ``agg`` is far slower per group.
    return (
        rows.with_columns(
            group_key(names).alias("group"),
            pl.when(finite("reward")).then(pl.col("reward")).alias("__r"),
            *([prompt_hash().alias("__p")] if p else []),
        )
        .group_by("step", "group")
        .agg(
            r.count().alias("group_n"),
            r.mean().alias("group_mean"),
            r.std(ddof=ADVANTAGE_DDOF).alias("group_std"),
            r.min().alias("group_min"),
            r.max().alias("group_max"),
            *p,
        )
        # A single response has no spread (null, not 0).
        .with_columns(
            pl.when(pl.col("group_n") >= MIN_GROUP)
            .then(pl.col("group_max") - pl.col("group_min"))
            .alias("group_spread")
        )
        .with_columns(
            pl.when(pl.col("group_n") >= MIN_GROUP).then(pl.col("group_spread") == 0).alias("zero_spread"),
            learning_signal().alias("learning_signal"),
        )
    )


def learning_signal() -> pl.Expr:
    """``learning_signal`` (see the registry): whether a group's rewards differ (its spread > 0, so that
    some advantage is not 0); null for a group of fewer than ``MIN_GROUP`` finite rewards, which has no
    spread. Over :func:`group_stats`' ``group_n`` and ``group_spread``."""
    return pl.when(pl.col("group_n") >= MIN_GROUP).then(pl.col("group_spread") > 0)


def group_step_summary(scalars: pl.LazyFrame) -> pl.LazyFrame:
    """Per step, sorted: ``n_groups`` (groups of ``MIN_GROUP``+ responses) and ``zero_spread_share`` (share of
    them whose rewards are all equal; null when the step has no group). Joined into the step summary."""
    names = scalars.collect_schema().names()
    if "prompt_key" not in names and "group_id" not in names:
        return (
            scalars.group_by("step")
            .agg(pl.lit(0, pl.UInt32).alias("n_groups"), pl.lit(None, pl.Float64).alias("zero_spread_share"))
            .sort("step")
        )
    cols = [c for c in ("step", "reward", "prompt_key", "group_id") if c in names]
    return (
        group_stats(scalars.select(cols))
        .group_by("step")
        .agg(
            (pl.col("group_n") >= MIN_GROUP).sum().cast(pl.UInt32).alias("n_groups"),
            pl.col("zero_spread").fill_null(False).sum().alias("__zero"),
        )
        .with_columns(
            _ratio(pl.col("__zero").cast(pl.Float64), pl.col("n_groups")).alias("zero_spread_share")
        )
        .drop("__zero")
        .sort("step")
    )


def with_advantage(rows: pl.LazyFrame, from_file: bool) -> pl.LazyFrame:
    """Add the group columns of :func:`group_stats` and ``advantage`` to responses (``rows``).

    With ``from_file`` the file's ``advantage`` column is kept as it is; otherwise it is recomputed as
    ``(reward − group_mean) / group_std`` (0 when the std is 0; null outside groups of ``MIN_GROUP``+ or
    for a non-finite reward). ``advantage_recomputed`` says which one a row holds.
    """
    names = rows.collect_schema().names()
    stats = group_stats(rows).drop("__p", strict=False)
    out = rows.with_columns(group_key(names).alias("group")).join(
        stats, on=["step", "group"], how="left", maintain_order="left"
    )
    if from_file and "advantage" in names:
        return out.with_columns(
            pl.col("advantage").cast(pl.Float64), pl.lit(False).alias("advantage_recomputed")
        )
    recomputed = (
        pl.when((pl.col("group_n") >= MIN_GROUP) & finite("reward"))
        .then(
            pl.when(pl.col("group_std") > 0)
            .then((pl.col("reward") - pl.col("group_mean")) / pl.col("group_std"))
            .otherwise(0.0)
        )
        .cast(pl.Float64)
    )
    return out.with_columns(recomputed.alias("advantage"), pl.lit(True).alias("advantage_recomputed"))


# ---- per prompt ------------------------------------------------------------------------------------------


def _prompt_step_stats(scalars: pl.LazyFrame) -> pl.LazyFrame:
    """One row per (prompt ``__p``, step): counts and sums of reward, gain, wins, repetition and length
    ratio. ``scalars`` is a whole run (``length_ratio`` needs every response of a step)."""
    names = scalars.collect_schema().names()
    lf = scalars
    if "length_ratio" not in names:
        medians = step_length_medians(scalars)
        lf = lf.join(medians, on="step", how="left").with_columns(
            length_ratio_from(pl.col("length_median"), pl.col("chars_median")).alias("length_ratio")
        )
    rep = pl.col("repetition") if "repetition" in names else pl.lit(None, pl.Float64)
    ok = finite("reward")
    both = reference.compared()
    lf = lf.select(
        prompt_hash().alias("__p"),
        "step",
        pl.when(ok).then(pl.col("reward")).alias("__r"),
        pl.when(both).then(pl.col("reward") - pl.col("ref_reward")).alias("__g"),
        reference.win().alias("__w"),
        reference.tie().alias("__t"),
        pl.when(rep.is_not_null() & rep.is_finite()).then(rep).alias("__rep"),
        pl.when(finite("length_ratio")).then(pl.col("length_ratio")).alias("__lr"),
    )
    # Masked columns and plain aggregations: a filter inside ``agg`` is far slower per group.
    return lf.group_by("__p", "step").agg(
        pl.len().alias("n"),
        pl.col("__r").count().alias("r_n"),
        pl.col("__r").sum().alias("r_sum"),
        pl.col("__r").min().alias("r_min"),
        pl.col("__r").max().alias("r_max"),
        pl.col("__g").count().alias("b_n"),
        pl.col("__g").sum().alias("g_sum"),
        pl.col("__w").sum().alias("wins"),
        pl.col("__t").sum().alias("ties"),
        pl.col("__rep").count().alias("rep_n"),
        pl.col("__rep").sum().alias("rep_sum"),
        pl.col("__lr").count().alias("lr_n"),
        pl.col("__lr").sum().alias("lr_sum"),
    )


def trend_expr(threshold: float) -> pl.Expr:
    """Trend code (see ``TRENDS``) from ``never_beats``, ``n_steps`` and ``reward_delta`` columns."""
    d = pl.col("reward_delta")
    return (
        pl.when(pl.col("never_beats"))
        .then(pl.lit("never"))
        .when(pl.col("n_steps") < 2)
        .then(pl.lit("single"))
        .when(d.is_null() | d.is_nan())
        .then(pl.lit(None, pl.String))
        .when(d > threshold)
        .then(pl.lit("improved"))
        .when(d < -threshold)
        .then(pl.lit("regressed"))
        .otherwise(pl.lit("flat"))
    )


def trend_threshold(scalars: pl.LazyFrame) -> float:
    """``TREND_EFFECT`` × the run's reward standard deviation (0 when it has fewer than two rewards)."""
    # Exactly rounded sums (math.fsum), so that the figure does not depend on the order the rows were read
    # in, nor on how a parallel reduction split them: the threshold kept at a commit is to the last bit
    # the one a scan of the same responses gives.
    x = scalars.select(pl.col("reward").filter(finite("reward")).cast(pl.Float64)).collect().to_series()
    n = x.len()
    if n < 2:
        return 0.0
    values = x.to_numpy()
    try:
        with np.errstate(over="ignore"):
            sd = _sample_sd(values)
    except OverflowError:  # math.fsum's "intermediate overflow": rewards near the largest float
        sd = math.inf
    if math.isfinite(sd):
        return TREND_EFFECT * sd
    # Rewards so large that their squares overflow (hostile or broken files): the same figure from the
    # rewards divided by the largest of them, multiplied back last (0 when that too overflows).
    scale = float(np.max(np.abs(values)))
    t = scale * (TREND_EFFECT * _sample_sd(values / scale))
    return t if math.isfinite(t) else 0.0


def _sample_sd(values) -> float:
    """The standard deviation (ddof 1) of ``values`` from exactly rounded sums."""
    n = len(values)
    mean = math.fsum(values) / n
    return math.sqrt(math.fsum((values - mean) ** 2) / (n - 1))


def prompt_group_counts(scalars: pl.LazyFrame) -> pl.LazyFrame:
    """Per prompt ``__p`` (:func:`prompt_hash`): ``n_groups`` (groups of ``MIN_GROUP``+ responses, by
    ``group_id``; see :func:`group_stats`) and ``zero_spread_groups`` of a run with ``group_id``."""
    names_in = scalars.collect_schema().names()
    cols = [c for c in ("step", "reward", "prompt_key", "group_id") if c in names_in]
    return (
        group_stats(scalars.select(cols))
        .filter(pl.col("group_n") >= MIN_GROUP)
        .group_by("__p")
        .agg(
            pl.len().cast(pl.Int64).alias("n_groups"),
            pl.col("zero_spread").sum().cast(pl.Int64).alias("zero_spread_groups"),
        )
    )


def prompt_aggregates(
    scalars: pl.LazyFrame, threshold: float, groups: pl.LazyFrame | None = None
) -> pl.LazyFrame:
    """One row per prompt (unsorted): the prompt list's columns.

    ``n_steps`` distinct steps, ``n_responses``, ``first_step``/``last_step``, ``reward_early`` /
    ``reward_late`` (mean reward over the first / last ``QUARTER`` of its steps), ``reward_delta`` (late −
    early, null for one step), ``reward_mean``, ``gain_mean`` (mean reward − ref_reward where both exist),
    ``n_both`` (responses compared with their reference), ``wins``, ``win_rate``, ``ties``,
    ``tie_rate`` (see :mod:`data.metrics.reference`),
    ``never_beats`` (``n_both > 0`` and no win), ``trend`` (a ``TRENDS`` code, threshold in reward units),
    ``repetition_mean``, ``length_ratio_mean``, ``n_groups`` / ``zero_spread_groups`` and ``order``.

    ``order`` orders prompts by their first response: with ``part`` and ``row`` in ``scalars``, it is the
    first response's ``part × 2³² + row`` (so that the prompts of a run aggregated in several pieces
    keep their order), else its index in ``scalars``. ``groups``: :func:`prompt_group_counts` of the whole
    run, for ``scalars`` that hold only some of its prompts (a group may span prompts in principle).
    """
    per_step = _prompt_step_stats(scalars).with_columns(
        pl.col("step").rank("ordinal").over("__p").alias("__rank"),
        pl.len().over("__p").alias("__k"),
    )
    q = (pl.col("__k").cast(pl.Float64) * QUARTER).ceil()
    early = pl.col("__rank") <= q
    late = pl.col("__rank") > pl.col("__k") - q
    per_step = per_step.with_columns(
        pl.when(early).then(pl.col("r_sum")).alias("__re"),
        pl.when(early).then(pl.col("r_n")).alias("__ne"),
        pl.when(late).then(pl.col("r_sum")).alias("__rl"),
        pl.when(late).then(pl.col("r_n")).alias("__nl"),
    )
    agg = per_step.group_by("__p").agg(
        pl.len().cast(pl.Int64).alias("n_steps"),
        pl.col("n").sum().cast(pl.Int64).alias("n_responses"),
        pl.col("step").min().alias("first_step"),
        pl.col("step").max().alias("last_step"),
        _ratio(pl.col("__re").sum(), pl.col("__ne").sum()).alias("reward_early"),
        _ratio(pl.col("__rl").sum(), pl.col("__nl").sum()).alias("reward_late"),
        _ratio(pl.col("r_sum").sum(), pl.col("r_n").sum()).alias("reward_mean"),
        _ratio(pl.col("g_sum").sum(), pl.col("b_n").sum()).alias("gain_mean"),
        pl.col("b_n").sum().cast(pl.Int64).alias("n_both"),
        pl.col("wins").sum().cast(pl.Int64).alias("wins"),
        pl.col("ties").sum().cast(pl.Int64).alias("ties"),
        _ratio(pl.col("rep_sum").sum(), pl.col("rep_n").sum()).alias("repetition_mean"),
        _ratio(pl.col("lr_sum").sum(), pl.col("lr_n").sum()).alias("length_ratio_mean"),
    )
    # The key text and first position of each prompt (one cheap pass over the strings). Without the previews
    # (a scan that leaves them in the files), the first response's ``part, row`` instead, to read them by.
    names_in = scalars.collect_schema().names()
    keyed = "part" in names_in and "row" in names_in
    first = (
        [pl.col("prompt_preview").first()]
        if "prompt_preview" in names_in
        else [
            pl.lit(None, pl.String).alias("prompt_preview"),
            pl.col("part").first().alias("__part"),
            pl.col("row").first().alias("__row"),
        ]
    )
    if keyed:  # the first response is the one of the smallest ``__idx``, whatever the rows' order
        first = (
            [pl.col("prompt_preview").sort_by("__idx").first()]
            if "prompt_preview" in names_in
            else [
                pl.lit(None, pl.String).alias("prompt_preview"),
                (pl.col("__idx").min() // 2**32).alias("__part"),
                (pl.col("__idx").min() % 2**32).alias("__row"),
            ]
        )
        indexed = scalars.select(
            "prompt_key",
            *(["prompt_preview"] if "prompt_preview" in names_in else []),
            (pl.col("part").cast(pl.Int64) * 2**32 + pl.col("row").cast(pl.Int64)).alias("__idx"),
        )
    else:
        indexed = scalars.select(
            "prompt_key", *(c for c in ("prompt_preview",) if c in names_in)
        ).with_row_index("__idx")
    names = (
        indexed.group_by("prompt_key")
        .agg(pl.col("__idx").min().alias("order"), *first)
        .with_columns(prompt_hash().alias("__p"))
    )
    if groups is None and "group_id" in names_in:
        groups = prompt_group_counts(scalars)
    elif groups is None:
        # Without group_id a group is (step, prompt): exactly the rows of ``per_step``, no second pass.
        grouped = pl.col("r_n") >= MIN_GROUP
        groups = per_step.group_by("__p").agg(
            grouped.sum().cast(pl.Int64).alias("n_groups"),
            (grouped & (pl.col("r_max") == pl.col("r_min"))).sum().cast(pl.Int64).alias("zero_spread_groups"),
        )
    return (
        names.join(agg, on="__p", how="left")
        .join(groups, on="__p", how="left")
        .drop("__p")
        .with_columns(
            pl.col("n_groups").fill_null(0),
            pl.col("zero_spread_groups").fill_null(0),
            pl.when(pl.col("n_steps") >= 2)
            .then(pl.col("reward_late") - pl.col("reward_early"))
            .alias("reward_delta"),
            reference.rate(pl.col("wins"), pl.col("n_both")).alias("win_rate"),
            reference.rate(pl.col("ties"), pl.col("n_both")).alias("tie_rate"),
            ((pl.col("n_both") > 0) & (pl.col("wins") == 0)).alias("never_beats"),
        )
        .with_columns(trend_expr(threshold).alias("trend"))
    )
