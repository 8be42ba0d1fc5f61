"""The token strip's data and legend: colour scales (a metric's value to a background, its palette and the
text colour on it) and each window of tokens as the columnar dict the browser fills the strip from
(:mod:`components.token_js`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import orjson
import polars as pl
from dash import html

from components import theme
from components.format import DIGITS, num

# Text turns white on backgrounds darker than this (0..255 luma).
DARK_LUMA = 120.0

# Tokens of the strip sent at once: a little more than its box shows (22rem: about 14 lines of 30 tokens of
# five characters at 1440 px); the next window is asked for when the strip is scrolled near its end, or at
# once when the tokens do not fill the box. A 32,000-token response sent whole was 6.4 MB and took 3-5 s to
# draw; 1,000 tokens at once (two boxes) were 153 KB of the page's 326 KB.
STRIP_WINDOW = 600


def _rgb_at(t: float, stops) -> tuple[float, float, float]:
    t = min(1.0, max(0.0, t))
    for (p0, c0), (p1, c1) in zip(stops, stops[1:], strict=False):
        if t <= p1:
            f = 0.0 if p1 == p0 else (t - p0) / (p1 - p0)
            return tuple(a + (b - a) * f for a, b in zip(c0, c1, strict=True))
    return tuple(float(c) for c in stops[-1][1])


def colour(value: float | None, lo: float, hi: float, stops) -> str | None:
    """CSS colour of ``value`` on a scale from ``lo`` to ``hi`` (clipped); None for a missing / NaN value."""
    if value is None or math.isnan(value):
        return None
    t = 0.5 if hi <= lo else (value - lo) / (hi - lo)
    r, g, b = _rgb_at(t, stops)
    return f"rgb({round(r)},{round(g)},{round(b)})"


PALETTE_SIZE = 256


@lru_cache(maxsize=16)
def palette(stops) -> tuple[tuple[str, ...], tuple[str | None, ...]]:
    """The scale quantised to :data:`PALETTE_SIZE` colours: background CSS colours and, per colour, the text
    colour (``theme.ON_DARK`` on dark backgrounds, None otherwise)."""
    bgs, fgs = [], []
    for i in range(PALETTE_SIZE):
        r, g, b = _rgb_at(i / (PALETTE_SIZE - 1), stops)
        bgs.append(f"rgb({round(r)},{round(g)},{round(b)})")
        fgs.append(theme.ON_DARK if 0.299 * r + 0.587 * g + 0.114 * b < DARK_LUMA else None)
    return tuple(bgs), tuple(fgs)


def palette_index_expr(col: str, lo: float, hi: float) -> pl.Expr:
    """Index into :func:`palette` of each value of ``col`` on the scale ``lo..hi`` (clipped); null for a
    missing or NaN value."""
    v = pl.col(col).cast(pl.Float64)
    t = pl.lit(0.5) if hi <= lo else ((v - lo) / (hi - lo)).clip(0.0, 1.0)
    idx = (t * (PALETTE_SIZE - 1)).round(0).cast(pl.Int32)
    return pl.when(v.is_not_null() & ~v.is_nan()).then(idx)


def window_end(tokens: pl.DataFrame, start: int, upto: int | None = None) -> int:
    """The end (exclusive) of the strip's window from row ``start`` of the visible ``tokens``: the next
    :data:`STRIP_WINDOW` rows, and at least up to position ``upto`` (a chart's point hovered beyond them)."""
    end = start + STRIP_WINDOW
    if upto is not None and tokens.height:
        end = max(end, int(tokens.get_column("pos").search_sorted(upto, side="right")))
    return min(end, tokens.height)


def strip_data(
    tokens: pl.DataFrame,
    metric: str,
    lo: float,
    hi: float,
    stops,
    key: str,
    hover: Sequence[tuple[str, str]],
    start: int = 0,
    end: int | None = None,
) -> dict:
    """Columnar data of rows ``start:end`` of the strip for :data:`STRIP_JS` (default: the first window,
    see :func:`window_end`).

    ``tokens``: the visible positions in reading order with ``pos, token, text, is_pad``, the ``metric``
    column and the ``hover`` columns. ``hover``: ``(column, label)`` pairs shown when a token is hovered.
    Returns ``{"key": key, "n": tokens, "json": text}`` where ``text`` is the JSON of ``{"start", "total",
    "pos", "text", "raw", "pad", "masked", "colour", "bg", "fg", "labels", "values"}``: ``start`` the first row
    sent and ``total`` the visible rows, ``colour`` the index of each token's colour in ``bg``/``fg`` (the
    palette of :func:`palette`; null: no colour), ``pad`` 1 for a pad position, ``masked`` 1 for a position
    the loss mask drops (``tokens``' optional ``masked`` column; all 0 without it), ``touched`` (where
    ``tokens`` has that column) 1 for a position a correction clips or masks (drawn with a wavy underline),
    ``values`` one list of
    4-significant-digit strings per hover column (``"NaN"``/``"inf"`` kept, null if missing). The columns
    travel as one JSON string because Dash's encoder walks every list element in Python (~50 ms for 4,000
    tokens); orjson writes the string in well under a millisecond.
    """
    total = tokens.height
    start = max(0, min(start, total))
    end = window_end(tokens, start) if end is None else max(start, min(end, total))
    tokens = tokens.slice(start, end - start)
    if metric not in tokens.columns:
        tokens = tokens.with_columns(pl.lit(None, dtype=pl.Float64).alias(metric))
    if "masked" not in tokens.columns:
        tokens = tokens.with_columns(pl.lit(False).alias("masked"))
    df = tokens.select(
        "pos",
        "text",
        pl.col("token").fill_null("").alias("raw"),
        pl.col("is_pad").cast(pl.Int8).alias("pad"),
        pl.col("masked").fill_null(False).cast(pl.Int8).alias("masked"),
        palette_index_expr(metric, lo, hi).alias("colour"),
        *(
            pl.col(c).cast(pl.Float64).round_sig_figs(DIGITS).cast(pl.String).alias(f"__h{i}")
            for i, (c, _) in enumerate(hover)
        ),
    )
    bgs, fgs = palette(stops)
    out = {"start": start, "total": total}
    out.update({c: df.get_column(c).to_list() for c in ("pos", "text", "raw", "pad", "masked", "colour")})
    out["bg"], out["fg"] = list(bgs), list(fgs)
    if "touched" in tokens.columns:  # the positions a correction in the URL clips or masks
        out["touched"] = tokens.get_column("touched").fill_null(False).cast(pl.Int8).to_list()
    out["labels"] = [lab for _, lab in hover]
    out["values"] = [df.get_column(f"__h{i}").to_list() for i in range(len(hover))]
    return {"key": key, "n": df.height, "json": orjson.dumps(out).decode()}


def strip_keys(keys: Sequence[tuple[str, str]]) -> html.Div | None:
    """The strip's legend beyond its colour scale, ``(kind, text)`` each: ``"masked"`` with a hatched swatch
    (the look of a position the loss mask drops), ``"ids"`` with a sample ⟨id⟩; None for none."""
    if not keys:
        return None
    items = []
    for kind, text in keys:
        swatch = (
            html.Span("\u00a0\u00a0\u00a0", className="token-masked me-1 border")
            if kind == "masked"
            else html.Span("\u27e8id\u27e9", className="me-1 font-monospace")
        )
        items.append(html.Span([swatch, text], className="me-3"))
    return html.Div(items, className="small text-muted mb-1")


def legend(
    title: str,
    lo: float,
    hi: float,
    stops,
    signed: bool,
    clip=None,
    ticks: Sequence[tuple[float, float, str]] | None = None,
    caption: tuple[str, str] | None = None,
) -> html.Div:
    """The scale's colour bar with its range (and 0 in the middle for a diverging scale). ``clip``: ``(the
    response's most extreme value, a note)`` when the scale stops short of it: the bar's ends then read
    "≥ hi" and a line "clipped at hi (max peak)" follows, the note as its hover text. ``ticks``: ``(place
    0..1, value, prefix)`` of a scale that is not linear (its ticks in the metric's values, each at its
    place on the bar); ``caption``: ``(text, note)`` saying which scale ("log scale"), the note as its
    hover text."""
    gradient = ", ".join(f"rgb{tuple(c)} {p * 100:.0f}%" for p, c in stops)
    if ticks is None:
        edge = "≥ " if clip else ""
        low = ("≤ " if clip and signed else "") + num(lo, 3)
        ticks = [(0.0, low, ""), *([(0.5, "0", "")] if signed else []), (1.0, num(hi, 3), edge)]
    else:
        ticks = [(p, num(v, 3), pre) for p, v, pre in ticks]
    marks = [
        # Each tick centred on its place, the ends kept inside the bar: shifted left by their own place.
        html.Span(
            pre + text,
            style={
                "position": "absolute",
                "left": f"{p * 100:.2f}%",
                "transform": f"translateX(-{p * 100:.2f}%)",
            },
            className="text-nowrap",
        )
        for p, text, pre in ticks
    ]
    after = []
    if caption:
        after.append(_hint(caption[0], caption[1]))
    if clip:
        after.append(_hint(clip_text(lo, hi, signed, clip[0]), clip[1]))
    return html.Div(
        [
            html.Span(title, className="small text-muted me-2"),
            html.Div(
                [
                    html.Div(
                        style={
                            "background": f"linear-gradient(to right, {gradient})",
                            "height": "0.7rem",
                            "border": f"1px solid {theme.ZERO_LINE}",
                            "borderRadius": "2px",
                        }
                    ),
                    html.Div(
                        marks,
                        className="small text-muted numeric",
                        style={"position": "relative", "height": "1.2rem"},
                    ),
                ],
                style={"width": "16rem"},
            ),
            *after,
        ],
        className="d-flex align-items-center",
    )


def clip_text(lo: float, hi: float, signed: bool, peak: float) -> str:
    """The legend's line for a scale that stops short of the response's most extreme value ``peak``:
    "clipped at ±hi (max peak)" (a ratio's scale: at its two ends)."""
    bound = f"±{num(hi, 3)}" if signed and lo == -hi else num(hi, 3)
    if signed and lo != -hi and lo > 0:  # a ratio's scale: its two ends
        bound = f"{num(lo, 3)} to {num(hi, 3)}"
    return f"clipped at {bound} (max {num(peak, 3)})"


def _hint(text: str, note: str) -> html.Span:
    """A line beside the legend with its note as hover text (dotted underline)."""
    return html.Span(
        text,
        title=note,
        className="small text-muted ms-2 text-decoration-underline",
        style={"textDecorationStyle": "dotted", "cursor": "help"},
    )
