"""Builders of the token page: colour scales, the token strip's data and legend, per-position figures and
top-k tables.

The strip itself is filled in the browser by :data:`STRIP_JS` from a columnar dict (one ``<span>`` per token,
text set with ``textContent`` and the hover with ``title``, so model text never becomes markup); building 4,000
Dash components per response would cost far more than the 50 ms the server has. Labels and the columns of
the trainer's own fields are passed in by the page (``components`` never import ``data``).
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


def strip_data(
    tokens: pl.DataFrame,
    metric: str,
    lo: float,
    hi: float,
    stops,
    key: str,
    hover: Sequence[tuple[str, str]],
) -> dict:
    """Columnar data of the strip for :data:`STRIP_JS`.

    ``tokens``: the visible positions in reading order with ``pos, token, text, is_pad``, the ``metric``
    column and the ``hover`` columns. ``hover``: ``(column, label)`` pairs shown when a token is hovered.
    Returns ``{"key": key, "n": tokens, "json": text}`` where ``text`` is the JSON of ``{"pos", "text", "raw",
    "pad", "colour", "bg", "fg", "labels", "values"}``: ``colour`` the index of each token's colour in
    ``bg``/``fg`` (the palette of :func:`palette`; null: no colour), ``pad`` 1 for a pad position, ``values``
    one list of 4-significant-digit strings per hover column (``"NaN"``/``"inf"`` kept, null if missing).
    The columns travel as one JSON string because Dash's encoder walks every list element in Python
    (~50 ms for 4,000 tokens); orjson writes the string in well under a millisecond.
    """
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
    out = {c: df.get_column(c).to_list() for c in ("pos", "text", "raw", "pad", "colour")}
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
function(store) {
    if (!store || !store.json) { return window.dash_clientside.no_update; }
    if (window.performance && performance.mark) { performance.mark('tokens-strip-data'); }
    var data = JSON.parse(store.json);
    var tries = 0;
    function tip(i) {
        var t = 'position ' + data.pos[i] + ' · token "' + data.raw[i] + '"' + (data.pad[i] ? ' · pad' : '');
        for (var j = 0; j < data.labels.length; j++) {
            var v = data.values[j][i];
            t += '\n' + data.labels[j] + ': ' + (v === null ? '–' : v);
        }
        return t;
    }
    function fill() {
        var root = document.querySelector('#__STRIP__[data-key="' + store.key + '"]');
        if (!root) {
            if (tries++ < 300) { window.requestAnimationFrame(fill); }
            return;
        }
        var frag = document.createDocumentFragment();
        var n = data.text.length;
        for (var i = 0; i < n; i++) {
            var s = document.createElement('span');
            s.textContent = data.text[i];
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
        root.replaceChildren(frag);
        // The hover text is written when a token is first hovered: 4,000 ten-line titles up front cost
        // more than the spans themselves.
        root.onmouseover = function(e) {
            var s = e.target;
            if (s.parentNode === root && !s.title) { s.title = tip(+s.getAttribute('data-i')); }
        };
        root.setAttribute('data-rendered', String(n));
        if (window.performance && performance.mark) { performance.mark('tokens-strip-filled'); }
    }
    fill();
    return store.key;
}
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
    if (!el) { return null; }
    el.classList.add('token-hl');
    el.style.outline = '2px solid __OUTLINE__';
    var top = el.offsetTop - root.offsetTop;
    if (top < root.scrollTop || top > root.scrollTop + root.clientHeight - 20) {
        root.scrollTop = Math.max(0, top - root.clientHeight / 2);
    }
    return pos;
}
"""


def strip_js(strip_id: str) -> str:
    """:data:`STRIP_JS` for the strip element ``strip_id`` (a clientside callback: strip data in, key out;
    marks ``tokens-strip-data`` / ``tokens-strip-filled`` in the browser's performance timeline)."""
    return STRIP_JS.replace("__STRIP__", strip_id)


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
            xaxis={"title": {"text": "position"}, "gridcolor": theme.GRID, "zeroline": False},
            yaxis={"title": {"text": ytitle}, "gridcolor": theme.GRID, "zerolinecolor": theme.ZERO_LINE},
        )
    # The app's compact template, not Plotly's ~7 kB default (deep-copied and sent with every figure).
    return {"template": TEMPLATE, **layout.to_plotly_json()}


def _figure(
    traces: list, title: str | None, ytitle: str | None, message: str | None = None, **extra
) -> go.Figure:
    layout = copy.deepcopy(_layout_json(title, ytitle, message))
    layout.update(extra)
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


def _columns(tokens: pl.DataFrame, *cols: str) -> dict:
    # float32 halves the figure's JSON (Plotly sends typed arrays); the files' values are float32 anyway.
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


def logprob_figure(tokens: pl.DataFrame, labels: Mapping[str, str]) -> go.Figure:
    """Policy and reference log-prob along the response (x = position; the hover names the token up to
    :data:`LONG_RESPONSE` positions).

    ``tokens``: visible positions with ``pos, text, logprob, ref_logprob``. Empty-state figure when there is
    no log-prob at all.
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
    return _figure(traces, f"{labels['logprob']} vs {labels['ref_logprob']}", "log-prob")


def value_figure(tokens: pl.DataFrame, labels: Mapping[str, str]) -> go.Figure:
    """Critic value against the return (γ = 1) along the response: where the critic fits and where not.

    ``tokens``: visible positions with ``pos, text, value, return``. Empty-state figure without values.
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
    )


def token_reward_figure(tokens: pl.DataFrame, labels: Mapping[str, str]) -> go.Figure:
    """Token rewards as bars (red below 0, blue above), x = position; a filled step line above
    :data:`LONG_RESPONSE` positions.

    ``tokens``: visible positions with ``pos, text, token_reward``. Empty-state figure without token rewards.
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
    return _figure([trace], labels["token_reward"], "reward", showlegend=False)


def file_fields_figure(tokens: pl.DataFrame, fields: Sequence[tuple[str, str]]) -> go.Figure:
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
    return _figure(traces, title, "as in the file")


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
