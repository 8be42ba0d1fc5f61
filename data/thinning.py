"""Curves of many steps drawn at fewer points: the rows kept of each curve (its lowest and highest per
bucket of steps), the note that says so, and a thinned panel with the selected step put back."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import numpy as np
import polars as pl

from data.curve_panels import Panel

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


def _rows_of_step(steps: np.ndarray, step: int) -> tuple[int, int]:
    """``(lo, hi)``: the rows ``lo`` to ``hi - 1`` of the sorted ``steps`` that are ``step`` (none: equal)."""
    return int(np.searchsorted(steps, step)), int(np.searchsorted(steps, step, side="right"))


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
