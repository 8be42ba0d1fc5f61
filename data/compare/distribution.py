"""The reward distributions of several runs at a chosen step of each, on one set of bins: bars of every
run cover the same intervals, so their shares can be compared bar by bar."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from data import curves as run_curves
from data import histograms
from data.cache import StoreKey, shared
from data.compare.notes import METRIC, Note
from data.derived.cells import read_hist_cells
from data.queries import MAX_DISCRETE_VALUES, Bins, discrete_edges, distinct_values, histogram_edges
from data.run_context import context_of
from data.store import RunStore

# The columns the histogram cells count (data.derived.cells.COLUMNS; data.curves' histograms'): a
# column without cells has none in the file, which must not read as "no value".
CELL_COLUMNS = {c for _, cols in histograms.HISTOGRAMS.values() for c in cols}


@shared(16)
def _distinct(v: StoreKey, col: str) -> tuple[float, ...] | None:
    """:func:`~data.queries.distinct_values` of ``col`` over the responses shown: told by the steps'
    histogram cells the last commit wrote (see :func:`data.curves.cells_distinct`) where they tell it,
    else from a scan of the column."""
    if col in CELL_COLUMNS:
        told = run_curves.cells_distinct(read_hist_cells(v.store), (col,), MAX_DISCRETE_VALUES)
        if told is not False:
            return None if told is None else tuple(told)
    values = distinct_values(v.store.scan([col]), (col,), MAX_DISCRETE_VALUES)
    return None if values is None else tuple(values)


def _range(frame: pl.DataFrame, col: str) -> tuple[float, float] | None:
    if f"{col}_min" not in frame.columns or frame.height == 0:
        return None
    lo = frame.select(pl.col(f"{col}_min").filter(pl.col(f"{col}_min").is_finite()).min()).item()
    hi = frame.select(pl.col(f"{col}_max").filter(pl.col(f"{col}_max").is_finite()).max()).item()
    return None if lo is None or hi is None else (float(lo), float(hi))


def shared_bins(stores: dict[str, RunStore], col: str = "reward") -> Bins:
    """Bins for ``col`` shared by every run: one bar per value when the runs' distinct values together
    are at most :data:`~data.queries.MAX_DISCRETE_VALUES` (and not too close, see
    :func:`~data.queries.discrete_edges`), else :func:`~data.queries.histogram_edges` over the union of
    the runs' whole ranges (from each per-step summary), so the bars stay put when the chosen steps
    change. No edges when no run has a finite value."""
    values: set[float] = set()
    discrete = True
    ranges = []
    for store in stores.values():
        d = _distinct(StoreKey(store), col)
        if d is None:
            discrete = False
        else:
            values.update(d)
        r = _range(run_curves.run_steps(store), col)
        if r is not None:
            ranges.append(r)
    if discrete and values and len(values) <= MAX_DISCRETE_VALUES:
        edges = discrete_edges(sorted(values))
        if edges is not None:
            return Bins(tuple(edges), discrete=True)
    if not ranges:
        return Bins()
    return Bins(tuple(histogram_edges(min(r[0] for r in ranges), max(r[1] for r in ranges))))


@dataclass(frozen=True)
class RunBars:
    """One run's bars at its chosen ``step``: ``frame`` has ``bin, lo, hi, count, share`` (share of the
    step's responses with a finite value), ``n`` is that number of responses."""

    run: str
    step: int
    frame: pl.DataFrame
    n: int


def distributions(
    stores: dict[str, RunStore], chosen: dict[str, int | None], bins: Bins, col: str = "reward"
) -> tuple[list[RunBars], list[Note]]:
    """Each run's histogram of ``col`` at its chosen step (``chosen[run]``; None: its last step; a step the
    run does not have: the step :meth:`data.run_context.RunContext.step` shows, with its note) on the
    shared ``bins``."""
    bars, notes = [], []
    edges = list(bins.edges)
    for run, store in stores.items():
        ctx = context_of(run, store)
        if not ctx.steps:
            notes.append(Note(METRIC, (run,), f"{run}: no step to show."))
            continue
        step, said = ctx.step(chosen.get(run))  # the one rule of every page (data.run_context)
        notes += [Note(METRIC, (run,), text) for text in said]
        frame = _bars(store, col, step, tuple(edges)) if edges else None
        n = int(frame.get_column("count").sum()) if frame is not None else 0
        if not n:
            notes.append(Note(METRIC, (run,), f"{run}: no finite {col} at step {step}."))
            continue
        frame = frame.with_columns((pl.col("count") / n).alias("share"))
        bars.append(RunBars(run, step, frame, n))
    return bars, notes


@shared(256)
def _bars_cached(v: StoreKey, col: str, step: int, edges: tuple[float, ...]) -> pl.DataFrame:
    return histograms.bars(v.store.scan(["step", col], step=step), col, step, list(edges))


def _bars(store: RunStore, col: str, step: int, edges: tuple[float, ...]) -> pl.DataFrame:
    return _bars_cached(StoreKey(store), col, step, edges)
