"""Which value columns the responses table shows (``cols=`` in its URL; the column chooser): the run's
columns and how each response ended (:data:`END`, read for the rows on screen), and the defaults: every column, but for a run with groups (GRPO,
RLOO: a ``group_id`` or an ``advantage`` field) the few a group's reader needs, so that they fit at
1440 px without a horizontal scroll."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import polars as pl

from data.derived.ends import COLUMN as ENDS_COLUMN
from data.metrics import label
from data.metrics.registry import length_column
from data.responses import END, table_columns
from data.search.tokens import HIT_COLUMNS
from data.signals import END_LABELS, ENDS, row_ends
from data.store import RunStore
from data.views.responses import ResponsesView

# A run with groups shows these by default (those it has, in the table's order); the others a click away.
GROUP_COLUMNS = (
    "step",
    "reward",
    "advantage",
    "group_id",
    END,
    "kl_sum",
    "response_length",
    "response_chars",
)
GROUP_FIELDS = ("group_id", "advantage")  # a run with one of these has groups


def choices(table: Sequence[str]) -> list[tuple[str, str]]:
    """``(column, label)`` of every value column the responses table can show, in the table's order: the
    run's metric and extra columns ``table`` (``data.responses.table_columns``), then :data:`END`."""
    return [*((c, label(c)) for c in table), (END, label(END))]


def has_groups(store: RunStore) -> bool:
    """Whether the run's files give its responses a group (``group_id``) or an advantage: a GRPO-like run."""
    return any(c in store.extra_columns() for c in GROUP_FIELDS)


def default_columns(store: RunStore, table: Sequence[str]) -> tuple[str, ...]:
    """The columns shown when the URL names none, of the table's ``table``: every column (not :data:`END`)
    for a run without groups, as the table always was; for a run with groups :data:`GROUP_COLUMNS` (those
    it has, in the table's order; its length in tokens, else in characters)."""
    keys = [c for c, _ in choices(table)]
    if not has_groups(store):
        return tuple(c for c in keys if c != END)
    lengths = {"response_length", "response_chars"} - {length_column(keys)}
    return tuple(c for c in keys if c in GROUP_COLUMNS and c not in lengths)  # in the table's order


def shown_columns(store: RunStore, table: Sequence[str], cols: Sequence[str] | None) -> tuple[str, ...]:
    """The columns a view shows: its ``cols`` (the URL's, already checked against :func:`choices`), else
    :func:`default_columns`."""
    return tuple(cols) if cols else default_columns(store, table)


def add_ends(
    store: RunStore,
    rows: list[dict],
    shown: Iterable[str],
    pad_tokens: tuple[str, ...],
    end_tokens: tuple[str, ...],
) -> list[dict]:
    """``rows`` (grid rows with ``part`` and ``row``, and :data:`~data.derived.ends.COLUMN` where it was read
    with them: taken out of them) with :data:`END` set (``"ended"``, ``"truncated"`` or None where it
    cannot be told) when it is one of the ``shown`` columns; as they are otherwise."""
    read = bool(rows) and all(ENDS_COLUMN in r for r in rows)
    kept = [r.pop(ENDS_COLUMN, None) for r in rows] if ENDS_COLUMN not in set(shown) else None
    if END not in set(shown) or not rows:
        return rows
    keys = pl.DataFrame(
        {"part": [r["part"] for r in rows], "row": [r["row"] for r in rows]},
        schema={"part": pl.Int64, "row": pl.Int64},
    )
    ends = row_ends(store, keys, pad_tokens, end_tokens, kept if read else None).get_column(ENDS).to_list()
    for r, e in zip(rows, ends, strict=True):
        r[END] = None if e is None else END_LABELS[e]
    return rows


# ---- what the responses page calls ----------------------------------------------------------------------


def column_choices(store: RunStore) -> list[tuple[str, str]]:
    """``(column, label)`` of the value columns the table can show (its column chooser's choices)."""
    metrics, extras = table_columns(store)
    return choices([*metrics, *extras])


def shown(store: RunStore, view: ResponsesView) -> tuple[str, ...]:
    """The value columns ``view`` shows: its ``cols``, else the run's defaults (see
    :func:`data.response_columns.default_columns`: a run with groups shows its advantage, group and end)."""
    metrics, extras = table_columns(store)
    return shown_columns(store, [*metrics, *extras], view.cols)


def with_hits(view: ResponsesView, shown: tuple[str, ...]) -> tuple[str, ...]:
    """The grid's value columns: ``shown``, after where a token filter's token is and its value (see
    :data:`data.search.tokens.HIT_COLUMNS`) when ``view`` has one; they are not the chooser's."""
    return (*HIT_COLUMNS, *shown) if view.token_pattern() else shown


def chooser_value(store: RunStore | None, view: ResponsesView, current) -> list[str] | None:
    """The column chooser's value for ``view``: the columns it shows, in the table's order; None when the
    chooser's ``current`` value already holds them (in any order) or there is no store."""
    if store is None:
        return None
    want = list(shown(store, view))
    return None if set(current or ()) == set(want) else want


def chosen(store: RunStore | None, cols) -> tuple[str, ...] | None:
    """The view's ``cols`` for the column chooser's value ``cols``: the run's columns among them, in the
    table's order; None (the URL names none) for the run's defaults, an empty choice or no store."""
    if store is None or not cols:
        return None
    metrics, extras = table_columns(store)
    table = [c for c, _ in choices([*metrics, *extras])]
    picked = tuple(c for c in table if c in set(cols))
    return None if not picked or set(picked) == set(default_columns(store, [*metrics, *extras])) else picked


def with_ends(store: RunStore, rows: list[dict], view: ResponsesView, settings) -> list[dict]:
    """Grid ``rows`` with how each ended (:data:`END`) when ``view`` shows that column (see
    :func:`data.response_columns.add_ends`; ``settings``: the board's pad and end tokens)."""
    return add_ends(store, rows, shown(store, view), settings.pad_tokens, settings.end_tokens)
