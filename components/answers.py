"""The JSON of what Dash sends the browser (a callback's answer, the layout), the same text as Plotly's orjson
engine writes, made without its copy of the whole answer.

Dash writes its answers with ``plotly.io.json.to_json_plotly``. With orjson installed, Plotly first gives the
answer to orjson as it is; an answer that holds a component or a figure (nearly every answer) fails at the
first one, and Plotly then copies the whole answer node by node in Python (``clean_to_json_compatible``: every
dict, list and string of every component tree) and gives the copy to orjson. Here orjson walks the answer once
and calls :func:`_default` on what it cannot write itself, which makes of that one object what the copy would
have held. The text is Plotly's to the byte (``test_answers``), at about half the time (the nine pages' recorded
answers at 256k responses: 50 -> 25 ms, ``benchmarks/RESULTS.md``).

:func:`install` puts :func:`to_json` where Dash looks for Plotly's writer (Dash imports it on each call).
"""

from __future__ import annotations

import numpy as np
import orjson
import plotly.io.json as plotly_json
from dash.development.base_component import Component
from plotly.basedatatypes import BaseFigure, BasePlotlyType
from plotly.io._json import _safe, _swap_orjson, clean_to_json_compatible, to_json_plotly

_NUMPY = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
_PLAIN = orjson.OPT_NON_STR_KEYS
# Plotly's own writer, kept for what this one does not make (pretty text, the "json" engine).
PLOTLY_TO_JSON = to_json_plotly


def _modules() -> dict:
    """The optional modules Plotly's copy looks at, found as Plotly finds them (each time: one imported since
    counts, as in Plotly's)."""
    from _plotly_utils.optional_imports import get_module

    return {
        "sage_all": get_module("sage.all", should_load=False),
        "np": np,
        "pd": get_module("pandas", should_load=False),
        "image": get_module("PIL.Image", should_load=False),
    }


def _default(obj):
    """What Plotly's copy holds in place of ``obj`` (one that orjson cannot write), one level deep: orjson goes
    on into the dicts and lists returned and calls this again for what they hold."""
    if isinstance(obj, (Component, BaseFigure, BasePlotlyType)):
        return obj.to_plotly_json()
    if isinstance(obj, np.ndarray) and obj is not np.ma.masked:  # (the copy writes masked as NaN)
        if obj.dtype.kind in "biuf":  # the copy keeps it, written by orjson's numpy option
            return orjson.Fragment(orjson.dumps(np.ascontiguousarray(obj), option=_NUMPY))
        if obj.dtype.kind == "O":  # the copy's list, whose items orjson writes or gives back here
            return obj.tolist()
    elif isinstance(obj, float):  # numpy's float64 (a float, which orjson writes only with its numpy option)
        return float(obj)
    out = clean_to_json_compatible(obj, numpy_allowed=True, datetime_allowed=True, modules=_modules())
    if out is obj:
        raise TypeError(f"Type is not JSON serializable: {type(obj).__name__}")
    return out


def to_json(plotly_object, pretty: bool = False, engine: str | None = None) -> str:
    """``plotly.io.json.to_json_plotly``: the same text, for the orjson engine without a copy."""
    if pretty or (engine or plotly_json.config.default_engine) not in ("auto", "orjson"):
        return PLOTLY_TO_JSON(plotly_object, pretty=pretty, engine=engine)
    try:
        plotly_object = plotly_object.to_plotly_json()
    except AttributeError:
        pass
    try:  # as Plotly, first as it is (an answer with no component or figure)
        text = orjson.dumps(plotly_object, option=_NUMPY)
    except TypeError:
        text = orjson.dumps(plotly_object, option=_PLAIN, default=_default)
    return _safe(text.decode("utf8"), _swap_orjson)


def install() -> None:
    """Make :func:`to_json` the writer Dash uses (``dash._utils.to_json`` imports ``to_json_plotly`` from
    ``plotly.io.json`` on each call)."""
    plotly_json.to_json_plotly = to_json
