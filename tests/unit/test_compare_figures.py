"""components/compare_figures.py and compare_views.py: what the compare page's builders send to the
browser (evenly spaced x as x0/dx, float32 values, one colour per run) and model text kept as text."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import polars as pl

from components.compare_figures import diff_histogram, distribution_figure, overlay_figure, paired_scatter
from components.compare_views import word_diff_view


def test_comparefig001_overlay_sends_evenly_spaced_x_as_x0_dx():
    """Compare curves: evenly spaced steps go as x0/dx (no array), uneven ones as an array, values as
    float32; on the samples axis each point carries its step."""
    even = pl.DataFrame(
        {"x": [1.0, 2.0, 3.0], "step": [1, 2, 3], "y": [0.5, 1.0, None], "smooth": [0.5, 0.8, 0.8]}
    )
    uneven = pl.DataFrame(
        {"x": [16.0, 48.0, 56.0], "step": [1, 2, 3], "y": [1.0, 2.0, 3.0], "smooth": [1.0, 2.0, 3.0]}
    )
    fig = overlay_figure(
        [("a", "#000000", even), ("b", "#ffffff", uneven)], y_title="r", x_title="x", smoothed=True
    )
    go.Figure(fig.to_dict())  # Plotly accepts it
    a_raw, a_line, b_raw, b_line = fig.data
    assert (a_line.x0, a_line.dx, a_line.x) == (1, 1, None) and a_line.customdata is None
    assert list(b_line.x) == [16, 48, 56] and list(b_line.customdata) == [1, 2, 3]
    assert np.asarray(a_line.y).dtype == np.float32 and np.isnan(np.asarray(a_raw.y)[2])
    assert a_raw.hoverinfo == "skip" and a_line.name == "a"


def test_comparefig002_scatter_colours_by_sign_and_keeps_text_as_text():
    """Scatter points are coloured by which run did better (−1 / 0 / 1 on a three-colour scale) and carry
    their prompt's key; hover previews are cut to 80 characters, "<" escaped for Plotly; a word diff of HTML-looking text stays
    text (children, no markup)."""
    table = pl.DataFrame(
        {"match": ["m1", "m2", "m3"], "preview": ["<script>x</script>", "p" * 100, None],
         "a_reward": [1.0, 0.0, 0.5], "b_reward": [0.0, 1.0, 0.5], "diff": [1.0, -1.0, 0.0],
         "a_step": [3, 7, 9], "b_step": [4, 7, 12]}
    )  # fmt: skip
    fig = paired_scatter(table, a="A", b="B", a_color="#111111", b_color="#222222", threshold=0.5)
    go.Figure(fig.to_dict())
    t = fig.data[0]
    assert list(t.marker.color) == [1, -1, 0] and t.marker.colorscale[0][1] == "#222222"
    assert [c[0] for c in t.customdata] == ["m1", "m2", "m3"]
    assert [list(c[1:]) for c in t.customdata] == [[3, 4], [7, 7], [9, 12]]  # each run's paired step
    assert "A: %{y:" in t.hovertemplate and "at step %{customdata[1]}" in t.hovertemplate
    assert (
        t.hovertext[0] == "&lt;script&gt;x&lt;/script&gt;"
        and len(t.hovertext[1]) == 81
        and t.hovertext[2] == ""
    )
    view = word_diff_view((("equal", "<b>"), ("insert", "<script>")), "A", "B", False, "d")
    spans = view.children[1].children
    assert [s.children for s in spans] == ["<b>", "<script>"]


def test_comparefig003_bars_carry_their_interval():
    """The distributions' and the differences' bars carry ``[lo, hi, count]`` in customdata (``hi`` None
    for the last bar, which takes its top edge too), as the reward page's histogram does; the hover reads
    the count from it."""
    frame = pl.DataFrame(
        {"bin": [0, 1, 2], "lo": [-1.0, 0.0, 0.5], "hi": [0.0, 0.5, 1.0], "count": [2, 0, 6], "share": [0.25, 0.0, 0.75]}
    )  # fmt: skip
    dist = distribution_figure([("a", "#111111", 3, frame), ("b", "#222222", 4, frame)], x_title="reward")
    go.Figure(dist.to_dict())
    for t in dist.data:
        assert [list(c) for c in t.customdata] == [[-1.0, 0.0, 2], [0.0, 0.5, 0], [0.5, None, 6]]
        assert "%{customdata[2]}" in t.hovertemplate
    hist = diff_histogram(frame.drop("share"), label="Δ")
    go.Figure(hist.to_dict())
    assert [list(c) for c in hist.data[0].customdata] == [[-1.0, 0.0, 2], [0.0, 0.5, 0], [0.5, None, 6]]


def test_comparefig004_exact_keeps_float64():
    """``exact=True`` (the API's answer) sends the curves' and the scatter's values as float64."""
    line = pl.DataFrame({"x": [1.0, 2.0], "step": [1, 2], "y": [0.1, 1 / 3], "smooth": [0.1, 1 / 3]})
    fig = overlay_figure([("a", "#000000", line)], y_title="r", x_title="x", exact=True)
    assert np.asarray(fig.data[0].y).tolist() == [0.1, 1 / 3]
    table = pl.DataFrame(
        {"match": ["m1"], "preview": ["p"], "a_reward": [1 / 3], "b_reward": [0.1], "diff": [1 / 3 - 0.1],
         "a_step": [1], "b_step": [1]}
    )  # fmt: skip
    t = paired_scatter(table, a="A", b="B", a_color="#111111", b_color="#222222", threshold=None, exact=True)
    assert np.asarray(t.data[0].y).tolist() == [1 / 3] and np.asarray(t.data[0].x).tolist() == [0.1]
