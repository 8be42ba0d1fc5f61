"""Run-level curves of several runs on one set of axes: one line per run for each metric, from each run's
per-step summary (no scan of the responses: ingest keeps the per-step means of the repetition and of the
reward component columns there too), smoothed on request and drawn against the step or against the responses seen so
far."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from data import curve_panels
from data import curves as run_curves
from data.cache import StoreKey, shared
from data.compare.notes import METRIC, STEPS, Note
from data.compare.smoothing import ema
from data.metrics import label
from data.metrics.critic import return_label
from data.metrics.degeneration import runs_label, summary_units
from data.metrics.step import CRITIC_SUMS, critic_health, extra_mean
from data.store import RunStore

# x-axes: the training step, or "samples seen": the responses of the run up to and including the step
# (the cumulative sum of the step's response count, in step order), for runs with different batch sizes.
X_AXES = {"step": label("step"), "samples": label("samples_seen")}

# Curves are drawn with this many significant digits (a chart needs no more, and it halves what the page
# sends); tables and the summary keep every digit.
SIG_DIGITS = 6

# Compared metrics: key -> (label, unit on the y-axis, where the per-step value comes from). A key of the
# per-step summary with a ``_mean`` column (``reward``) gets a spread band; the others are one value per
# step. ``repetition`` is the summary's ``repetition_mean`` (the mean of the step's finite repetitions).
METRICS = {
    "reward": (label("reward"), "reward"),
    "ref_reward": (label("ref_reward"), "reward"),
    "kl_token_mean": (label("kl") + ", per-token mean", "per token"),
    "log_ratio_token_mean": (label("log_ratio") + ", per-token mean", "per token"),
    "response_length": (label("response_length"), "tokens"),
    "response_chars": (label("response_chars"), "characters"),
    "win_rate": (label("win_rate"), "share"),
    "zero_spread_share": ("share of groups whose responses all got the same reward", "share"),
    "repetition": (label("repetition"), "share"),
    "truncated_share": (label("truncated_share"), "share"),
    # Pooled from the summary's critic sums (data.metrics.step.critic_health); each run's own returns.
    "explained_variance": (return_label("explained_variance", "mixed"), "explained variance"),
}
BANDED = ("reward", "ref_reward", "response_length", "response_chars")
# Those whose ±1 std band is clipped to the run's observed range, as on the reward page (a note says so):
# mean ± std knows no limit, and a reward or a length has one (a length is never below its shortest).
CLIPPED = ("reward", "response_length", "response_chars")
FROM_RESPONSES = ("repetition",)
# A reward component: an extra column of the run's own named ``rewards.<fn>`` (a file's ``{"rewards":
# {"<fn>": …}}``) or ``reward_<fn>`` / ``<fn>_reward``, or one the reward was summed from at ingest (TRL's
# columns named after its reward functions, see data/schema/dialects/trl.py); its curve is the per-step mean.
# Key: ``component:<col>``.
COMPONENT = "component:"

MISSING = {
    "ref_reward": "no reference reward (ref_reward)",
    "kl_token_mean": "no per-token log-probs (logprobs and ref_logprobs)",
    "log_ratio_token_mean": "no per-token log-probs (logprobs and ref_logprobs)",
    "response_length": "no token fields (its length is in characters)",
    "win_rate": "no reference reward (ref_reward), so no win rate",
    "zero_spread_share": "no groups of 2+ responses to one prompt at a step",
    "repetition": "no repetition column",
    "truncated_share": "no response ends with an end token, so a cut one cannot be told from a finished one",
    "explained_variance": "no critic values (values)",
}


def is_component(col: str) -> bool:
    """Whether an extra column is a reward component (see :data:`COMPONENT`)."""
    c = col.lower()
    return (c.startswith(("rewards.", "reward_", "rewards/")) or c.endswith("_reward")) and c not in (
        "ref_reward",
        "reward_gain",
    )


def component_columns(store) -> list[str]:
    """The run's extra columns that are reward components (see :data:`COMPONENT`), in the store's order."""
    formed = store.manifest.reward_formed or {}
    parts = set(formed.get("parts") or ())
    return [c for c in store.extra_columns() if is_component(c) or c in parts]


def metric_label(key: str) -> str:
    return key.removeprefix(COMPONENT) + " (mean)" if key.startswith(COMPONENT) else METRICS[key][0]


def metric_unit(key: str) -> str:
    return "reward" if key.startswith(COMPONENT) else METRICS[key][1]


# ---- one run, cached on its store version ----------------------------------------------------------------


def _summary_means(store: RunStore, steps: pl.DataFrame) -> dict[str, str]:
    """``{column of run_frame: column of the summary}`` for the repetition and the reward components, whose
    means the steps summary ``steps`` keeps. A component without a kept mean is not numeric (it has no
    curve)."""
    components = component_columns(store)
    out = {"repetition": "repetition_mean"}
    out.update({COMPONENT + c: extra_mean(c) for c in components if extra_mean(c) in steps.columns})
    return out


# In the process only: built from the summary in a millisecond, while pickling 5,000 steps of it into the
# results cache took ~7 ms.
@shared(16, disk=False)
def _run_frame(v: StoreKey) -> pl.DataFrame:
    """The run's step summary with ``samples`` (responses seen, cumulative) and the response means."""
    steps = run_curves.run_steps(v.store)
    out = steps.sort("step").with_columns(pl.col("n").cum_sum().cast(pl.Int64).alias("samples"))
    kept = _summary_means(v.store, out)
    out = out.with_columns(pl.col(src).alias(key) for key, src in kept.items())
    if set(CRITIC_SUMS) <= set(out.columns):
        out = out.with_columns(critic_health())
    # The summary's means of the extra columns are read under the keys above (or not at all).
    return out.drop([extra_mean(c) for c in v.store.extra_columns()], strict=False)


def run_frame(store: RunStore) -> pl.DataFrame:
    """One row per step of the run: the per-step summary (see :func:`data.metrics.step.step_summary`),
    ``samples`` and the per-step means of ``repetition`` and the reward components."""
    return _run_frame(StoreKey(store))


def _column(key: str) -> str:
    if key.startswith(COMPONENT):
        return key
    return f"{key}_mean" if key in BANDED else key


def available(frame: pl.DataFrame) -> list[str]:
    """The metric keys a run's :func:`run_frame` has values for, in :data:`METRICS` order, then its
    reward components by name."""
    comps = [c for c in frame.columns if c.startswith(COMPONENT)]
    found = curve_panels.with_values(frame, [_column(k) for k in METRICS] + comps)
    out = [k for k in METRICS if _column(k) in found]
    # A run with token lengths has characters too; the characters are only for runs without tokens.
    if "response_length" in out and "response_chars" in out:
        out.remove("response_chars")
    comps = sorted(c for c in comps if c in found)
    return out + comps


def clipped(frame: pl.DataFrame, key: str, band: str | None) -> tuple[float, float] | None:
    """The range ``key``'s ``band`` is cut to in ``frame`` (:func:`data.curve_panels.band_clipped`), None
    when it is not cut."""
    return curve_panels.band_clipped(frame, key, band) if band and key in CLIPPED else None


def run_curve(
    frame: pl.DataFrame, key: str, band: str | None = None, clip: tuple[float, float] | None = None
) -> pl.DataFrame:
    """``step, samples, y`` (+ ``lo, hi`` with a band, for :data:`BANDED` metrics) of one metric, sorted by
    step; non-finite values are nulls (gaps). ``clip``: the range the band is cut to (:func:`clipped`)."""
    col = _column(key)
    if col not in frame.columns:
        return pl.DataFrame(schema={"step": pl.Int64, "samples": pl.Int64, "y": pl.Float64})
    if key in BANDED:
        curve = curve_panels.curve(frame, key, band if band else None, clip=clip)
    else:
        curve = curve_panels.curve(frame, col, None, mean=False)
    return curve.join(frame.select("step", "samples"), on="step", how="left").select(
        "step", "samples", *[c for c in curve.columns if c != "step"]
    )


# ---- several runs ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunLine:
    """One run's line on a compared chart: ``frame`` has ``x`` (step or samples seen), ``step``, ``y``
    (raw), ``smooth`` (the EMA of ``y``; equal to ``y`` without smoothing) and, with a band, ``lo, hi``."""

    run: str
    frame: pl.DataFrame


@dataclass(frozen=True)
class Overlay:
    """One compared chart: ``metric`` key, its label and y unit, the x-axis (a :data:`X_AXES` key), one
    :class:`RunLine` per run that has the metric (in the runs' order), and notes for the runs without."""

    metric: str
    label: str
    unit: str
    x: str
    lines: tuple[RunLine, ...]
    notes: tuple[Note, ...]


def overlay(
    frames: dict[str, pl.DataFrame],
    key: str,
    band: str | None = None,
    smoothing: float = 0.0,
    x: str = "step",
    digits: int | None = SIG_DIGITS,
    have: dict[str, list[str]] | None = None,
) -> Overlay:
    """The chart of ``key`` over ``frames`` (run name -> :func:`run_frame`, in the order to draw).

    Smoothing is :func:`data.compare.smoothing.ema` of each run's raw ``y`` with weight ``smoothing``
    (on the step order; the band is not smoothed); the values are then rounded to ``digits`` significant
    digits (None: kept as computed, as the API answers). A run without values for ``key`` gets a note
    saying what it lacks instead of a line. ``have``: each run's :func:`available` when the caller has it
    (a chart per metric asks it of every run; one pass over a frame's ~100 columns each time).
    """
    if x not in X_AXES:
        raise ValueError(f"unknown x-axis {x!r}")
    lines, notes = [], []
    for run, frame in frames.items():
        if key not in (have[run] if have is not None else available(frame)):
            why = MISSING.get(key, f"no column {key.removeprefix(COMPONENT)!r}")
            notes.append(Note(METRIC, (run,), f"{run}: {why}; no {metric_label(key)} line."))
            continue
        rng = clipped(frame, key, band)
        c = run_curve(frame, key, band, clip=rng)
        if rng is not None:
            span = f"{rng[0]:.4g} – {rng[1]:.4g}"
            text = f"{run}: its {curve_panels.BANDS[band]} band is clipped to its observed range {span}."
            notes.append(Note(METRIC, (run,), text))
        smooth = ema(c.get_column("y").to_list(), smoothing) if smoothing else c.get_column("y").to_numpy()
        c = c.with_columns(
            pl.col("samples" if x == "samples" else "step").cast(pl.Float64).alias("x"),
            pl.Series("smooth", smooth, dtype=pl.Float64).fill_nan(None),
        )
        cols = ["y", "smooth", *[k for k in ("lo", "hi") if k in c.columns]]
        if digits is not None:
            c = c.with_columns(pl.col(cols).round_sig_figs(digits))
        lines.append(RunLine(run, c.select("x", "step", *cols)))
    name = metric_label(key)
    if key == "repetition":  # its unit (token, character or word 3-grams), each run's where they differ
        name = runs_label(name, {line.run: summary_units(frames[line.run]) for line in lines})
    return Overlay(key, name, metric_unit(key), x, tuple(lines), tuple(notes))


def metrics_of(frames: dict[str, pl.DataFrame], have: dict[str, list[str]] | None = None) -> list[str]:
    """The metric keys at least one run has, in :func:`available` order (components last, by name)."""
    out: list[str] = []
    for run, frame in frames.items():
        for k in have[run] if have is not None else available(frame):
            if k not in out:
                out.append(k)
    fixed = [k for k in METRICS if k in out]
    return fixed + sorted(k for k in out if k.startswith(COMPONENT))


def step_notes(frames: dict[str, pl.DataFrame]) -> list[Note]:
    """Notes on the runs' step ranges: a run with no step; runs whose step ranges differ (each run's
    first–last step and count); runs whose ranges do not overlap at all (on a step axis they sit side by
    side: the samples-seen axis or the summary table compares them better)."""
    notes = []
    ranges = {}
    for run, f in frames.items():
        if f.height == 0:
            notes.append(Note(STEPS, (run,), f"{run}: no complete step yet."))
            continue
        s = f.get_column("step")
        ranges[run] = (int(s.min()), int(s.max()), f.height)
    if len(ranges) >= 2 and len({r for r in ranges.values()}) > 1:
        text = "; ".join(f"{r}: steps {a}–{b} ({n} steps)" for r, (a, b, n) in ranges.items())
        notes.append(Note(STEPS, tuple(ranges), f"The runs cover different steps — {text}."))
        lo = max(a for a, _, _ in ranges.values())
        hi = min(b for _, b, _ in ranges.values())
        if lo > hi:
            notes.append(Note(STEPS, tuple(ranges), "Their step ranges do not overlap."))
    return notes
