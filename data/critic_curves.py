"""The reward page's critic health (runs with ``values``): per step, the explained variance and the mean
|value − return| pooled over every position (data.metrics.step.critic_health), labelled with the returns they
used, and the trainer's own value loss beside them when its log is in the run's folder. A point opens its
step's responses, the largest value error first (data.views.links.SIGNAL_VIEWS)."""

from __future__ import annotations

import polars as pl

from data.curve_panels import Panel, Series, has_values
from data.curves import summary_columns
from data.metrics.critic import return_label, return_source
from data.metrics.step import CRITIC_SUMS, critic_health
from data.trainer_logs import TrainerScalars, trainer_scalars

# The trainer's value (critic) loss as trainers log it, the first found drawn: TRL's PPO
# (trl/experimental/ppo/ppo_trainer.py:899 ``loss/value_avg``; ``train/`` in front in TensorBoard and W&B),
# TRL's older PPOTrainer (``ppo/loss/value``), veRL's critic (``critic/vf_loss``).
VALUE_LOSS_KEYS = (
    *("loss/value_avg", "train/loss/value_avg", "ppo/loss/value", "critic/vf_loss"),
    *("train/value_loss", "value_loss"),
)
TITLE = "Critic health"
NOTE_NO_CRITIC = "No critic values (values) in this run: no critic health to show."
NOTE_CLICK = "Click a point for the step's responses, the largest value error first."


def value_loss_key(trainer: TrainerScalars | None) -> str | None:
    """The first of :data:`VALUE_LOSS_KEYS` the trainer's logs have, else None."""
    if trainer is None or trainer.empty:
        return None
    keys = set(trainer.keys())
    return next((k for k in VALUE_LOSS_KEYS if k in keys), None)


def critic_frame(steps: pl.DataFrame) -> pl.DataFrame:
    """``step, explained_variance, value_error_abs_pooled, critic_n, critic_file_n`` of a per-step summary
    (empty without its critic sums), sorted by step."""
    if not set(CRITIC_SUMS) <= set(steps.columns):
        return pl.DataFrame(schema={"step": pl.Int64, "explained_variance": pl.Float64})
    return steps.select("step", "critic_n", "critic_file_n", *critic_health()).sort("step")


def run_source(frame: pl.DataFrame) -> str | None:
    """Which returns the run's critic health used over all its steps (data.metrics.critic.return_source)."""
    if "critic_n" not in frame.columns:
        return None
    return return_source(frame.get_column("critic_file_n").sum(), frame.get_column("critic_n").sum())


def critic_panel(steps: pl.DataFrame, trainer: TrainerScalars | None = None) -> Panel:
    """The critic-health panel: explained variance (named by its returns: 'explained variance (trainer
    returns)' or '(γ = 1 returns)'), the mean |value − return| dashed and, when logged, the trainer's value
    loss at the rollout steps. A run without values gets a panel with a note and no series."""
    frame = critic_frame(steps)
    if not has_values(frame, "explained_variance") and not has_values(frame, "value_error_abs_pooled"):
        return Panel("critic", TITLE, "", (), NOTE_NO_CRITIC, empty=NOTE_NO_CRITIC, absent=True)
    source = run_source(frame)
    series = [
        Series(k, return_label(k, source), frame.select("step", pl.col(k).alias("y")), dashed=dashed)
        for k, dashed in (("explained_variance", False), ("value_error_abs_pooled", True))
    ]
    notes = [NOTE_CLICK]
    if source == "mixed":
        notes.insert(0, "Some responses have the trainer's returns and some not (γ = 1 there).")
    if (key := value_loss_key(trainer)) is not None:
        logged = frame.select("step").join(trainer.series(key), on="step", how="left")
        series.append(
            Series(
                "value_loss",
                f"trainer's value loss ({key})",
                logged.select("step", pl.col("value").alias("y")),
            )
        )
    return Panel("critic", TITLE, "explained variance · |value − return|", tuple(series), " ".join(notes))


def run_critic_panel(store, run_dir) -> Panel:
    """:func:`critic_panel` of a run's store, with the trainer's logs found in its folder ``run_dir`` (None:
    without them)."""
    steps = summary_columns(store, CRITIC_SUMS)  # the reward page's one read of its summary columns
    return critic_panel(steps, trainer_scalars(run_dir) if run_dir is not None else None)
