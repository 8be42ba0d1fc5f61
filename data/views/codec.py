"""URL view-state codec: every view is its path plus query string.

Each page has one frozen dataclass with ``from_query(query, context) -> (state, notices)`` and
``to_query() -> str``; the helpers here parse one parameter each. A malformed value never raises: it
falls back to the default and adds a readable notice.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from urllib.parse import parse_qs, urlencode

from data.queries import regex_error


def parse_search(search: str | None) -> dict[str, list[str]]:
    """``?a=1&b=2&b=3`` -> ``{"a": ["1"], "b": ["2", "3"]}`` (blank values kept as "")."""
    return parse_qs((search or "").lstrip("?"), keep_blank_values=True)


def first(query: Mapping, key: str) -> str | None:
    """The first value of ``key`` from a parsed query or a Dash ``layout(**query)`` mapping."""
    v = query.get(key)
    if isinstance(v, list | tuple):
        v = v[0] if v else None
    return None if v is None else str(v)


# Keys the app shell keeps in every page's URL (data/live.py's LIVE_KEY: auto-refresh), known to every page.
SHELL_KEYS = ("live",)
# A URL of thousands of bad keys gets this many notices (and a count of the rest), not thousands.
MAX_KEY_NOTICES = 8


def key_notices(query: Mapping, known: Iterable[str]) -> list[str]:
    """Notices for the keys of ``query`` (parsed, or ``layout(**query)`` kwargs) that every page reads the
    same way: a key the page does not know is ignored, and of a key given more than once only the first
    value is used (every helper here reads the first value)."""
    known = set(known) | set(SHELL_KEYS)
    out: list[str] = []
    for key, value in query.items():
        if key not in known:
            out.append(f"Ignored unknown parameter {key!r}.")
        elif isinstance(value, list | tuple) and len(value) > 1:
            out.extend(
                f"Ignored {key}={v!r}: {key} is given more than once; the first, {key}={value[0]!r}, is used."
                for v in value[1:]
            )
    if len(out) > MAX_KEY_NOTICES:
        out[MAX_KEY_NOTICES - 1 :] = [f"… and {len(out) - MAX_KEY_NOTICES + 1} more ignored parameters."]
    return out


def get_int(query: Mapping, key: str, notices: list[str], default: int | None = None) -> int | None:
    raw = first(query, key)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        notices.append(f"Ignored {key}={raw!r}: not a whole number.")
        return default


def get_float(query: Mapping, key: str, notices: list[str], default: float | None = None) -> float | None:
    raw = first(query, key)
    if raw is None or raw == "":
        return default
    try:
        v = float(raw)
    except ValueError:
        notices.append(f"Ignored {key}={raw!r}: not a number.")
        return default
    if not math.isfinite(v):
        notices.append(f"Ignored {key}={raw!r}: not a finite number.")
        return default
    return v


def get_choice(
    query: Mapping, key: str, choices: Iterable[str], notices: list[str], default: str | None = None
) -> str | None:
    raw = first(query, key)
    if raw is None or raw == "":
        return default
    choices = list(choices)
    if raw not in choices:
        shown = ", ".join(choices[:12]) + ("…" if len(choices) > 12 else "")
        notices.append(f"Ignored {key}={raw!r}: expected one of {shown}.")
        return default
    return raw


def get_bool(query: Mapping, key: str, notices: list[str], default: bool = False) -> bool:
    raw = first(query, key)
    if raw is None or raw == "":
        return default
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    notices.append(f"Ignored {key}={raw!r}: expected 1 or 0.")
    return default


REGEX_FALLBACK = ": the text search is not applied."


def get_regex(query: Mapping, key: str, notices: list[str]) -> tuple[str | None, bool]:
    """The regular expression of ``key`` (None when absent or blank) and whether it compiles; an invalid
    one adds a notice saying the search is not applied."""
    raw = first(query, key) or None
    if raw is None:
        return None, True
    error = regex_error(raw)
    if error is not None:
        notices.append(regex_notice(error))
    return raw, error is None


def regex_notice(error: str) -> str:
    """The notice of a search pattern refused with ``error`` (see :func:`get_regex`)."""
    return f"{error}{REGEX_FALLBACK}"


def fmt_float(v: float) -> str:
    """Shortest text that reads back as the same float (``0.25``, ``1e-05``)."""
    return repr(float(v)) if not float(v).is_integer() else str(int(v)) if abs(v) < 1e15 else repr(float(v))


def encode(pairs: Iterable[tuple[str, object]]) -> str:
    """Query string from ``(key, value)`` pairs, leaving out None values; '' when nothing is left."""
    items = []
    for k, v in pairs:
        if v is None:
            continue
        if isinstance(v, bool):
            v = "1" if v else "0"
        elif isinstance(v, float):
            v = fmt_float(v)
        items.append((k, str(v)))
    return ("?" + urlencode(items)) if items else ""
