"""The token page's per-position figures: log-probabilities, values and returns, per-token rewards and the
trainer's own fields over the response's positions. A chart gets at most :data:`CHART_POINTS` points (each
bucket's lowest and highest), the detail again when it is zoomed. Labels and the columns of the trainer's
own fields are passed in by the page (``components`` never import ``data``)."""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from functools import lru_cache
from html import escape as html_escape  # names from the file in Plotly text, which reads a few tags

import numpy as np
import plotly.graph_objects as go
import polars as pl

from components import theme
from components.figures import TEMPLATE, Figure
from components.format import D3_NUM
from components.theme import FILE_FIELD_COLOURS

POSITION_FIGURE_HEIGHT = 230
# Above this many positions the charts drop per-point markers and bars (one SVG element each) for lines.
LONG_RESPONSE = 600
# Points of a per-position chart at most (a chart is ~450 px wide): above, each bucket of consecutive positions
# keeps its lowest and highest value of every line (two per pixel at most), so no spike is lost; zooming in
# sends the positions of the range again at this resolution.
CHART_POINTS = 1000
_FONT = {"size": 11}
_MARGIN = {"l": 50, "r": 10, "t": 45, "b": 35}


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
    return Figure(traces, layout=layout, _validate=False)


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
