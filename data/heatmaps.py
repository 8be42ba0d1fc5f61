"""The steps x bins heatmap of a column: its shares and counts per step, the columns of a zoomed window, and
the same from the histogram cells kept at ingest (pure: frames in, a :class:`Heatmap` out)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from data import thinning
from data.histograms import _names
from data.queries import bar_indices, step_histograms


@dataclass(frozen=True)
class Heatmap:
    """Steps x bins distribution of a column: ``share[b, i]`` (float32) is the share of step ``steps[i]``'s
    finite values in bar ``b`` of ``edges``, ``count[b, i]`` the number of responses there. ``discrete``:
    bar ``b`` holds the one value ``edges[b]`` (see :class:`~data.queries.Bins`)."""

    steps: np.ndarray
    edges: list[float]
    share: np.ndarray
    count: np.ndarray
    discrete: bool = False


@dataclass(frozen=True)
class HeatmapColumns:
    """The columns a heatmap draws of a :class:`Heatmap`: column ``i`` holds the run's steps ``first[i]``
    to ``last[i]`` (``k`` consecutive steps of the run; one when ``k == 1``, the last column may hold
    fewer), drawn at ``x[i]`` (the step, or the middle of its first and last); ``count[b, i]`` is the
    number of their responses in bar ``b``, ``share[b, i]`` that over their responses with a value (0
    when none). ``window``: the steps asked for (None: the whole run); ``note`` says what a column is."""

    x: np.ndarray
    first: np.ndarray
    last: np.ndarray
    edges: list[float]
    share: np.ndarray
    count: np.ndarray
    k: int
    window: tuple[int, int] | None
    note: str
    discrete: bool = False


def _span(a: int, b: int) -> str:
    return f"{a:,}" if a == b else f"{a:,}–{b:,}"


def heatmap_columns(
    hm: Heatmap, window: tuple[int, int] | None = None, max_columns: int | None = None
) -> HeatmapColumns:
    """The columns of ``hm`` drawn for the run's steps in ``window`` (``(lo, hi)``, both included; None or
    a window without steps: all of them): one per step up to ``max_columns`` (default
    :data:`data.thinning.MAX_POINTS`) steps, else runs of ``k`` consecutive steps (``k`` the smallest that
    keeps at most ``max_columns`` columns) whose counts are summed and whose share is of their responses
    together."""
    max_columns = thinning.MAX_POINTS if max_columns is None else max_columns
    steps, count, share = hm.steps, hm.count, hm.share
    if window is not None:
        keep = (steps >= window[0]) & (steps <= window[1])
        if keep.any():
            steps, count, share = steps[keep], count[:, keep], share[:, keep]
        else:
            window = None
    n, total = len(steps), len(hm.steps)
    where = f"Steps {_span(int(steps[0]), int(steps[-1]))} of {total:,}" if window is not None else ""
    if n <= max_columns:
        note = f"{where}, one column per step: click a cell for its responses." if where else ""
        return HeatmapColumns(steps, steps, steps, hm.edges, share, count, 1, window, note, hm.discrete)
    k = -(-n // max_columns)
    starts = np.arange(0, n, k)
    counts = np.add.reduceat(count.astype(np.int64), starts, axis=1)
    totals = counts.sum(axis=0)
    shares = np.divide(counts, totals, out=np.zeros(counts.shape), where=totals > 0).astype(np.float32)
    first, last = steps[starts], steps[np.r_[starts[1:], n] - 1]
    shown = ", ".join(_span(int(a), int(b)) for a, b in zip(first[:2], last[:2], strict=True))
    note = (
        f"{where + ': ' if where else ''}{n:,} steps, each column {k:,} of them ({shown}, …): the colour is the "
        f"share of their responses in the bin. Click a column to draw the {max_columns:,} steps around it, "
        "one column per step."
    )
    top = int(counts.max()) if counts.size else 0
    counts = counts.astype(np.uint8 if top < 2**8 else np.uint16 if top < 2**16 else np.uint32)
    return HeatmapColumns(
        (first + last) / 2, first, last, hm.edges, shares, counts, k, window, note, hm.discrete
    )


def zoom_window(steps: list[int], first: int, last: int, size: int | None = None) -> tuple[int, int] | None:
    """The window of ``size`` (default :data:`data.thinning.MAX_POINTS`) consecutive steps of the run
    (``steps``, sorted) centred on the run's steps ``first``..``last`` (a column of :func:`heatmap_columns`),
    kept within the run; None when the run has no step there."""
    size = thinning.MAX_POINTS if size is None else size
    lo, hi = np.searchsorted(steps, first), np.searchsorted(steps, last, side="right")
    if not steps or lo >= hi:
        return None
    start = min(max(int(lo + hi) // 2 - size // 2, 0), max(len(steps) - size, 0))
    return steps[start], steps[min(start + size, len(steps)) - 1]


def heatmap(
    scalars: pl.DataFrame | pl.LazyFrame,
    col: str,
    edges: list[float],
    steps: list[int],
    discrete: bool = False,
) -> Heatmap:
    """Dense :class:`Heatmap` of ``col`` on ``edges`` for ``steps`` (steps without values stay at 0)."""
    counts = step_histograms(scalars.lazy(), col, edges) if col in _names(scalars) else None
    return dense_heatmap(counts, edges, steps, discrete)


def cell_histograms(
    cells: pl.DataFrame, col: str, edges: list[float], steps: list[int]
) -> tuple[np.ndarray, list[int]]:
    """:func:`data.queries.step_histograms`' counts of ``col`` summed from a store's histogram cells (see
    data.ingest.hist_cells): ``count[b, i]`` in bar ``b`` of ``edges`` at the step ``sorted(steps)[i]``,
    for the steps none of whose cells lies across an edge (their every value is in the bar of its cell's
    ``lo`` and ``hi``; the others' counts are 0), and the sorted steps with such a cell (to count from
    their responses). Summed in numpy (:func:`data.queries.bar_indices`: ``lo`` and ``hi`` are finite)."""
    c = cells.filter(pl.col("col") == col)
    at = c.get_column("step").cast(pl.Int64).to_numpy()
    b = bar_indices(c.get_column("lo").to_numpy(), edges)
    top = bar_indices(c.get_column("hi").to_numpy(), edges)
    split = np.unique(at[b != top])
    whole = ~np.isin(at, split)
    n = c.get_column("n").to_numpy()
    return placed_counts(at[whole], b[whole], n[whole], edges, steps), split.tolist()


def placed_counts(
    at: np.ndarray, b: np.ndarray, n: np.ndarray, edges: list[float], steps: list[int]
) -> np.ndarray:
    """``count[b, i]``: the sum of the counts ``n`` of bar ``b`` at the step ``sorted(steps)[i]``, from cells
    given by their steps ``at``, bars ``b`` and counts ``n`` (cells of other steps left out)."""
    nb = max(len(edges) - 1, 0)
    step_arr = np.asarray(sorted(steps), dtype=np.int64)
    size = nb * len(step_arr)
    if not size or not len(at):
        return np.zeros((nb, len(step_arr)), dtype=np.int64)
    # Each cell's column: its step's place among ``steps``.
    i = np.minimum(np.searchsorted(step_arr, at), len(step_arr) - 1)
    keep = step_arr[i] == at
    flat = np.bincount(b[keep] * len(step_arr) + i[keep], weights=n[keep], minlength=size)
    return flat.astype(np.int64).reshape(nb, len(step_arr))


def rows_placed(counts: pl.LazyFrame | None, edges: list[float], steps: list[int]) -> np.ndarray:
    """:func:`placed_counts` of ``step, bin, count`` rows (None: none)."""
    if counts is None:
        return placed_counts(*(np.zeros(0, dtype=np.int64),) * 3, edges, steps)
    rows = counts.select("step", "bin", "count").collect()
    return placed_counts(
        *(rows.get_column(k).cast(pl.Int64).to_numpy() for k in ("step", "bin", "count")), edges, steps
    )


def dense_heatmap(
    counts: pl.LazyFrame | np.ndarray | None, edges: list[float], steps: list[int], discrete: bool = False
) -> Heatmap:
    """:class:`Heatmap` for ``steps`` of per step and bar ``counts``: ``step, bin, count`` rows (as
    :func:`data.queries.step_histograms` gives them; None: none) or :func:`placed_counts`' table (steps
    without values stay at 0). A bar's share is its count over its step's, as step_histograms' ``share``."""
    step_arr = np.asarray(sorted(steps), dtype=np.int64)
    count = counts if isinstance(counts, np.ndarray) else rows_placed(counts, edges, steps)
    totals = count.sum(axis=0)
    share = np.divide(count, totals, out=np.zeros(count.shape), where=totals > 0).astype(np.float32)
    # The smallest unsigned type that holds the counts keeps the browser payload small.
    top = int(count.max()) if count.size else 0
    count = count.astype(np.uint8 if top < 2**8 else np.uint16 if top < 2**16 else np.uint32)
    return Heatmap(step_arr, edges, share, count, discrete)
