"""Pure figure builders of the compare page: several runs on one chart, one colour per run everywhere
(the run's position in the URL picks its colour), built like :mod:`components.figures` (plain dicts,
numpy arrays, no Plotly validation)."""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go

from components import theme
from components.figures import _figure, count_ticks, empty_figure
from components.format import D3_NUM, D3_PRECISE, D3_SHARE, D3_SHARE_AXIS, D3_SHARE_PRECISE, exact
from components.theme import rgba

# A prompt's preview in the paired scatter's hover is cut to this many characters.
PREVIEW_HOVER = 80


def _arr(series) -> np.ndarray:
    return series.cast(float).to_numpy()


def _xs(x: np.ndarray) -> dict:
    """A trace's x: ``x0`` and ``dx`` when the values are evenly spaced (steps 1, 2, 3… or a fixed batch
    size's responses seen), so that no array is sent for them; else the array."""
    if len(x) >= 2:
        d = np.diff(x)
        if (d == d[0]).all() and d[0] > 0:
            return {"x0": int(x[0]), "dx": int(d[0])}
    return {"x": x}


def _intervals(lo: np.ndarray, hi: np.ndarray, counts: np.ndarray) -> list[list]:
    """Each bar's ``[lo, hi, count]`` (``hi`` None for the last bar, which also takes its top edge)."""
    last = len(lo) - 1
    return [[float(a), None if k == last else float(b), int(n)] for k, (a, b, n) in enumerate(zip(lo, hi, counts, strict=True))]  # fmt: skip


def _f32(series) -> np.ndarray:
    """A long series as float32 (7 significant digits, more than a chart shows): Plotly sends numpy arrays
    as base64 typed arrays, and float32 halves what the page downloads for each curve."""
    return series.cast(float).to_numpy().astype(np.float32)


def overlay_figure(
    lines,
    *,
    y_title: str,
    x_title: str,
    smoothed: bool = False,
    band_label: str | None = None,
    percent: bool = False,
    height: int = 280,
    empty_message: str = "No run has this curve (see the note above).",
    exact: bool = False,
) -> go.Figure:
    """One metric of several runs. ``lines``: ``(run, color, frame)`` with ``frame`` columns ``x, step, y,
    smooth`` (+ ``lo, hi``). With ``smoothed`` each run's raw ``y`` is drawn faint beneath its smoothed
    line (as TensorBoard and W&B do; hover gives the smoothed value); the band (``lo``–``hi``) is shaded
    when given. Hover shows the run, the step and the value; on the samples axis the ``customdata`` of
    every point is its step. Evenly spaced x values are sent as ``x0`` / ``dx``. ``exact``: y values as
    float64 (the API's answer), else float32."""
    lines = [ln for ln in lines if ln[2].height]
    ys = _arr if exact else _f32
    if not lines:
        return empty_figure(empty_message, height)
    fmt = D3_SHARE_PRECISE if percent else D3_PRECISE
    data = []
    for run, color, f in lines:
        # On the step axis x is the step; on the samples axis the step rides along as customdata.
        x = f.get_column("x").cast(int)
        xs = _xs(x.to_numpy().astype(np.int32))
        steps = None if x.equals(f.get_column("step")) else f["step"].to_numpy().astype(np.int32)
        step_text = "step %{x}" if steps is None else "step %{customdata}"
        mode = "lines+markers" if f.height <= 60 else "lines"
        common = dict(type="scatter", legendgroup=run, connectgaps=False, **xs)
        if band_label and {"lo", "hi"} <= set(f.columns):
            for edge, fill in (("lo", "none"), ("hi", "tonexty")):
                band = dict(y=ys(f[edge]), mode="lines", line=dict(width=0), fill=fill, hoverinfo="skip")
                data.append(dict(common, **band, fillcolor=rgba(color, 0.12), showlegend=False))
        if smoothed:
            raw = dict(y=ys(f["y"]), mode="lines", line=dict(color=rgba(color, 0.3), width=1))
            data.append(dict(common, **raw, showlegend=False, hoverinfo="skip"))
        hover = f"<b>{run}</b><br>{step_text}<br>%{{y:{fmt}}}<extra></extra>"
        y = ys(f["smooth" if smoothed else "y"])
        line = dict(color=color, width=2)
        data.append(dict(common, y=y, mode=mode, marker=dict(size=4), name=run, line=line, customdata=steps,
                         hovertemplate=hover))  # fmt: skip
    yaxis = dict(title=dict(text=y_title), zeroline=True)
    if percent:
        yaxis.update(tickformat=D3_SHARE_AXIS)
    return _figure(
        data,
        dict(
            height=height,
            hovermode="closest",
            xaxis=dict(title=dict(text=x_title), zeroline=False),
            yaxis=yaxis,
            showlegend=True,
        ),  # fmt: skip
    )


def distribution_figure(bars, *, x_title: str, discrete: bool = False, height: int = 300) -> go.Figure:
    """Each run's histogram at its step on shared bins, side by side in each bin's slot. ``bars``:
    ``(run, color, step, frame)`` with ``frame`` columns ``bin, lo, hi, count, share`` (same bins for every
    run). y is the share of the step's responses (runs may have different batch sizes); hover gives the
    count too. Each bar's ``customdata`` is ``[lo, hi_or_None, count]``, as
    :func:`components.figures.histogram_figure`'s (``hi`` None for the last bar: ``x >= lo``)."""
    bars = [b for b in bars if b[3].height]
    if not bars:
        return empty_figure("No reward to show.", height)
    k = len(bars)
    rows0 = bars[0][3].sort("bin")
    lo0, hi0 = _arr(rows0.get_column("lo")), _arr(rows0.get_column("hi"))
    gaps = hi0 - lo0
    if discrete:
        slot = 0.8 * (float(np.min(np.diff(lo0))) if len(lo0) > 1 else 1.0)
        centre = lo0
    else:
        slot = np.where(gaps > 0, gaps, 1.0)
        centre = lo0 + slot / 2
    data = []
    for i, (run, color, step, f) in enumerate(bars):
        f = f.sort("bin")
        width = slot / k
        x = centre - slot / 2 + width * (i + 0.5)
        if discrete:
            text = [f"= {exact(v)}" for v in lo0]
        else:
            last = len(lo0) - 1
            text = [
                f"≥ {exact(a)}" if j == last else f"[{exact(a)}, {exact(b)})"
                for j, (a, b) in enumerate(zip(lo0, hi0, strict=True))
            ]
        counts = f.get_column("count").to_numpy()
        data.append(
            dict(
                type="bar",
                x=x,
                y=_arr(f.get_column("share")),
                width=width,
                name=f"{run} · step {step}",
                marker=dict(color=rgba(color, 0.75), line=dict(color=color, width=1)),
                customdata=_intervals(lo0, hi0, counts),
                hovertext=text,
                hovertemplate=f"<b>{run}</b> step {step}<br>%{{hovertext}}: %{{y:{D3_SHARE}}} (%{{customdata[2]}})<extra></extra>",
            )  # fmt: skip
        )
    xaxis = dict(title=dict(text=x_title), zeroline=False)
    if discrete and len(lo0) <= 12:
        xaxis.update(tickmode="array", tickvals=lo0, ticktext=[exact(v) for v in lo0])
    return _figure(
        data,
        dict(
            height=height,
            barmode="overlay",
            bargap=0,
            hovermode="closest",
            xaxis=xaxis,
            yaxis=dict(
                title=dict(text="share of the step's responses"), tickformat=D3_SHARE_AXIS, rangemode="tozero"
            ),
            showlegend=True,
        ),  # fmt: skip
    )


def paired_scatter(
    table, *, a: str, b: str, a_color: str, b_color: str, threshold: float | None, height: int = 340,
    exact: bool = False,
):  # fmt: skip
    """Each prompt shared by runs ``a`` and ``b``: x = b's reward at the prompt's paired step, y = a's.
    Above the diagonal ``a`` did better. ``table`` columns ``match, preview, a_reward, b_reward, diff,
    a_step, b_step`` (the hover says each run's step);
    ``customdata`` of a point is ``[match, a_step, b_step]``: a click opens that prompt. Dotted lines
    mark the solved threshold. ``exact``: rewards as float64 (the API's answer), else float32."""
    if table.height == 0:
        return empty_figure("No prompt is shared by the two runs.", height)
    xa, ya = _arr(table.get_column("b_reward")), _arr(table.get_column("a_reward"))
    d = _arr(table.get_column("diff"))
    finite = np.concatenate([xa[np.isfinite(xa)], ya[np.isfinite(ya)]])
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    pad = (hi - lo) * 0.05 or 0.5
    # The point's colour tells which run did better: A's colour above the diagonal, B's below (a number
    # per point on a three-colour scale: much lighter to send than a colour name per point).
    sign = np.sign(np.nan_to_num(d)).astype(np.int8)
    scale = [[0.0, b_color], [0.5, theme.MUTED], [1.0, a_color]]
    # Plotly reads a hover text as its own small HTML: the prompt's "<" and ">" are escaped to show as text.
    previews = [
        html.escape((t or "")[:PREVIEW_HOVER] + ("…" if len(t or "") > PREVIEW_HOVER else ""), quote=False)
        for t in table["preview"]
    ]
    data = [
        dict(type="scatter", x=xa if exact else xa.astype(np.float32), y=ya if exact else ya.astype(np.float32), mode="markers",
             marker=dict(color=sign, colorscale=scale, cmin=-1, cmax=1, size=8, opacity=0.55,
                         line=dict(width=0.5, color="white")),
             customdata=np.stack([table.get_column(c).to_numpy().astype(object) for c in ("match", "a_step", "b_step")], axis=-1),
             hovertext=previews,
             hovertemplate=f"%{{hovertext}}<br>{a}: %{{y:{D3_NUM}}} at step %{{customdata[1]}} · {b}: %{{x:{D3_NUM}}} "
                           "at step %{customdata[2]}<br><i>click to open both</i><extra></extra>",
             name="shared prompt", showlegend=False)
    ]  # fmt: skip
    shapes = [
        dict(
            type="line",
            x0=lo - pad,
            y0=lo - pad,
            x1=hi + pad,
            y1=hi + pad,
            line=dict(color=theme.AXIS_LINE, width=1),
        )
    ]
    if threshold is not None:
        for axis in ("x", "y"):
            shapes.append(
                dict(
                    type="line",
                    xref="x" if axis == "x" else "paper",
                    yref="paper" if axis == "x" else "y",
                    x0=threshold if axis == "x" else 0,
                    x1=threshold if axis == "x" else 1,
                    y0=0 if axis == "x" else threshold,
                    y1=1 if axis == "x" else threshold,
                    line=dict(color=theme.MUTED, width=1, dash="dot"),
                )  # fmt: skip
            )
    rng = [lo - pad, hi + pad]
    return _figure(
        data,
        dict(
            height=height,
            hovermode="closest",
            clickmode="event",
            shapes=shapes,
            xaxis=dict(title=dict(text=f"{b}: reward at the paired step"), range=rng, zeroline=False),
            yaxis=dict(title=dict(text=f"{a}: reward at the paired step"), range=rng, zeroline=False),
        ),  # fmt: skip
    )


def diff_histogram(bars, *, label: str, discrete: bool = False, height: int = 340) -> go.Figure:
    """Histogram of the paired differences: ``bars`` columns ``bin, lo, hi, count``; 0 is marked. Each
    bar's ``customdata`` is ``[lo, hi_or_None, count]`` (see :func:`distribution_figure`)."""
    if bars.height == 0:
        return empty_figure("No paired difference.", height)
    lo, hi = _arr(bars.get_column("lo")), _arr(bars.get_column("hi"))
    if discrete:
        width = 0.8 * (float(np.min(np.diff(lo))) if len(lo) > 1 else 1.0)
        x, w = lo, np.full(len(lo), width)
    else:
        w = np.where(hi > lo, hi - lo, 1.0)
        x = lo + w / 2
    counts = bars.get_column("count").to_numpy()
    text = [f"= {exact(a)}" if discrete else f"[{exact(a)}, {exact(b)})" for a, b in zip(lo, hi, strict=True)]
    data = [dict(type="bar", x=x, y=counts, width=w, hovertext=text, marker=dict(color=theme.MUTED),
                 customdata=_intervals(lo, hi, counts),
                 hovertemplate="%{hovertext}: <b>%{y}</b> prompts<extra></extra>")]  # fmt: skip
    return _figure(
        data,
        dict(
            height=height,
            bargap=0,
            xaxis=dict(title=dict(text=label), zeroline=True, zerolinecolor=theme.TEXT),
            yaxis=dict(
                title=dict(text="shared prompts"), rangemode="tozero", **count_ticks(int(counts.max()))
            ),
            showlegend=False,
        ),  # fmt: skip
    )


def over_steps_figure(frame, *, label: str, runs: tuple[str, str], height: int = 260) -> go.Figure:
    """The mean paired difference per step where both runs (``runs``) gave shared prompts, with its
    interquartile band: ``frame`` columns ``step, n_prompts, diff_mean, diff_p25, diff_p75``. The x axis
    says whose step it is: the same step of both runs."""
    if frame.height == 0:
        return empty_figure("The shared prompts never come at the same step in both runs.", height)
    x = frame.get_column("step").to_numpy()
    data = [
        dict(type="scatter", x=x, y=_arr(frame.get_column("diff_p25")), mode="lines", line=dict(width=0),
             showlegend=False, hoverinfo="skip"),
        dict(type="scatter", x=x, y=_arr(frame.get_column("diff_p75")), mode="lines", line=dict(width=0),
             fill="tonexty", fillcolor="rgba(108,117,125,0.18)", name="p25–p75", hoverinfo="skip"),
        dict(type="scatter", x=x, y=_arr(frame.get_column("diff_mean")), mode="lines+markers" if len(x) <= 60 else "lines",
             line=dict(color=theme.TEXT, width=2), marker=dict(size=4), name="mean",
             customdata=frame.get_column("n_prompts").to_numpy(),
             hovertemplate=f"step %{{x}}: %{{y:{D3_NUM}}} over %{{customdata}} prompts<extra></extra>"),
    ]  # fmt: skip
    return _figure(
        data,
        dict(
            height=height,
            hovermode="closest",
            xaxis=dict(title=dict(text=f"step (the same step of {runs[0]} and {runs[1]})")),
            # Wide tick labels (a mean difference of 1e-5 reads "10µ") push the title aside, not into them.
            yaxis=dict(title=dict(text=label), zeroline=True, zerolinecolor=theme.TEXT, automargin=True),
            showlegend=True,
        ),  # fmt: skip
    )


def sparkline(x, y, *, color: str, height: int = 40) -> go.Figure:
    """A tiny line of a run's mean reward over steps: no axes, no hover labels beyond the value."""
    if len(x) == 0:
        return empty_figure("", height)
    return _figure(
        [dict(type="scatter", x=np.asarray(x), y=np.asarray(y, dtype=float), mode="lines",
              line=dict(color=color, width=1.5), hovertemplate=f"step %{{x}}: %{{y:{D3_NUM}}}<extra></extra>")],
        dict(height=height, margin=dict(l=2, r=2, t=2, b=2), xaxis=dict(visible=False),
             yaxis=dict(visible=False), showlegend=False),
    )  # fmt: skip
