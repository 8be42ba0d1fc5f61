"""What a view answers, as one object: :class:`Answer` (built by one module of ``api.answers`` per page) and
:func:`to_json`, its JSON form::

    {"page": "/reward", "view": {…}, "figures": {"<id>": {"title": …, "note": …, "traces": [{"name": …, "type": …,
     "x": […], "y": […], …}]}}, "rows": […], "tables": {"<id>": {…}}, "strips": {…}, "notices": ["…"]}

Each figure is the very Plotly figure the page draws; its traces become plain parallel arrays (numbers at
full precision, a missing value as ``null``), with each trace's ``customdata`` (e.g. a bar's interval
``[lo, hi, count]``). ``rows`` are the page's main table's rows in order; ``tables`` every table by id.
"""

from __future__ import annotations

import base64
import datetime as dt
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# The array-valued keys of a trace kept in its JSON form (what a trace draws and what its points stand for).
TRACE_ARRAYS = ("x", "y", "z", "customdata", "text", "base", "width", "error_y", "ids")
# Scalar keys of a trace kept as they are (what it is and how it reads).
TRACE_SCALARS = ("name", "type", "mode", "fill", "legendgroup", "orientation", "xaxis", "yaxis")
API_VERSION = 1


@dataclass(frozen=True)
class Table:
    """A table as the page shows it: ``rows`` (dicts keyed by ``columns``, in the page's order), the label
    each column shows, and, when the page shows only the first rows, how many there are and why cut."""

    columns: list[str]
    rows: list[dict[str, Any]]
    labels: dict[str, str] = field(default_factory=dict)
    total: int | None = None
    cut_off: str | None = None


@dataclass(frozen=True)
class Strip:
    """A token strip: each token's text, its value of ``metric`` (None where it has none) and the colour the
    page paints it (``""``: none) and, in ``text_colours``, the text's colour on it; ``caption`` says how the
    colours spread (the strip's scale)."""

    metric: str
    label: str
    tokens: list[str]
    values: list[float | None]
    colours: list[str]
    caption: str = ""
    marks: list[str] = field(default_factory=list)  # per token: "" or what the page marks it as
    text_colours: list[str] = field(default_factory=list)  # per token: "" or the text colour on its colour


@dataclass
class Answer:
    """One view's answer. ``page`` is its path (``/reward``); ``view`` the resolved view state (what the URL
    asked, as the page resolved it: the step shown, the sort, …); ``figures`` the page's Plotly figures by
    the page's own component id, ``titles`` their titles; ``tables`` its tables by id, ``main`` the id of
    the one whose rows are the answer's ``rows``; ``strips`` its token strips; ``notes`` what a figure's card says under its title (a thinning, a missing
    column), by the figure's id; ``notices`` what the page
    says above its content (what it guessed, ignored or cut); ``run`` the run shown and ``store`` what was
    read (``{"format": …, "version": …}``)."""

    page: str
    view: dict[str, Any]
    run: str | None = None
    figures: dict[str, Any] = field(default_factory=dict)
    titles: dict[str, str] = field(default_factory=dict)
    tables: dict[str, Table] = field(default_factory=dict)
    main: str | None = None
    strips: dict[str, Strip] = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)
    store: dict[str, Any] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)  # by figure id: the note its card shows under it


def plain(value: Any) -> Any:
    """``value`` as plain JSON data: numpy arrays and scalars as lists and numbers, Plotly's typed arrays
    (``{"dtype": …, "bdata": …}``) decoded, non-finite floats as None, dates as ISO text, tuples as lists."""
    if value is None or isinstance(value, bool | str | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, np.generic):
        return plain(value.item())
    if isinstance(value, np.ndarray):
        return [plain(v) for v in value.tolist()]
    if isinstance(value, dict):
        if set(value) >= {"dtype", "bdata"}:
            return plain(typed_array(value))
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if hasattr(value, "to_plotly_json"):
        return plain(value.to_plotly_json())
    return str(value)


def typed_array(value: dict) -> np.ndarray:
    """A Plotly typed array (``{"dtype": "f8", "bdata": base64, "shape": "r, c"?}``) as a numpy array."""
    arr = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
    shape = value.get("shape")
    if shape:
        arr = arr.reshape(tuple(int(s) for s in str(shape).split(",")))
    return arr


def figure_traces(figure: Any) -> list[dict[str, Any]]:
    """A Plotly figure (a ``go.Figure`` or its dict, as a callback returns it) as its traces' plain
    series: :data:`TRACE_SCALARS` and :data:`TRACE_ARRAYS` where the trace has them (``x`` from ``x0`` and
    ``dx`` where the trace gives those instead, ``y`` likewise)."""
    fig = figure.to_plotly_json() if hasattr(figure, "to_plotly_json") else figure
    out = []
    for trace in fig.get("data", []) or []:
        t = trace.to_plotly_json() if hasattr(trace, "to_plotly_json") else trace
        kept = {k: plain(t[k]) for k in TRACE_SCALARS if t.get(k) is not None}
        kept.update({k: plain(t[k]) for k in TRACE_ARRAYS if t.get(k) is not None})
        for axis, other in (("x", "y"), ("y", "x")):
            # Evenly spaced values sent as a start and a step (x0, dx) are given as the array they stand for.
            if axis not in kept and t.get(f"{axis}0") is not None and isinstance(kept.get(other), list):
                start, step = plain(t[f"{axis}0"]), plain(t.get(f"d{axis}", 1))
                kept[axis] = [start + step * i for i in range(len(kept[other]))]
        out.append(kept)
    return out


def figure_title(figure: Any) -> str | None:
    fig = figure.to_plotly_json() if hasattr(figure, "to_plotly_json") else figure
    title = (fig.get("layout") or {}).get("title")
    if isinstance(title, dict):
        title = title.get("text")
    return title if isinstance(title, str) else None


def table_json(table: Table) -> dict[str, Any]:
    return {
        "columns": list(table.columns),
        "labels": dict(table.labels),
        "rows": plain(table.rows),
        "total": table.total,
        "cut_off": table.cut_off,
    }


def to_json(answer: Answer) -> dict[str, Any]:
    """The answer as the JSON object the API and ``app.py query`` print (see the module's docstring)."""
    figures = {
        fid: {
            "title": answer.titles.get(fid) or figure_title(fig),
            "note": answer.notes.get(fid) or None,
            "traces": figure_traces(fig),
        }
        for fid, fig in answer.figures.items()
    }
    main = answer.tables.get(answer.main) if answer.main else None
    return {
        "api": API_VERSION,
        "page": answer.page,
        "run": answer.run,
        "view": plain(answer.view),
        "store": plain(answer.store),
        "notices": [str(n) for n in answer.notices],
        "figures": figures,
        "rows": plain(main.rows) if main is not None else [],
        "tables": {tid: table_json(t) for tid, t in answer.tables.items()},
        "strips": {sid: plain(vars(s)) for sid, s in answer.strips.items()},
    }
