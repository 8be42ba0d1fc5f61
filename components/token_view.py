"""Builders of the token page: colour scales, the token strip's data and legend, per-position figures and
top-k tables.

The strip itself is filled in the browser by :data:`STRIP_JS` from a columnar dict (one ``<span>`` per token,
text set with ``textContent`` and the hover with ``title``, so model text never becomes markup); building 4,000
Dash components per response would cost far more than the 50 ms the server has. Labels are passed in by the
page (``components`` never import ``data``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import dash_bootstrap_components as dbc
import plotly.graph_objects as go
import polars as pl
from dash import html

# Colour stops (position in [0, 1] of the scale's range, RGB). Diverging: red below 0, white at 0, blue above.
DIVERGING = (
    (0.0, (178, 24, 43)),
    (0.25, (239, 138, 98)),
    (0.5, (247, 247, 247)),
    (0.75, (103, 169, 207)),
    (1.0, (33, 102, 172)),
)
BLUES = ((0.0, (247, 251, 255)), (0.5, (158, 202, 225)), (1.0, (8, 81, 156)))
ORANGES = ((0.0, (255, 245, 235)), (0.5, (253, 174, 107)), (1.0, (217, 72, 1)))
PURPLES = ((0.0, (252, 251, 253)), (0.5, (188, 189, 220)), (1.0, (84, 39, 143)))
# Text turns white on backgrounds darker than this (0..255 luma).
DARK_LUMA = 120.0

POSITION_FIGURE_HEIGHT = 230
_FONT = {"size": 11}
_MARGIN = {"l": 50, "r": 10, "t": 45, "b": 35}


def colour_stops(metric: str, signed: bool):
    """The colour stops of a metric's scale: diverging for signed metrics, a sequential ramp otherwise."""
    if signed:
        return DIVERGING
    if metric == "kl":
        return ORANGES
    if metric == "ref_prob":
        return PURPLES
    return BLUES


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


def _channel_expr(t: pl.Expr, stops, k: int) -> pl.Expr:
    expr = None
    for (p0, c0), (p1, c1) in zip(stops, stops[1:], strict=False):
        seg = pl.lit(float(c0[k])) + (t - p0) * ((c1[k] - c0[k]) / ((p1 - p0) or 1.0))
        expr = pl.when(t <= p1).then(seg) if expr is None else expr.when(t <= p1).then(seg)
    return expr.otherwise(pl.lit(float(stops[-1][1][k]))).round(0).cast(pl.Int64)


def colour_exprs(col: str, lo: float, hi: float, stops) -> tuple[pl.Expr, pl.Expr]:
    """Background and text colour of each value of ``col`` as Polars expressions (same mapping as
    :func:`colour`); null / NaN values give null (no background)."""
    v = pl.col(col).cast(pl.Float64)
    t = (pl.lit(0.5) if hi <= lo else (v - lo) / (hi - lo)).clip(0.0, 1.0)
    r, g, b = (_channel_expr(t, stops, k) for k in range(3))
    ok = v.is_not_null() & ~v.is_nan()
    bg = pl.when(ok).then(pl.format("rgb({},{},{})", r, g, b))
    luma = 0.299 * r + 0.587 * g + 0.114 * b
    fg = pl.when(ok & (luma < DARK_LUMA)).then(pl.lit("#fff"))
    return bg, fg


def strip_data(tokens: pl.DataFrame, metric: str, lo: float, hi: float, stops, key: str) -> dict:
    """Columnar data of the strip for :data:`STRIP_JS`: ``{"key", "pos", "text", "hover", "bg", "fg", "pad"}``.

    ``tokens`` are the visible positions in reading order, with ``pos, text, hover, is_pad`` and ``metric``
    columns. ``bg``/``fg`` are CSS colours or None; ``pad`` is 1 for a pad position shown.
    """
    if metric not in tokens.columns:
        tokens = tokens.with_columns(pl.lit(None, dtype=pl.Float64).alias(metric))
    bg, fg = colour_exprs(metric, lo, hi, stops)
    df = tokens.select(
        "pos", "text", "hover", bg.alias("bg"), fg.alias("fg"), pl.col("is_pad").cast(pl.Int8).alias("pad")
    )
    out = {c: df.get_column(c).to_list() for c in df.columns}
    out["key"] = key
    return out


def _fmt(v: float) -> str:
    return f"{v:.3g}"


def legend(title: str, lo: float, hi: float, stops, signed: bool) -> html.Div:
    """The scale's colour bar with its range (and 0 in the middle for a diverging scale)."""
    gradient = ", ".join(f"rgb{tuple(c)} {p * 100:.0f}%" for p, c in stops)
    ticks = [html.Span(_fmt(lo))]
    if signed:
        ticks.append(html.Span("0"))
    ticks.append(html.Span(_fmt(hi)))
    return html.Div(
        [
            html.Span(title, className="small text-muted me-2"),
            html.Div(
                [
                    html.Div(
                        style={
                            "background": f"linear-gradient(to right, {gradient})",
                            "height": "0.7rem",
                            "border": "1px solid #ced4da",
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

# Fills the strip from strip_data(): textContent and title are plain text, so a token such as
# "<script>" is shown, never parsed. The strip's div carries data-key: a re-render may mount a new div
# after this runs, so it waits (a few frames) for the div of this very data.
STRIP_JS = """
function(data) {
    if (!data || !data.text) { return window.dash_clientside.no_update; }
    var tries = 0;
    function fill() {
        var root = document.querySelector('#tokens-strip[data-key="' + data.key + '"]');
        if (!root) {
            if (tries++ < 300) { window.requestAnimationFrame(fill); }
            return;
        }
        var frag = document.createDocumentFragment();
        var n = data.text.length;
        for (var i = 0; i < n; i++) {
            var s = document.createElement('span');
            s.textContent = data.text[i];
            s.title = data.hover[i];
            s.setAttribute('data-pos', data.pos[i]);
            if (data.bg[i]) { s.style.backgroundColor = data.bg[i]; }
            if (data.fg[i]) { s.style.color = data.fg[i]; }
            if (data.pad[i]) { s.className = 'token-pad'; }
            frag.appendChild(s);
        }
        root.replaceChildren(frag);
        root.setAttribute('data-rendered', String(n));
    }
    fill();
    return data.text.length;
}
"""

# Highlights the strip token of the chart point under the mouse (charts' x is the position) and scrolls
# the strip, not the page, to it.
HIGHLIGHT_JS = """
function(hovers) {
    var ctx = window.dash_clientside.callback_context;
    var root = document.getElementById('tokens-strip');
    if (!root) { return window.dash_clientside.no_update; }
    var old = root.querySelector('span.token-hl');
    if (old) { old.classList.remove('token-hl'); old.style.outline = ''; }
    var hit = ctx.triggered && ctx.triggered.length ? ctx.triggered[0].value : null;
    if (!hit || !hit.points || !hit.points.length) { return null; }
    var pos = hit.points[0].x;
    var el = root.querySelector('span[data-pos="' + pos + '"]');
    if (!el) { return null; }
    el.classList.add('token-hl');
    el.style.outline = '2px solid #212529';
    var top = el.offsetTop - root.offsetTop;
    if (top < root.scrollTop || top > root.scrollTop + root.clientHeight - 20) {
        root.scrollTop = Math.max(0, top - root.clientHeight / 2);
    }
    return pos;
}
"""


# ---- per-position figures ------------------------------------------------------------------------------


def empty_figure(message: str) -> go.Figure:
    """A figure that says why it is empty (no axes, one centred line of text)."""
    fig = go.Figure()
    fig.update_layout(
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
    return fig


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


def _layout(fig: go.Figure, title: str, ytitle: str) -> go.Figure:
    fig.update_layout(
        title={"text": title, "font": {"size": 12}, "x": 0.01, "y": 0.97},
        height=POSITION_FIGURE_HEIGHT,
        margin=_MARGIN,
        font=_FONT,
        hovermode="x unified",
        plot_bgcolor="white",
        legend={"orientation": "h", "x": 1, "xanchor": "right", "y": 1.0, "yanchor": "bottom", "font": {"size": 10}},
        xaxis={"title": {"text": "position"}, "gridcolor": "#eee", "zeroline": False},
        yaxis={"title": {"text": ytitle}, "gridcolor": "#eee", "zerolinecolor": "#bbb"},
    )
    return fig


def _columns(tokens: pl.DataFrame, *cols: str) -> dict:
    df = tokens.select("pos", hover_safe_expr().alias("label"), *cols)
    return {c: df.get_column(c).to_numpy() for c in df.columns}


def logprob_figure(tokens: pl.DataFrame, labels: Mapping[str, str]) -> go.Figure:
    """Policy and reference log-prob along the response (x = position, hover shows the token).

    ``tokens``: visible positions with ``pos, text, logprob, ref_logprob``. Empty-state figure when there is
    no log-prob at all.
    """
    if tokens.height == 0 or tokens.get_column("logprob").null_count() == tokens.height:
        return empty_figure("no log-probs in this response")
    c = _columns(tokens, "logprob", "ref_logprob")
    traces = [
        go.Scatter(
            x=c["pos"],
            y=c["logprob"],
            customdata=c["label"],
            name=labels["logprob"],
            mode="lines+markers",
            marker={"size": 4},
            line={"width": 1.5, "color": "#1f77b4"},
            hovertemplate="%{customdata}: %{y:.4g}<extra>" + labels["logprob"] + "</extra>",
        )
    ]
    if tokens.get_column("ref_logprob").null_count() < tokens.height:
        traces.append(
            go.Scatter(
                x=c["pos"],
                y=c["ref_logprob"],
                name=labels["ref_logprob"],
                mode="lines",
                line={"width": 1.5, "color": "#999", "dash": "dot"},
                hovertemplate="%{y:.4g}<extra>" + labels["ref_logprob"] + "</extra>",
            )
        )
    fig = go.Figure(traces)
    return _layout(fig, f"{labels['logprob']} vs {labels['ref_logprob']}", "log-prob")


def value_figure(tokens: pl.DataFrame, labels: Mapping[str, str]) -> go.Figure:
    """Critic value against the return (γ = 1) along the response: where the critic fits and where not.

    ``tokens``: visible positions with ``pos, text, value, return``. Empty-state figure without values.
    """
    if tokens.height == 0 or tokens.get_column("value").null_count() == tokens.height:
        return empty_figure("no critic values in this response")
    c = _columns(tokens, "value", "return")
    fig = go.Figure(
        [
            go.Scatter(
                x=c["pos"],
                y=c["return"],
                customdata=c["label"],
                name=labels["return"],
                mode="lines",
                line={"width": 2, "color": "#2ca02c"},
                hovertemplate="%{customdata}: %{y:.4g}<extra>" + labels["return"] + "</extra>",
            ),
            go.Scatter(
                x=c["pos"],
                y=c["value"],
                name=labels["value"],
                mode="lines+markers",
                marker={"size": 4},
                line={"width": 1.5, "color": "#9467bd"},
                hovertemplate="%{y:.4g}<extra>" + labels["value"] + "</extra>",
            ),
        ]
    )
    return _layout(fig, f"{labels['value']} vs {labels['return']}", "value")


def token_reward_figure(tokens: pl.DataFrame, labels: Mapping[str, str]) -> go.Figure:
    """Token rewards as bars (red below 0, blue above), x = position.

    ``tokens``: visible positions with ``pos, text, token_reward``. Empty-state figure without token rewards.
    """
    if tokens.height == 0 or tokens.get_column("token_reward").null_count() == tokens.height:
        return empty_figure("no token rewards in this response")
    c = _columns(tokens, "token_reward")
    colours = ["#b2182b" if v < 0 else "#2166ac" for v in tokens.get_column("token_reward").fill_null(0.0)]
    fig = go.Figure(
        go.Bar(
            x=c["pos"],
            y=c["token_reward"],
            customdata=c["label"],
            name=labels["token_reward"],
            marker={"color": colours},
            hovertemplate="%{customdata}: %{y:.4g}<extra>" + labels["token_reward"] + "</extra>",
        )
    )
    fig.update_layout(showlegend=False)
    return _layout(fig, labels["token_reward"], "reward")


# ---- tables ------------------------------------------------------------------------------------------


def _num(v) -> str:
    if v is None:
        return "–"
    return f"{v:.4g}"


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
                *(html.Td(_num(r[k])) for k in ("logprob", "ref_logprob", "log_ratio", "kl")),
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
