"""Per part and step, how many responses ended with an end token and how many were cut (see
:func:`data.metrics.degeneration.ends_with_end_token`), counted by ingest when it writes a part (its rows
are in memory then) and kept in the part's manifest entry (``"ends": [[step, n, ended, truncated], ...]``).

The reward page's truncation curve (:func:`data.signals.truncation_by_step`) needs every response's last
token: read from the parts, that is every response's token list, the largest read of the page, growing
with the run. Summed from the entries instead, it costs a few numbers per part. The counts hold for the
store's pad tokens and :data:`END_TOKENS` (the board's default end tokens, named in the manifest as
``"ends_with"``); a board set with other end tokens reads the parts as before.
"""

from __future__ import annotations

import polars as pl

from data.config import DEFAULT_END_TOKENS
from data.metrics.degeneration import ends_with_end_token

END_TOKENS = DEFAULT_END_TOKENS
MANIFEST_KEY = "ends_with"  # the end tokens the parts' counts were made with
ENTRY_KEY = "ends"


def ends_counts(full: pl.DataFrame, pad_tokens: tuple[str, ...]) -> dict[int, list[list[int]]]:
    """``{part: [[step, n, ended, truncated], ...]}`` (by step) of a part file's rows ``full`` (one part or
    several written together: its ``part`` column). ``n`` counts every response, ``ended`` / ``truncated``
    those that can be told (a response of pads only is neither)."""
    if full is None or full.height == 0:
        return {}
    names = full.columns
    lf = full.lazy().select("part", "step", *(c for c in ("response_tokens", "response") if c in names))
    if "response_tokens" not in names:  # a run without token strings
        lf = lf.with_columns(pl.lit(None, pl.List(pl.String)).alias("response_tokens"))
    if "response" not in names:
        lf = lf.with_columns(pl.lit(None, pl.String).alias("response"))
    e = pl.col("__ends")
    counts = (
        lf.select("part", "step", ends_with_end_token(tuple(pad_tokens), END_TOKENS).alias("__ends"))
        .group_by("part", "step")
        .agg(pl.len().alias("n"), e.sum().alias("ended"), e.not_().sum().alias("truncated"))
        .sort("part", "step")
        .collect()
    )
    out: dict[int, list[list[int]]] = {}
    for part, step, n, ended, truncated in counts.iter_rows():
        out.setdefault(int(part), []).append([int(step), int(n), int(ended), int(truncated)])
    return out


def counted_with(data: dict, pad_tokens: tuple[str, ...], end_tokens: tuple[str, ...]) -> bool:
    """Whether every part with rows of a manifest's ``data`` holds counts made with these tokens."""
    if tuple(data.get(MANIFEST_KEY) or ()) != tuple(end_tokens):
        return False
    if tuple(data.get("pad_tokens") or ()) != tuple(pad_tokens):
        return False
    return all(ENTRY_KEY in e for e in data["parts"].values() if e["rows"])


def truncation_from_entries(data: dict) -> pl.DataFrame:
    """Per step shown (below ``visible_below``), sorted: ``step, n, ended, truncated, y`` (truncated / n)
    summed from the parts' counts; the columns and types of :func:`data.signals.truncation_by_step`."""
    below = data.get("visible_below")
    rows = [
        c
        for e in data["parts"].values()
        if e["rows"]
        for c in e.get(ENTRY_KEY, ())
        if below is None or c[0] < below
    ]
    schema = {"step": pl.Int64, "n": pl.UInt32, "ended": pl.Int64, "truncated": pl.Int64}
    df = pl.DataFrame(rows, schema=schema, orient="row")
    return (
        df.group_by("step")
        .agg(pl.col("n", "ended", "truncated").sum())
        .with_columns((pl.col("truncated") / pl.col("n")).alias("y"))
        .sort("step")
    )
