"""components/figures.py: histogram bars and their customdata, curves with bands, heatmap, empty states,
the selected-step marker and reading clicks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.io as pio
import polars as pl

from components import figures


def _bars(edges, counts):
    return pl.DataFrame(
        {"bin": list(range(len(counts))), "lo": edges[:-1], "hi": edges[1:], "count": counts},
        schema={"bin": pl.Int32, "lo": pl.Float64, "hi": pl.Float64, "count": pl.Int64},
    )


@dataclass
class _Series:
    label: str
    frame: pl.DataFrame
    key: str = "reward"  # its colour is the theme's
    band_label: str | None = None
    dashed: bool = False


def _annotation(fig) -> str:
    return fig.layout.annotations[0].text


def test_figures001_histogram_customdata_is_the_bar_interval():
    """Each bar's customdata is [lo, hi, count]; the last bar has hi None; bars sit on their intervals."""
    fig = figures.histogram_figure(_bars([0.0, 0.5, 1.0, 1.5], [2, 0, 5]), label="reward")
    bar = fig.data[0]
    assert [list(c) for c in bar.customdata] == [[0.0, 0.5, 2], [0.5, 1.0, 0], [1.0, None, 5]]
    assert list(bar.x) == [0.25, 0.75, 1.25] and list(bar.width) == [0.5, 0.5, 0.5]
    assert list(bar.y) == [2, 0, 5]
    hint = "<br><i>click for these responses</i>"
    assert bar.hovertext[0] == "reward [0, 0.5): <b>2</b> (28.6%)" + hint
    assert bar.hovertext[1] == "reward [0.5, 1): <b>0</b> (0.0%)"  # nothing to click
    assert bar.hovertext[2] == "reward ≥ 1: <b>5</b> (71.4%)" + hint
    assert fig.layout.hovermode == "closest"  # a click holds the one bar under the pointer


def test_figures002_histogram_with_reference_overlay():
    """The reference histogram is trace 1, on the same bins, with its own counts, each bar in the right half
    of its bin beside the histogram's bar in the left half (so either can be clicked); the legend shows."""
    edges = [0.0, 1.0, 2.0]
    fig = figures.histogram_figure(
        _bars(edges, [1, 3]), label="reward", ref_bars=_bars(edges, [4, 0]), ref_label="reference reward"
    )
    assert len(fig.data) == 2 and fig.data[1].name == "reference reward"
    assert [list(c) for c in fig.data[1].customdata] == [[0.0, 1.0, 4], [1.0, None, 0]]
    assert list(fig.data[0].x) == [0.25, 1.25] and list(fig.data[1].x) == [0.75, 1.75]
    assert list(fig.data[0].width) == list(fig.data[1].width) == [0.5, 0.5]
    assert fig.layout.barmode == "overlay" and fig.layout.showlegend
    # Discrete bins: the pair is centred on the value.
    disc = figures.histogram_figure(
        _bars(edges, [1, 3]), label="reward", ref_bars=_bars(edges, [4, 0]), discrete=True
    )
    assert list(disc.data[0].x) == [-0.2, 0.8] and list(disc.data[1].x) == [0.2, 1.2]


def test_figures003_histogram_single_value_and_empty():
    """A run with one distinct value draws one unit-wide bar at it; an empty frame gives the empty state."""
    fig = figures.histogram_figure(_bars([0.7, 0.7], [1]), label="reward")
    assert list(fig.data[0].x) == [0.7] and list(fig.data[0].width) == [1.0]
    assert [list(c) for c in fig.data[0].customdata] == [[0.7, None, 1]]
    empty = figures.histogram_figure(_bars([0.0, 1.0], [0]).head(0), label="reward")
    assert len(empty.data) == 0 and _annotation(empty) == "No values at this step."


def test_figures004_curves_with_band_and_marker():
    """A banded series gives low/high fill traces then the line; the selected step gets a dotted marker."""
    frame = pl.DataFrame({"step": [1, 2], "y": [1.0, 2.0], "lo": [0.5, 1.5], "hi": [1.5, 2.5]})
    fig = figures.curves_figure(
        [_Series("reward", frame, band_label="±1 std")], y_title="reward", selected_step=2
    )
    lo, hi, line = fig.data
    assert list(lo.y) == [0.5, 1.5] and lo.fill == "none" and hi.fill == "tonexty"
    assert list(line.y) == [1.0, 2.0] and line.name == "reward (band: ±1 std)"
    assert list(line.x) == [1, 2]
    assert fig.layout.shapes[0].x0 == 2 and fig.layout.shapes[0].name == figures.MARKER_NAME
    assert fig.layout.hovermode == "x unified"


def test_figures005_curves_percent_and_empty():
    """Percent panels format as % and stay within ±105 %; no series (or only empty frames) gives the empty
    state with its message."""
    frame = pl.DataFrame({"step": [1], "y": [0.375]})
    fig = figures.curves_figure([_Series("win rate", frame)], y_title="share", percent=True)
    assert fig.layout.yaxis.tickformat == ".0%" and "%" in fig.data[0].hovertemplate
    clip = fig.layout.yaxis.autorangeoptions
    assert (clip.clipmin, clip.clipmax) == (-1.05, 1.05)  # a flat line at 100 % is not padded to 200 %
    empty = figures.curves_figure([], y_title="x", empty_message="No KL here.")
    assert len(empty.data) == 0 and _annotation(empty) == "No KL here."
    assert len(figures.curves_figure([_Series("r", frame.head(0))], y_title="x").data) == 0


def test_figures006_heatmap_bins_and_counts():
    """Heatmap: x = steps, y = bin interval labels (last one ≥), z = shares, customdata = counts."""
    share = np.array([[0.25, 1.0], [0.75, 0.0]], dtype=np.float32)
    count = np.array([[1, 2], [3, 0]], dtype=np.uint8)
    fig = figures.heatmap_figure([1, 5], [0.0, 0.5, 1.0], share, count, label="reward", selected_step=5)
    hm = fig.data[0]
    assert list(hm.y) == ["[0, 0.5)", "≥ 0.5"] == figures.bin_labels([0.0, 0.5, 1.0])
    assert list(hm.x) == [1, 5]
    np.testing.assert_array_equal(hm.z, share)
    np.testing.assert_array_equal(hm.customdata, count)
    assert fig.layout.shapes[0].x0 == 5
    empty = figures.heatmap_figure([], [], np.zeros((0, 0)), np.zeros((0, 0)), label="reward")
    assert len(empty.data) == 0


def test_figures007_clicks():
    """clicked_bar reads trace 0's [lo, hi, count]; clicked_step reads an integer x; bad input gives None."""
    click = {
        "points": [
            {"curveNumber": 1, "x": 0.25, "customdata": [0.0, 0.5, 9]},
            {"curveNumber": 0, "x": 0.25, "customdata": [0.0, 0.5, 2]},
        ]
    }
    assert figures.clicked_bar(click) == (1, 0.0, 0.5, 9)  # the first point: the one under the pointer
    assert figures.clicked_bar({"points": [{"curveNumber": 0, "customdata": [1.0, None, 4]}]}) == (
        0,
        1.0,
        None,
        4,
    )
    for bad in (None, {}, {"points": []}, {"points": [{"curveNumber": 0, "customdata": "x"}]}):
        assert figures.clicked_bar(bad) is None
    assert figures.clicked_bar({"points": [{"curveNumber": 2, "customdata": [0.0, 0.5, 9]}]}) is None
    cell = {"points": [{"curveNumber": 0, "x": 20, "y": "[0, 0.5)", "z": 0.25, "customdata": 4}]}
    assert figures.clicked_cell(cell) == (20, "[0, 0.5)", 4)
    for bad in (None, {"points": [{"x": 2}]}, {"points": [{**cell["points"][0], "y": 0.5}]}):
        assert figures.clicked_cell(bad) is None
    assert figures.clicked_step({"points": [{"x": 300}]}) == 300
    assert figures.clicked_step({"points": [{"x": 2.0}]}) == 2
    for bad in (None, {"points": [{"x": 2.5}]}, {"points": [{"x": "abc"}]}, {"points": []}):
        assert figures.clicked_step(bad) is None


def test_figures008_step_marker_and_small_payload():
    """No marker for no step; a 500-step curve figure with a band stays small (typed arrays, compact template)."""
    assert figures.step_marker(None) == []
    steps = np.arange(500)
    frame = pl.DataFrame(
        {"step": steps, "y": np.sin(steps / 7), "lo": np.sin(steps / 7) - 1, "hi": np.sin(steps / 7) + 1}
    )
    fig = figures.curves_figure(
        [_Series("reward", frame, band_label="±1 std")], y_title="reward", selected_step=3
    )
    assert len(pio.to_json(fig)) < 30_000


def test_figures009_builders_produce_valid_plotly():
    """Builders skip Plotly's validation for speed, so check here that Plotly accepts every output."""
    import plotly.graph_objects as go

    frame = pl.DataFrame({"step": [1, 2], "y": [1.0, 2.0], "lo": [0.5, 1.5], "hi": [1.5, 2.5]})
    edges = [-1.0, 0.0, 1.0]
    built = [
        figures.empty_figure("nothing"),
        figures.curves_figure(
            [_Series("r", frame, band_label="±1 std", dashed=True)], y_title="r", selected_step=1
        ),
        figures.curves_figure([_Series("w", frame)], y_title="share", percent=True),
        figures.histogram_figure(
            _bars(edges, [1, 2]), label="gain", ref_bars=_bars(edges, [0, 3]), signed=True
        ),
        figures.heatmap_figure([1, 2], edges, np.ones((2, 2)), np.ones((2, 2), dtype=np.uint8), label="r"),
        figures.histogram_figure(
            _bars([0.0, 1.0, 2.0], [1, 2]), label="r", ref_bars=_bars([0.0, 1.0, 2.0], [0, 3]), discrete=True
        ),
        figures.heatmap_figure(
            [1, 2],
            [0.0, 1.0, 2.0],
            np.ones((2, 2)),
            np.ones((2, 2), dtype=np.uint8),
            label="r",
            discrete=True,
        ),
    ]
    for fig in built:
        go.Figure(fig.to_dict())  # raises ValueError on any invalid property


def test_figures010_discrete_bars_sit_on_their_values():
    """Discrete bins (one value per bar): each bar is centred on its value, 0.8 of the closest gap wide,
    with the values as ticks; customdata is still the whole interval [lo, hi) (hi None for the last);
    hover names the value."""
    edges = [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5]
    fig = figures.histogram_figure(_bars(edges, [0, 0, 3, 1, 0, 2, 2]), label="reward", discrete=True)
    bar = fig.data[0]
    assert list(bar.x) == edges[:-1] and list(bar.width) == [0.4] * 7
    assert [list(c) for c in bar.customdata][:2] == [[0.0, 0.5, 0], [0.5, 1.0, 0]]
    assert list(bar.customdata[-1]) == [3.0, None, 2]
    assert bar.hovertext[2] == "reward = 1: <b>3</b> (37.5%)<br><i>click for these responses</i>"
    assert list(fig.layout.xaxis.tickvals) == edges[:-1] and fig.layout.xaxis.ticktext[3] == "1.5"
    assert list(fig.layout.xaxis.range) == [-0.4, 3.4]
    # 0 / 1 verifier rewards: two bars of width 0.8 at 0 and 1.
    binary = figures.histogram_figure(_bars([0.0, 1.0, 2.0], [3, 5]), label="reward", discrete=True)
    assert list(binary.data[0].x) == [0.0, 1.0] and list(binary.data[0].width) == [0.8, 0.8]
    # The heatmap has a row per value, labelled with it.
    hm = figures.heatmap_figure(
        [1, 2],
        [0.0, 1.0, 2.0],
        np.ones((2, 2)),
        np.ones((2, 2), dtype=np.uint8),
        label="reward",
        discrete=True,
    )
    assert list(hm.data[0].y) == ["0", "1"] and "reward = %{y}" in hm.data[0].hovertemplate


def test_figures011_count_ticks_are_whole_numbers():
    """The count axis ticks on whole numbers (Plotly's own ticks for a top of 2 are 0, 0.5, 1, 1.5, 2),
    about six at most, for the reference's counts too."""
    assert figures.count_ticks(2) == {"tick0": 0, "dtick": 1, "tickformat": "d"}
    assert [figures.count_ticks(n)["dtick"] for n in (0, 6, 7, 12, 13, 30, 31, 61, 300, 301)] == [
        1,
        1,
        2,
        2,
        5,
        5,
        10,
        20,
        50,
        100,
    ]
    fig = figures.histogram_figure(
        _bars([0.0, 1.0, 2.0], [1, 2]), label="reward", ref_bars=_bars([0.0, 1.0, 2.0], [0, 9])
    )
    assert fig.layout.yaxis.dtick == 2 and fig.layout.yaxis.tick0 == 0


def test_figures012_answer_to_dash_is_plotlys_own():
    """What Dash sends of a figure (``to_plotly_json``, which copies only dicts and lists) is the JSON of
    Plotly's own ``to_dict`` (which deep-copies everything), for arrays of each kind (int64 narrowed,
    float32, 2-D, nested in ``marker``), asked twice; the figure's own arrays are left as they were."""
    import plotly.graph_objects as go
    from plotly.io.json import to_json_plotly

    z = np.arange(6, dtype=np.int64).reshape(2, 3) * 1000
    colours = np.array([0.5, 1.5, 2.5], dtype=np.float32)
    fig = figures._figure(
        [
            {
                "type": "heatmap",
                "z": z,
                "x": np.array([1, 2, 3]),
                "customdata": np.ones((2, 3), dtype=np.uint8),
            },
            {
                "type": "scatter",
                "x": (1, 2, 3),
                "y": colours,
                "marker": {"color": colours, "size": [3, 4, 5]},
            },
        ],
        {"xaxis": {"range": np.array([0.0, 4.0])}, "shapes": figures.step_marker(2)},
    )
    built = [
        fig,
        figures.empty_figure("nothing"),
        figures.heatmap_figure(
            [1, 2], [-1.0, 0.0, 1.0], np.ones((2, 2)), np.ones((2, 2), dtype=np.uint8), label="r"
        ),
    ]
    for f in built:
        own = to_json_plotly(go.Figure.to_dict(f))
        assert to_json_plotly(f.to_plotly_json()) == own
        assert to_json_plotly(f.to_plotly_json()) == own  # the first answer changed nothing of the figure
    assert '"bdata"' in to_json_plotly(fig.to_plotly_json())  # the arrays went as typed arrays
    assert isinstance(fig._data[0]["z"], np.ndarray) and fig._data[0]["z"].dtype == np.int64
    assert isinstance(fig._data[1]["marker"]["color"], np.ndarray)


def test_figures013_graph_placeholder_is_the_loading_figure():
    """A graph's placeholder is the JSON of the "Loading…" empty figure of its height (made once per
    height), a dict of its own in each graph."""
    from plotly.io.json import to_json_plotly

    from components.layout import graph

    a, b = graph("a", 250).children.figure, graph("b", 250).children.figure
    assert to_json_plotly(a) == to_json_plotly(figures.empty_figure("Loading…", 250))
    assert a["layout"]["height"] == 250 and a["layout"]["annotations"][0]["text"] == "Loading…"
    assert a is not b and a["layout"] is not b["layout"]
    assert graph("c", 400).children.figure["layout"]["height"] == 400
