"""The rollout data contract: the known fields, their canonical types, and the store's own column names.

A line that breaks it is a :class:`BadLine`; :mod:`data.schema.record` and :mod:`data.schema.frame` apply
it to one line and to a whole chunk.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from data.metrics.registry import response_columns

TEXT_FIELDS = ("prompt", "response", "ref_response")
REQUIRED = ("prompt", "response", "reward", "step")
FLOAT_LIST_FIELDS = ("logprobs", "ref_logprobs", "values", "token_rewards")
TOKEN_FIELDS = ("response_tokens", *FLOAT_LIST_FIELDS)

# Canonical Polars dtype of every known field.
CANONICAL: dict[str, pl.DataType] = {
    "prompt": pl.String(),
    "response": pl.String(),
    "reward": pl.Float64(),
    "step": pl.Int64(),
    "response_tokens": pl.List(pl.String()),
    "logprobs": pl.List(pl.Float32()),
    "ref_logprobs": pl.List(pl.Float32()),
    "values": pl.List(pl.Float32()),
    "token_rewards": pl.List(pl.Float32()),
    "ref_response": pl.String(),
    "ref_reward": pl.Float64(),
}
KNOWN = tuple(CANONICAL)

# Columns the store itself writes (every response column of the registry); an extra field of the same
# name is kept as ``extra_<name>``.
RESERVED = response_columns() | {
    "token_length_mismatch",  # a column of stores before format 5: the name stays apart
    "__prompt_lead",  # chat.PROMPT_LEAD
    "__response_own",  # chat.RESPONSE_OWN
    "__response_length",  # chat.RESPONSE_LENGTH
    "__line_notes",  # dialects.base.LINE_NOTES
    # Working columns of ingest and export, named here so that a field of the same name stays apart.
    "__reason",
    "__response_clean",
    "__rank",
    "__in_line",  # IN_LINE
}
# A record's place among the records of its line, for a dialect whose line holds several (see
# ``Dialect.rows``): set at ingest, it makes their sample ids and group, then is dropped.
IN_LINE = "__in_line"

SCALAR_EXTRA_DTYPES = (pl.Boolean, pl.String)


@dataclass(frozen=True)
class BadLine(Exception):
    """A line that cannot be used; ``reason`` is shown to the user as is."""

    reason: str

    def __str__(self) -> str:
        return self.reason


def _type_name(v) -> str:
    return "null" if v is None else type(v).__name__


def _is_number(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


# The types of a list's items (as parsed from JSON, no subclasses but bool) allowed in token arrays.
_NUMBER_OR_NULL = frozenset({int, float, type(None)})
_FLOAT_OR_NULL = frozenset({float, type(None)})
_STR_OR_NULL = frozenset({str, type(None)})


def _number_list(v) -> list | None:
    """A parsed list of numbers (nulls kept) as floats, or None for anything else. Its items' types are
    compared as a set (bool is no number here): several times faster than a test per item."""
    kinds = set(map(type, v)) if isinstance(v, list) else None
    if kinds is None or not kinds <= _NUMBER_OR_NULL:
        return None
    return v if kinds <= _FLOAT_OR_NULL else [None if x is None else float(x) for x in v]


# Families (see _family) of a per-token field of the trainer's own: lists of numbers (or of nulls only).
_NUMBER_LISTS = frozenset({"list[int]", "list[float]", "list[null]"})

# Integer types whose values an Int64 column holds; Polars reads a larger JSON integer as UInt64 or Int128.
_FITS_INT64 = frozenset({pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32})
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
STEP_OUT_OF_RANGE = "field 'step' is out of range (not a 64-bit integer)"


def extra_name(key: str) -> str:
    """The column of an extra field: ``extra_<key>`` for a key the store or the contract uses, and for an
    empty key (a column needs a name: Arrow readers name an empty one ``column_<n>``)."""
    return f"extra_{key}" if key in RESERVED or key in KNOWN or not key else key


def not_text_reason(key: str, got: str) -> str:
    """Why a field that must be a text is not one; ``got``: the JSON type found (a list may be chat
    messages, so its reason names them)."""
    kind = "a string or chat messages" if got == "list" else "a string"
    return f"field '{key}' is not {kind} (got {got})"


def trainer_token_fields(df: pl.DataFrame, with_values: bool = False) -> list[str]:
    """The per-token fields of the trainer's own in a frame of conformed rows (a part, or one response):
    the lists beside the contract's token arrays, which :func:`conform_frame` and :func:`validate_record`
    keep only as lists of numbers. ``with_values``: only those where some row has a non-empty list."""
    names = [c for c, t in df.schema.items() if isinstance(t, pl.List) and c not in CANONICAL]
    if with_values:
        names = [c for c in names if (df.get_column(c).list.len() > 0).any()]
    return names
