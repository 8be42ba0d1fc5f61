"""The compare page's sections as data: what each callback of ``pages/compare.py`` composes from the runs and
the view, in one function per section, which the API's answer (``api/answers/compare.py``) calls too, so
that the page and its JSON cannot disagree. ``digits``: the curves' significant digits (None: full
precision, as the API answers)."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from data.compare import curves, distribution, prompts, summary, trainer
from data.compare.curves import SIG_DIGITS, Overlay
from data.compare.distribution import RunBars
from data.compare.runs import CompareRun
from data.metrics import label
from data.trainer_logs import trainer_scalars
from data.trainer_logs.agreement import Check


@dataclass(frozen=True)
class Curves:
    """The summary table (:func:`data.compare.summary.summary_table`, one row per run), one
    :class:`~data.compare.curves.Overlay` per metric any run has, and the notes on the runs' steps."""

    summary: pl.DataFrame
    overlays: tuple[Overlay, ...]
    step_notes: tuple[str, ...]


def curves_section(
    runs: list[CompareRun], band: str, smooth: float, x: str, digits: int | None = SIG_DIGITS
) -> Curves:
    frames = {r.name: r.frame for r in runs}
    have = {run: curves.available(f) for run, f in frames.items()}
    overlays = tuple(
        curves.overlay(frames, key, band=band, smoothing=smooth, x=x, digits=digits, have=have)
        for key in curves.metrics_of(frames, have)
    )
    notes = tuple(n.text for n in curves.step_notes(frames))
    return Curves(summary.summary_table(frames), overlays, notes)


@dataclass(frozen=True)
class Trainer:
    """The trainer card: the ``key`` charted (the one asked for when any run logged it, else
    :func:`~data.compare.trainer.default_key`; None without any log), its overlay, the notes, and each
    run's agreement checks ``(run, checks)`` in the runs' order."""

    keys: list[str]
    key: str | None
    overlay: Overlay | None
    notes: tuple[str, ...]
    checks: tuple[tuple[str, tuple[Check, ...]], ...]


def trainer_section(
    runs: list[CompareRun], asked: str | None, smooth: float, x: str, digits: int | None = SIG_DIGITS
) -> Trainer:
    logs = {r.name: trainer_scalars(r.run_dir) for r in runs}
    keys = trainer.trainer_keys(logs)
    key = asked if asked in keys else trainer.default_key(keys)
    notes = [
        n.text for r in runs for n in trainer.trainer_notes(r.name, logs[r.name], r.frame["step"].to_list())
    ]
    ov = None
    if key is not None:
        ov = trainer.trainer_overlay(logs, {r.name: r.frame for r in runs}, key, smooth, x, digits=digits)
        notes += [n.text for n in ov.notes]
    checks = tuple((r.name, trainer.agreement(r.store, r.run_dir)) for r in runs)
    return Trainer(keys, key, ov, tuple(notes), checks)


@dataclass(frozen=True)
class Distribution:
    """Each run's reward bars at its chosen step on the shared bins (discrete: one bar per value), the
    notes (a step shown instead of the one asked for, a run without a finite reward) and the x title."""

    bars: tuple[RunBars, ...]
    notes: tuple[str, ...]
    discrete: bool
    x_title: str


def distribution_section(runs: list[CompareRun], chosen: dict[str, int | None]) -> Distribution:
    """``chosen``: each run's asked step (None: its last); the step shown follows the one step rule."""
    stores = {r.name: r.store for r in runs}
    bins = distribution.shared_bins(stores)
    bars, notes = distribution.distributions(stores, {r.name: chosen.get(r.name) for r in runs}, bins)
    return Distribution(tuple(bars), tuple(n.text for n in notes), bins.discrete, label("reward"))


@dataclass(frozen=True)
class Pairing:
    """Runs A and B paired by prompt: :class:`~data.compare.prompts.Paired`; ``scatter`` the rows the
    scatter draws (at most :data:`~data.compare.prompts.MAX_SCATTER`) and how many it leaves out; the
    differences' bars; the prompts solved by each run and not the other (``{"a": …, "b": …}``, every
    one, in the lists' order); ``notes``: the headline (how many prompts are shared, the window of paired
    steps, the threshold) then each note; ``diff_label`` the differences' axis title. ``scatter`` has the
    columns of ``paired.table`` but the prompt keys."""

    paired: prompts.Paired
    scatter: pl.DataFrame
    left_out: int
    bars: pl.DataFrame
    discrete: bool
    solved: dict[str, pl.DataFrame]
    notes: tuple[str, ...]
    diff_label: str


def pair_section(
    runs: list[CompareRun], a: str | None, b: str | None, solved: float | None, gap: float | None
) -> Pairing | None:
    """The pairing of runs ``a`` and ``b`` (None unless both are among ``runs``), with the threshold
    ``solved`` and the gap limit ``gap`` (None: the defaults of :func:`data.compare.prompts.pair`)."""
    by_name = {r.name: r for r in runs}
    if a not in by_name or b not in by_name:
        return None
    p = prompts.pair(a, by_name[a].store, b, by_name[b].store, solved, gap)
    rows, left_out = p.scatter_rows()
    bars, discrete = prompts.diff_bars(p.table)
    notes = [p.headline(), *(n.text for n in p.notes)]
    if left_out:
        notes.append(
            f"The scatter shows the {rows.height:,} prompts with the largest differences ({left_out:,} more)."
        )
    diff = label("reward_diff").replace("A", p.a, 1).replace("B", p.b, 1)
    lists = {side: p.solved_by(side) for side in ("a", "b")}
    shown = rows.drop("a_keys", "b_keys")
    return Pairing(p, shown, left_out, bars, discrete, lists, tuple(notes), diff)
