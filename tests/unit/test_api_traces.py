"""api.answer.figure_traces: a trace sent with evenly spaced x as ``x0`` / ``dx`` (the compare page's
curves) is given with its ``x`` array, so that every series of the JSON is plain parallel arrays."""

from __future__ import annotations

import json

import numpy as np
import plotly.graph_objects as go

from api.answer import figure_traces


def test_apitraces001_x0_dx_become_x():
    """x0=3, dx=2 over 4 values is x = 3, 5, 7, 9; a trace with its own x keeps it; typed arrays decode."""
    fig = go.Figure(
        [
            go.Scatter(x0=3, dx=2, y=np.array([0.5, 1.5, np.nan, 2.0])),
            go.Scatter(x=[1, 4], y=[1.0, 2.0], x0=9, dx=9),
        ]
    )
    a, b = figure_traces(fig.to_plotly_json())
    assert a["x"] == [3, 5, 7, 9] and a["y"] == [0.5, 1.5, None, 2.0]
    assert b["x"] == [1, 4]
    # As a callback's JSON sends it (numpy arrays as Plotly's typed arrays), the same.
    assert figure_traces(json.loads(fig.to_json())) == [a, b]
