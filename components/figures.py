"""Pure figure builders: small aggregated frames in, ``go.Figure`` out (no Plotly Express, no I/O).

Figures use a compact template (a few hundred bytes instead of Plotly's ~7 kB default per figure) and
numpy arrays for long series, which Plotly sends to the browser as base64 typed arrays: exact and small.
Builders assemble plain trace and layout dicts and wrap them in ``go.Figure(..., _validate=False)``:
Plotly's per-property validation costs 10-40 ms per figure, more than the page's whole time budget, so it
is done once in the unit tests instead (``go.Figure(fig.to_dict())`` must accept every builder's output).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import plotly.graph_objects as go
from _plotly_utils.basevalidators import is_homogeneous_array
from _plotly_utils.utils import to_typed_array_spec
from dash import Patch

from components import theme
from components.format import D3_INT, D3_PRECISE, D3_SHARE, D3_SHARE_AXIS, D3_SHARE_PRECISE, exact, share
from components.theme import colour, rgba

MARKER_NAME = "selected-step"

TEMPLATE = dict(
    layout=dict(
        font=dict(family=theme.FONT, size=12, color=theme.TEXT),
        paper_bgcolor="white",
        plot_bgcolor="white",
        margin=dict(l=56, r=16, t=36, b=44),
        hoverlabel=dict(font=dict(family=theme.FONT, size=12)),
        xaxis=dict(
            gridcolor=theme.GRID, zerolinecolor=theme.ZERO_LINE, linecolor=theme.AXIS_LINE, ticks="outside"
        ),
        yaxis=dict(gridcolor=theme.GRID, zerolinecolor=theme.ZERO_LINE, linecolor=theme.AXIS_LINE),
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="left", x=0, font=dict(size=11)),
    )
)


class Figure(go.Figure):
    """``go.Figure`` whose answer to Dash is Plotly's own (``to_dict``: numpy arrays as base64 typed arrays)
    made in one pass over its dicts and lists (``_answer``), where Plotly deep-copies everything, the arrays
    too, then walks the copy again down to each number of each list. Same JSON (``test_figures012``)."""

    def to_plotly_json(self) -> dict:
        if self._frame_objs:
            return super().to_plotly_json()
        return {"data": _answer(self._data), "layout": _answer(self._layout)}


_SCALARS = (str, int, float, type(None))
# The keys whose values Plotly's convert_to_base64 leaves as they are (its is_skipped_key).
_NOT_TYPED = frozenset(("geojson", "layer", "layers", "range"))


def _answer(obj):
    """``obj`` as Plotly's ``convert_to_base64`` leaves a deep copy of it: each array that is a dict's value
    (but under a key of ``_NOT_TYPED``) a typed array spec; new dicts and lists, the rest shared."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k in _NOT_TYPED or isinstance(v, _SCALARS):
                out[k] = v
            elif isinstance(v, np.ndarray) or is_homogeneous_array(v):
                out[k] = to_typed_array_spec(v)
            else:
                out[k] = _answer(v)
        return out
    if isinstance(obj, (list, tuple)):
        return type(obj)(v if isinstance(v, _SCALARS) else _answer(v) for v in obj)
    return obj


def _figure(data: list[dict], layout: dict) -> go.Figure:
    """``go.Figure`` of plain dicts with the app's template, skipping Plotly's slow validation."""
    return Figure(data=data, layout={"template": TEMPLATE, **layout}, _validate=False)


def empty_figure(message: str, height: int = 300) -> go.Figure:
    """An explicit empty-state figure: no axes, ``message`` in the middle."""
    return _figure(
        [],
        dict(
            height=height,
            xaxis=dict(visible=False),
            yaxis=dict(visible=False),
            annotations=[
                dict(
                    text=message,
                    showarrow=False,
                    xref="paper",
                    yref="paper",
                    x=0.5,
                    y=0.5,
                    font=dict(color=theme.MUTED, size=13),
                )
            ],
        ),
    )


def marker_patch(step: int | None) -> Patch:
    """A patch of a figure that moves only its selected-step marker (see :func:`step_marker`)."""
    patch = Patch()
    patch["layout"]["shapes"] = step_marker(step)
    return patch


def step_marker(step: int | None) -> list[dict]:
    """``layout.shapes`` marking the selected step: a vertical dashed line at ``x = step`` (none for None).

    Used by the curve and heatmap figures, and alone to move the marker with a ``dash.Patch``.
    """
    if step is None:
        return []
    return [
        dict(
            type="line",
            name=MARKER_NAME,
            x0=step,
            x1=step,
            xref="x",
            y0=0,
            y1=1,
            yref="paper",
            line=dict(color=theme.MARKER, width=1.5, dash="dot"),
            layer="above",
        )
    ]


def _keys(key: str, n: int) -> np.ndarray:
    """``key`` for each of ``n`` points, as a numpy text array: its JSON is the list of ``n`` keys, and Plotly's
    figure copies the array at once where it copied a list item by item (~2 ms a curve of 2,000 steps)."""
    return np.full(n, key)


def curves_figure(
    series: Sequence,
    *,
    y_title: str,
    selected_step: int | None = None,
    percent: bool = False,
    empty_message: str = "Nothing to show for this run.",
    height: int = 300,
    pick: bool = False,
) -> go.Figure:
    """Curves over steps (x = step, numeric order), each with an optional shaded spread band.

    ``series``: objects with ``label``, ``frame`` (columns ``step, y`` and, for a band, ``lo, hi``;
    sorted by step, nulls are gaps), ``key`` (its colour is the theme's), ``band_label`` (None: no band) and ``dashed``. Hover shows
    the exact values of every curve at the step; clicking anywhere gives ``clickData.points[*].x`` = step.
    ``percent`` formats the y axis and the hover as percentages. No series -> :func:`empty_figure`.
    With ``pick`` a click takes the one point under the cursor, whose ``customdata`` is its series' ``key``
    (:func:`clicked_point` reads it): each point stands for its own responses.
    """
    series = [s for s in series if s.frame.height]
    if not series:
        return empty_figure(empty_message, height)
    fmt = D3_SHARE_PRECISE if percent else D3_PRECISE
    data = []
    for s in series:
        c = colour(s.key)
        x = s.frame.get_column("step").to_numpy()
        if s.band_label and {"lo", "hi"} <= set(s.frame.columns):
            for edge, fill in (("lo", "none"), ("hi", "tonexty")):
                data.append(
                    dict(
                        type="scatter",
                        x=x,
                        y=s.frame.get_column(edge).cast(float).to_numpy(),
                        mode="lines",
                        line=dict(width=0, color=c),
                        fill=fill,
                        fillcolor=rgba(c, 0.16),
                        name=f"{s.label} {s.band_label} ({'low' if edge == 'lo' else 'high'})",
                        legendgroup=s.label,
                        showlegend=False,
                        hovertemplate=f"%{{y:{fmt}}}",
                        connectgaps=False,
                    )
                )
        if getattr(s, "flags", False):
            data.append(
                dict(type="scatter", x=x, y=s.frame.get_column("y").cast(float).to_numpy(), mode="markers",
                     marker=dict(symbol="x-thin-open", size=11, line=dict(width=2, color=c), color=c), name=s.label,
                     hovertemplate="flagged", customdata=_keys(s.key, len(x)) if pick else None)
            )  # fmt: skip
            continue
        data.append(
            dict(
                type="scatter",
                x=x,
                y=s.frame.get_column("y").cast(float).to_numpy(),
                mode="lines+markers" if s.frame.height <= 60 else "lines",
                marker=dict(size=4),
                line=dict(color=c, width=2, dash="dash" if s.dashed else "solid"),
                name=s.label + (f" (band: {s.band_label})" if s.band_label else ""),
                legendgroup=s.label,
                hovertemplate=f"step %{{x}}: %{{y:{fmt}}}" if pick else f"%{{y:{fmt}}}",
                connectgaps=False,
                customdata=_keys(s.key, len(x)) if pick else None,
            )
        )
    yaxis = dict(title=dict(text=y_title), zeroline=True)
    if percent:
        # A share never needs more than ±100 %: Plotly pads a flat line at 100 % (every group tied) to 200 %.
        yaxis.update(tickformat=D3_SHARE_AXIS, autorangeoptions=dict(clipmin=-1.05, clipmax=1.05))
        if pick and all((s.frame.get_column("y").drop_nulls() >= 0).all() for s in series):
            # A share of responses from 0 (a flat 0 % would sit mid-way on a −100 %…100 % axis).
            yaxis.update(rangemode="tozero")
    return _figure(
        data,
        dict(
            height=height,
            hovermode="closest" if pick else "x unified",
            clickmode="event",
            shapes=step_marker(selected_step),
            xaxis=dict(title=dict(text="step"), zeroline=False, unifiedhovertitle=dict(text="step %{x}")),
            yaxis=yaxis,
            showlegend=True,
        ),
    )


def histogram_figure(
    bars,
    *,
    label: str,
    color: str = colour("reward"),
    ref_bars=None,
    ref_label: str | None = None,
    ref_color: str = colour("ref_reward"),
    signed: bool = False,
    discrete: bool = False,
    height: int = 300,
    empty_message: str = "No values at this step.",
) -> go.Figure:
    """One step's histogram on run-level bin edges, optionally beside a reference histogram.

    ``bars`` (and ``ref_bars``, on the same edges): columns ``bin, lo, hi, count`` for every bar, sorted by
    ``bin``. Trace 0 holds the bars of ``bars``; each bar's ``customdata`` is ``[lo, hi_or_None, count]``:
    the interval ``lo <= x < hi`` it stands for, with ``hi`` None for the last bar (``x >= lo``, the
    bounds of :func:`data.queries.bar_interval`), and the number of responses in it. Trace 1 (the
    reference) has the same ``customdata`` layout for its own counts; its bars stand beside trace 0's (the
    left half of each bin's slot for trace 0, the right half for trace 1), so that a click lands on one bar
    of one trace (hover mode "closest": :func:`clicked_bar` tells which).
    ``discrete``: bar k holds the one value ``lo`` (few distinct values in the run): its slot is centred
    on ``lo``, 0.8 of the closest gap between two values wide, with the values as x ticks when they fit;
    its ``customdata`` is still the whole interval. With one distinct value in the run (edges ``[v, v]``)
    the single slot is one unit wide around ``v``. Count ticks are whole numbers. ``signed`` marks
    ``x = 0`` with a line. Empty ``bars`` -> :func:`empty_figure`.
    """
    if bars is None or bars.height == 0:
        return empty_figure(empty_message, height)
    rows = bars.sort("bin").to_dicts()
    last = len(rows) - 1
    gaps = [float(r["hi"]) - float(r["lo"]) for r in rows if r["hi"] > r["lo"]]
    bar_width = 0.8 * min(gaps) if discrete and gaps else None
    has_ref = ref_bars is not None and ref_bars.height > 0

    def trace(rs, side, name, marker):
        """Bars of ``rs``; ``side`` -1 / +1 puts each in the left / right half of its slot, 0 fills it."""
        x, width, custom = [], [], []
        for k, r in enumerate(rs):
            lo, hi = float(r["lo"]), float(r["hi"])
            if bar_width is not None:
                centre, slot = lo, bar_width
            else:
                slot = hi - lo if hi > lo else 1.0
                centre = lo + slot / 2 if hi > lo else lo
            x.append(centre + side * slot / 4)
            width.append(slot / 2 if side else slot)
            custom.append([lo, None if k == last else hi, int(r["count"])])
        n_all = sum(c[2] for c in custom)
        hover = []
        for lo, hi, n in custom:
            if discrete:
                interval = f"= {exact(lo)}"
            else:
                interval = f"≥ {exact(lo)}" if hi is None else f"[{exact(lo)}, {exact(hi)})"
            part = f" ({share(n / n_all)})" if n_all else ""
            hint = "<br><i>click for these responses</i>" if n else ""
            hover.append(f"{name} {interval}: <b>{n}</b>{part}{hint}")
        return dict(
            type="bar",
            x=x,
            y=[c[2] for c in custom],
            width=width,
            customdata=custom,
            hovertext=hover,
            hovertemplate="%{hovertext}<extra></extra>",
            marker=marker,
            name=name,
        )

    data = [
        trace(
            rows, -1 if has_ref else 0, label, dict(color=rgba(color, 0.75), line=dict(color=color, width=1))
        )
    ]
    if has_ref:
        marker = dict(color=rgba(ref_color, 0.15), line=dict(color=ref_color, width=1.5))
        data.append(trace(ref_bars.sort("bin").to_dicts(), 1, ref_label or "reference", marker))
    top = max(max(d["y"]) for d in data)
    edges = [float(r["lo"]) for r in rows] + [float(rows[-1]["hi"])]
    xaxis = dict(title=dict(text=label), range=_padded(edges), zeroline=False)
    if bar_width is not None:
        values = edges[:-1]
        xaxis["range"] = [values[0] - bar_width, values[-1] + bar_width]
        # One tick under each bar when the labels have room (about 1/12 of the axis each).
        if len(values) <= 12 and min(gaps) >= (values[-1] - values[0]) / 12:
            xaxis.update(tickmode="array", tickvals=values, ticktext=[exact(v) for v in values])
    shapes = []
    if signed and edges[0] < 0 < edges[-1]:
        shapes.append(
            dict(
                type="line",
                x0=0,
                x1=0,
                xref="x",
                y0=0,
                y1=1,
                yref="paper",
                line=dict(color=theme.AXIS_LINE, width=1),
                layer="below",  # a bar is now centred on 0: the line would split it in two
            )
        )
    return _figure(
        data,
        dict(
            height=height,
            barmode="overlay",
            bargap=0,
            hovermode="closest",
            clickmode="event",
            showlegend=has_ref,
            shapes=shapes,
            xaxis=xaxis,
            yaxis=dict(title=dict(text="responses"), rangemode="tozero", **count_ticks(top)),
        ),
    )


def panel_figure(panel, selected_step: int | None, pick: bool = False) -> go.Figure:
    """:func:`curves_figure` of one panel of curves (``series``, ``y_title``, ``percent``; see
    ``data.curve_panels.Panel``), saying so where the run has none of its curves; ``pick``: each point clicks
    on its own (see :func:`clicked_point`)."""
    return curves_figure(
        panel.series,
        y_title=panel.y_title,
        selected_step=selected_step,
        percent=panel.percent,
        empty_message=getattr(panel, "empty", None) or "Not available for this run (see the note above).",
        pick=pick,
    )


def step_histogram_figure(hist, label: str, ref_label: str) -> go.Figure:
    """:func:`histogram_figure` of one step's histogram panel (``kind``, ``note``, ``bars``, ``ref_bars``,
    ``discrete``; see ``data.curves.StepHistogram``) in its metric's colour, the reference's bars beside;
    the panel's note as an empty state when it has no bars. A gain (``reward_gain``) is signed."""
    if hist.bars is None:
        return empty_figure(hist.note)
    return histogram_figure(
        hist.bars,
        label=label,
        color=colour(hist.kind),
        ref_bars=hist.ref_bars,
        ref_label=ref_label,
        signed=hist.kind == "reward_gain",
        discrete=hist.discrete,
    )


def count_ticks(top: int) -> dict:
    """Axis settings that put ticks on whole numbers only, about five of them up to ``top`` (a count):
    Plotly's own choice for a top of 2 is 0, 0.5, 1, 1.5, 2 — half a response."""
    step, k = 1, 0
    while top / step > 6:
        k += 1
        step = (1, 2, 5)[k % 3] * 10 ** (k // 3)
    return dict(tick0=0, dtick=step, tickformat=D3_INT)


def _padded(edges: list[float]) -> list[float]:
    lo, hi = edges[0], edges[-1]
    if hi <= lo:
        return [lo - 1, lo + 1]
    pad = (hi - lo) * 0.02
    return [lo - pad, hi + pad]


def heatmap_figure(
    steps,
    edges: Sequence[float],
    share,
    count,
    *,
    label: str,
    selected_step: int | None = None,
    discrete: bool = False,
    height: int = 320,
    empty_message: str = "No values to show.",
    spans: tuple | None = None,
    x_range: tuple[float, float] | None = None,
) -> go.Figure:
    """Steps x bins heatmap (x = step, y = bins of ``edges``): colour = share of the step in the bin.

    ``share`` and ``count`` are ``(bins, steps)`` arrays; the share is a sequential scale from 0. Hover
    shows the step, the bin's exact interval and its count; :func:`clicked_cell` reads a click (step,
    bin, its label, count). Rows are labelled by :func:`bin_labels`.

    With ``spans`` (``(first, last)``: arrays of the first and last step of each column) a column holds
    those steps (drawn at ``steps``, their middle) and the share of their responses: hover says which
    steps, each cell's ``customdata`` is ``[count, first, last]`` and :func:`clicked_span` reads a click.
    ``x_range``: the step axis's range (default: the columns', and the selected step's marker).
    """
    steps = np.asarray(steps)
    if len(edges) < 2 or steps.size == 0:
        return empty_figure(empty_message, height)
    labels = bin_labels(edges, discrete)
    where = "step %{x}"
    custom, n = np.asarray(count), "%{customdata}"
    action = "click for these responses"
    if spans is not None:
        first, last = (np.broadcast_to(np.asarray(a), custom.shape) for a in spans)
        top = int(max(custom.max(initial=0), last.max(initial=0)))
        custom = np.stack([custom, first, last], axis=-1).astype(np.uint16 if top < 2**16 else np.uint32)
        where, n = "steps %{customdata[1]:,}–%{customdata[2]:,}", "%{customdata[0]:,}"
        action = "click to draw the steps around these, one column per step"
    return _figure(
        [
            dict(
                type="heatmap",
                x=steps,
                y=labels,
                z=np.asarray(share, dtype=np.float32),
                customdata=custom,
                colorscale=theme.HEATMAP_SCALE,
                zmin=0,
                colorbar=dict(title=dict(text="share", side="right"), tickformat=D3_SHARE_AXIS, thickness=12),
                hovertemplate=(
                    f"{where}<br>"
                    + label
                    + (" = %{y}" if discrete else " %{y}")
                    + f"<br>{n} responses (%{{z:{D3_SHARE}}})<br><i>{action}</i>"
                    + "<extra></extra>"
                ),
                xgap=0,
                ygap=0,
            )
        ],
        dict(
            height=height,
            clickmode="event",
            shapes=step_marker(selected_step),
            xaxis=dict(title=dict(text="step"), showgrid=False)
            | ({} if x_range is None else dict(range=list(x_range), autorange=False)),
            yaxis=dict(
                title=dict(text=label, standoff=8),
                type="category",
                showgrid=False,
                tickfont=dict(size=10),
                automargin=True,
            ),
        ),
    )


# ---- reading clicks ----------------------------------------------------------------------------------------


def clicked_step(click_data) -> int | None:
    """The step of a click on a curve or heatmap (``points[0].x``); None when there is none."""
    try:
        x = (click_data or {})["points"][0]["x"]
    except (KeyError, IndexError, TypeError):
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return int(v) if math.isfinite(v) and v.is_integer() else None


def clicked_point(click_data) -> tuple[str, int] | None:
    """``(series key, step)`` of a click on a point of a :func:`curves_figure` drawn with ``pick``."""
    step = clicked_step(click_data)
    try:
        key = click_data["points"][0]["customdata"]
    except (KeyError, IndexError, TypeError):
        return None
    return (key, step) if isinstance(key, str) and step is not None else None


class BarClick(NamedTuple):
    """A click on a bar of a :func:`histogram_figure`: its trace (0 the histogram, 1 the reference), its
    interval ``lo <= x < hi`` (``hi`` None: ``x >= lo``) and its count."""

    trace: int
    lo: float
    hi: float | None
    count: int


def clicked_bar(click_data) -> BarClick | None:
    """The clicked bar of a :func:`histogram_figure` (trace 0 or the reference's trace 1), read from its
    ``customdata``; None when the click holds no such bar."""
    for p in (click_data or {}).get("points") or []:
        cd = p.get("customdata")
        if p.get("curveNumber") in (0, 1) and isinstance(cd, list | tuple) and len(cd) == 3:
            lo, hi, n = cd
            try:
                return BarClick(int(p["curveNumber"]), float(lo), None if hi is None else float(hi), int(n))
            except (TypeError, ValueError):
                return None
    return None


def bin_labels(edges: Sequence[float], discrete: bool = False) -> list[str]:
    """The row labels of a :func:`heatmap_figure`: ``[lo, hi)`` per bin, ``≥ lo`` for the last one, as in
    :func:`histogram_figure`; with ``discrete`` bins (bin k holds the one value ``edges[k]``) the value."""
    nb = len(edges) - 1
    if discrete:
        return [exact(edges[k]) for k in range(nb)]
    return [
        f"≥ {exact(edges[k])}" if k == nb - 1 else f"[{exact(edges[k])}, {exact(edges[k + 1])})"
        for k in range(nb)
    ]


class CellClick(NamedTuple):
    """A click on a cell of a :func:`heatmap_figure`: its step, its row's label (one of :func:`bin_labels`:
    the bin, found again by its text, so a click on a figure drawn on bins since changed finds none) and
    its count."""

    step: int
    label: str
    count: int


def clicked_cell(click_data) -> CellClick | None:
    """The clicked cell of a :func:`heatmap_figure` (Dash's clickData of a heatmap has no point index: the
    row is its label ``y``); None when the click holds none."""
    try:
        p = (click_data or {})["points"][0]
        step, count = clicked_step(click_data), int(p["customdata"])
        if step is None or not isinstance(p["y"], str):
            return None
        return CellClick(step, p["y"], count)
    except (KeyError, IndexError, TypeError, ValueError):
        return None


class SpanClick(NamedTuple):
    """A click on a column of a :func:`heatmap_figure` drawn with ``spans``: its first and last step."""

    first: int
    last: int


def clicked_span(click_data) -> SpanClick | None:
    """The column clicked on a :func:`heatmap_figure` drawn with ``spans`` (its cell's ``customdata``
    ``[count, first, last]``, which the browser may send as an object of indexes); None for any other
    click."""
    try:
        cd = (click_data or {})["points"][0]["customdata"]
        if isinstance(cd, dict):
            cd = [cd.get(str(i)) for i in range(3)]
        if not isinstance(cd, list | tuple) or len(cd) != 3:
            return None
        return SpanClick(int(cd[1]), int(cd[2]))
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def cell_has_responses(click_data) -> bool:
    """Whether a click on a :func:`heatmap_figure` is on a cell that has responses (a cell to open)."""
    cell = clicked_cell(click_data)
    return cell is not None and cell.count > 0


def warm_up() -> None:
    """Build and write a validated figure of each trace and layout part the pages draw. Plotly imports its
    trace and layout classes and their validators on first use: without this a fresh worker's first
    reward, token and prompt pages paid for those imports (the app calls it once at start)."""
    from plotly.io.json import to_json_plotly

    x = np.arange(3)
    title = {"text": "x", "font": {"size": 11}}
    fig = Figure(
        data=[
            go.Scatter(
                x=x, y=x, line={"width": 1}, marker={"size": 3}, customdata=x, hoverlabel={"font": {}}
            ),
            go.Bar(x=x, y=x, marker={"color": "red"}, customdata=x),
            go.Heatmap(z=np.ones((2, 2)), x=x[:2], y=["a", "b"], colorbar={"title": title}),
        ],
        layout=go.Layout(
            template=TEMPLATE,
            title=title,
            xaxis={"title": title, "range": [0, 1]},
            yaxis={"title": title},
            legend={"font": {"size": 11}},
            hoverlabel={"font": {"size": 12}},
            margin={"l": 1},
            annotations=[{"text": "x"}],
            shapes=step_marker(1),
        ),
    )
    to_json_plotly(fig)
    to_json_plotly(empty_figure("x"))
