"""How the token strip spreads a per-token metric over its colours, defined once for every strip: linear, a
log scale for a heavy tail (``ln(1 + |v| / s)``, linear below the run's median ``s``, symmetric around 0 for
a signed metric), or a ratio's log scale centred on 1 (½ and 2 equally far); each clipped at the run's
quantile (:mod:`data.token_scale`). The registry names each metric's kind (``Metric.scale``). A token's
place on the scale (0..1) is the column :data:`STRIP_AT`; the legend's ticks are in the metric's values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl

from data.metrics import METRICS, label
from data.token_frames import MIN_SCALE, scale_range
from data.token_scale import RunScale, clipped_scale, legend_note

# The column of a token's place on the strip's colour scale, 0..1 (null: no colour).
STRIP_AT = "strip_at"
# A ratio's scale is the scale of its log: the importance ratio's is the gap's (imp_ratio = exp(infer_gap)).
RATIO_OF = {"imp_ratio": "infer_gap"}
# Ticks between a log scale's ends: these |values| (and their inverses, for a ratio), where they fall at
# least MIN_TICK_GAP of the bar from every other tick (the bar is 16rem: about 30px).
DECADES = tuple(10.0**k for k in range(-9, 10))
RATIO_TICKS = (1.01, 1.1, 2.0, 10.0, 100.0, 1000.0, 1e4, 1e6)
MIN_TICK_GAP = 0.12


def kind_of(metric: str) -> str:
    """The registry's scale kind of ``metric`` (``linear`` for a field of the trainer's own)."""
    return METRICS[metric].scale if metric in METRICS else "linear"


@dataclass(frozen=True)
class StripScale:
    """The strip's colour scale of ``metric``: ``kind`` (``linear``, ``log``, ``ratio``), its ends ``lo``,
    ``hi`` in the metric's values, ``signed``: diverging colours (centred at 0, at 1 for a ratio);
    ``knee``: the ``s`` of a log scale (in the log's values for a ratio), its linear part; ``clip``:
    ``(the response's most extreme value, the legend's note)`` when the scale stops short of it, else None."""

    metric: str
    kind: str
    lo: float
    hi: float
    signed: bool
    knee: float | None = None
    clip: tuple[float, str] | None = None
    column: str = STRIP_AT  # where data.tokens.strip puts each token's place on the scale
    knee_of: str = "the run's median"  # where ``knee`` comes from, as the legend's note says it

    def _shape(self, v: pl.Expr | float):
        """``sign(v) · ln(1 + |v| / knee)`` of a log scale (of ln v for a ratio); ``v`` on a linear one."""
        if self.kind == "ratio":
            v = v.log() if isinstance(v, pl.Expr) else math.log(v) if v > 0 else -math.inf
        if self.kind == "linear":
            return v
        s = self.knee
        if isinstance(v, pl.Expr):
            return v.sign() * (v.abs() / s).log1p()
        return math.copysign(math.log1p(abs(v) / s), v)

    def at_expr(self, col: str) -> pl.Expr:
        """Each value of ``col`` as its place on the scale, 0..1 (clipped at the ends); null where missing or
        NaN."""
        v = pl.col(col).cast(pl.Float64)
        lo, hi = self._shape(self.lo), self._shape(self.hi)
        t = pl.lit(0.5) if hi <= lo else ((self._shape(v) - lo) / (hi - lo)).clip(0.0, 1.0)
        return pl.when(v.is_not_null() & ~v.is_nan()).then(t).otherwise(None)

    def at(self, value: float) -> float:
        """One value's place on the scale, 0..1 (as :meth:`at_expr`)."""
        lo, hi = self._shape(self.lo), self._shape(self.hi)
        return 0.5 if hi <= lo else min(1.0, max(0.0, (self._shape(value) - lo) / (hi - lo)))

    def ticks(self) -> tuple[tuple[float, float, str], ...]:
        """``(place 0..1, value, prefix)`` of the legend's ticks, in the metric's values: the ends (prefixed
        ``≥`` / ``≤`` when clipped), the centre of a diverging scale, and on a log scale the powers of ten
        (for a ratio 1.01, 1.1, 2, 10, … and their inverses) between them that keep ticks apart."""
        centre = 1.0 if self.kind == "ratio" else 0.0
        ends = [
            (0.0, self.lo, "≤ " if self.clip and self.signed else ""),
            (1.0, self.hi, "≥ " if self.clip else ""),
        ]
        kept = ends + ([(0.5, centre, "")] if self.signed else [])
        if self.kind == "log":
            cands = [d for d in DECADES if self.knee <= d < self.hi]
            cands = [x for d in reversed(cands) for x in ((d, -d) if self.signed else (d,))]
        elif self.kind == "ratio":
            cands = [x for r in RATIO_TICKS for x in (r, 1 / r) if self.lo < x < self.hi]
        else:
            cands = []
        for v in cands:
            p = self.at(v)
            if all(abs(p - q) >= MIN_TICK_GAP for q, _, _ in kept):
                kept.append((p, v, ""))
        return tuple(sorted(kept))

    def caption(self) -> tuple[str, str] | None:
        """``(text, note)`` saying which scale, for the legend (None for a linear scale)."""
        if self.kind == "linear":
            return None
        what = f"|{label(self.metric)}|" if self.signed and self.kind == "log" else label(self.metric)
        if self.kind == "ratio":
            return (
                "log scale, centred on 1",
                f"Colours follow ln({label(self.metric)}), as the gap's do: ½ and 2 are equally far from 1; "
                f"linear in ln ratio up to |ln ratio| = {self.knee:.3g} ({self.knee_of}), then each tenfold "
                "step of |ln ratio| adds about the same colour. Hover a token for its value.",
            )
        return (
            "log scale",
            f"Colours grow with ln(1 + {what} / {self.knee:.3g}): linear below {self.knee:.3g} ({self.knee_of}), "
            "then each tenfold step adds about the same colour, so tokens far below the largest stay "
            "apart. Hover a token for its value.",
        )


def strip_scale(metric: str, values: pl.Series, signed: bool, run: RunScale | None) -> StripScale:
    """The :class:`StripScale` of ``metric`` over the ``values`` a strip shows (``signed``: see
    :func:`data.token_frames.strip_signed`): the range of :func:`data.token_frames.scale_range` clipped at
    the run's quantile (:func:`data.token_scale.clipped_scale`), spread by the registry's kind; a log scale
    whose linear part (the run's median |value|, else the shown tokens') covers the whole range is linear."""
    kind = kind_of(metric)
    base = RATIO_OF.get(metric, metric) if kind == "ratio" else metric
    if kind == "ratio":
        v = values.cast(pl.Float64)
        values, signed = v.filter(v > 0).log(), True
    lo, hi, peak = clipped_scale(base, *scale_range(base, values, signed), run)
    note = None if peak is None else legend_note(base, hi, peak, run)
    if kind == "ratio" and peak is not None:  # the ratio itself: below 1 when its log is the most negative
        g = values.filter(values.is_finite())
        peak = math.exp(float(g.gather(g.abs().arg_max())[0]))
    knee, knee_of = _knee(base, values, run) if kind != "linear" else (None, "")
    if kind == "log" and (knee is None or knee >= hi):
        kind, knee = "linear", None
    if kind == "ratio":  # log-symmetric whatever its knee (one at or past the end: linear in ln ratio)
        knee = hi if knee is None else knee
        lo, hi = math.exp(-hi), math.exp(hi)
    clip = None if peak is None else (peak, note)
    return StripScale(metric, kind, lo, hi, signed, knee, clip, knee_of=knee_of)


def _knee(metric: str, values: pl.Series, run: RunScale | None) -> tuple[float | None, str]:
    """A log scale's ``s`` and where it comes from: the run's median |value| of ``metric``, else the shown
    values'; never under the metric's float noise (:data:`data.token_frames.MIN_SCALE`). None when there is
    none above 0."""
    s, of = (run.knee(metric) if run is not None else None), "the run's median"
    if s is None or not s > 0:
        v = values.cast(pl.Float64)
        v = v.filter(v.is_finite()).abs()
        s, of = (v.quantile(0.5, "higher") if v.len() else None), "this response's median"
    if s is None or not math.isfinite(s) or s <= 0:
        return None, of
    return max(float(s), MIN_SCALE.get(metric, 0.0)), of
