"""One entry of the metrics registry (data.metrics.registry): what a column or metric is and where it goes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    """One column or metric. ``signed`` metrics get a diverging colour scale centred at 0; ``fmt`` is the
    kind of number the UI's formatter shows (``num``, ``int``, ``share``, ``step``, ``text``); ``level``
    is ``token``, ``response``, ``group``, ``step`` or ``prompt`` for a metric, ``shown`` for one a page
    computes for the rows on screen (never stored), and ``row`` for a column that only identifies or
    previews a response. ``stored``: a column of the store's scalars; ``exported``: its place among the
    export's columns (1 first; 0 not exported); ``range_key``: the URL prefix of its range filter
    (``<key>_min`` / ``<key>_max``), ``range_at`` that filter's place among the filters (every one but the
    step's is an axis the scatter page can draw), ``range_input`` whether the responses page always shows
    its inputs (False: only while the URL sets one of its bounds, e.g. a box brushed on the scatter);
    ``table``: its
    place among the responses table's columns (0: not a column of it); ``from_tokens``: its place among
    the per-response aggregates computed from the token arrays at ingest (0: not one of them);
    ``scale``: how the token strip spreads a per-token metric's values over its colours (``linear``,
    ``log`` for a heavy tail, ``ratio`` for a ratio centred on 1; see :mod:`data.strip_scale`)."""

    key: str
    label: str
    description: str
    signed: bool = False
    level: str = "response"
    unit: str = ""
    fmt: str = "num"
    stored: bool = False
    exported: int = 0
    range_key: str | None = None
    range_at: int = 0
    range_input: bool = True
    table: int = 0
    from_tokens: int = 0
    scale: str = "linear"


ROW = "row"
