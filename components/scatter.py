"""The scatter page's parts: its controls, the figure (points, or a 2-D histogram of exact counts), the box
brushed on it and the line that opens the box's responses. Pure: values, labels and ids in, components out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import dash_bootstrap_components as dbc
import numpy as np
import plotly.graph_objects as go
from dash import dcc, html

from components import theme
from components.figures import _figure, empty_figure
from components.format import D3_INT, D3_NUM
from components.layout import GRAPH_CONFIG

HEIGHT = 560
# Unlike the other figures, the mode bar is shown: dragging draws a box, so zooming into a dense corner (one
# response of KL 500 squeezes the rest against the axis) is its zoom button or the mouse wheel. No lasso:
# only a box is two ranges.
CONFIG = {
    **GRAPH_CONFIG,
    "displayModeBar": True,
    "displaylogo": False,
    "scrollZoom": True,
    "doubleClick": "reset",
    # Plotly's "Share chart" (sendChartToCloud) would upload the figure's data to Plotly Cloud: never.
    "modeBarButtonsToRemove": [
        *("lasso2d", "toImage", "autoScale2d", "toggleSpikelines", "sendDataToCloud", "sendChartToCloud")
    ],
}
# Points are drawn see-through, so that piled points read darker.
POINT_ALPHA = 0.55
BOX_COLOUR = theme.SELECTION


def controls(
    ids: Mapping[str, str], steps_text: str, x: str, y: str, axes: Mapping[str, str], logs=(False, False)
) -> dbc.Card:
    """The steps box (``51``, ``40-60``, ``all``), the x and y columns (``axes``: column -> label), a log
    scale on each and "Clear box". ``ids``: ``steps``, ``x``, ``y``, ``xlog``, ``ylog``, ``clear``."""
    options = [{"label": text, "value": col} for col, text in axes.items()]

    def picker(text: str, id_: str, value: str) -> html.Div:
        return html.Div(
            [
                html.Div(text, className="small text-muted"),
                dcc.Dropdown(
                    id=id_,
                    options=options,
                    value=value,
                    clearable=False,
                    style={"width": "21rem", "fontSize": "0.85rem"},
                ),
            ],
            className="me-3",
        )

    steps = html.Div(
        [
            html.Div("steps: one, a range or all", className="small text-muted"),
            dbc.Input(
                id=ids["steps"],
                type="text",
                value=steps_text,
                debounce=True,
                size="sm",
                placeholder="e.g. 51, 40-60 or all",
                style={"width": "10rem"},
            ),
        ],
        className="me-3",
    )
    scales = html.Div(
        [
            dbc.Switch(id=ids["xlog"], label="log x", value=logs[0], className="small mb-0"),
            dbc.Switch(id=ids["ylog"], label="log y", value=logs[1], className="small mb-0"),
        ],
        className="me-3 align-self-center pt-1",
    )
    clear = dbc.Button(
        "Clear box", id=ids["clear"], size="sm", color="link", className="align-self-center pt-3 px-0"
    )
    return dbc.Card(
        dbc.CardBody(
            html.Div(
                [steps, picker("x", ids["x"], x), picker("y", ids["y"], y), scales, clear],
                className="d-flex flex-wrap align-items-start gap-1",
            ),
            className="py-2",
        ),
        className="mb-2",
    )


def body(ids: Mapping[str, str]) -> list:
    """The figure's card: its note, the figure (drag a box to brush), the box's line and a clicked point's
    line. ``ids``: ``note``, ``figure``, ``box``, ``point``."""
    graph = dcc.Loading(
        dcc.Graph(
            id=ids["figure"],
            figure=empty_figure("Loading…", HEIGHT),
            config=CONFIG,
            style={"height": f"{HEIGHT}px"},
        ),
        type="circle",
        delay_show=300,
    )
    return [
        html.Div(id=ids["note"], className="text-muted small mb-1"),
        graph,
        html.Div(id=ids["box"], className="small mt-1"),
        html.Div(id=ids["point"], className="small mt-1"),
    ]


def _at(values, log: bool) -> np.ndarray:
    """Where ``values`` are drawn: themselves, or their log10 on a log axis (drawn on a linear axis of
    log10 with the decades labelled, so that a box's range is in the figure's own coordinates)."""
    v = np.asarray(values, dtype=np.float64)
    if not log:
        return v
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log10(v)


def _log_axis(values) -> dict:
    """A linear axis of log10 values labelled in decades (1, 10, 100 … and 0.1, 0.01 …)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return {}
    lo, hi = math.floor(v.min()), math.ceil(v.max())
    ticks = list(range(lo, hi + 1))
    return dict(tickvals=ticks, ticktext=[f"{10.0**k:g}" for k in ticks], zeroline=False)


def _box_shape(box, logs=(False, False)) -> list[dict]:
    if box is None:
        return []
    (x0, x1), (y0, y1) = _at(box[:2], logs[0]), _at(box[2:], logs[1])
    return [
        dict(
            type="rect",
            xref="x",
            yref="y",
            x0=float(x0),
            x1=float(x1),
            y0=float(y0),
            y1=float(y1),
            line=dict(color=BOX_COLOUR, width=1.5, dash="dash"),
            fillcolor=theme.rgba(BOX_COLOUR, 0.06),
        )
    ]


def _layout(x_label: str, y_label: str, box, logs=(False, False), drawn=((), ())) -> dict:
    """``drawn``: the values drawn on each axis (log10 on a log axis), for its decade labels."""
    titles = [t + (" (log scale)" if log else "") for t, log in zip((x_label, y_label), logs, strict=True)]
    xaxis = dict(title=dict(text=titles[0]), zeroline=True) | (_log_axis(drawn[0]) if logs[0] else {})
    yaxis = dict(title=dict(text=titles[1], standoff=8), zeroline=True, automargin=True)
    return dict(
        height=HEIGHT,
        dragmode="select",
        selectdirection="any",
        clickmode="event",
        shapes=_box_shape(box, logs),
        xaxis=xaxis,
        yaxis=yaxis | (_log_axis(drawn[1]) if logs[1] else {}),
        margin=dict(l=64, r=16, t=16, b=48),
        # A new figure of the same axes keeps the user's zoom (Plotly's uirevision).
        uirevision=f"{titles[0]}|{titles[1]}",
    )


def title(x_label: str, y_label: str) -> str:
    """The figure card's title."""
    return f"{y_label} against {x_label}, one response each"


def scatter_figure(drawn, *, x_label: str, y_label: str, box=None, colour: str) -> go.Figure:
    """What the page draws of ``drawn`` (a ``data.scatter.Scatter``): its :func:`density_figure` when it is
    a 2-D histogram (``cells``: ``xbin, ybin, count`` on ``x_edges`` x ``y_edges``), else its
    :func:`points_figure` (``points``: ``x, y, step, sample_id``); ``box`` (``x_min``, ``x_max``, ``y_min``,
    ``y_max``, or None) drawn dashed, on the log axes ``drawn.logs``."""
    b = None if box is None else (box.x_min, box.x_max, box.y_min, box.y_max)
    if drawn.density:
        c = drawn.cells
        return density_figure(
            drawn.x_edges, drawn.y_edges, c["xbin"], c["ybin"], c["count"], x_label=x_label, y_label=y_label,
            box=b, logs=drawn.logs,
        )  # fmt: skip
    p = drawn.points
    return points_figure(
        *(p[k] if p is not None else [] for k in ("x", "y", "step", "sample_id")),
        x_label=x_label, y_label=y_label, box=b, colour=colour, logs=drawn.logs,
    )  # fmt: skip


def points_figure(
    x, y, steps, samples, *, x_label: str, y_label: str, box=None, colour: str, logs=(False, False)
) -> go.Figure:
    """One point per response (``x``, ``y``, their ``steps`` and sample ids ``samples``): hover says its step
    and values; each point's ``customdata`` is ``[sample id, step, x, y]`` (:func:`clicked_sample` reads a
    click). ``box``: ``(x_min, x_max, y_min, y_max)`` drawn dashed, or None. ``logs``: a log scale on x, on
    y (every value > 0 there): the log10 is drawn, the decades labelled."""
    if len(x) == 0:
        return empty_figure("No response has a value of both columns here.", HEIGHT)
    xs, ys = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    custom = np.stack([np.asarray(c, dtype=object) for c in (samples, steps, xs, ys)], axis=-1)
    px, py = _at(xs, logs[0]), _at(ys, logs[1])
    trace = dict(
        type="scatter",
        mode="markers",
        x=px,
        y=py,
        customdata=custom,
        marker=dict(size=7, color=theme.rgba(colour, POINT_ALPHA), line=dict(width=0)),
        selected=dict(marker=dict(color=colour)),
        unselected=dict(marker=dict(opacity=0.35)),
        hovertemplate=(
            f"step %{{customdata[1]}}<br>{x_label}: %{{customdata[2]:{D3_NUM}}}<br>"
            f"{y_label}: %{{customdata[3]:{D3_NUM}}}<br><i>click for its tokens</i><extra></extra>"
        ),
    )
    return _figure([trace], _layout(x_label, y_label, box, logs, (px, py)))


def density_figure(
    x_edges, y_edges, xbin, ybin, count, *, x_label: str, y_label: str, box=None, logs=(False, False)
) -> go.Figure:
    """A 2-D histogram: cell ``(xbin, ybin)`` covers ``x_edges[i] <= x < x_edges[i+1]`` and likewise on y,
    coloured by the log of its ``count`` (a colour bar in counts); hover gives the cell's exact intervals
    and count, its ``customdata`` ``[count, x lo, x hi, y lo, y hi]``. Empty cells are blank. An invisible
    point at each non-empty cell's centre lets Plotly's box select run over a heatmap (which has no points
    of its own to select); only the box's range is read (:func:`selected_range`). ``logs``: a log scale on
    x, on y (edges > 0 there; drawn at their log10, the decades labelled)."""
    xe, ye = np.asarray(x_edges, dtype=np.float64), np.asarray(y_edges, dtype=np.float64)
    nx, ny = max(len(xe) - 1, 1), max(len(ye) - 1, 1)
    if len(xe) < 2 or xe[-1] <= xe[0]:
        xe = np.array([xe[0] * 0.9, xe[0] * 1.1]) if logs[0] else np.array([xe[0] - 0.5, xe[0] + 0.5])
    if len(ye) < 2 or ye[-1] <= ye[0]:
        ye = np.array([ye[0] * 0.9, ye[0] * 1.1]) if logs[1] else np.array([ye[0] - 0.5, ye[0] + 0.5])
    pxe, pye = _at(xe, logs[0]), _at(ye, logs[1])  # the edges where they are drawn
    xbin, ybin, count = (np.asarray(a) for a in (xbin, ybin, count))
    if count.size == 0:
        return empty_figure("No response has a value of both columns here.", HEIGHT)
    z = np.full((ny, nx), np.nan)
    z[ybin, xbin] = np.log10(count)
    counts = np.zeros((ny, nx), dtype=np.int64)
    counts[ybin, xbin] = count
    xlo, xhi = np.broadcast_to(xe[:-1], (ny, nx)), np.broadcast_to(xe[1:], (ny, nx))
    ylo, yhi = np.broadcast_to(ye[:-1, None], (ny, nx)), np.broadcast_to(ye[1:, None], (ny, nx))
    custom = np.stack([counts, xlo, xhi, ylo, yhi], axis=-1)
    top = int(count.max())
    ticks = [10**k for k in range(0, len(str(top))) if 10**k <= top]
    heat = dict(
        type="heatmap",
        x=pxe,  # one more than the columns: the cells' edges (on a log axis, not evenly spaced in value)
        y=pye,
        z=z,
        customdata=custom,
        colorscale=theme.HEATMAP_SCALE,
        zmin=0,
        zmax=max(np.log10(top), 1e-9),
        colorbar=dict(
            title=dict(text="responses", side="right"),
            tickvals=np.log10(ticks).tolist(),
            ticktext=[f"{t:,}" for t in ticks],
            thickness=12,
        ),
        hovertemplate=(
            f"{x_label}: %{{customdata[1]:{D3_NUM}}} ≤ x < %{{customdata[2]:{D3_NUM}}}<br>"
            f"{y_label}: %{{customdata[3]:{D3_NUM}}} ≤ y < %{{customdata[4]:{D3_NUM}}}<br>"
            f"%{{customdata[0]:,{D3_INT}}} responses<extra></extra>"
        ),
        xgap=0,
        ygap=0,
    )
    centres = dict(
        type="scatter",
        mode="markers",
        x=((pxe[:-1] + pxe[1:]) / 2)[xbin],
        y=((pye[:-1] + pye[1:]) / 2)[ybin],
        marker=dict(size=2, opacity=0),
        hoverinfo="skip",
        showlegend=False,
    )
    return _figure([heat, centres], _layout(x_label, y_label, box, logs, (pxe, pye)))


def box_line(text: str, count: int | None, href: str | None) -> list:
    """The line under the figure: the box in words, its number of responses and a link to them."""
    if count is None:
        return [
            html.Span("Drag a box over the figure to open the responses inside it.", className="text-muted")
        ]
    parts = [html.Span("Box: ", className="fw-semibold"), html.Span(f"{text} · {count:,} responses")]
    if href and count:
        parts += [" · ", dcc.Link("open them on the responses page", href=href)]
    return parts


def point_line(sample: str, step, href: str) -> list:
    """The line of a clicked point: its sample id and step, and its token page."""
    return [
        html.Span("Clicked: ", className="fw-semibold"),
        html.Span(f"{sample} at step {step} · "),
        dcc.Link("its tokens", href=href),
    ]


def selected_range(selected) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """The ``(x range, y range)`` of a box select (Plotly's ``selectedData``), None for anything else (a
    lasso, a selection cleared)."""
    rng = (selected or {}).get("range") if isinstance(selected, dict) else None
    if not isinstance(rng, dict):
        return None
    try:
        (x0, x1), (y0, y1) = (float(v) for v in rng["x"]), (float(v) for v in rng["y"])
    except (KeyError, TypeError, ValueError):
        return None
    return (min(x0, x1), max(x0, x1)), (min(y0, y1), max(y0, y1))


def clicked_sample(click) -> tuple[str, object] | None:
    """``(sample id, step)`` of a click on a point of :func:`points_figure`; None for anything else."""
    try:
        sample, step = click["points"][0]["customdata"][:2]
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return (sample, step) if isinstance(sample, str) else None
