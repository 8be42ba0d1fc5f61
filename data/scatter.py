"""The scatter page's data: two per-response columns of a step or a range of steps against each other, as
points up to :data:`MAX_POINTS` responses and as exact counts per cell of a 2-D histogram beyond; a box
brushed on it, snapped to a lattice, is two range filters of the responses page (exactly its responses).

Only the two columns (and the step) of the steps asked are read (``RunStore.scan``), once per committed
state of the store (cached on its version).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl

from data.cache import StoreKey, shared
from data.derived.cells import _nice, lattice_edges
from data.metrics import label
from data.metrics.registry import COLUMNS, scatter_axes
from data.queries import COMPUTED, RANGE_COLUMNS, bar_indices, histogram_edges
from data.store.reader import RunStore

AXES = scatter_axes()
# The analyst's first cross-check for reward hacking: a reward bought with a large move from the reference.
DEFAULT_X, DEFAULT_Y = "kl_sum", "reward"
# Up to this many responses are drawn one point each (a point can be hovered and opens its tokens); more
# are drawn as a 2-D histogram whose cells carry exact counts (a browser draws 5,000 markers in ~50 ms;
# 2.56M would be ~100 MB of JSON).
MAX_POINTS = 5000
# Bins per axis a density aims at (histogram_edges rounds the width to a nice number: 40 to 100 bins).
DENSITY_BINS = 60
# The lattice a box drawn over points snaps outward to: this many steps across the drawn range.
POINT_LATTICE = 1000
RANGE_KEY = {col: key for key, col in RANGE_COLUMNS.items()}  # column -> its range filter's URL prefix


def range_key(col: str) -> str:
    """The URL prefix of ``col``'s range filter (``reward_gain`` -> ``gain``; see the registry)."""
    return RANGE_KEY[col]


def axis_expr(col: str) -> pl.Expr:
    """The value of axis ``col`` as a float, exactly what its range filter compares (the length is
    computed: tokens, else characters)."""
    return COMPUTED.get(col, pl.col(col)).cast(pl.Float64).alias(col)


@dataclass(frozen=True)
class Steps:
    """Which steps: one (``first == last``), a range ``first <= step <= last``, or every step shown (both
    None)."""

    first: int | None = None
    last: int | None = None

    @property
    def single(self) -> int | None:
        return self.first if self.first is not None and self.first == self.last else None

    def text(self) -> str:
        if self.first is None:
            return "over all steps"
        if self.single is not None:
            return f"at step {self.first}"
        return f"at steps {self.first} to {self.last}"


@dataclass(frozen=True)
class Scatter:
    """What the figure draws. ``n``: responses with both values finite (drawn); ``missing``: responses of
    the steps without (not drawn). ``points`` (``n <= MAX_POINTS``): ``x, y, step, sample_id``, sorted by
    sample id. Else ``cells``: ``xbin, ybin, count`` of the non-empty cells of ``x_edges`` x ``y_edges``
    (bar k of an axis covers ``edges[k] <= v < edges[k+1]``, the last one also ``v == edges[-1]``; the
    counts are exact and add up to ``n``). ``lattice``: per axis ``(origin, width)`` of the grid a box
    snaps to (the density's cell edges, or a fine grid over points)."""

    x: str
    y: str
    n: int
    missing: int
    points: pl.DataFrame | None
    cells: pl.DataFrame | None
    x_edges: tuple[float, ...]
    y_edges: tuple[float, ...]
    lattice: tuple[tuple[float, float], tuple[float, float]]
    limit: int = MAX_POINTS  # the most responses drawn as points
    logs: tuple[bool, bool] = (False, False)  # a log scale on x, on y
    off_log: int = 0  # responses with a value <= 0 on a log axis: not drawn

    @property
    def density(self) -> bool:
        return self.cells is not None

    def note(self, steps: Steps) -> str:
        """The figure's note: what it draws, how, and what it leaves out."""
        what = f"{self.n:,} responses {steps.text()}"
        if self.density:
            nx, ny = len(self.x_edges) - 1, len(self.y_edges) - 1
            how = (
                f"more than {self.limit:,}, so drawn as a {nx} x {ny} histogram: a cell's colour is its "
                "number of responses (hover for the exact count); a box snaps out to whole cells"
            )
        else:
            how = "one point each (a click opens its tokens)"
        left = (
            f" {self.missing:,} more have no finite {label(self.x)} or {label(self.y)} and are not drawn."
            if self.missing
            else ""
        )
        if self.off_log:
            left += f" {self.off_log:,} with a value ≤ 0 on a log axis are not drawn."
        return f"{what}: {how}.{left}"


def scatter(
    store: RunStore,
    x: str,
    y: str,
    steps: Steps,
    max_points: int = MAX_POINTS,
    logs: tuple[bool, bool] = (False, False),
) -> Scatter:
    """The scatter of columns ``x`` and ``y`` (of :data:`AXES`) of the responses of ``steps``: points up to
    ``max_points`` responses, else a density; ``logs``: a log scale on x, on y (its cells evenly wide in
    log10, a value <= 0 left out and counted)."""
    return _scatter(StoreKey(store), x, y, steps, max_points, tuple(bool(v) for v in logs))


def _scan(store: RunStore, columns: list[str], steps: Steps) -> pl.LazyFrame:
    """The responses of ``steps``, only ``columns`` (and what a computed axis is made of) read."""
    if steps.first is None:
        return store.scan(columns)
    return store.scan(columns, steps=(steps.first, steps.last))


@shared(32)
def _scatter(
    key: StoreKey, x: str, y: str, steps: Steps, max_points: int, logs: tuple[bool, bool]
) -> Scatter:
    store = key.store
    if x == y:
        raise ValueError(f"a scatter of {x!r} against itself")
    exprs = [axis_expr(x), axis_expr(y)]
    inputs = list(dict.fromkeys(n for e in exprs for n in e.meta.root_names()))
    have = store.schema()
    absent = [c for c in inputs if c not in have]
    lf = _scan(store, inputs, steps)
    if absent:  # a column no part has: no value, as a run without it
        lf = lf.with_columns(pl.lit(None, pl.Float64).alias(c) for c in absent)
    both = lf.select(exprs).collect()
    xs = both.get_column(x).to_numpy()
    ys = both.get_column(y).to_numpy()
    finite = np.isfinite(xs) & np.isfinite(ys)
    drawn = finite & _on_axis(xs, logs[0]) & _on_axis(ys, logs[1])
    missing, off_log = int(both.height - finite.sum()), int(finite.sum() - drawn.sum())
    xs, ys = xs[drawn], ys[drawn]
    n = int(xs.size)
    if n == 0:
        lattice = ((0.0, 1.0), (0.0, 1.0))
        return Scatter(x, y, 0, missing, None, None, (), (), lattice, max_points, logs, off_log)
    xe, ye = axis_edges(x, xs, logs[0]), axis_edges(y, ys, logs[1])
    if n <= max_points:
        points = _points(store, exprs, inputs, absent, steps, logs)
        lattice = (_fine_lattice(xe), _fine_lattice(ye))
        return Scatter(
            x, y, n, missing, points, None, tuple(xe), tuple(ye), lattice, max_points, logs, off_log
        )
    cells = density_cells(xs, ys, xe, ye, logs)
    lattice = (_cell_lattice(xe), _cell_lattice(ye))
    return Scatter(x, y, n, missing, None, cells, tuple(xe), tuple(ye), lattice, max_points, logs, off_log)


def _on_axis(values: np.ndarray, log: bool) -> np.ndarray | bool:
    """Where ``values`` can be drawn on their axis: all of them, only those > 0 on a log axis."""
    if not log:
        return True
    with np.errstate(invalid="ignore"):
        return values > 0


def axis_edges(col: str, values: np.ndarray, log: bool = False) -> list[float]:
    """The density's bars on axis ``col`` for its finite ``values``: :func:`data.queries.histogram_edges`
    (:data:`DENSITY_BINS` of a nice width), at least 1 wide for a column of whole numbers (a length), so
    that no bar falls between two of them. On a log axis (``values`` > 0) the bars are evenly wide in
    log10, their edges ``10 ** e`` written to 6 significant digits (the floats a box's range keeps)."""
    lo, hi = float(values.min()), float(values.max())
    if log:
        edges = [_sig(10.0**e) for e in histogram_edges(math.log10(lo), math.log10(hi), DENSITY_BINS)]
        # Written to 6 digits, the outer edges could pass the values they hold: they are at most those.
        edges[0], edges[-1] = min(edges[0], lo), max(edges[-1], hi)
        return edges
    if COLUMNS[col].fmt != "int" or hi <= lo:
        return histogram_edges(lo, hi, DENSITY_BINS)
    return lattice_edges(lo, hi, max(_nice((hi - lo) / DENSITY_BINS), 1.0))


def _sig(v: float, digits: int = 6) -> float:
    return float(f"{v:.{digits}g}")


def _points(store, exprs, inputs, absent, steps: Steps, logs: tuple[bool, bool]) -> pl.DataFrame:
    """``x, y, step, sample_id`` of the responses with both values finite (and > 0 on a log axis), sorted
    by sample id."""
    lf = _scan(store, [*inputs, "step", "sample_id"], steps)
    if absent:
        lf = lf.with_columns(pl.lit(None, pl.Float64).alias(c) for c in absent)
    df = lf.select(exprs[0].alias("x"), exprs[1].alias("y"), pl.col("step"), pl.col("sample_id")).collect()
    keep = pl.col("x").is_finite() & pl.col("y").is_finite()
    for c, log in zip(("x", "y"), logs, strict=True):
        if log:
            keep &= pl.col(c) > 0
    return df.filter(keep).sort("sample_id")


def lattice_indices(values: np.ndarray, edges: list[float]) -> np.ndarray:
    """:func:`data.queries.bar_indices` of finite ``values`` on evenly spaced ``edges`` (a lattice of
    :func:`histogram_edges`), in O(n): each value's bar from its offset over the width, then moved by one
    where a rounded edge says otherwise (the binary search costs 5x more on 2.56M values; a test holds
    the two equal, values on the edges too)."""
    n = len(edges) - 1
    if n <= 1:
        return np.zeros(len(values), np.int64)
    e = np.asarray(edges, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        k = np.floor((values - e[0]) / ((e[-1] - e[0]) / n))
    k = np.clip(k, 0, n - 1).astype(np.int64)
    k -= (k > 0) & (values < e[k])
    k += (k < n - 1) & (values >= e[np.minimum(k + 1, n)])
    return k


def density_cells(
    xs: np.ndarray,
    ys: np.ndarray,
    x_edges: list[float],
    y_edges: list[float],
    logs: tuple[bool, bool] = (False, False),
) -> pl.DataFrame:
    """``xbin, ybin, count`` of the non-empty cells of finite ``xs`` x ``ys`` on the bars of ``x_edges`` and
    ``y_edges`` (:func:`lattice_indices`: the bars of :func:`data.queries.bar_indices`, as the reward page's
    histograms), by ``xbin`` then ``ybin``: exact counts."""
    nx, ny = max(len(x_edges) - 1, 1), max(len(y_edges) - 1, 1)
    # A log axis's edges are not evenly spaced in value: its bars by the binary search.
    xi, yi = ((bar_indices(v, e).astype(np.int64) if log else lattice_indices(v, e))
              for v, e, log in ((xs, x_edges, logs[0]), (ys, y_edges, logs[1])))  # fmt: skip
    flat = xi * ny + yi
    # Counted in one pass (np.unique sorts: 5x slower on 2.56M responses).
    every = np.bincount(flat, minlength=nx * ny)
    idx = np.flatnonzero(every)
    counts = every[idx]
    return pl.DataFrame(
        {"xbin": (idx // ny).astype(np.int32), "ybin": (idx % ny).astype(np.int32), "count": counts},
        schema={"xbin": pl.Int32, "ybin": pl.Int32, "count": pl.Int64},
    )


def _width(edges: list[float]) -> float:
    """The bars' width of ``edges`` (a nice number), or of a narrow grid around a single value."""
    if len(edges) >= 2 and edges[-1] > edges[0]:
        return edges[1] - edges[0]
    v = abs(edges[0]) if edges else 0.0
    return _nice(v / 100) if v > 0 else 0.01


def _cell_lattice(edges: list[float]) -> tuple[float, float]:
    """The density's cells as a lattice ``(origin, width)``: a box snaps to whole cells."""
    width = _width(edges)
    return (edges[0] if len(edges) >= 2 and edges[-1] > edges[0] else edges[0] - width / 2), width


def _fine_lattice(edges: list[float]) -> tuple[float, float]:
    """A grid :data:`POINT_LATTICE` steps across the drawn range, from 0: a box over points snaps to it."""
    span = (edges[-1] - edges[0]) if len(edges) >= 2 and edges[-1] > edges[0] else _width(edges) * 100
    return 0.0, _nice(span / POINT_LATTICE)


def _decimals(width: float) -> int:
    """Decimals that write every multiple of a nice ``width`` exactly (``0.025`` -> 3)."""
    return max(0, -math.floor(math.log10(width)) + 2)


def snap(lo: float, hi: float, lattice: tuple[float, float]) -> tuple[float, float]:
    """A box side ``[lo, hi]`` (as drawn: both ends inside) widened to the ``lattice`` ``(origin, width)``:
    the largest lattice point ``<= lo`` and the smallest ``> hi`` (to a billionth of the width), so that the
    half-open range ``min <= v < max`` holds what the side held; the snapped box is the one drawn and
    filtered on. Written with the decimals the width needs (URL-exact)."""
    origin, width = lattice
    if lo > hi:
        lo, hi = hi, lo
    # A side on a lattice point, as its float quotient puts it a hair below (0.3 / 0.05 = 5.999…), is on it.
    k_lo = math.floor((lo - origin) / width + 1e-9)
    k_hi = math.floor((hi - origin) / width + 1e-9) + 1
    d = _decimals(width) if origin == 0 or abs(origin / width) < 1e12 else 12
    return round(origin + k_lo * width, d), round(origin + k_hi * width, d)


@dataclass(frozen=True)
class Box:
    """A box brushed on the scatter: ``x_min <= x < x_max`` and ``y_min <= y < y_max``."""

    x_min: float
    x_max: float
    y_min: float
    y_max: float

    def text(self, x: str, y: str) -> str:
        return (
            f"{self.x_min:g} ≤ {label(x)} < {self.x_max:g} and {self.y_min:g} ≤ {label(y)} < {self.y_max:g}"
        )


def brushed(sc: Scatter, x_range: tuple[float, float], y_range: tuple[float, float]) -> Box:
    """The box of a selection's ranges (as Plotly gives them) snapped outward to the scatter's lattice. A
    side that ends on a density's top edge goes one cell further: the last cell also holds a value equal
    to that edge, which ``v < max`` would leave out."""
    (x0, x1), (y0, y1) = (_side(sc, r, i) for i, r in enumerate((x_range, y_range)))
    return Box(x0, x1, y0, y1)


def _side(sc: Scatter, rng: tuple[float, float], axis: int) -> tuple[float, float]:
    edges = (sc.x_edges, sc.y_edges)[axis]
    if sc.logs[axis]:
        return _log_side(sc, rng, edges)
    lo, hi = snap(*rng, sc.lattice[axis])
    if sc.density and len(edges) >= 2 and hi == edges[-1]:
        hi = snap(hi, hi, sc.lattice[axis])[1]
    return lo, hi


def _log_side(sc: Scatter, rng: tuple[float, float], edges) -> tuple[float, float]:
    """A side drawn on a log axis (``rng`` in log10, as Plotly gives the figure's coordinates): over a
    density, out to the cells' edges (one more edge above the top one); over points, out to 3 significant
    digits (the low end down, the high end to the next such number above it)."""
    lo, hi = sorted(10.0 ** np.asarray(rng, dtype=np.float64))
    if sc.density and len(edges) >= 2:
        e = list(edges)
        step = math.log10(e[-1]) - math.log10(e[-2])
        e.append(_sig(10.0 ** (math.log10(e[-1]) + step)))
        below = [v for v in e if v <= lo]
        top = next((v for v in e if v > hi), e[-1])
        # The top cell also holds a value equal to its top edge: a box ending there goes one cell further.
        return (below[-1] if below else e[0]), (e[-1] if top == edges[-1] else top)
    k = math.floor(math.log10(lo)) - 2
    low = math.floor(lo / 10.0**k) * 10.0**k
    k = math.floor(math.log10(hi)) - 2
    return _sig(low, 3), _sig((math.floor(hi / 10.0**k) + 1) * 10.0**k, 4)


def is_axis(col: str) -> bool:
    return col in AXES


def axis_labels() -> dict[str, str]:
    """Each axis' label (the registry's), by column."""
    return {c: COLUMNS[c].label for c in AXES}
