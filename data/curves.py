"""What the reward page reads of a store, cached on ``store.version`` (small aggregates only, never a
table): the steps summary, the curves' panels, the run-level bins, one step's histograms and stats, and
the steps x bins heatmap. The pure builders are :mod:`data.curve_panels`, :mod:`data.thinning`,
:mod:`data.histograms` and :mod:`data.heatmaps`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl

from data import thinning
from data.cache import StoreKey, shared
from data.curve_panels import DEFAULT_BAND, KL_TOP_FLAG, NOTE_NO_REF, Panel, panels
from data.derived.cells import read_hist_cells
from data.heatmaps import (
    Heatmap,
    HeatmapColumns,
    cell_histograms,
    dense_heatmap,
    heatmap,
    heatmap_columns,
    rows_placed,
)
from data.histograms import HISTOGRAMS, NOTE_BARS, StepHistogram, bars, bins_for, edges_for, sentence
from data.metrics import METRICS, label
from data.metrics.response import source_line_text
from data.metrics.step import CRITIC_SUMS, PartialStep, kl_top_share, partial_last_step
from data.queries import (
    MAX_DISCRETE_VALUES,
    Bins,
    bin_index,
    discrete_edges,
    every_bar,
    more_distinct_than,
    step_histograms,
)
from data.run_context import steps_of
from data.store import RunStore
from data.thinning import _rows_of_step, thinned_all, with_step


def histogram_panels(store: RunStore, step: int) -> list[StepHistogram]:
    """The reward and reward-gain histograms of ``step`` on the run-level bins (cached aggregates)."""
    out = []
    for kind in HISTOGRAMS:
        title = f"{label(kind)} at step {step}"
        bins = run_bins(store, kind)
        if not bins.edges:
            msg = (
                "No reference reward (ref_reward) in this run, so there is no reward gain."
                if kind == "reward_gain"
                else "No finite rewards in this run."
            )
            out.append(StepHistogram(kind, sentence(title), msg))
            continue
        ref, note = None, NOTE_BARS
        if kind == "reward":
            ref = step_bars(store, kind, step, "ref_reward")
            if ref.get_column("count").sum() == 0:
                ref, note = None, NOTE_NO_REF + " " + note
            else:
                title = f"{label('reward')} and {label('ref_reward')} at step {step}"
        out.append(
            StepHistogram(kind, sentence(title), note, step_bars(store, kind, step), ref, bins.discrete)
        )
    return out


def step_stats(store: RunStore, step: int) -> list[tuple[str, object, str]]:
    """``(name, value, kind)`` of the step's key figures (kind: the registry's ``fmt``): step, responses,
    mean reward and reference reward, win rate; those without a value left out. A partial last step
    (:func:`data.metrics.step.partial_last_step`) adds ``("partial step", its text, "warn")``."""
    frame = summary_columns(store, STAT_COLUMNS)
    partial = partial_last_step(frame)
    stats = [
        ("step", step, "step"),
        ("responses", _value_at(frame, step, "n"), "int"),
        (f"{label('reward')} mean", _value_at(frame, step, "reward_mean"), "num"),
        (f"{label('ref_reward')} mean", _value_at(frame, step, "ref_reward_mean"), "num"),
        ("win rate", _value_at(frame, step, "win_rate"), METRICS["win_rate"].fmt),
    ]
    if partial is not None and partial.step == step:
        stats.append((label("partial_step"), partial.detail(), "warn"))
    if (top := kl_top_response(store, step)) is not None:
        stats.append(("KL", top, "kl_top"))
    return [s for s in stats if s[1] is not None or s[0] == "step"]


@dataclass(frozen=True)
class KlTop:
    """The response of a step with the largest KL (k3 sum): where it is (``source``, ``line`` from 1, as on
    the responses page), its ``sample_id``, and ``share`` (:func:`data.metrics.step.kl_top_share`)."""

    source: str
    line: int
    sample_id: str
    share: float

    @property
    def flagged(self) -> bool:
        """Whether it carries more than :data:`data.curve_panels.KL_TOP_FLAG` of the step's KL (the KL
        curve flags the step)."""
        return self.share > KL_TOP_FLAG

    def text(self) -> str:
        """'rank1.jsonl:806 carries 62.4 % of the step's KL'."""
        return f"{source_line_text(self.source, self.line)} carries {self.share * 100:.1f} % of the step's KL"


def kl_top_response(store: RunStore, step: int) -> KlTop | None:
    """:class:`KlTop` of ``step`` (from the per-step summary: no response is read), or None without KL at the
    step."""
    frame = summary_columns(store, STAT_COLUMNS)
    if "kl_top_sample_id" not in frame.columns:
        return None
    frame = frame.filter(pl.col("step") == step).with_columns(kl_top_share())
    if frame.height == 0 or frame.item(0, "kl_top_share") is None or frame.item(0, "kl_top_line") is None:
        return None
    r = frame.row(0, named=True)
    return KlTop(r["kl_top_source"], int(r["kl_top_line"]), r["kl_top_sample_id"], float(r["kl_top_share"]))


def partial_step(store: RunStore) -> PartialStep | None:
    """The run's partial last step (see :func:`data.metrics.step.partial_last_step`), or None."""
    return partial_last_step(summary_columns(store, ("n",)))


# ---- cached on the store version -------------------------------------------------------------------------


# In the process only: at 5,000 steps (65 columns) pickling it into the results cache cost more than reading
# the summary's file again.
@shared(8, disk=False)
def _steps(v: StoreKey) -> pl.DataFrame:
    return v.store.steps().sort("step")


# The per-step summary's columns :func:`panels` reads (those of the curves and their bands).
CURVE_COLUMNS = (
    *(f"{c}_{s}" for c in ("reward", "response_length", "response_chars")
      for s in ("mean", "std", "p25", "p75", "p05", "p95")),
    "reward_min", "reward_max",  # the run's observed range: the std band is clipped to it
    "ref_reward_mean", "kl_token_mean", "log_ratio_token_mean", "win_rate", "tie_rate", "zero_spread_share",
    *(f"kl_mean_{s}" for s in ("std", "p25", "p75", "p05", "p95", "mean", "max")), "kl_sum_total", "kl_sum_max",
)  # fmt: skip
# The per-step summary's columns of :func:`step_stats`.
STAT_COLUMNS = ("n", "reward_mean", "ref_reward_mean", "win_rate", "kl_sum_total", "kl_sum_max",
                "kl_top_source", "kl_top_line", "kl_top_sample_id")  # fmt: skip
# Those the reward page reads (the curves, the key figures, the range of the bins and the critic card), read
# together: each read of the summary parses its footer of 118 columns (~1.8 ms cold at 256k responses).
PAGE_COLUMNS = tuple(
    dict.fromkeys(
        (*CURVE_COLUMNS, *STAT_COLUMNS, *CRITIC_SUMS,
         *(f"{c}_{s}" for _, cols in HISTOGRAMS.values() for c in cols for s in ("min", "max")))
    )
)  # fmt: skip


# In the process only, as _steps.
@shared(32, disk=False)
def _summary(v: StoreKey, columns: tuple[str, ...]) -> pl.DataFrame:
    return v.store.steps_columns(("step", *columns)).sort("step")


def summary_columns(store: RunStore, columns) -> pl.DataFrame:
    """``step`` and those of ``columns`` the per-step summary has, read alone and sorted by step (cached on
    the store version): a page that draws a few of its 65 columns reads no other. Those of
    :data:`PAGE_COLUMNS` come from one read of them all."""
    wanted = tuple(dict.fromkeys(c for c in columns if c != "step"))
    if set(wanted) <= set(PAGE_COLUMNS):
        page = _summary(StoreKey(store), PAGE_COLUMNS)
        return page.select("step", *(c for c in wanted if c in page.columns))
    return _summary(StoreKey(store), wanted)


# In the process only: made in ~3 ms from the summary this process reads anyway, when pickling them into the
# results cache took 2.3 ms at 5,000 steps (805 KB: every curve's every step) and 0.75 ms at 500.
@shared(64, disk=False)
def _panels(v: StoreKey, band: str, zero_shift: bool) -> tuple[Panel, ...]:
    return tuple(panels(summary_columns(v.store, CURVE_COLUMNS), band, zero_shift))


# Each reads only the columns (and, for one step, the files) it needs.


# The cells :func:`_bins` looks at first: a few steps' (8 cells a step and column at 2.56M responses), where
# the distinct values of every step's (112k cells there) took 4-5 ms.
CELLS_PROBE = 4096


@shared(8, disk=False)
def _cells(v: StoreKey) -> pl.DataFrame | None:
    # The steps' histogram cells, read once per process and commit: the run's bins, one step's bars and the
    # heatmap are all told from them.
    return read_hist_cells(v.store)


@shared(32)
def _bins(v: StoreKey, kind: str) -> Bins:
    columns = HISTOGRAMS[kind][1]
    steps = summary_columns(v.store, [f"{c}_{s}" for c in columns for s in ("min", "max")])
    cells = _cells(v)
    values = None
    if cells is not None and steps.height:
        # The first cells (of the first steps, as ingest sorts them) hold more values than a discrete
        # histogram takes: so does the run (each cell's lo and hi is a value of a response shown; what
        # cells_distinct of every step says then), told without a pass over every step's cells.
        first = cells.head(CELLS_PROBE).filter(pl.col("col").is_in(columns))
        if pl.concat([first.get_column("lo"), first.get_column("hi")]).n_unique() <= MAX_DISCRETE_VALUES:
            values = cells_distinct(cells, columns, MAX_DISCRETE_VALUES)
    else:
        values = cells_distinct(cells, columns, MAX_DISCRETE_VALUES)
    if values is False and steps.height:
        # Not told by the cells. One step with more than MAX_DISCRETE_VALUES distinct values: so has the
        # run, and its bins are the range's (a continuous reward is known from one step, not from every
        # response of the run).
        first = v.store.scan(columns, step=int(steps.get_column("step")[0]))
        if more_distinct_than(first, columns, MAX_DISCRETE_VALUES):
            return Bins(tuple(edges_for(steps, columns)))
    if values is False:  # nor by the first step: the responses are read
        return bins_for(steps, v.store.scan(columns), columns)
    # Told by the cells: the run's few values (one bar each, where they are far enough apart), or None
    # (more than MAX_DISCRETE_VALUES: the range's bins, whatever the first step holds).
    edges = discrete_edges(values) if values is not None else None
    if edges is not None:
        return Bins(tuple(edges), discrete=True)
    return Bins(tuple(edges_for(steps, columns)))


def cells_distinct(
    cells: pl.DataFrame | None, columns: tuple[str, ...], limit: int
) -> list[float] | None | bool:
    """:func:`data.queries.distinct_values` of ``columns`` told from a store's histogram cells: the sorted
    values when every cell holds one value (``lo == hi``), None when the cells' ``lo`` and ``hi`` are more
    than ``limit`` values (or none), False when the cells cannot tell (or there are none)."""
    if cells is None:
        return False
    c = cells.filter(pl.col("col").is_in(list(columns)))
    values = pl.concat([c.get_column("lo"), c.get_column("hi")]).unique()
    if values.len() == 0 or values.len() > limit:
        return None
    if c.filter(pl.col("lo") != pl.col("hi")).height:
        return False
    return sorted(values.to_list())


@shared(256)
def _bars(v: StoreKey, col: str, step: int, kind: str) -> pl.DataFrame:
    edges = list(_bins(v, kind).edges)
    cells = _cells(v)
    told = cell_bars(cells, col, step, edges, _cell_names(v)) if cells is not None else None
    if told is not None:
        return told
    return bars(v.store.scan(["step", col], step=step), col, step, edges)


def cell_bars(
    cells: pl.DataFrame, col: str, step: int, edges: list[float], names: frozenset[str] | None = None
) -> pl.DataFrame | None:
    """:func:`bars` of ``col`` at ``step`` summed from a store's histogram cells (see data.derived.cells):
    None when the cells cannot tell (one of the step's cells lies across an edge, or the run has no cell of
    ``col``: the column may be absent, whose bars are none rather than empty). ``names``: the columns the
    cells count, when known (:func:`_names_in`)."""
    if not edges or col not in (_names_in(cells) if names is None else names):
        return None
    c = _cells_of(cells, step).filter(pl.col("col") == col)
    c = c.select("n", bin_index("lo", edges).alias("bin"), bin_index("hi", edges).alias("top"))
    if c.filter(pl.col("bin") != pl.col("top")).height:
        return None
    counts = c.lazy().group_by("bin").agg(pl.col("n").sum().alias("count"))
    return every_bar(counts, edges).collect()


def _names_in(cells: pl.DataFrame) -> frozenset[str]:
    """The columns ``cells`` count."""
    return frozenset(cells.get_column("col").unique())


# In the process, as _cells: a pass over every step's cells (0.75 ms at 5,000 steps) once, not at each bar.
@shared(8, disk=False)
def _cell_names(v: StoreKey) -> frozenset[str]:
    cells = _cells(v)
    return frozenset() if cells is None else _names_in(cells)


def _cells_of(cells: pl.DataFrame, step: int) -> pl.DataFrame:
    """The cells of one step: a slice found by bisection where the cells are sorted by step (as ingest
    writes them), not a pass over every step's cells; else a filter."""
    steps = cells.get_column("step").to_numpy()
    if len(steps) and bool((steps[1:] >= steps[:-1]).all()):
        lo, hi = _rows_of_step(steps, step)
        return cells.slice(lo, hi - lo)
    return cells.filter(pl.col("step") == step)


@shared(16)
def _heatmap(v: StoreKey, kind: str) -> Heatmap:
    b = _bins(v, kind)
    edges, steps = list(b.edges), list(steps_of(v.store))
    cells = _cells(v)
    if cells is None:  # a store committed without the cells
        if kind not in v.store.schema():
            return dense_heatmap(None, edges, steps, b.discrete)
        return heatmap(v.store.scan(["step", kind]), kind, edges, steps, b.discrete)
    # (A column the scalars lack has no cell: its heatmap is all zeros, as without the column.)
    # Summed from the steps' cells; a step with a cell across an edge is counted from its responses.
    count, split = cell_histograms(cells, kind, edges, steps)
    if split:
        rows = v.store.scan(["step", kind], steps=(split[0], split[-1])).filter(pl.col("step").is_in(split))
        count += rows_placed(step_histograms(rows, kind, edges), edges, steps)
    return dense_heatmap(count, edges, steps, b.discrete)


def run_steps(store: RunStore) -> pl.DataFrame:
    """The store's per-step summary sorted by step (cached on the store version)."""
    return _steps(StoreKey(store))


def run_panels(store: RunStore, band: str = DEFAULT_BAND, zero_shift: bool = False) -> tuple[Panel, ...]:
    """:func:`panels` of the store's per-step summary (cached on the store version)."""
    return _panels(StoreKey(store), band, bool(zero_shift))


# Not on disk: thinning a page's panels takes ~2 ms at 5,000 steps, and the panels are objects of this
# process.
@shared(16, disk=False)
def _thinned_panels(v: StoreKey, band: str, zero_shift: bool, max_points: int) -> tuple[Panel, ...]:
    steps = list(steps_of(v.store))
    return thinned_all(_panels(v, band, zero_shift), steps, max_points=max_points)


def run_panels_at(
    store: RunStore, band: str = DEFAULT_BAND, zero_shift: bool = False, step: int | None = None
) -> tuple[Panel, ...]:
    """:func:`run_panels` as drawn with ``step`` selected: ``thinned(panel, steps, step)`` of each (the
    thinning cached on the store version, the selected step added)."""
    key = StoreKey(store)
    full = _panels(key, band, bool(zero_shift))
    shown = _thinned_panels(key, band, bool(zero_shift), thinning.MAX_POINTS)
    return tuple(with_step(s, f, step) for s, f in zip(shown, full, strict=True))


def run_panels_by_key(store: RunStore, band: str | None, zero_shift, step: int | None, keys) -> list[Panel]:
    """:func:`run_panels_at` (``band`` None: the default) of the curve panels ``keys``, in that order: the
    reward page's curves."""
    by_key = {p.key: p for p in run_panels_at(store, band or DEFAULT_BAND, bool(zero_shift), step)}
    return [by_key[k] for k in keys]


def reward_heatmap_columns(store: RunStore, window: tuple[int, int] | None) -> HeatmapColumns:
    """The reward heatmap's columns for the steps in ``window`` (None: the whole run; see
    :func:`data.heatmaps.heatmap_columns`)."""
    return heatmap_columns(run_heatmap(store, "reward"), window)


def run_bins(store: RunStore, kind: str) -> Bins:
    """The run-level :class:`~data.queries.Bins` of the ``kind`` histogram (a :data:`HISTOGRAMS` key),
    cached on the store version; no edges without values."""
    return _bins(StoreKey(store), kind)


def run_edges(store: RunStore, kind: str) -> list[float]:
    """The edges of :func:`run_bins`; [] without values."""
    return list(run_bins(store, kind).edges)


def step_bars(store: RunStore, kind: str, step: int, col: str | None = None) -> pl.DataFrame:
    """One step's :func:`bars` of ``col`` (default: ``kind``) on the run-level edges of ``kind``."""
    return _bars(StoreKey(store), col or kind, step, kind)


def run_heatmap(store: RunStore, kind: str = "reward") -> Heatmap:
    """The steps x bins :class:`Heatmap` of ``kind`` on its run-level edges (cached on the store version)."""
    return _heatmap(StoreKey(store), kind)


def summary_value(store: RunStore, step: int, col: str) -> float | None:
    """One value of the per-step summary (None when missing or not finite)."""
    return _value_at(summary_columns(store, (col,)), step, col)


def _value_at(steps: pl.DataFrame, step: int, col: str) -> float | None:
    df = steps.filter(pl.col("step") == step)
    if df.height == 0 or col not in df.columns:
        return None
    v = df.item(0, col)
    return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else v
