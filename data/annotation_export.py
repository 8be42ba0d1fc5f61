"""The annotated responses of a run as a dataset (``/export?run=R&annotated=1&format=jsonl|parquet`` and
``app.py export --annotated``): one row per annotation, with its response's prompt, response and reward.

Exported: the annotations as they stand (:mod:`data.annotations`); a response the store does not hold (an
annotation made before its file was cut, say) keeps its row with null texts, and the file says how many.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from dataclasses import dataclass

import polars as pl

from data import annotations
from data.queries import ResponseFilter
from data.search.order import matching
from data.store import RunStore
from data.views.codec import first

FORMATS = ("jsonl", "parquet")
KEYS = {"run", "annotated", "format", "label"}  # what an annotated export's query may hold
# The dataset's columns, in order.
COLUMNS = (
    "sample_id",
    "step",
    "source",
    "line",
    "prompt",
    "response",
    "reward",
    "label",
    "note",
    "span_from",
    "span_to",
    "who",
    "when",
)
SCHEMA = {
    "sample_id": pl.String,
    "step": pl.Int64,
    "source": pl.String,
    "line": pl.Int64,
    "prompt": pl.String,
    "response": pl.String,
    "reward": pl.Float64,
    "label": pl.String,
    "note": pl.String,
    "span_from": pl.Int64,
    "span_to": pl.Int64,
    "who": pl.String,
    "when": pl.String,
}


class AnnotatedExportError(ValueError):
    """A query an annotated export cannot answer: ``status`` (400) and the message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


@dataclass(frozen=True)
class AnnotatedPlan:
    run: str
    fmt: str
    label: str | None


def plan(query: Mapping) -> AnnotatedPlan:
    """Check an annotated export's query strictly: ``run``, ``annotated=1``, ``format`` (jsonl, the default,
    or parquet) and an optional ``label``; anything else is refused (400), never ignored."""
    unknown = sorted(k for k in query if k not in KEYS)
    if unknown:
        raise AnnotatedExportError(
            400, f"an annotated export takes run, format and label, not {', '.join(unknown)}"
        )
    run = first(query, "run")
    if not run:
        raise AnnotatedExportError(400, "missing parameter run=")
    fmt = first(query, "format") or "jsonl"
    if fmt not in FORMATS:
        raise AnnotatedExportError(400, f"format={fmt!r}: an annotated export is one of {', '.join(FORMATS)}")
    return AnnotatedPlan(run, fmt, first(query, "label") or None)


def frame(store: RunStore, annotated: annotations.Annotated, label: str | None = None) -> pl.DataFrame:
    """One row per annotation (of ``label`` only, when given) in the order of their last change, with its
    response's ``step, source, line, prompt, response, reward`` (null where the store lacks it)."""
    items = [a for a in annotated.items if label is None or a.label == label]
    notes = pl.DataFrame(
        {
            "sample_id": [a.sample_id for a in items],
            "label": [a.label for a in items],
            "note": [a.note for a in items],
            "span_from": [a.span[0] if a.span else None for a in items],
            "span_to": [a.span[1] if a.span else None for a in items],
            "who": [a.who for a in items],
            "when": [a.when for a in items],
        },
        schema={k: SCHEMA[k] for k in ("sample_id", "label", "note", "span_from", "span_to", "who", "when")},
    )
    ids = tuple(dict.fromkeys(notes.get_column("sample_id").to_list()))
    texts = _responses(store, ids)
    out = notes.join(texts, on="sample_id", how="left", maintain_order="left")
    return out.select(pl.col(c).cast(SCHEMA[c]) for c in COLUMNS)


def _responses(store: RunStore, ids: tuple[str, ...]) -> pl.DataFrame:
    """``sample_id, step, source, line, prompt, response, reward`` of the responses ``ids`` names."""
    want = ["sample_id", "step", "source", "line", "prompt", "response", "reward"]
    empty = pl.DataFrame(schema={c: SCHEMA[c] for c in want})
    if not ids:
        return empty
    keys = matching(store, ResponseFilter(samples=ids), ["sample_id"]).collect()
    if keys.height == 0:
        return empty
    names = {*store.schema(), "prompt", "response"}  # the texts are in the parts, not the scalars' schema
    got = store.read_keys(keys.select("part", "row"), [c for c in want if c in names])
    got = got.with_columns(pl.lit(None).alias(c) for c in want if c not in names)
    return got.select(pl.col(c).cast(SCHEMA[c]) for c in want).unique("sample_id", keep="first")


def to_bytes(df: pl.DataFrame, fmt: str) -> bytes:
    """``df`` as JSON lines (texts as JSON strings) or Parquet."""
    if fmt == "parquet":
        buf = io.BytesIO()
        df.write_parquet(buf)
        return buf.getvalue()
    df = df.with_columns(pl.when(pl.col("reward").is_finite()).then(pl.col("reward")))  # JSON has no NaN
    lines = (json.dumps(row, ensure_ascii=False, allow_nan=False) for row in df.iter_rows(named=True))
    return "".join(f"{line}\n" for line in lines).encode("utf-8", "surrogatepass")
