"""The JSON of Dash's answers (``components.answers``) is Plotly's orjson engine's text to the byte."""

from __future__ import annotations

import collections
import datetime
import decimal
import inspect

import numpy as np
import plotly.graph_objects as go
import pytest
from dash import dcc, html

from components import answers, figures


class _Text(str):
    pass


def _component_answer() -> dict:
    """A callback's answer as the pages make them: component trees holding figures, tables and numbers of
    every kind Python and numpy give."""
    fig = figures._figure(
        [
            {"type": "bar", "x": np.arange(4), "y": np.array([0.1, np.nan, np.inf, -2.5], dtype=np.float32)},
            {"type": "scatter", "x": [1, 2], "y": [np.float32(0.1), np.float64(0.2)], "text": ["<b>", "é"]},
        ],
        {"title": {"text": "</script><script>alert(1)</script>"}, "xaxis": {"range": [np.int64(1), 2]}},
    )
    wide = np.arange(12, dtype=np.float64).reshape(3, 4)
    mixed = np.array([None, 1.5, "x", np.float32(0.1), html.B("in an array"), [np.int64(3)]], dtype=object)
    tree = html.Div(
        [
            html.H4("回答 \u2028 line \u2029 para 🙂 …"),
            dcc.Graph(id="g", figure=fig),
            dcc.Graph(id="v", figure=go.Figure(go.Scatter(x=[1, 2], y=[3, 4]))),
            html.Td(np.float32(0.1)),
            html.Td(np.int64(2**40)),
            html.Td(np.bool_(True)),
            html.Td(np.uint8(7)),
            html.Span(_Text("a str subclass")),
            dcc.Store(id="s", data={"cols": wide[:, ::2], "t": wide.T, "o": mixed}),
        ],
        id="root",
    )
    return {
        "multi": True,
        "response": {
            "root": {"children": tree},
            "store": {
                "data": {
                    1: "an int key",
                    2.5: "a float key",
                    "when": datetime.datetime(2026, 11, 30, 1, 2, 3),
                    "day": datetime.date(2026, 11, 30),
                    "dt64": np.datetime64("2026-11-30T01:02:03"),
                    "dt64s": np.array(["2026-11-30", "2026-12-01"], dtype="datetime64[D]"),
                    "money": decimal.Decimal("1.25"),
                    "masked": np.ma.masked,
                    "masked_array": np.ma.masked_array([1.0, 2.0], mask=[True, False]),
                    "texts": np.array(["a", "ß"]),
                    "ints": (np.int32(1), np.int16(-2)),
                    "ordered": collections.OrderedDict(b=1, a=[np.float32(0.5)]),
                    "bools": np.array([True, False]),
                    "empty": [],
                    "none": None,
                    "nan": float("nan"),
                    "big": 1.7e308,
                }
            },
        },
    }


def _plain_answer() -> dict:
    """An answer with no component or figure, which orjson writes as it is (numpy scalars too)."""
    return {"a": [np.float32(0.1), np.float64(0.2), np.int64(3)], "b": np.arange(3), "c": "x</y>\u2028"}


@pytest.mark.parametrize("make", [_component_answer, _plain_answer, lambda: figures.empty_figure("x")])
def test_answers001_text_is_plotlys_own(make):
    """For answers of every kind of value, the text is Plotly's orjson engine's to the byte (and it escapes
    ``<``, ``>``, ``/``, U+2028 and U+2029 as Plotly does; non-ASCII text stays UTF-8)."""
    own = answers.PLOTLY_TO_JSON(make(), engine="orjson")
    ours = answers.to_json(make())
    assert ours == own
    if make is _component_answer:
        assert "回答" in ours and "\\u003c\\u002fscript\\u003e" in ours and "\\u2028" in ours
        assert '"bdata"' in ours  # the figure's arrays as typed arrays, as Dash sends them


def test_answers002_what_orjson_cannot_write_fails_as_in_plotly():
    """A value neither orjson nor Plotly's copy can write raises ``TypeError`` in both."""
    for bad in ({"s": {1, 2}}, {"o": html.Div(object())}):
        with pytest.raises(TypeError):
            answers.PLOTLY_TO_JSON(bad, engine="orjson")
        with pytest.raises(TypeError):
            answers.to_json(bad)


def test_answers003_other_engines_and_pretty_are_plotlys():
    """Pretty text and the ``json`` engine are left to Plotly."""
    answer = _component_answer()
    assert answers.to_json(answer, pretty=True) == answers.PLOTLY_TO_JSON(answer, pretty=True)
    assert answers.to_json(answer, engine="json") == answers.PLOTLY_TO_JSON(answer, engine="json")


def test_answers004_dash_writes_with_it_once_installed():
    """Installed, it is what Dash's ``to_json`` writes with (Dash imports Plotly's writer on each call: a
    Dash that stops doing so fails here, not silently slower)."""
    import dash._utils
    import plotly.io.json

    answers.install()
    assert plotly.io.json.to_json_plotly is answers.to_json
    assert "from plotly.io.json import to_json_plotly" in inspect.getsource(dash._utils.to_json)
    calls = []
    real = answers.to_json

    def spy(obj, *args, **kw):
        calls.append(obj)
        return real(obj, *args, **kw)

    plotly.io.json.to_json_plotly = spy
    try:
        text = dash._utils.to_json({"x": html.B("y")})
    finally:
        answers.install()
    assert calls and text == answers.PLOTLY_TO_JSON({"x": html.B("y")})
