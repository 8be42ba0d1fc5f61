"""The trainer's own scalars on the compare and reward pages: one trainer key charted for several runs
(lined up with each run's rollouts by step), and the agreement check of each run (see
:mod:`data.trainer_logs.agreement`)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from data.cache import StoreKey
from data.compare.curves import SIG_DIGITS, X_AXES, Overlay, RunLine
from data.compare.notes import TRAINER, Note
from data.compare.smoothing import ema
from data.store import RunStore
from data.trainer_logs import TrainerScalars, align, trainer_scalars
from data.trainer_logs.agreement import Check, checks

# The key charted first, when the URL names none: the first of these that a run logged (else the first key).
FIRST_KEYS = ("loss", "train/loss", "reward", "train/reward", "objective/kl", "kl", "objective/scores")


def trainer_keys(logs: dict[str, TrainerScalars]) -> list[str]:
    """Every trainer key of any of the runs, sorted."""
    return sorted({k for t in logs.values() for k in t.keys()})


def default_key(keys: list[str]) -> str | None:
    """The key charted when none is chosen: the first of :data:`FIRST_KEYS` present, else the first key."""
    return next((k for k in FIRST_KEYS if k in keys), keys[0] if keys else None)


def trainer_overlay(
    logs: dict[str, TrainerScalars],
    frames: dict[str, pl.DataFrame],
    key: str,
    smoothing: float = 0.0,
    x: str = "step",
    digits: int | None = SIG_DIGITS,
) -> Overlay:
    """The chart of trainer key ``key`` over the runs (``logs``: run -> its :class:`TrainerScalars`;
    ``frames``: run -> :func:`data.compare.curves.run_frame`, for the samples-seen axis). Every logged step
    is drawn on the step axis; on the samples-seen axis only steps with rollouts (their responses seen so
    far), with a note counting the others. A run whose logs lack the key gets a note (one without any log
    gets its note from :func:`trainer_notes`). Values are rounded to ``digits`` significant digits, as
    the rollout curves are (None: kept as logged)."""
    if x not in X_AXES:
        raise ValueError(f"unknown x-axis {x!r}")
    lines, notes = [], []
    for run, t in logs.items():
        s = t.series(key)
        if s.height == 0:
            if t.files:  # a run without any log has its note from trainer_notes
                notes.append(Note(TRAINER, (run,), f"{run}: its trainer log has no {key!r}."))
            continue
        frame = frames.get(run)
        if x == "samples":
            if frame is None or frame.height == 0:
                notes.append(Note(TRAINER, (run,), f"{run}: no rollouts, so no samples-seen axis."))
                continue
            joined = s.join(frame.select("step", "samples"), on="step", how="inner")
            if joined.height < s.height:
                notes.append(Note(TRAINER, (run,), f"{run}: {s.height - joined.height} logged steps of {key} "
                                                   "have no rollouts and are left out on this axis."))  # fmt: skip
            s = joined.with_columns(pl.col("samples").cast(pl.Float64).alias("x"))
        else:
            s = s.with_columns(pl.col("step").cast(pl.Float64).alias("x"))
        y = s.get_column("value")
        smooth = ema(y.to_list(), smoothing) if smoothing else y.to_numpy()
        line = s.select(
            "x",
            "step",
            pl.col("value").fill_nan(None).alias("y"),
            pl.Series("smooth", smooth, dtype=pl.Float64).fill_nan(None),
        )
        if digits is not None:
            line = line.with_columns(pl.col("y", "smooth").round_sig_figs(digits))
        lines.append(RunLine(run, line))
    return Overlay(key, key, "trainer log", x, tuple(lines), tuple(notes))


def trainer_notes(run: str, t: TrainerScalars, rollout_steps: list[int]) -> list[Note]:
    """What a run's trainer logs leave out: none found (and where they were looked for), files not
    read, steps that do not line up with the rollouts."""
    if not t.files:
        return [
            Note(
                TRAINER,
                (run,),
                f"{run}: no trainer log in its folder (trainer_state.json, checkpoint-*/trainer_state.json, "
                "*log_history*.json, or TensorBoard events.out.tfevents.* up to two folders down).",
            )
        ]
    out = [Note(TRAINER, (run,), f"{run}: {n}") for n in t.notes]
    out += [Note(TRAINER, (run,), f"{run}: {n}") for n in align(t, rollout_steps).notes()]
    return out


@functools.lru_cache(maxsize=32)
def _checks(key: StoreKey, stamp: tuple, run_dir) -> tuple[Check, ...]:
    logs = trainer_scalars(run_dir)
    if logs.empty:  # nothing to check: the store is not read (its index and summary cost ~50 ms at 2.56M)
        return ()
    store = key.store
    return tuple(checks(logs, store.scan(), store.steps()))


def agreement(store: RunStore, run_dir: Path) -> tuple[Check, ...]:
    """:func:`data.trainer_logs.agreement.checks` of a run (cached on its store version and its trainer
    logs' sizes and times)."""
    t = trainer_scalars(run_dir)
    if t.reading:  # checked once the TensorBoard events are read (never kept before: the stamps stay)
        return ()
    stamp = tuple((f.kind, f.stamp) for f in t.files)
    return _checks(StoreKey(store), stamp, run_dir)


@dataclass(frozen=True)
class RunTrainerView:
    """What the reward page shows of one run's trainer logs: every ``keys``, the ``key`` charted (the one
    asked for when logged, else :func:`default_key`), its :class:`Overlay` (None without any log),
    ``notes`` and the agreement ``checks``; ``reading``: its TensorBoard folders still being read (see
    :attr:`~data.trainer_logs.TrainerScalars.reading`)."""

    keys: list[str]
    key: str | None
    overlay: Overlay | None
    notes: list[Note]
    checks: tuple[Check, ...]
    reading: tuple[str, ...] = ()


def run_keys(run_dir: Path, key: str | None) -> tuple[list[str], str | None]:
    """A run's trainer keys and the one charted (``key`` when logged, else :func:`default_key`): what the
    card's picker shows, without reading the rollouts."""
    keys = trainer_scalars(run_dir).keys()
    return keys, key if key in keys else default_key(keys)


def run_trainer_view(
    run: str, store: RunStore, run_dir: Path, frame: pl.DataFrame, key: str | None
) -> RunTrainerView:
    """:class:`RunTrainerView` of one run on the step axis (``frame``: one row per step with ``step``, e.g.
    its per-step summary or :func:`data.compare.curves.run_frame`; only its steps are read)."""
    logs = trainer_scalars(run_dir)
    keys, key = run_keys(run_dir, key)
    notes = trainer_notes(run, logs, frame.get_column("step").to_list())
    ov = trainer_overlay({run: logs}, {run: frame}, key) if key is not None else None
    notes += list(ov.notes if ov else ())
    return RunTrainerView(keys, key, ov, notes, agreement(store, run_dir), logs.reading)
