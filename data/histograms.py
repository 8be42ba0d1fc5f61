"""The reward page's histograms of one step: which columns are binned, the run-level edges and bins, and
a step's bars on them (pure: frames in, frames out)."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from data.curve_panels import _finite
from data.metrics import label
from data.queries import (
    MAX_DISCRETE_VALUES,
    Bins,
    discrete_edges,
    distinct_values,
    histogram,
    histogram_edges,
)

# Histogram columns of the reward page: the column, the URL prefix of its drill-down interval, and the
# columns whose values share its edges (the reference rewards are drawn on the reward histogram's bins).
HISTOGRAMS = {
    "reward": ("reward", ("reward", "ref_reward")),
    "reward_gain": ("gain", ("reward_gain",)),
}


def sentence(text: str) -> str:
    """A sentence-case title from lower-case metric labels (the labels themselves stay exact)."""
    return text[:1].upper() + text[1:]


HEATMAP_TITLE = sentence(
    f"{label('reward')} distribution across training: share of each step's responses per bin"
)
NOTE_BARS = "Bars share the run's bins at every step; click a bar for its responses."


@dataclass(frozen=True)
class StepHistogram:
    """One histogram panel of a step: ``kind`` (a :data:`HISTOGRAMS` key), its title and note, the step's
    bars on the run's bins (None when the run has no value to bin: ``note`` says why) and the reference
    rewards' bars beside the rewards' (None when there are none)."""

    kind: str
    title: str
    note: str
    bars: pl.DataFrame | None = None
    ref_bars: pl.DataFrame | None = None
    discrete: bool = False


# ---- histograms ----------------------------------------------------------------------------------------


def edges_for(steps: pl.DataFrame, columns: tuple[str, ...]) -> list[float]:
    """:func:`data.queries.histogram_edges` over the run's whole range of ``columns`` (finite values).

    The range comes from the per-step summary's ``<col>_min`` / ``<col>_max`` (no scan of the responses).
    Computed on the whole run so that every step has the same bars; the reference rewards share the
    reward's edges, so their range counts too (none of them falls outside the first or last bar).
    """
    lows, highs = [], []
    for col in columns:
        if f"{col}_min" in steps.columns and steps.height:
            lo = steps.select(_finite(f"{col}_min").min()).item()
            hi = steps.select(_finite(f"{col}_max").max()).item()
            if lo is not None and hi is not None:
                lows.append(lo)
                highs.append(hi)
    if not lows:
        return []
    return histogram_edges(min(lows), max(highs))


def _names(frame: pl.DataFrame | pl.LazyFrame) -> list[str]:
    return frame.collect_schema().names()


def bins_for(steps: pl.DataFrame, scalars: pl.DataFrame | pl.LazyFrame, columns: tuple[str, ...]) -> Bins:
    """The run's :class:`~data.queries.Bins` for ``columns``: one bar per value when their values together
    are few (:func:`data.queries.discrete_edges`, from the responses: a frame or a lazy scan), else
    :func:`edges_for`."""
    values = distinct_values(scalars.lazy(), columns, MAX_DISCRETE_VALUES)
    edges = discrete_edges(values) if values is not None else None
    if edges is not None:
        return Bins(tuple(edges), discrete=True)
    return Bins(tuple(edges_for(steps, columns)))


def bars(scalars: pl.DataFrame | pl.LazyFrame, col: str, step: int, edges: list[float]) -> pl.DataFrame:
    """One step's histogram of ``col`` on ``edges``: ``bin, lo, hi, count`` for every bar, sorted by bin.

    ``count`` is the number of responses of the step with ``edges[k] <= x < edges[k+1]`` (the last bar
    also takes its top edge): exactly what ``ResponseFilter(step=step, <col>_min=lo, <col>_max=hi)``
    selects with the bounds of :func:`data.queries.bar_interval`.
    """
    if not edges or col not in _names(scalars):
        return pl.DataFrame(schema={"bin": pl.Int32, "lo": pl.Float64, "hi": pl.Float64, "count": pl.Int64})
    lf = scalars.lazy().filter(pl.col("step") == step)
    return histogram(lf, col, edges).collect()
