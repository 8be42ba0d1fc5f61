"""Per-step histogram cells of the reward page's columns, kept beside the steps summary so that the heatmap
of every step (and the run's discrete bins) is summed from a small file instead of read from every response.

The bins of a histogram (:func:`data.queries.histogram_edges`, or one bar per value) are settled from the
whole run and move as it grows, so ingest cannot count the bars themselves. It counts **cells** instead:
per step and column, the finite values grouped by a key, with their count and their smallest and largest
value (:data:`SCHEMA`: ``step, col, lo, hi, n``). Every value of a cell lies in ``[lo, hi]`` and a value's
bar is monotone in the value, so a cell whose ``lo`` and ``hi`` fall in one bar has all its ``n`` values in
that bar: the counts summed from such cells are exactly the scan's (see ``data.curves``). A cell across an
edge cannot be split; the steps holding one are read from the parts instead.

The key makes such cells rare: a batch of rows with at most :data:`MAX_DISCRETE_VALUES` distinct values
has one cell per value (``lo == hi``: exact on any edges, and the run's distinct values when it has few);
otherwise a cell is a bar of the edges the run has now (``w`` the width of :func:`data.queries.
histogram_edges` over the run's range; :func:`data.queries.lattice_edges` gives the very floats of its
edges whatever part of the range the rows at hand cover).
When the run's width changes, the cells of every step are made again (:class:`data.derived.steps.
StepSummaries`); a width changes only when the run's range crosses a 'nice' step (1, 2, 2.5, 5 times a
power of ten), a few times in a run.

A step's cells depend only on that step's rows (and the width), so they are made where the steps summary
is, from the same rows.
"""

from __future__ import annotations

import math
import sys

import polars as pl

from data.derived.base import Commit, collect_named, read_named

# A column with at most this many distinct values in a run gets one bar per value (a verifier's 0 / 1, a
# reward in steps of 0.5) instead of evenly spaced bins, which there leave most bars empty, draw each value
# off-centre and need one heatmap row per bin.
MAX_DISCRETE_VALUES = 24


def _nice(x: float) -> float:
    """Round a positive width up to 1, 2, 2.5 or 5 times a power of ten (a float: ``10 ** 39`` was a Python
    int too large for Polars, and a reward of 1e40 stopped the ingest). A width of a range that overflows
    (from -1e308 to 1e308) is taken as the largest float's."""
    x = min(x, sys.float_info.max)
    exp = math.floor(math.log10(x))
    for m in (1, 2, 2.5, 5, 10):
        if m * 10.0**exp >= x * (1 - 1e-9):
            return min(m * 10.0**exp, sys.float_info.max)
    return sys.float_info.max  # (not reached: 10 times the power of ten is at least x, or inf)


def lattice_edges(lo: float, hi: float, width: float) -> list[float]:
    """The edges of bars ``width`` wide centred on its multiples, from the one holding ``lo`` to the one
    holding ``hi`` (those of :func:`histogram_edges`: the same floats for the same width, whatever the
    range, so one range's edges are among a wider range's)."""
    start = math.floor(lo / width + 0.5) - 0.5  # in widths: the edge below the bar centred nearest lo
    edges = []
    k = 0
    while not edges or edges[-1] < hi:
        edges.append(round((start + k) * width, 12))
        k += 1
    # The last bar is closed, so a top edge equal to the maximum is enough.
    return edges


# The manifest's entry naming the cells file (written with the steps summary).
CELLS_KEY = "cells_file"


def read_hist_cells(store) -> pl.DataFrame | None:
    """The steps' histogram cells as the store's last commit wrote them: the steps shown, nothing else;
    None for a store committed without them."""
    return read_named(store, "cells")


# The columns counted (data.curves.HISTOGRAMS: the reward's bins also hold the reference rewards) and the
# columns whose range gives each one's width.
COLUMNS = {
    "reward": ("reward", "ref_reward"),
    "ref_reward": ("reward", "ref_reward"),
    "reward_gain": ("reward_gain",),
}
SCHEMA = {
    "step": pl.Int64,
    "col": pl.String,
    "lo": pl.Float64,
    "hi": pl.Float64,
    "n": pl.UInt32,
    "w": pl.Float64,
}
TARGET_BINS = 24  # data.queries.histogram_edges' default


def empty_cells() -> pl.DataFrame:
    return pl.DataFrame(schema=SCHEMA)


def widths(steps: pl.DataFrame) -> dict[str, float | None]:
    """Per counted column, the bar width of :func:`data.queries.histogram_edges` over the range of its
    :data:`COLUMNS` in the steps summary ``steps`` (``<col>_min`` / ``<col>_max``, finite values); None
    where that range is one value or none."""
    out: dict[str, float | None] = {}
    for col, over in COLUMNS.items():
        lows, highs = [], []
        for c in over:
            if f"{c}_min" not in steps.columns or steps.height == 0:
                continue
            finite = [pl.col(f"{c}_{s}").cast(pl.Float64) for s in ("min", "max")]
            finite = [x.filter(x.is_finite()) for x in finite]
            lo, hi = steps.select(finite[0].min(), finite[1].max()).row(0)
            if lo is not None and hi is not None:
                lows.append(lo)
                highs.append(hi)
        if lows and max(highs) > min(lows):
            out[col] = _nice((max(highs) - min(lows)) / TARGET_BINS)
        else:
            out[col] = None
    return out


def hist_cells(rows: pl.DataFrame, width: dict[str, float | None]) -> pl.DataFrame:
    """The cells (:data:`SCHEMA`, sorted by step, col, lo) of ``rows`` (``step`` and any of :data:`COLUMNS`)
    for the run's ``width`` (:func:`widths`). Non-finite values are left out and -0.0 is counted as 0.0,
    as :func:`data.queries.distinct_values` does; ``w`` is the width the cells were made with (NaN: one
    cell per value)."""
    frames = []
    for col in COLUMNS:
        if col not in rows.columns:
            continue
        x = rows.lazy().select("step", (pl.col(col).cast(pl.Float64) + 0.0).alias("x"))
        x = x.filter(pl.col("x").is_finite()).collect()
        if x.height == 0:
            continue
        w = width.get(col)
        few = w is None or x.get_column("x").n_unique() <= MAX_DISCRETE_VALUES
        if few:
            key = pl.col("x")
        else:  # the bar of the run's edges holding x, found as data.queries.bin_index finds it
            edges = lattice_edges(x.get_column("x").min(), x.get_column("x").max(), w)
            key = pl.lit(pl.Series(edges, dtype=pl.Float64)).search_sorted(pl.col("x"), side="right")
        frames.append(
            x.lazy()
            .group_by("step", key.alias("key"))
            .agg(pl.col("x").min().alias("lo"), pl.col("x").max().alias("hi"), pl.len().alias("n"))
            .select(
                pl.col("step").cast(pl.Int64),
                pl.lit(col).alias("col"),
                "lo",
                "hi",
                pl.col("n").cast(pl.UInt32),
                pl.lit(float("nan") if few else w, pl.Float64).alias("w"),
            )
            .collect()
        )
    if not frames:
        return empty_cells()
    return pl.concat(frames).sort("step", "col", "lo")


def made_with(cells: pl.DataFrame) -> dict[str, float]:
    """The widths ``cells`` were made with, per column (those made one per value left out)."""
    w = cells.filter(pl.col("w").is_not_nan()).group_by("col").agg(pl.col("w").first())
    return dict(w.iter_rows())


# ---- at a commit ---------------------------------------------------------------------------------------


def build(c: Commit) -> None:
    """The histogram cells of the steps shown, made with the steps summary (see data.derived.steps)."""
    cells = c.summaries.cells
    if c.below is not None:
        cells = cells.filter(pl.col("step") < c.below)
    name = c.file("cells", "parquet")
    c.put_frame(name, cells)
    c.set({CELLS_KEY: name})


def collect(c: Commit, removable) -> None:
    collect_named(c, removable, "cells-g*.parquet", CELLS_KEY)
