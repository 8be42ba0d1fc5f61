"""Per-step summary (see :mod:`data.metrics`): one row per step, kept beside the store."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import polars as pl

from data.metrics import reference
from data.metrics.group import group_step_summary
from data.metrics.registry import label

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


def _finite_total(col: str) -> list[pl.Expr]:
    """``<col>_finite_n`` and ``<col>_finite_sum``: how many finite values, and their sum (so that a mean over
    several steps is summed from the steps, see :func:`data.search.order.all_steps_reward`)."""
    c = pl.col(col).filter(pl.col(col).is_finite())
    return [
        c.len().cast(pl.UInt32).alias(f"{col}_finite_n"),
        c.sum().cast(pl.Float64).alias(f"{col}_finite_sum"),
    ]


def _units() -> pl.Expr:
    """The units the step's repetitions were counted in, sorted and joined ('tokens', 'characters, words');
    null where none has one."""
    u = pl.col("repetition_unit").drop_nulls().unique().sort()
    return pl.when(u.len() > 0).then(u.str.join(", "))


def _token_mean(sum_col: str) -> pl.Expr:
    """Σ sum_col / Σ n_kl_tokens over a group: a mean over all its tokens (null when it has none)."""
    n = pl.col("n_kl_tokens").sum()
    return pl.when(n > 0).then(pl.col(sum_col).sum() / n)


def _finite_mean(col: str) -> pl.Expr:
    """The mean of ``col``'s finite values (null when there are none)."""
    x = pl.col(col).cast(pl.Float64)
    return x.filter(x.is_finite()).mean()


def extra_mean(col: str) -> str:
    """The per-step summary's column of extra column ``col``'s finite mean: ``<col>_finite_mean`` (no column
    of the summary's own ends so, and extra columns' names are distinct, so no two names meet)."""
    return f"{col}_finite_mean"


def _aggregations(extras: Sequence[str] = ()) -> list[tuple[tuple[str, ...], list[pl.Expr]]]:
    """The summary's aggregations over a step's rows in order, each with the columns it reads beside
    ``step`` (see :func:`step_summary_by_columns`)."""
    compared = reference.compared().sum()
    return [
        ((), [pl.len().alias("n")]),
        (("reward",), [*_dist("reward"), *_finite_total("reward")]),
        (("ref_reward",), _dist("ref_reward")),
        (("reward_gain",), _dist("reward_gain")),
        (("ref_reward",), [pl.col("ref_reward").is_not_null().sum().alias("n_ref")]),
        (
            ("reward", "ref_reward"),
            [
                compared.alias("n_both"),
                reference.rate(reference.win().sum(), compared).alias("win_rate"),
                reference.rate(reference.tie().sum(), compared).alias("tie_rate"),
                reference.rate(reference.loss().sum(), compared).alias("loss_rate"),
            ],
        ),
        (
            ("kl_sum", "log_ratio_sum", "n_kl_tokens", "kl_mean"),
            [
                _token_mean("kl_sum").alias("kl_token_mean"),
                _token_mean("log_ratio_sum").alias("log_ratio_token_mean"),
                *_dist("kl_mean"),  # the responses' per-token means: the KL curve's band and its largest
                pl.col("kl_sum").mean().alias("kl_sum_mean"),
                # The step's k3 over all its positions, and the largest of one response: kl_top_share.
                pl.col("kl_sum").filter(pl.col("kl_sum").is_finite()).sum().alias("kl_sum_total"),
                pl.col("kl_sum").filter(pl.col("kl_sum").is_finite()).max().alias("kl_sum_max"),
                pl.col("log_ratio_sum").mean().alias("log_ratio_sum_mean"),
                pl.col("n_kl_tokens").sum().alias("n_kl_tokens"),
            ],
        ),
        (("kl_sum", *KL_TOP_COLUMNS), [_kl_top(c).alias(f"kl_top_{c}") for c in KL_TOP_COLUMNS]),
        (("response_length",), _dist("response_length")),
        (("response_chars",), _dist("response_chars")),
        (
            ("value_error_abs_mean", "value_error_mean"),
            [
                pl.col("value_error_abs_mean").mean().alias("value_error_abs_mean"),
                pl.col("value_error_mean").mean().alias("value_error_mean"),
            ],
        ),
        # A few columns at a time (step_summary_by_columns reads each group's columns at once).
        *[
            (cols, [pl.col(c).sum().alias(c) for c in cols])
            for cols in (CRITIC_SUMS[:2], CRITIC_SUMS[2:4], CRITIC_SUMS[4:])
        ],
        (("repetition",), [_finite_mean("repetition").alias("repetition_mean")]),
        (("repetition_unit",), [_units().alias("repetition_units")]),
        *_gap_step(),
        *[((c,), [_finite_mean(c).alias(extra_mean(c))]) for c in extras],
    ]


# The critic's sums of each response (see data.metrics.registry), summed per step: its pooled critic health.
CRITIC_SUMS = (
    *("critic_n", "critic_file_n", "return_sum", "return_sq_sum"),
    *("value_error_sum", "value_error_sq_sum", "value_error_abs_sum"),
)

GAP_INPUT = (
    "infer_gap_n",
    "infer_gap_tail_n",
    "infer_gap_abs_mean",
    "infer_gap_abs_max",
    "infer_gap_tail_share",
)


def _gap_step() -> list[tuple[tuple[str, ...], list[pl.Expr]]]:
    """The inference–trainer gap of a step (as :func:`_aggregations`' items, a few columns each): the
    responses' mean |Δ|, max |Δ| and tail share as distributions (the curves' bands), and the tail pooled
    over the step's positions, exactly, from the responses' counts: ``infer_gap_n_total`` positions,
    ``infer_gap_tail_n_total`` in the tail, ``infer_gap_tail_pooled`` their ratio (null without one)."""
    n, tail = pl.col("infer_gap_n").sum(), pl.col("infer_gap_tail_n").sum()
    counts = [
        n.alias("infer_gap_n_total"),
        tail.alias("infer_gap_tail_n_total"),
        pl.when(n > 0).then(tail / n).alias("infer_gap_tail_pooled"),
    ]
    dists = [((c,), _dist(c)) for c in ("infer_gap_abs_mean", "infer_gap_abs_max", "infer_gap_tail_share")]
    return [*dists, (("infer_gap_n", "infer_gap_tail_n"), counts)]


# The columns a summary reads that a frame made by hand may lack: nulls of their type there.
_ABSENT = {
    "repetition": pl.Float64,
    "repetition_unit": pl.String,
    "source": pl.String,
    "sample_id": pl.String,
    "line": pl.Int64,
    **{c: pl.Int64 if c.endswith("_n") else pl.Float64 for c in CRITIC_SUMS},
    **{c: pl.Int64 if c.endswith("_n") else pl.Float64 for c in GAP_INPUT},
}


def _with_absent(rows: pl.LazyFrame, names) -> pl.LazyFrame:
    absent = [pl.lit(None, t).alias(c) for c, t in _ABSENT.items() if c not in names]
    return rows.with_columns(absent) if absent else rows


# What the groups' columns of the summary read (see data.metrics.group.group_step_summary).
GROUP_INPUT = ("reward", "prompt_key", "group_id")


def step_summary(scalars: pl.LazyFrame, extras: Sequence[str] = ()) -> pl.LazyFrame:
    """One row per step, sorted by step: counts, reward / ref reward / gain distributions, win rate, KL, length.

    ``n_both`` counts the responses compared with their reference, ``win_rate`` / ``tie_rate`` /
    ``loss_rate`` are the shares of wins / ties / losses among them (see :mod:`data.metrics.reference`);
    ``kl_token_mean`` is Σ kl_sum / Σ n_kl_tokens over the step (a mean over all its tokens), while
    ``kl_mean_*`` are the distribution of the per-response means (``kl_mean_mean`` their mean);
    ``kl_sum_total`` / ``kl_sum_max`` are the finite k3 sums' total and largest (see :func:`kl_top_share`)
    and ``kl_top_source`` / ``_line`` / ``_sample_id`` where that largest one is; ``repetition_mean`` is the mean repetition of the
    step's responses that have one (3 units or more), the reward page's degeneration curve, and
    ``repetition_units`` the units they were counted in;
    ``reward_finite_n`` / ``reward_finite_sum`` count and sum the finite rewards; for each numeric extra
    column ``c`` of ``extras`` (the reward components the compare page draws are among them),
    ``<c>_finite_mean`` (see :func:`extra_mean`) is the mean of its finite values (null when none);
    :data:`CRITIC_SUMS` are the step's sums of its responses' critic sums (:func:`critic_health` reads them).
    """
    # A frame without repetition or where a response is (one made by hand) summarises to nulls there.
    scalars = _with_absent(scalars, scalars.collect_schema().names())
    return (
        scalars.group_by("step")
        .agg(*[e for _, exprs in _aggregations(extras) for e in exprs])
        .join(group_step_summary(scalars), on="step", how="left")  # n_groups, zero_spread_share
        .sort("step")
    )


def step_summary_by_columns(
    read: Callable[[Sequence[str]], pl.DataFrame], extras: Sequence[str] = ()
) -> pl.DataFrame:
    """:func:`step_summary` of the rows that ``read(columns)`` gives (``step`` and those of ``columns`` the
    rows have; the same rows in the same order at each call), read a few columns at a time: the same
    frame, to the last bit, holding a few columns of the rows at once instead of all of them (a step of
    3M responses held 2 GB at once)."""
    by_input: dict[tuple[str, ...], list[pl.Expr]] = {}
    for cols, exprs in _aggregations(extras):
        by_input.setdefault(cols, []).extend(exprs)
    out: pl.DataFrame | None = None
    for cols, exprs in by_input.items():
        rows = read(["step", *cols])
        rows = _with_absent(rows.lazy(), rows.columns).collect()
        piece = rows.lazy().group_by("step").agg(exprs).collect()
        del rows
        out = piece if out is None else out.join(piece, on="step", how="left")
    assert out is not None
    order = [e.meta.output_name() for _, exprs in _aggregations(extras) for e in exprs]
    groups = group_step_summary(read(["step", *GROUP_INPUT]).lazy()).collect()
    return out.select("step", *order).join(groups, on="step", how="left").sort("step")


@dataclass(frozen=True)
class PartialStep:
    """A run's last step holding fewer responses (``n``) than every other step of the run, whose counts
    range from ``others_min`` to ``others_max`` (see :func:`partial_last_step`)."""

    step: int
    n: int
    others_min: int
    others_max: int

    def detail(self) -> str:
        """'56 responses, where the run's other steps have 128' (or '120–128')."""
        lo, hi = self.others_min, self.others_max
        others = f"{lo:,}" if lo == hi else f"{lo:,}–{hi:,}"
        return f"{self.n:,} responses, where the run's other steps have {others}"

    def text(self) -> str:
        """The registry's label and :meth:`detail`: 'partial step: 56 responses, where …'."""
        return f"{label('partial_step')}: {self.detail()}"


def partial_last_step(steps: pl.DataFrame) -> PartialStep | None:
    """The run's last step when it holds fewer responses than every other step of the run (a run stopped,
    or still being written, in the middle of a step), from the per-step summary's ``step`` and ``n``.

    None for a run of fewer than two steps, or whose last step has at least as many responses as the
    smallest other step. Only the last step can be partial: a smaller step in the middle is a run's own.
    """
    if steps.height < 2 or "n" not in steps.columns:
        return None
    s = steps.select("step", "n").sort("step")
    n = s.get_column("n")
    others = n.head(s.height - 1)
    last, lo, hi = int(n[-1]), int(others.min()), int(others.max())
    if last >= lo:
        return None
    return PartialStep(int(s.get_column("step")[-1]), last, lo, hi)


# Of the step's response with the largest KL (k3 sum; a tie to the first sample id), where it is: the reward
# page names it without reading the step's responses.
KL_TOP_COLUMNS = ("source", "line", "sample_id")


def _kl_top(col: str) -> pl.Expr:
    finite = pl.col("kl_sum").is_finite()
    return (
        pl.col(col)
        .filter(finite)
        .sort_by(
            [pl.col("kl_sum").filter(finite), pl.col("sample_id").filter(finite)], descending=[True, False]
        )
        .first()
    )


def kl_top_share() -> pl.Expr:
    """``kl_top_share`` of a per-step summary: the step's largest response k3 sum over the k3 sum of all its
    positions (k3 ≥ 0, so a share in [0, 1]); null without KL or where the step's total is 0."""
    total = pl.col("kl_sum_total")
    return pl.when(total > 0).then(pl.col("kl_sum_max") / total).alias("kl_top_share")


def critic_health() -> list[pl.Expr]:
    """``explained_variance`` and ``value_error_abs_pooled`` of a per-step summary, pooled exactly from its
    critic sums over every position of the step with a value and a return (e = value − return, r = return):
    1 − Var(e) / Var(r) with population variances (Σx² / n − (Σx / n)²), and Σ|e| / n. Explained variance is
    null under 2 positions or where the returns do not vary; both are null without a position."""
    n = pl.col("critic_n").cast(pl.Float64)
    var_r = pl.col("return_sq_sum") / n - (pl.col("return_sum") / n) ** 2
    var_e = pl.col("value_error_sq_sum") / n - (pl.col("value_error_sum") / n) ** 2
    return [
        pl.when((n >= 2) & (var_r > 0)).then(1.0 - var_e / var_r).alias("explained_variance"),
        pl.when(n > 0).then(pl.col("value_error_abs_sum") / n).alias("value_error_abs_pooled"),
    ]
