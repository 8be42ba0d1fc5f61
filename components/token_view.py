"""Builders of the token page: colour scales, the token strip's data and legend, per-position figures and
top-k tables.

The strip itself is filled in the browser by :data:`STRIP_JS` from a columnar dict (one ``<span>`` per token,
text set with ``textContent`` and the hover with ``title``, so model text never becomes markup); building 4,000
Dash components per response would cost far more than the 50 ms the server has. What is on screen is sent,
not every token at once: the strip a window of :data:`STRIP_WINDOW` tokens, the next one when it is scrolled
near its end; a chart at most :data:`CHART_POINTS` points (each bucket's lowest and highest), the detail when
it is zoomed. Labels and the columns of the trainer's own fields are passed in by the page (``components``
never import ``data``).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from functools import lru_cache
from html import escape as html_escape  # names from the file in Plotly text, which reads a few tags

import dash_bootstrap_components as dbc
import numpy as np
import orjson
import plotly.graph_objects as go
import polars as pl
from dash import html

from components import theme
from components.figures import TEMPLATE
from components.format import D3_NUM, DIGITS, num
from components.theme import FILE_FIELD_COLOURS

# Text turns white on backgrounds darker than this (0..255 luma).
DARK_LUMA = 120.0

POSITION_FIGURE_HEIGHT = 230
# Above this many positions the charts drop per-point markers and bars (one SVG element each) for lines.
LONG_RESPONSE = 600
# Tokens of the strip sent at once: a little more than its box shows (22rem: about 14 lines of 30 tokens of
# five characters at 1440 px); the next window is asked for when the strip is scrolled near its end, or at
# once when the tokens do not fill the box. A 32,000-token response sent whole was 6.4 MB and took 3-5 s to
# draw; 1,000 tokens at once (two boxes) were 153 KB of the page's 326 KB.
STRIP_WINDOW = 600
# Points of a per-position chart at most (a chart is ~450 px wide): above, each bucket of consecutive positions
# keeps its lowest and highest value of every line (two per pixel at most), so no spike is lost; zooming in
# sends the positions of the range again at this resolution.
CHART_POINTS = 1000
_FONT = {"size": 11}
_MARGIN = {"l": 50, "r": 10, "t": 45, "b": 35}


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
    "pos", "text", "raw", "pad", "colour", "bg", "fg", "labels", "values"}``: ``start`` the first row sent and
    ``total`` the visible rows, ``colour`` the index of each token's colour in ``bg``/``fg`` (the palette of
    :func:`palette`; null: no colour), ``pad`` 1 for a pad position, ``values`` one list of
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
    df = tokens.select(
        "pos",
        "text",
        pl.col("token").fill_null("").alias("raw"),
        pl.col("is_pad").cast(pl.Int8).alias("pad"),
        palette_index_expr(metric, lo, hi).alias("colour"),
        *(
            pl.col(c).cast(pl.Float64).round_sig_figs(DIGITS).cast(pl.String).alias(f"__h{i}")
            for i, (c, _) in enumerate(hover)
        ),
    )
    bgs, fgs = palette(stops)
    out = {"start": start, "total": total}
    out.update({c: df.get_column(c).to_list() for c in ("pos", "text", "raw", "pad", "colour")})
    out["bg"], out["fg"] = list(bgs), list(fgs)
    out["labels"] = [lab for _, lab in hover]
    out["values"] = [df.get_column(f"__h{i}").to_list() for i in range(len(hover))]
    return {"key": key, "n": df.height, "json": orjson.dumps(out).decode()}


def legend(title: str, lo: float, hi: float, stops, signed: bool) -> html.Div:
    """The scale's colour bar with its range (and 0 in the middle for a diverging scale)."""
    gradient = ", ".join(f"rgb{tuple(c)} {p * 100:.0f}%" for p, c in stops)
    ticks = [html.Span(num(lo, 3))]
    if signed:
        ticks.append(html.Span("0"))
    ticks.append(html.Span(num(hi, 3)))
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
                    html.Div(ticks, className="d-flex justify-content-between small text-muted numeric"),
                ],
                style={"width": "14rem"},
            ),
        ],
        className="d-flex align-items-center",
    )


# ---- browser side --------------------------------------------------------------------------------------

# __STRIP__ stands for the strip's id (see strip_js / highlight_js).
# Fills the strip from strip_data(): textContent and title are plain text, so a token such as
# "<script>" is shown, never parsed. The strip's div carries data-key: a re-render may mount a new div
# after this runs, so it waits (a few frames) for the div of this very data.
STRIP_JS = r"""
(function() {
function strip(store) {
    if (!store || !store.json) { return window.dash_clientside.no_update; }
    var data = JSON.parse(store.json);
    var first = !data.start;
    var shown = document.querySelector('#__STRIP__[data-key="' + store.key + '"]');
    if (first && shown && shown.__filledKey === store.key) {
        // The first window, filled already as the strip mounted (below), which said so too.
        return shown.__doneSent ? window.dash_clientside.no_update : store.key + ':0';
    }
    if (first && window.performance && performance.mark) { performance.mark('tokens-strip-data'); }
    var tries = 0;
    function tip(d, i) {
        var t = 'position ' + d.pos[i] + ' · token "' + d.raw[i] + '"' + (d.pad[i] ? ' · pad' : '');
        for (var j = 0; j < d.labels.length; j++) {
            var v = d.values[j][i];
            t += '\n' + d.labels[j] + ': ' + (v === null ? '–' : v);
        }
        return t;
    }
    function fill() {
        var root = document.querySelector('#__STRIP__[data-key="' + store.key + '"]');
        if (!root) {
            if (tries++ < 300) { window.requestAnimationFrame(fill); }
            return;
        }
        if (first && root.__filledKey === store.key) { return; }  // filled as it mounted
        var loaded = first ? 0 : +(root.getAttribute('data-rendered') || 0);
        if (!first && data.start !== loaded) { return; }  // not the window that follows: an old answer
        var frag = document.createDocumentFragment();
        var n = data.text.length;
        for (var i = 0; i < n; i++) {
            var s = document.createElement('span');
            s.textContent = data.text[i];
            s.setAttribute('data-w', data.start);
            s.setAttribute('data-i', i);
            s.setAttribute('data-pos', data.pos[i]);
            var c = data.colour[i];
            if (c !== null) {
                s.style.backgroundColor = data.bg[c];
                if (data.fg[c]) { s.style.color = data.fg[c]; }
            }
            if (data.pad[i]) { s.className = 'token-pad'; }
            frag.appendChild(s);
        }
        if (first) {
            root.replaceChildren(frag);
            root.__windows = {};
            root.__filledKey = store.key;
        } else {
            root.appendChild(frag);
        }
        root.__windows[data.start] = data;
        // The hover text is written when a token is first hovered: 4,000 ten-line titles up front cost
        // more than the spans themselves.
        root.onmouseover = function(e) {
            var s = e.target;
            if (s.parentNode === root && !s.title) {
                s.title = tip(root.__windows[+s.getAttribute('data-w')], +s.getAttribute('data-i'));
            }
        };
        var done = data.start + n;
        root.setAttribute('data-rendered', String(done));
        root.setAttribute('data-total', String(data.total));
        var status = document.getElementById('__STATUS__');
        if (status) {
            status.textContent = done < data.total
                ? done.toLocaleString('en') + ' of ' + data.total.toLocaleString('en')
                    + ' tokens shown: scroll the strip for more.'
                : '';
        }
        // The next window when the strip is scrolled near its end (or at once, when it does not fill its box).
        root.__pending = false;
        root.__more = function(upto) {
            if (root.__pending || done >= data.total) { return; }
            root.__pending = true;
            window.dash_clientside.set_props('__WANT__',
                {data: {key: store.key, start: done, upto: upto === undefined ? null : upto}});
        };
        root.onscroll = done < data.total ? function() {
            if (root.scrollTop + root.clientHeight >= root.scrollHeight - 400) { root.__more(); }
        } : null;
        if (done < data.total && root.scrollHeight <= root.clientHeight) { root.__more(); }
        // A chart's point hovered beyond the tokens shown: outline it once its window is here.
        var want = window.__tokensHighlight;
        if (want !== undefined && want !== null) {
            var el = root.querySelector('span[data-pos="' + want + '"]');
            if (el) {
                window.__tokensHighlight = null;
                el.classList.add('token-hl');
                el.style.outline = '2px solid __OUTLINE__';
                root.scrollTop = Math.max(0, el.offsetTop - root.offsetTop - root.clientHeight / 2);
            }
        }
        if (first && window.performance && performance.mark) { performance.mark('tokens-strip-filled'); }
    }
    fill();
    return store.key + ':' + data.start;
}
// The first window is drawn as soon as the strip's div is in the page: its data is in the layout Dash
// has just rendered (dash_component_api.getLayout), and the callback above ran 150-200 ms later, after
// the renderer's own rounds over the new layout. It then says the strip is in (__DONE__, which the charts
// wait for) itself; the callback finds the strip filled and does nothing. Installed once, when the page's
// scripts run.
if (window.MutationObserver && !window['__rlbStripWatch:__STRIP__']) {
    window['__rlbStripWatch:__STRIP__'] = true;
    new MutationObserver(function() {
        var root = document.getElementById('__STRIP__');
        var key = root && root.getAttribute('data-key');
        var api = window.dash_component_api;
        if (!key || root.__filledKey === key || !api || !api.getLayout) { return; }
        var c;
        try { c = api.getLayout('__DATA__'); } catch (e) { return; }
        var store = c && (c.props ? c.props.data : c.data);
        if (!store || store.key !== key) { return; }
        strip(store);
        var dc = window.dash_clientside;
        if (root.__filledKey === key && dc && dc.set_props) {
            root.__doneSent = true;
            dc.set_props('__DONE__', {data: key + ':0'});
        }
    }).observe(document.documentElement, {childList: true, subtree: true});
}
return strip;
})()
"""

# Highlights the strip token of the chart point under the mouse (charts' x is the position) and scrolls
# the strip, not the page, to it.
HIGHLIGHT_JS = r"""
function(hovers) {
    var ctx = window.dash_clientside.callback_context;
    var root = document.getElementById('__STRIP__');
    if (!root) { return window.dash_clientside.no_update; }
    var old = root.querySelector('span.token-hl');
    if (old) { old.classList.remove('token-hl'); old.style.outline = ''; }
    var hit = ctx.triggered && ctx.triggered.length ? ctx.triggered[0].value : null;
    if (!hit || !hit.points || !hit.points.length) { return null; }
    var pos = hit.points[0].x;
    var el = root.querySelector('span[data-pos="' + pos + '"]');
    if (!el) {
        // Beyond the tokens shown: ask for the windows up to it (the strip outlines it when they come).
        if (root.__more) { window.__tokensHighlight = pos; root.__more(pos); }
        return null;
    }
    el.classList.add('token-hl');
    el.style.outline = '2px solid __OUTLINE__';
    var top = el.offsetTop - root.offsetTop;
    if (top < root.scrollTop || top > root.scrollTop + root.clientHeight - 20) {
        root.scrollTop = Math.max(0, top - root.clientHeight / 2);
    }
    return pos;
}
"""


def strip_js(
    strip_id: str, want_id: str = "", status_id: str = "", data_id: str = "", done_id: str = ""
) -> str:
    """:data:`STRIP_JS` for the strip element ``strip_id`` (a clientside callback: strip data in, key out;
    marks ``tokens-strip-data`` / ``tokens-strip-filled`` in the browser's performance timeline when the
    first window is in). It asks for the next window by setting the store ``want_id`` to ``{"key", "start",
    "upto"}`` and says how many tokens are shown in the element ``status_id``. ``data_id``: the store of the
    first window, drawn from the page's layout as soon as the strip's element mounts, which then sets the
    store ``done_id`` (the first window's callback output) itself."""
    return (
        STRIP_JS.replace("__STRIP__", strip_id)
        .replace("__WANT__", want_id)
        .replace("__STATUS__", status_id)
        .replace("__DATA__", data_id)
        .replace("__DONE__", done_id)
        .replace("__OUTLINE__", theme.TEXT)
    )


def highlight_js(strip_id: str) -> str:
    """:data:`HIGHLIGHT_JS` for the strip element ``strip_id`` (charts' hoverData in, hovered position out)."""
    return HIGHLIGHT_JS.replace("__STRIP__", strip_id).replace("__OUTLINE__", theme.TEXT)


# ---- per-position figures ------------------------------------------------------------------------------


# Plotly validates a figure property by property (~12 ms for these layouts, ~1 ms per trace): each layout
# is validated once through go.Layout and cached as a plain dict, traces are plain dicts, and the figure is
# built with ``_validate=False``. The unit tests validate every builder's output (go.Figure(fig.to_dict())).
@lru_cache(maxsize=32)
def _layout_json(title: str | None, ytitle: str | None, message: str | None = None) -> dict:
    if message is not None:
        layout = go.Layout(
            height=POSITION_FIGURE_HEIGHT,
            margin=_MARGIN,
            font=_FONT,
            xaxis={"visible": False},
            yaxis={"visible": False},
            plot_bgcolor="white",
            annotations=[
                {"text": message, "showarrow": False, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5}
            ],
        )
    else:
        layout = go.Layout(
            title={"text": title, "font": {"size": 12}, "x": 0.01, "y": 0.97},
            height=POSITION_FIGURE_HEIGHT,
            margin=_MARGIN,
            font=_FONT,
            hovermode="x unified",
            plot_bgcolor="white",
            legend={
                "orientation": "h",
                "x": 1,
                "xanchor": "right",
                "y": 1.0,
                "yanchor": "bottom",
                "font": {"size": 10},
            },
            # The hovered position as a whole number ("19,847", not the axis's "19.847k").
            xaxis={
                "title": {"text": "position"},
                "gridcolor": theme.GRID,
                "zeroline": False,
                "hoverformat": ",d",
            },
            yaxis={"title": {"text": ytitle}, "gridcolor": theme.GRID, "zerolinecolor": theme.ZERO_LINE},
        )
    # The app's compact template, not Plotly's ~7 kB default (deep-copied and sent with every figure).
    return {"template": TEMPLATE, **layout.to_plotly_json()}


def _figure(
    traces: list,
    title: str | None,
    ytitle: str | None,
    message: str | None = None,
    x_range: tuple[float, float] | None = None,
    **extra,
) -> go.Figure:
    layout = copy.deepcopy(_layout_json(title, ytitle, message))
    layout.update(extra)
    # A chart's zoom is kept across the figures sent for it (the detail of a range replaces the overview).
    layout["uirevision"] = "positions"
    if x_range is not None and message is None:
        layout["xaxis"] = {**layout["xaxis"], "range": list(x_range), "autorange": False}
    return go.Figure(traces, layout=layout, _validate=False)


def empty_figure(message: str) -> go.Figure:
    """A figure that says why it is empty (no axes, one centred line of text)."""
    return _figure([], None, None, message)


def hover_safe_expr(col: str = "text") -> pl.Expr:
    """Token text for Plotly hover labels: Plotly reads a few HTML tags there, so ``& < >`` are escaped
    (it shows the entities as the characters) and newlines / tabs made visible."""
    return (
        pl.col(col)
        .fill_null("")
        .str.replace_all("&", "&amp;", literal=True)
        .str.replace_all("<", "&lt;", literal=True)
        .str.replace_all(">", "&gt;", literal=True)
        .str.replace_all("\n", "↵", literal=True)
        .str.replace_all("\t", "⇥", literal=True)
    )


def _mode(tokens: pl.DataFrame) -> str:
    return "lines+markers" if tokens.height <= LONG_RESPONSE else "lines"


RESET = "reset"  # relayout_range(): the chart was reset to its whole range


def relayout_range(relayout: Mapping | None) -> tuple[float, float] | str | None:
    """What a chart's ``relayoutData`` asks for: ``(x0, x1)`` after a zoom or pan along x, :data:`RESET`
    after a reset (double click), None for anything else (a first draw, a resize, a y-only zoom)."""
    if not relayout:
        return None
    if relayout.get("xaxis.autorange"):
        return RESET
    x = relayout.get("xaxis.range")
    if x is None and "xaxis.range[0]" in relayout and "xaxis.range[1]" in relayout:
        x = (relayout["xaxis.range[0]"], relayout["xaxis.range[1]"])
    try:
        x0, x1 = float(x[0]), float(x[1])
    except (TypeError, ValueError, IndexError, KeyError):
        return None
    return (x0, x1) if math.isfinite(x0) and math.isfinite(x1) and x0 < x1 else None


def decimate(tokens: pl.DataFrame, cols: Sequence[str], points: int = CHART_POINTS) -> pl.DataFrame:
    """At most ``points`` rows of ``tokens`` (in position order) for a chart of ``cols``: all of them when
    they are few; else, in each of ``points / (2 * len(cols) + 1)`` buckets of consecutive rows, its first
    row and the rows of every column's lowest and highest value (a spike stays visible, a flat stretch is a
    few points)."""
    n = tokens.height
    if n <= points or not cols:
        return tokens
    buckets = max(1, points // (2 * len(cols) + 1))
    bucket = (pl.int_range(pl.len(), dtype=pl.Int64) * buckets // n).alias("__b")
    keep = [
        pl.col("__i").get(pl.col(c).cast(pl.Float64).fill_nan(None).arg_min()).alias(f"__lo{k}")
        for k, c in enumerate(cols)
    ] + [
        pl.col("__i").get(pl.col(c).cast(pl.Float64).fill_nan(None).arg_max()).alias(f"__hi{k}")
        for k, c in enumerate(cols)
    ]
    picked = (
        tokens.with_row_index("__i")
        .with_columns(bucket)
        .group_by("__b")
        .agg(pl.col("__i").first().alias("__first"), *keep)
        .drop("__b")
        .unpivot()
        .get_column("value")
        .drop_nulls()
        .unique()
    )
    return tokens.with_row_index("__i").filter(pl.col("__i").is_in(picked.implode())).drop("__i")


def _columns(tokens: pl.DataFrame, *cols: str) -> dict:
    # float32 halves the figure's JSON (Plotly sends typed arrays); the files' values are float32 anyway.
    tokens = decimate(tokens, cols)
    df = tokens.select(pl.col("pos").cast(pl.Int32), *(pl.col(c).cast(pl.Float32) for c in cols))
    out = {c: df.get_column(c).to_numpy() for c in df.columns}
    # The token text in the hover label costs one Python object per point, deep-copied and walked by
    # Plotly's and Dash's encoders (~0.1 s per chart at 4,000 points): long responses show the position
    # only, and the hovered token is outlined in the strip.
    out["label"] = (
        tokens.select(hover_safe_expr()).to_series().to_numpy() if tokens.height <= LONG_RESPONSE else None
    )
    return out


def _hover(c: dict, name: str, first: bool) -> dict:
    """customdata / hovertemplate of a trace: the first trace of a chart names the token when it can."""
    if first and c["label"] is not None:
        return {
            "customdata": c["label"],
            "hovertemplate": "%{customdata}: %{y:" + D3_NUM + "}<extra>" + name + "</extra>",
        }
    return {"hovertemplate": "%{y:" + D3_NUM + "}<extra>" + name + "</extra>"}


def logprob_figure(
    tokens: pl.DataFrame, labels: Mapping[str, str], x_range: tuple[float, float] | None = None
) -> go.Figure:
    """Policy and reference log-prob along the response (x = position; the hover names the token up to
    :data:`LONG_RESPONSE` positions).

    ``tokens``: visible positions with ``pos, text, logprob, ref_logprob``, drawn with at most
    :data:`CHART_POINTS` points (see :func:`decimate`); ``x_range``: the positions shown (a zoom). Empty-state
    figure when there is no log-prob at all.
    """
    if tokens.height == 0 or tokens.get_column("logprob").null_count() == tokens.height:
        return empty_figure("no log-probs in this response")
    c = _columns(tokens, "logprob", "ref_logprob")
    traces = [
        dict(
            type="scatter",
            x=c["pos"],
            y=c["logprob"],
            name=labels["logprob"],
            mode=_mode(tokens),
            marker={"size": 4},
            line={"width": 1.5, "color": theme.colour("logprob")},
            **_hover(c, labels["logprob"], True),
        )
    ]
    if tokens.get_column("ref_logprob").null_count() < tokens.height:
        traces.append(
            dict(
                type="scatter",
                x=c["pos"],
                y=c["ref_logprob"],
                name=labels["ref_logprob"],
                mode="lines",
                line={"width": 1.5, "color": theme.colour("ref_logprob"), "dash": "dot"},
                **_hover(c, labels["ref_logprob"], False),
            )
        )
    return _figure(traces, f"{labels['logprob']} vs {labels['ref_logprob']}", "log-prob", x_range=x_range)


def value_figure(
    tokens: pl.DataFrame, labels: Mapping[str, str], x_range: tuple[float, float] | None = None
) -> go.Figure:
    """Critic value against the return (γ = 1) along the response: where the critic fits and where not.

    ``tokens``: visible positions with ``pos, text, value, return`` (at most :data:`CHART_POINTS` points;
    ``x_range`` as :func:`logprob_figure`). Empty-state figure without values.
    """
    if tokens.height == 0 or tokens.get_column("value").null_count() == tokens.height:
        return empty_figure("no critic values in this response")
    c = _columns(tokens, "value", "return")
    return _figure(
        [
            dict(
                type="scatter",
                x=c["pos"],
                y=c["return"],
                name=labels["return"],
                mode="lines",
                line={"width": 2, "color": theme.colour("return")},
                **_hover(c, labels["return"], True),
            ),
            dict(
                type="scatter",
                x=c["pos"],
                y=c["value"],
                name=labels["value"],
                mode=_mode(tokens),
                marker={"size": 4},
                line={"width": 1.5, "color": theme.colour("value")},
                **_hover(c, labels["value"], False),
            ),
        ],
        f"{labels['value']} vs {labels['return']}",
        "value",
        x_range=x_range,
    )


def token_reward_figure(
    tokens: pl.DataFrame, labels: Mapping[str, str], x_range: tuple[float, float] | None = None
) -> go.Figure:
    """Token rewards as bars (red below 0, blue above), x = position; a filled step line above
    :data:`LONG_RESPONSE` positions.

    ``tokens``: visible positions with ``pos, text, token_reward`` (at most :data:`CHART_POINTS` points;
    ``x_range`` as :func:`logprob_figure`). Empty-state figure without token rewards.
    """
    if tokens.height == 0 or tokens.get_column("token_reward").null_count() == tokens.height:
        return empty_figure("no token rewards in this response")
    c = _columns(tokens, "token_reward")
    hover = _hover(c, labels["token_reward"], True)
    if tokens.height > LONG_RESPONSE:
        trace = dict(
            type="scatter",
            x=c["pos"],
            y=c["token_reward"],
            name=labels["token_reward"],
            mode="lines",
            line={"width": 1, "color": theme.ABOVE_ZERO, "shape": "hvh"},
            fill="tozeroy",
            **hover,
        )
    else:
        trace = dict(
            type="bar",
            x=c["pos"],
            y=c["token_reward"],
            name=labels["token_reward"],
            # Numeric colours: a per-bar list of colour strings costs ~0.5 s to validate at 4,000 bars.
            marker={
                "color": np.where(c["token_reward"] < 0, 0.0, 1.0),
                "colorscale": [[0, theme.BELOW_ZERO], [1, theme.ABOVE_ZERO]],
                "cmin": 0,
                "cmax": 1,
            },
            **hover,
        )
    return _figure([trace], labels["token_reward"], "reward", x_range=x_range, showlegend=False)


def file_fields_figure(
    tokens: pl.DataFrame, fields: Sequence[tuple[str, str]], x_range: tuple[float, float] | None = None
) -> go.Figure:
    """The trainer's own per-token fields (TRL's PPO ``advantages``, ``returns``), one line each, as the file
    has them, x = position.

    ``tokens``: visible positions with ``pos, text`` and each column of ``fields``: ``(column, label)``
    pairs, in the order the file has them (a field without a value at these positions is left out).
    """
    shown = [
        (col, text)
        for col, text in fields
        if tokens.height and tokens.get_column(col).null_count() < tokens.height
    ]
    if not shown:
        return empty_figure("no per-token fields of the trainer at these positions")
    c = _columns(tokens, *(col for col, _ in shown))
    traces = []
    for i, (col, text) in enumerate(shown):
        label = html_escape(text, quote=False)
        traces.append(
            dict(
                type="scatter",
                x=c["pos"],
                y=c[col],
                name=label,
                mode=_mode(tokens),
                marker={"size": 4},
                line={"width": 1.5, "color": FILE_FIELD_COLOURS[i % len(FILE_FIELD_COLOURS)]},
                **_hover(c, label, i == 0),
            )
        )
    # One line has no legend: the title names it.
    title = html_escape(shown[0][1], quote=False) if len(shown) == 1 else "the trainer's own per-token fields"
    return _figure(traces, title, "as in the file", x_range=x_range)


# ---- tables ------------------------------------------------------------------------------------------


def top_table(rows: pl.DataFrame, title: str, labels: Mapping[str, str], table_id: str) -> html.Div:
    """A small table of top-k tokens (``pos, token, is_pad, logprob, ref_logprob, log_ratio, kl``)."""
    head = html.Thead(
        html.Tr(
            [
                html.Th("position"),
                html.Th("token"),
                *(html.Th(labels[k]) for k in ("logprob", "ref_logprob", "log_ratio", "kl")),
            ]
        )
    )
    body = [
        html.Tr(
            [
                html.Td(r["pos"]),
                html.Td(
                    [
                        html.Code(r["token"] if r["token"] is not None else "", style={"whiteSpace": "pre"}),
                        html.Span(" pad", className="text-muted") if r["is_pad"] else None,
                    ]
                ),
                *(html.Td(num(r[k])) for k in ("logprob", "ref_logprob", "log_ratio", "kl")),
            ]
        )
        for r in rows.iter_rows(named=True)
    ]
    return html.Div(
        [
            html.Div(title, className="small fw-semibold mb-1"),
            dbc.Table([head, html.Tbody(body)], size="sm", className="small mb-0", id=table_id),
        ]
    )
