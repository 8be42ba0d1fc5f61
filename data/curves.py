"""Small pure queries behind the reward page: curves over steps (spread bands, zero shift), the run-level
histogram edges, one step's histograms and the steps x bins heatmap. Store-level results are cached on
``store.version`` (small aggregates only, never a table).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np
import polars as pl

from data.cache import StoreKey, shared
from data.derived.cells import read_hist_cells
from data.metrics import METRICS, label
from data.metrics.step import PartialStep, partial_last_step
from data.queries import (
    MAX_DISCRETE_VALUES,
    Bins,
    bar_indices,
    bin_index,
    discrete_edges,
    distinct_values,
    every_bar,
    histogram,
    histogram_edges,
    more_distinct_than,
    step_histograms,
)
from data.store import RunStore

# Spread bands of a curve: URL value -> UI text. All come from the store's per-step summary.
BANDS = {"std": "±1 std", "p25-p75": "p25–p75", "p5-p95": "p5–p95"}
DEFAULT_BAND = "std"

# Histogram columns of the reward page: the column, the URL prefix of its drill-down interval, and the
# columns whose values share its edges (the reference rewards are drawn on the reward histogram's bins).
HISTOGRAMS = {
    "reward": ("reward", ("reward", "ref_reward")),
    "reward_gain": ("gain", ("reward_gain",)),
}


def step_label(key: str, fallback: str) -> str:
    """The metrics registry's label of a per-step column when it has one, else ``fallback``.

    ``fallback`` is itself built from registry labels (e.g. ``label("kl") + ", per-token mean"``).
    """
    return label(key) if key in METRICS else fallback


def _finite(col: str) -> pl.Expr:
    """``col`` as Float64 with NaN / infinities turned into nulls (a gap in a curve)."""
    c = pl.col(col).cast(pl.Float64)
    return pl.when(c.is_finite()).then(c).otherwise(None)


def has_values(steps: pl.DataFrame, col: str) -> bool:
    """True when the per-step column exists and holds at least one finite value."""
    if col not in steps.columns or steps.height == 0:
        return False
    return steps.select(_finite(col).is_not_null().any()).item()


def band_exprs(col: str, band: str) -> tuple[pl.Expr, pl.Expr]:
    """Lower and upper edge of the spread band of ``col`` (a :data:`BANDS` key) from the step summary."""
    if band == "std":
        return _finite(f"{col}_mean") - _finite(f"{col}_std"), _finite(f"{col}_mean") + _finite(f"{col}_std")
    lo, hi = {"p25-p75": ("p25", "p75"), "p5-p95": ("p05", "p95")}[band]
    return _finite(f"{col}_{lo}"), _finite(f"{col}_{hi}")


def curve(
    steps: pl.DataFrame, col: str, band: str | None = None, zero_shift: bool = False, mean: bool = True
) -> pl.DataFrame:
    """One curve over steps: ``step, y`` (+ ``lo, hi`` with a band), sorted by step.

    ``y`` is ``<col>_mean`` when ``mean`` (the summary's naming), else ``col`` itself. Non-finite values
    become nulls (gaps). With ``zero_shift`` the curve's first finite value is subtracted from ``y`` and
    from its band, so curves of different levels can be compared by trend.
    """
    ycol = f"{col}_mean" if mean else col
    exprs = [pl.col("step"), _finite(ycol).alias("y")]
    if band is not None:
        lo, hi = band_exprs(col, band)
        exprs += [lo.alias("lo"), hi.alias("hi")]
    out = steps.select(exprs).sort("step")
    if zero_shift:
        first = out.get_column("y").drop_nulls()
        if first.len():
            shift = float(first[0])
            out = out.with_columns(pl.exclude("step") - shift)
    return out


@dataclass(frozen=True)
class Series:
    """One line of a curve panel: ``key`` is the metric (or per-step column) it draws, ``frame`` has
    ``step, y`` and, with a band, ``lo, hi``."""

    key: str
    label: str
    frame: pl.DataFrame
    band_label: str | None = None
    dashed: bool = False


@dataclass(frozen=True)
class Panel:
    """One chart of the reward page's 2 x 2 grid: its series, y-axis title and a note on what is missing."""

    key: str
    title: str
    y_title: str
    series: tuple[Series, ...]
    note: str | None = None
    percent: bool = False
    empty: str | None = None  # what the chart says without a series (default: see the note)


NOTE_NO_REF = "No reference reward (ref_reward) in this run: the reference curve is left out."
NOTE_NO_WIN = "No reference reward (ref_reward) in this run, so there is no win rate against it."
NOTE_NO_KL = (
    "No per-token log-probs (logprobs and ref_logprobs) in this run: KL to the reference cannot be computed."
)
NOTE_CHARS = "No token fields in this run: response length is shown in characters (pads excluded) instead."
NOTE_NO_LENGTH = "No response length in this run."


def panels(steps: pl.DataFrame, band: str = DEFAULT_BAND, zero_shift: bool = False) -> list[Panel]:
    """The four curve panels (reward, KL, length, win rate) of a per-step summary.

    Curves that cannot exist (no token fields, no ``ref_*``) are left out and the panel carries a note.
    """
    band_text = BANDS[band]
    zs = zero_shift
    shift = " (minus first value)" if zs else ""

    reward = [Series("reward", label("reward"), curve(steps, "reward", band, zs), band_text)]
    has_ref = has_values(steps, "ref_reward_mean")
    if has_ref:
        reward.append(
            Series(
                "ref_reward",
                label("ref_reward"),
                curve(steps, "ref_reward", None, zs),
                dashed=True,
            )
        )
    out = [
        Panel(
            "reward",
            "Reward",
            label("reward") + shift,
            tuple(reward),
            None if has_ref else NOTE_NO_REF,
        )
    ]

    kl = []
    for key, base in (("kl_token_mean", "kl"), ("log_ratio_token_mean", "log_ratio")):
        if has_values(steps, key):
            name = step_label(key, f"{label(base)}, per-token mean")
            kl.append(Series(key, name, curve(steps, key, None, zs, mean=False)))
    out.append(Panel("kl", "KL to the reference", "per token" + shift, tuple(kl), None if kl else NOTE_NO_KL))

    if has_values(steps, "response_length_mean"):
        length = Series(
            "response_length",
            label("response_length"),
            curve(steps, "response_length", band, zs),
            band_text,
        )
        out.append(Panel("length", "Response length", "tokens" + shift, (length,)))
    elif has_values(steps, "response_chars_mean"):
        # A summary written before the character quantiles were kept has only their mean: no band then.
        chars_band = band if "response_chars_std" in steps.columns else None
        length = Series(
            "response_chars",
            label("response_chars"),
            curve(steps, "response_chars", chars_band, zs),
            band_text if chars_band else None,
        )
        out.append(Panel("length", "Response length", "characters" + shift, (length,), NOTE_CHARS))
    else:
        out.append(Panel("length", "Response length", "tokens", (), NOTE_NO_LENGTH))

    win = []
    # The tie rate beside the win rate: with a verifier's 0 / 1 rewards most responses may tie their
    # reference, which a win rate alone hides.
    for key, dashed in (("win_rate", False), ("tie_rate", True)):
        if has_ref and has_values(steps, key):
            win.append(Series(key, label(key), curve(steps, key, None, zs, mean=False), dashed=dashed))
    if has_values(steps, "zero_spread_share"):
        name = step_label("zero_spread_share", "share of groups whose responses all got the same reward")
        win.append(
            Series(
                "zero_spread_share",
                name,
                curve(steps, "zero_spread_share", None, zs, mean=False),
                dashed=True,
            )
        )
    title = "Win rate against the reference" if has_ref else "Win rate"
    out.append(
        Panel("win", title, "share" + shift, tuple(win), None if has_ref else NOTE_NO_WIN, percent=True)
    )
    return out


# A curve of more steps than this is drawn at most at this many of them (see :func:`thinned`): a chart is
# ~650 px wide at 1440 px, so 5,000 points draw no more than 500 lowest / highest ones do, and the page's
# JSON and time grew with them (927 KB at 5,000 steps against 99 KB at 500).
MAX_POINTS = 500


def thin_rows(y: np.ndarray, bucket: np.ndarray) -> list[int]:
    """The rows kept of a curve's values ``y`` (NaN: a gap) whose rows fall in runs ``bucket`` (one number
    per row, in row order): in each run, the row of its lowest and of its highest value (the first of equal
    ones) and its first gap, in row order. Every kept row is one step's exact value, and a spike or a gap
    of any run stays visible."""
    if not len(y):
        return []
    starts, sizes = _runs_of(bucket)
    if _stretches(starts, sizes, len(y)):
        return np.flatnonzero(_thin_mask(y[None, :], starts, sizes)[0]).tolist()

    def firsts(order: np.ndarray) -> np.ndarray:  # the first row of each run in a (stable) order
        b = bucket[order]
        return order[np.r_[True, b[1:] != b[:-1]]]

    # A stable sort by run, then value (NaN last): each run's first row is its lowest (or, a run of gaps
    # only, its first gap); by minus the value, its highest.
    lowest, highest = firsts(np.lexsort((y, bucket))), firsts(np.lexsort((-y, bucket)))
    gaps = np.flatnonzero(np.isnan(y))
    first_gaps = gaps[np.unique(bucket[gaps], return_index=True)[1]] if gaps.size else gaps
    return np.unique(np.concatenate((lowest, highest, first_gaps))).tolist()  # sorted, each once


def _runs_of(bucket: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first row and the number of rows of each stretch of equal ``bucket`` (not empty)."""
    starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
    return starts, np.diff(np.r_[starts, len(bucket)])


def _stretches(starts: np.ndarray, sizes: np.ndarray, n: int) -> bool:
    """True when a table of one stretch a row (:func:`_thin_mask`) is small: the stretches are of like
    sizes (then each run of a sorted ``bucket`` is one of them)."""
    return len(starts) * int(sizes.max()) <= 4 * n


def _thin_mask(y: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """:func:`thin_rows` of each row of ``y`` (curves of the same rows, one a row), where each run of
    ``bucket`` is one stretch of rows (``starts``, ``sizes``), found on a table of one run a row instead of
    by sorting: ``mask[c, r]`` is True where curve ``c`` keeps row ``r``: the first row at each run's
    lowest and highest non-gap value (its first row when it has none, as the sort puts gaps last), and
    its first gap."""
    width = np.arange(int(sizes.max()))
    inside = width < sizes[:, None]
    at = np.where(inside, starts[:, None] + width, 0)  # runs x width, as rows of y
    v = y[:, at]  # curves x runs x width
    nan = np.isnan(v)
    gap = nan | ~inside
    curve, run = np.arange(len(y))[:, None], np.arange(len(starts))
    mask = np.zeros(y.shape, dtype=bool)
    for pick, fill in ((np.min, np.inf), (np.max, -np.inf)):
        best = pick(np.where(gap, fill, v), axis=2)
        hit = (v == best[..., None]) & ~gap
        mask[curve, np.where(hit.any(axis=2), at[run, hit.argmax(axis=2)], starts)] = True
    real_gap = nan & inside
    c, r = np.nonzero(real_gap.any(axis=2))
    mask[c, at[r, real_gap.argmax(axis=2)[c, r]]] = True
    return mask


def _thin_frames(frames: list[pl.DataFrame], order: np.ndarray, k: int) -> list[np.ndarray]:
    """:func:`thin_rows` of the ``y`` of each of ``frames`` (``step, y, …``) in runs of ``k`` of the run's
    steps ``order`` (sorted): the rows kept of each, sorted. Curves of the same steps (a page's, read from
    one summary) are thinned together, on one table of runs."""
    steps = [f.get_column("step").to_numpy() for f in frames]
    ys = [f.get_column("y").cast(pl.Float64).to_numpy() for f in frames]  # a null: NaN
    same: list[list[int]] = []  # the frames of each distinct steps
    for i, s in enumerate(steps):
        j = next((j for j, g in enumerate(same) if np.array_equal(steps[g[0]], s)), None)
        if j is None:
            same.append([i])
        else:
            same[j].append(i)
    out: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * len(frames)
    for group in same:
        # The run of k steps of each row: by the step's place among the run's steps.
        bucket = np.searchsorted(order, steps[group[0]]) // k
        starts, sizes = _runs_of(bucket)
        if len(bucket) and _stretches(starts, sizes, len(bucket)):
            for i, m in zip(group, _thin_mask(np.stack([ys[i] for i in group]), starts, sizes), strict=True):
                out[i] = np.flatnonzero(m)
        else:
            for i in group:
                out[i] = np.asarray(thin_rows(ys[i], bucket), dtype=np.int64)
    return out


def thin_note(steps: list[int], k: int) -> str:
    """What a chart thinned by :func:`thinned` says it draws (``steps``: the run's steps, sorted)."""
    runs = [steps[i : i + k] for i in range(0, min(len(steps), 2 * k), k)]
    shown = ", ".join(f"{r[0]:,}–{r[-1]:,}" for r in runs)
    return (
        f"{len(steps):,} steps: each curve is drawn at the lowest and highest value of every {k:,} steps "
        f"({shown}, …) and at the selected step, each point exact."
    )


def thinned(panel: Panel, steps: list[int], keep: int | None = None, max_points: int | None = None) -> Panel:
    """``panel`` with each curve drawn at about ``max_points`` of its steps when the run has more
    (``steps``: the run's steps, sorted): :func:`thin_rows` of runs of ``k`` steps, ``k`` the smallest
    that keeps at most ``max_points`` points, plus the step ``keep`` (the selected one) where a curve has
    it; the note says so (:func:`thin_note`). Unchanged with fewer steps. ``max_points``: default
    :data:`MAX_POINTS`."""
    return thinned_all((panel,), steps, keep, max_points)[0]


def thinned_all(
    panels: Iterable[Panel], steps: list[int], keep: int | None = None, max_points: int | None = None
) -> tuple[Panel, ...]:
    """:func:`thinned` of each of ``panels``, their curves thinned together (one table of runs for all the
    curves of the same steps, as a page's panels read from one summary are)."""
    max_points = MAX_POINTS if max_points is None else max_points
    panels = tuple(panels)
    # A panel without curves says nothing of them: nothing to thin.
    thin = [len(steps) > max_points and any(s.frame.height > max_points for s in p.series) for p in panels]
    if not any(thin):
        return panels
    k = -(-len(steps) // (max_points // 2))
    frames = [s.frame for p, t in zip(panels, thin, strict=True) if t for s in p.series]
    kept = iter(_thin_frames(frames, np.asarray(steps), k))
    note = thin_note(steps, k)
    out = []
    for panel, t in zip(panels, thin, strict=True):
        if not t:
            out.append(panel)
            continue
        series = []
        for s in panel.series:
            rows = next(kept)
            if keep is not None:
                rows = np.union1d(rows, np.flatnonzero(s.frame.get_column("step").to_numpy() == keep))
            series.append(replace(s, frame=s.frame[rows]))
        out.append(replace(panel, series=tuple(series), note=" ".join(x for x in (panel.note, note) if x)))
    return tuple(out)


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
    return [s for s in stats if s[1] is not None or s[0] == "step"]


def partial_step(store: RunStore) -> PartialStep | None:
    """The run's partial last step (see :func:`data.metrics.step.partial_last_step`), or None."""
    return partial_last_step(summary_columns(store, ("n",)))


def nearest_step(steps: list[int], step: int) -> int | None:
    """The existing step closest to ``step`` (the lower one on a tie); None when there are no steps."""
    if not steps:
        return None
    return min(steps, key=lambda s: (abs(s - step), s))


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
    :data:`MAX_POINTS`) steps, else runs of ``k`` consecutive steps (``k`` the smallest that keeps at most
    ``max_columns`` columns) whose counts are summed and whose share is of their responses together."""
    max_columns = MAX_POINTS if max_columns is None else max_columns
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
    """The window of ``size`` (default :data:`MAX_POINTS`) consecutive steps of the run (``steps``, sorted)
    centred on the run's steps ``first``..``last`` (a column of :func:`heatmap_columns`), kept within the
    run; None when the run has no step there."""
    size = MAX_POINTS if size is None else size
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
    data.derived.cells): ``count[b, i]`` in bar ``b`` of ``edges`` at the step ``sorted(steps)[i]``,
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
    "ref_reward_mean", "kl_token_mean", "log_ratio_token_mean", "win_rate", "tie_rate", "zero_spread_share",
)  # fmt: skip
# The per-step summary's columns of :func:`step_stats`.
STAT_COLUMNS = ("n", "reward_mean", "ref_reward_mean", "win_rate")
# Those the reward page reads (the curves, the key figures and the range of the bins), read together: each
# read of the summary parses its footer of 65 columns.
PAGE_COLUMNS = tuple(
    dict.fromkeys(
        (*CURVE_COLUMNS, *STAT_COLUMNS,
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


def _rows_of_step(steps: np.ndarray, step: int) -> tuple[int, int]:
    """``(lo, hi)``: the rows ``lo`` to ``hi - 1`` of the sorted ``steps`` that are ``step`` (none: equal)."""
    return int(np.searchsorted(steps, step)), int(np.searchsorted(steps, step, side="right"))


@shared(16)
def _heatmap(v: StoreKey, kind: str) -> Heatmap:
    b = _bins(v, kind)
    edges, steps = list(b.edges), step_list(v.store)
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


def step_list(store: RunStore) -> list[int]:
    """The run's steps in numeric order (the summary's step column alone, cached on the store version: pages
    that only place a step read no other of its columns)."""
    return list(_step_list(StoreKey(store)))


@shared(64)
def _step_list(v: StoreKey) -> tuple[int, ...]:
    return tuple(v.store.steps_scan().select("step").collect().get_column("step").sort().to_list())


def run_panels(store: RunStore, band: str = DEFAULT_BAND, zero_shift: bool = False) -> tuple[Panel, ...]:
    """:func:`panels` of the store's per-step summary (cached on the store version)."""
    return _panels(StoreKey(store), band, bool(zero_shift))


# Not on disk: thinning a page's panels takes ~2 ms at 5,000 steps, and the panels are objects of this
# process.
@shared(16, disk=False)
def _thinned_panels(v: StoreKey, band: str, zero_shift: bool, max_points: int) -> tuple[Panel, ...]:
    steps = step_list(v.store)
    return thinned_all(_panels(v, band, zero_shift), steps, max_points=max_points)


def with_step(shown: Panel, full: Panel, step: int | None) -> Panel:
    """``shown`` (:func:`thinned` ``full``, without ``keep``) with each curve's point at ``step`` added
    where it lacks it: what ``thinned(full, steps, step)`` gives (frames sorted by step)."""
    if shown is full or step is None:
        return shown
    series = []
    for s, f in zip(shown.series, full.series, strict=True):
        # Found by bisection on the frames' sorted steps, and put in place (a filter and a sort of each
        # full curve cost ~1 ms a curve at 5,000 steps).
        steps = f.frame.get_column("step").to_numpy()
        lo, hi = _rows_of_step(steps, step)
        if lo < hi and s.frame is not f.frame:
            shown_steps = s.frame.get_column("step").to_numpy()
            i = int(np.searchsorted(shown_steps, step))
            if i == len(shown_steps) or shown_steps[i] != step:
                s = replace(s, frame=pl.concat([s.frame[:i], f.frame[lo:hi], s.frame[i:]]))
        series.append(s)
    return replace(shown, series=tuple(series))


def run_panels_at(
    store: RunStore, band: str = DEFAULT_BAND, zero_shift: bool = False, step: int | None = None
) -> tuple[Panel, ...]:
    """:func:`run_panels` as drawn with ``step`` selected: ``thinned(panel, steps, step)`` of each (the
    thinning cached on the store version, the selected step added)."""
    key = StoreKey(store)
    full = _panels(key, band, bool(zero_shift))
    shown = _thinned_panels(key, band, bool(zero_shift), MAX_POINTS)
    return tuple(with_step(s, f, step) for s, f in zip(shown, full, strict=True))


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
