"""The scatter page's figures and the reading of their events (components/scatter.py)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from components import scatter as sv


def test_scatter101_figures_are_valid_plotly():
    """Points, a density and the empty states pass Plotly's own validation (skipped when built)."""
    figs = [
        sv.points_figure(
            [0.1, 2.0], [1.0, 0.5], [3, 4], ["a-1", "b-2"], x_label="x", y_label="y", colour="#123456"
        ),
        sv.points_figure([], [], [], [], x_label="x", y_label="y", colour="#123456", box=(0, 1, 0, 1)),
        sv.density_figure(
            [0, 1, 2], [0, 5, 10], [0, 1], [1, 0], [3, 1200], x_label="x", y_label="y", box=(0, 1, 0, 5)
        ),
        sv.density_figure([2.0], [1.0], [0], [0], [7], x_label="x", y_label="y"),  # one value on each axis
    ]
    for fig in figs:
        go.Figure(fig.to_dict())  # raises ValueError on any invalid property


def test_scatter102_density_cells_carry_their_exact_count_and_intervals():
    """A cell's customdata is its count and its two intervals; empty cells are blank; the box is drawn; the
    colour bar is labelled in counts (its scale is their log)."""
    fig = sv.density_figure(
        [0, 1, 2, 3],
        [0, 5, 10],
        [0, 2, 2],
        [1, 0, 1],
        [3, 1, 1200],
        x_label="KL",
        y_label="reward",
        box=(1, 3, 0, 5),
    )
    heat = fig.data[0]
    custom = np.asarray(heat.customdata)
    assert custom.shape == (2, 3, 5)  # (y bins, x bins, fields)
    assert custom[1, 0].tolist() == [3, 0, 1, 5, 10] and custom[0, 2].tolist() == [1, 2, 3, 0, 5]
    assert custom[1, 2, 0] == 1200 and custom[0, 0, 0] == 0
    z = np.asarray(heat.z, dtype=float)
    assert np.isnan(z[0, 0]) and z[1, 2] == np.log10(1200)
    assert list(heat.colorbar.ticktext) == ["1", "10", "100", "1,000"]
    assert fig.layout.shapes[0].x0 == 1 and fig.layout.shapes[0].y1 == 5
    assert fig.layout.dragmode == "select"
    # The invisible points that make a heatmap box-selectable: one at each non-empty cell's centre.
    assert list(fig.data[1].x) == [0.5, 2.5, 2.5] and list(fig.data[1].y) == [7.5, 2.5, 7.5]


def test_scatter103_events_are_read():
    """A box select gives its two ranges (either way round); a lasso or a cleared selection gives none; a
    click on a point gives its sample id and step."""
    assert sv.selected_range({"range": {"x": [2, 1], "y": [0, 3.5]}, "points": []}) == ((1, 2), (0, 3.5))
    assert sv.selected_range({"lassoPoints": {"x": [1], "y": [2]}}) is None
    assert (
        sv.selected_range(None) is None and sv.selected_range({"range": {"x": ["a", 1], "y": [0, 1]}}) is None
    )
    assert sv.clicked_sample({"points": [{"customdata": ["abc-3", 7]}]}) == ("abc-3", 7)
    assert sv.clicked_sample({"points": [{"z": 3}]}) is None and sv.clicked_sample(None) is None


def test_scatter104_mode_bar_zooms_and_never_shares():
    """The scatter's mode bar zooms (and the wheel does) but has no lasso and no "Share chart", which would
    upload the figure's data to Plotly Cloud."""
    removed = sv.CONFIG["modeBarButtonsToRemove"]
    assert sv.CONFIG["displayModeBar"] and sv.CONFIG["scrollZoom"]
    assert {"sendChartToCloud", "sendDataToCloud", "lasso2d"} <= set(removed)
