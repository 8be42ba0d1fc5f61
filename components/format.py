"""How numbers read in the UI, once: Python text for components and the d3 formats of Plotly hovers and
grid cells, so that a value reads the same in a card, a table, a hover and a grid.

``kind`` is the registry's ``fmt`` of a metric (``num``, ``int``, ``step``, ``share``, ``text``; see
``data.metrics.registry``) or one of the table kinds ``signed`` (a leading + above 0) and ``trend``.
"""

from __future__ import annotations

import time
from datetime import datetime

MISSING = "–"
# Significant digits of a number shown on its own (cards, tables, hovers, the token strip's hover text).
DIGITS = 4

# d3 formats (Plotly hovers and axes, AG Grid cells through d3.format): the same rules as the Python ones.
D3_NUM = f".{DIGITS}~g"  # = num(): 4 significant digits, trailing zeros trimmed
D3_PRECISE = ".6~g"  # curves over steps: neighbouring steps differ in the 5th digit
D3_INT = "d"
D3_SHARE = ".1%"  # = share()
D3_SHARE_AXIS = ".0%"
D3_SHARE_PRECISE = ".2~%"


def num(v, digits: int = DIGITS) -> str:
    """A number on its own: ``digits`` significant digits, whole numbers with thousands separators, '–'
    for missing, 'NaN' for NaN; anything that is not a number as its text."""
    if v is None:
        return MISSING
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    try:
        if v != v:
            return "NaN"
        return f"{v:.{digits}g}"
    except (TypeError, ValueError):
        return str(v)


def exact(v: float) -> str:
    """The shortest text of a number that reads back as the same float (``0.25``, ``3``): bin edges and
    the intervals of histogram bars."""
    v = float(v)
    return str(int(v)) if v.is_integer() else repr(v)


def share(v, digits: int = 1) -> str:
    """A share as a percentage (``0.812`` -> ``81.2%``); '–' for missing, 'NaN' for NaN."""
    if v is None:
        return MISSING
    if v != v:
        return "NaN"
    return f"{v:.{digits}%}"


def signed(v) -> str:
    """:func:`num` with a leading + above 0 (a gain, an advantage)."""
    text = num(v)
    return "+" + text if isinstance(v, int | float) and v > 0 else text


def value(v, kind: str = "num", share_digits: int = 0) -> str:
    """A value by kind: ``share`` a percentage (``share_digits`` decimals), ``signed`` with a leading +,
    ``step`` a plain whole number, ``int`` a whole number with separators, ``text``/``trend`` as is, other
    numbers with :data:`DIGITS` significant digits; '–' for missing."""
    if v is None:
        return MISSING
    if kind in ("text", "trend"):
        return str(v)
    if isinstance(v, float) and v != v:
        return "NaN"
    if kind == "share":
        return share(v, share_digits)
    if kind == "step":
        return str(int(v))
    if kind == "int":
        return num(int(v))
    if kind == "signed":
        return signed(float(v))
    return num(float(v))


def step_range(lo: int, hi: int) -> str:
    """First and last step: ``1–25``, or ``-25 to -1`` where a dash would read as a minus sign."""
    return f"{lo} to {hi}" if lo < 0 else f"{lo}–{hi}"


def megabytes(n_bytes: float, digits: int = 1) -> str:
    """A size in MB (10^6 bytes): ``12.3 MB``."""
    return f"{n_bytes / 1e6:.{digits}f} MB"


def age(ts: float | None, now: float | None = None) -> str:
    """A file time with how long ago it was: ``2026-01-02 10:20 (3 min ago)``; '–' when unknown."""
    if not ts:
        return MISSING
    s = max(0.0, (time.time() if now is None else now) - ts)
    when = datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")
    for unit, n in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= n:
            return f"{when} ({s / n:.0f} {unit} ago)"
    return f"{when} ({s:.0f} s ago)"


def grid_formatter(kind: str, missing: str = MISSING) -> dict:
    """An AG Grid ``valueFormatter`` of a number column, the rules of :func:`value` in the browser:
    ``int``/``step`` whole numbers, ``signed`` with a leading +, others :data:`D3_NUM`; ``missing`` for
    null."""
    if kind in ("int", "step"):
        text = f"d3.format('{D3_INT}')(params.value)"
    elif kind == "signed":
        text = f"(params.value > 0 ? '+' : '') + d3.format('{D3_NUM}')(params.value)"
    else:
        text = f"d3.format('{D3_NUM}')(params.value)"
    return {"function": f"params.value == null ? '{missing}' : {text}"}
