"""Does the dump match the training? The trainer's logged per-step means against the same means computed
by the board from the rollouts it dumped. A disagreement means the rollouts on disk are not the batch the
trainer trained on (another step, a subset, other rewards, log-probs from elsewhere).

Each check pairs a trainer key with the board's quantity that the trainer computes the same way (TRL's
source: ``GRPOTrainer._generate_and_score_completions`` / ``_compute_loss`` and ``PPOTrainer.train``).
Only steps present in both are compared; a check with no such step, or without the board's columns it
needs, is "not comparable" and says why.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import polars as pl

from data.trainer_logs.scalars import TrainerScalars

# |trainer − board| ≤ ATOL + RTOL · |trainer| counts as equal. The trainer averages float32 values (on
# several devices, in another order) and the board float64 copies of them: sums of a few thousand float32
# numbers differ in the 6th or 7th significant digit; 1e-4 leaves room for that and for bf16 log-probs'
# rounding never to pass a real mismatch (a different batch moves a mean by far more).
RTOL = 1e-4
ATOL = 1e-6

AGREES, DISAGREES, NOT_COMPARABLE = "agrees", "disagrees", "not comparable"


@dataclass(frozen=True)
class Check:
    """One trainer key against one board quantity: ``status`` (:data:`AGREES`, :data:`DISAGREES`,
    :data:`NOT_COMPARABLE`), ``steps`` compared, ``bad`` steps that differ, the largest difference and its
    step, ``note`` (why not comparable, or which variant matched), and ``rows``: ``step, trainer, board,
    diff`` (diff = trainer − board) for the compared steps."""

    key: str
    board: str
    definition: str
    status: str
    steps: int = 0
    bad: int = 0
    max_abs_diff: float | None = None
    worst_step: int | None = None
    note: str | None = None
    rows: pl.DataFrame | None = None

    def as_row(self) -> dict:
        """The check without its per-step rows, as a plain dict (what a table shows)."""
        keys = ("key", "board", "definition", "status", "steps", "bad", "max_abs_diff", "worst_step", "note")
        return {k: getattr(self, k) for k in keys}


def _find_key(scalars: TrainerScalars, key: str) -> str | None:
    """``key`` as logged: itself (a log history), or ``train/<key>`` (the Trainer's TensorBoard tag)."""
    keys = set(scalars.keys())
    for k in (key, f"train/{key}"):
        if k in keys:
            return k
    return None


def _board_means(scalars: pl.DataFrame | pl.LazyFrame, steps: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """The board's per-step quantities a check may use: name -> ``step, board``."""
    out: dict[str, pl.DataFrame] = {}
    names = set(scalars.collect_schema().names())

    def from_summary(name: str, col: str) -> None:
        if col in steps.columns and steps.get_column(col).is_not_null().any():
            out[name] = steps.select("step", pl.col(col).cast(pl.Float64).alias("board"))

    from_summary("reward_mean", "reward_mean")
    from_summary("kl_token_mean", "kl_token_mean")
    from_summary("zero_spread_share", "zero_spread_share")
    if {"log_ratio_sum", "n_kl_tokens"} <= names:
        has = pl.col("n_kl_tokens") > 0
        out["log_ratio_sum_mean"] = _step_mean(scalars, pl.col("log_ratio_sum").filter(has))
        out["kl_sum_mean"] = _step_mean(scalars, pl.col("kl_sum").filter(has))
    if (
        "token_reward_sum" in names
        and scalars.lazy().select(pl.col("token_reward_sum").is_not_null().any()).collect().item()
    ):
        out["non_score_mean"] = _step_mean(scalars, pl.col("token_reward_sum") - pl.col("reward"))
    return out


def _step_mean(scalars: pl.DataFrame | pl.LazyFrame, expr: pl.Expr) -> pl.DataFrame:
    return scalars.lazy().group_by("step").agg(expr.mean().alias("board")).sort("step").collect()


def _compare(trainer: pl.DataFrame, board: pl.DataFrame) -> pl.DataFrame:
    rows = trainer.rename({"value": "trainer"}).join(board, on="step", how="inner").sort("step")
    rows = rows.filter(pl.col("trainer").is_finite() & pl.col("board").is_not_null())
    return rows.with_columns((pl.col("trainer") - pl.col("board")).alias("diff"))


def _verdict(key: str, board: str, definition: str, rows: pl.DataFrame, note: str | None = None) -> Check:
    if rows.height == 0:
        return Check(
            key, board, definition, NOT_COMPARABLE, note="No step is both logged and in the rollouts."
        )
    ok = (pl.col("diff").abs() <= ATOL + RTOL * pl.col("trainer").abs()) & pl.col("board").is_finite()
    bad = rows.filter(~ok)
    worst = rows.with_columns(pl.col("diff").abs().fill_nan(math.inf).alias("__a")).sort("__a").tail(1)
    return Check(
        key,
        board,
        definition,
        AGREES if bad.height == 0 else DISAGREES,
        rows.height,
        bad.height,
        float(worst.item(0, "__a")),
        int(worst.item(0, "step")),
        note,
        rows,
    )


_REWARD_FN = re.compile(r"rewards/(.+)/mean")


def reward_function_keys(scalars: TrainerScalars) -> list[str]:
    """TRL's per-function reward means (``rewards/<fn>/mean``) as logged, sorted."""
    out = []
    for k in scalars.keys():
        base = k.removeprefix("train/")
        if _REWARD_FN.fullmatch(base):
            out.append(k)
    return out


def checks(
    trainer: TrainerScalars, rollout_scalars: pl.DataFrame | pl.LazyFrame, steps: pl.DataFrame
) -> list[Check]:
    """Every check that applies to this trainer log (by the keys it has), in a fixed order.

    ``rollout_scalars``: the store's scalars (one row per response; a frame or a lazy scan);
    ``steps``: its per-step summary.

    - ``reward`` (TRL GRPO / RLOO: the mean total reward of the step's completions) and
      ``objective/scores`` (TRL PPO: the mean score) against the mean ``reward`` of the step's responses;
    - ``rewards/<fn>/mean`` against the mean of the run's own column for that function (``<fn>``,
      ``rewards.<fn>``), or the mean ``reward`` when the log has one reward function and the run no such
      column (its reward is then that function's);
    - ``kl`` (TRL GRPO, logged when β > 0) against the per-token mean of k3 over all the step's tokens
      (Σ kl / Σ tokens);
    - ``objective/kl`` (TRL PPO) against the mean per response of Σ_t (logprob_t − ref_logprob_t), the k1
      estimator TRL's default ``kl_estimator="k1"`` logs; when that differs and the mean of Σ_t k3_t
      matches (``kl_estimator="k3"``), it agrees with that note;
    - ``objective/non_score_reward`` (TRL PPO) against the mean of Σ token_reward − reward (the KL
      penalty part of the per-token rewards);
    - ``frac_reward_zero_std`` (TRL GRPO) against the share of the step's groups whose rewards are all
      equal.
    """
    if trainer.empty:
        return []
    board = _board_means(rollout_scalars, steps)
    out: list[Check] = []

    def one(key: str, name: str, label: str, definition: str) -> None:
        k = _find_key(trainer, key)
        if k is None:
            return
        if name not in board:
            out.append(Check(k, label, definition, NOT_COMPARABLE, note=f"The rollouts have no {label}."))
            return
        out.append(_verdict(k, label, definition, _compare(trainer.series(k), board[name])))

    one("reward", "reward_mean", "mean reward", "mean of reward over the step's responses")
    one("objective/scores", "reward_mean", "mean reward", "mean of reward over the step's responses")
    fns = reward_function_keys(trainer)
    for k in fns:
        fn = _REWARD_FN.fullmatch(k.removeprefix("train/")).group(1)
        col = next((c for c in (fn, f"rewards.{fn}") if c in rollout_scalars.collect_schema().names()), None)
        if col is not None:
            b = _step_mean(rollout_scalars, pl.col(col).cast(pl.Float64))
            out.append(_verdict(k, f"mean {col}", f"mean of the column {col} over the step's responses",
                                _compare(trainer.series(k), b)))  # fmt: skip
        elif len(fns) == 1 and "reward_mean" in board:
            out.append(_verdict(k, "mean reward", "mean of reward (the run's only reward function)",
                                _compare(trainer.series(k), board["reward_mean"])))  # fmt: skip
        else:
            out.append(Check(k, f"mean {fn}", "", NOT_COMPARABLE,
                             note=f"The rollouts have no column {fn!r} for this reward function."))  # fmt: skip
    one("kl", "kl_token_mean", "KL per token (k3)", "Σ k3 / Σ tokens over the step's responses")
    k = _find_key(trainer, "objective/kl")
    if k is not None:
        label, definition = "mean Σ log-ratio (k1)", "mean over responses of Σ_t (logprob_t − ref_logprob_t)"
        if "log_ratio_sum_mean" not in board:
            out.append(
                Check(k, label, definition, NOT_COMPARABLE, note="The rollouts have no per-token log-probs.")
            )
        else:
            k1 = _verdict(k, label, definition, _compare(trainer.series(k), board["log_ratio_sum_mean"]))
            k3 = _verdict(k, "mean Σ k3", "mean over responses of Σ_t k3_t",
                          _compare(trainer.series(k), board["kl_sum_mean"]),
                          note="Matches the k3 estimator (PPOConfig kl_estimator='k3').")  # fmt: skip
            out.append(k3 if k1.status == DISAGREES and k3.status == AGREES else k1)
    one("objective/non_score_reward", "non_score_mean", "mean Σ token reward − reward",
        "mean over responses of Σ_t token_reward_t − reward")  # fmt: skip
    one("frac_reward_zero_std", "zero_spread_share", "share of zero-spread groups",
        "share of the step's groups (2+ responses) whose rewards are all equal")  # fmt: skip
    return out
