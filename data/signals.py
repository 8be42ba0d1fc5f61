"""Degeneration signals of a run's responses read from its store: each response's end (does it end with an
end token, or was it cut: see :func:`data.metrics.degeneration.ends_with_end_token`) and, per step, the mean
repetition and the share of truncated responses. Small per-step results are cached on the store version;
the responses a filter needs are found per query (one step's rows only, when it names a step).
"""

from __future__ import annotations

import functools

import polars as pl

from data.cache import StoreKey, shared
from data.derived.ends import COLUMN as ENDS_COLUMN
from data.derived.ends import counted_with, truncation_from_counts
from data.metrics.degeneration import ends_with_end_token, summary_units, with_end_inputs
from data.store import RunStore

ENDS = "ends"  # the column of :func:`ends_frame`: True ended, False truncated, null cannot be told


def _ends_frames(store: RunStore, pad_tokens: tuple, end_tokens: tuple, step: int | None):
    """``part, row, step, ends`` of the shown responses (of ``step`` only, when given), one frame per file
    of ``parts/``: whether each ended with an end token
    (:func:`~data.metrics.degeneration.ends_with_end_token`). Only the token strings and the response texts
    are read, one file at a time (one step's row groups only, for a step): never the whole run's texts."""
    expr = ends_with_end_token(tuple(pad_tokens), tuple(end_tokens)).alias(ENDS)
    steps = None if step is None else (step, step)
    index = store.index()
    ids = store.part_ids() if steps is None else [p for s in index.select(*steps) for p in s.parts]
    by_file: dict = {}
    rows = store.manifest.parts
    for p in ids:
        if not rows[str(p)]["rows"]:  # a part of unusable lines only: no file of rows
            continue
        for path in store.part_files_of(p, steps):
            by_file.setdefault(path, []).append(p)
    shared_files = store.shares_files()
    for path, parts in by_file.items():
        lf = pl.scan_parquet(path, missing_columns="insert", extra_columns="ignore")
        schema = lf.collect_schema()
        if "step" not in schema:  # a part without rows
            continue
        if shared_files:  # a file written with others may hold rows of parts dropped since
            lf = lf.filter(pl.col("part").is_in(parts))
        if step is not None:
            lf = lf.filter(pl.col("step") == step)
        if store.visible_below is not None:  # steps that may still be partial are not shown
            lf = lf.filter(pl.col("step") < store.visible_below)
        lf = with_end_inputs(lf, schema)
        yield lf.select(
            pl.col("part").cast(pl.UInt32), pl.col("row").cast(pl.UInt32), pl.col("step").cast(pl.Int64), expr
        ).collect()


def _in_scalars(store: RunStore, pads: tuple, ends: tuple) -> bool:
    """Whether ingest kept each response's end with these tokens in the scalars (:data:`ENDS_COLUMN`, made
    with the default end tokens and the store's pads, as the ends counts are)."""
    return counted_with(store.manifest, pads, ends) and ENDS_COLUMN in store.schema()


@functools.lru_cache(maxsize=16)
def _rows_ending(key: StoreKey, pads: tuple, ends: tuple, step: int | None, ended: bool) -> pl.DataFrame:
    keep = pl.col(ENDS) if ended else pl.col(ENDS).not_()
    store = key.store
    if _in_scalars(store, pads, ends):
        lf = store.scan(["part", "row", ENDS_COLUMN], step=step).rename({ENDS_COLUMN: ENDS})
        return lf.filter(keep).select(pl.col("part", "row").cast(pl.UInt32)).collect()
    frames = [f.filter(keep).select("part", "row") for f in _ends_frames(store, pads, ends, step)]
    return pl.concat(frames) if frames else pl.DataFrame(schema={"part": pl.UInt32, "row": pl.UInt32})


def truncated_rows(
    store: RunStore, pad_tokens: tuple[str, ...], end_tokens: tuple[str, ...], step: int | None = None
) -> pl.DataFrame:
    """``part, row`` of the responses that do not end with an end token (of ``step`` only, when given):
    what the responses page's ``truncated=1`` keeps."""
    return _rows_ending(StoreKey(store), tuple(pad_tokens), tuple(end_tokens), step, False)


def ended_rows(
    store: RunStore, pad_tokens: tuple[str, ...], end_tokens: tuple[str, ...], step: int | None = None
) -> pl.DataFrame:
    """``part, row`` of the responses that end with an end token (of ``step`` only, when given): what the
    responses page's ``ended=1`` keeps. With :func:`truncated_rows`, every response but those of pads only
    (which cannot be told), each once."""
    return _rows_ending(StoreKey(store), tuple(pad_tokens), tuple(end_tokens), step, True)


@shared(16)
def _truncation(key: StoreKey, pads: tuple, ends: tuple) -> pl.DataFrame:
    m = key.store.manifest
    if counted_with(m, pads, ends):  # counted by ingest, per part and step: no token is read
        return truncation_from_counts(key.store.dir, m)
    # Counted per file, then summed: a step's responses may be in several files (one per rank).
    counts = [
        f.group_by("step").agg(
            pl.len().alias("n"),
            pl.col(ENDS).sum().cast(pl.Int64).alias("ended"),
            pl.col(ENDS).not_().sum().cast(pl.Int64).alias("truncated"),
        )
        for f in _ends_frames(key.store, pads, ends, None)
    ]
    schema = {"step": pl.Int64, "n": pl.UInt32, "ended": pl.Int64, "truncated": pl.Int64}
    df = pl.concat(counts) if counts else pl.DataFrame(schema=schema)
    return (
        df.group_by("step")
        .agg(pl.col("n", "ended", "truncated").sum())
        .with_columns((pl.col("truncated") / pl.col("n")).alias("y"))
        .sort("step")
    )


def truncation_by_step(store: RunStore, pad_tokens: tuple[str, ...], end_tokens: tuple[str, ...]):
    """Per step: ``n`` responses, ``ended`` with an end token, ``truncated`` (without one) and ``y`` =
    truncated / n, the share a click on the step's point opens (cached on the store version)."""
    return _truncation(StoreKey(store), tuple(pad_tokens), tuple(end_tokens))


def can_tell_truncation(store: RunStore, pad_tokens: tuple[str, ...], end_tokens: tuple[str, ...]) -> bool:
    """Whether any response of the run ends with an end token. None does when a trainer decodes its texts
    without special tokens (and logs no token strings): a cut response then looks like any other, and
    a truncation share would wrongly be 100 %."""
    df = truncation_by_step(store, pad_tokens, end_tokens)
    return bool(df.height and (df.get_column("ended").sum() or 0) > 0)


@shared(16)
def _repetition(key: StoreKey) -> pl.DataFrame:
    store = key.store
    empty = pl.DataFrame(schema={"step": pl.Int64, "y": pl.Float64})
    steps = store.steps_scan()  # its mean is kept in the per-step summary by ingest
    kept = steps.select("step", pl.col("repetition_mean").cast(pl.Float64).alias("y")).sort("step").collect()
    # A value says the responses have the column; only without one is the store's schema asked (it
    # builds the store's index of every part, which a run's first page need not).
    if kept.get_column("y").drop_nulls().len() or "repetition" in store.schema():
        return kept
    return empty


def repetition_by_step(store: RunStore) -> pl.DataFrame:
    """Per step: ``y`` = the mean :func:`~data.metrics.degeneration.repetition` of its responses that have
    one (3 units or more); null for a step with none (cached on the store version)."""
    return _repetition(StoreKey(store))


# How a response ended, as the pages name it (see :func:`row_ends`).
END_LABELS = {True: "ended", False: "truncated"}


def row_ends(
    store: RunStore,
    keys: pl.DataFrame,
    pad_tokens: tuple[str, ...],
    end_tokens: tuple[str, ...],
    kept: list[bool | None] | None = None,
) -> pl.DataFrame:
    """``part, row, ends`` of the responses ``keys`` (``part, row``; a page of rows, a group), in their
    order: True ended with an end token, False cut (truncated), by the definition of the ``truncated``
    filter (:func:`~data.metrics.degeneration.ends_with_end_token`), reading only those rows' token strings
    and texts. Null where it cannot be told: a response of pads only, or any response of a run none of whose
    responses ends with an end token (see :func:`can_tell_truncation`). ``kept``: the rows'
    :data:`ENDS_COLUMN` as read with them (``data.responses.page_rows``), taken where ingest made it with
    these tokens instead of a read of their row groups."""
    keys = keys.select(pl.col("part").cast(pl.Int64), pl.col("row").cast(pl.Int64))
    if keys.height == 0 or not can_tell_truncation(store, pad_tokens, end_tokens):
        return keys.with_columns(pl.lit(None, pl.Boolean).alias(ENDS))
    if kept is not None and len(kept) == keys.height and _in_scalars(store, pad_tokens, end_tokens):
        return keys.with_columns(pl.Series(ENDS, kept, dtype=pl.Boolean))
    parts, rows = tuple(keys.get_column("part").to_list()), tuple(keys.get_column("row").to_list())
    ends = _row_ends(StoreKey(store), parts, rows, tuple(pad_tokens), tuple(end_tokens))
    return keys.with_columns(pl.Series(ENDS, ends, dtype=pl.Boolean))


# Where ingest kept each response's end (the board's default end tokens), only that Boolean column of the
# page's rows is read; else their token strings and texts, from the dozens of row groups a page sorted over
# every step lies in (~0.4 s at 256k responses). Kept like the rows themselves (a warm page reads none).
@shared(64)
def _row_ends(
    key: StoreKey,
    parts: tuple[int, ...],
    rows: tuple[int, ...],
    pad_tokens: tuple[str, ...],
    end_tokens: tuple[str, ...],
) -> tuple[bool | None, ...]:
    store = key.store
    keys = pl.DataFrame({"part": parts, "row": rows}, schema={"part": pl.Int64, "row": pl.Int64})
    if _in_scalars(store, pad_tokens, end_tokens):  # kept by ingest: the rows' one column, no token list
        # (read from the rows' row groups: a scan of the scalars would read every response's, 0.3 s at 2.56M)
        return tuple(store.read_keys(keys, [ENDS_COLUMN]).get_column(ENDS_COLUMN).to_list())
    got = store.read_keys(keys, ["response_tokens", "response"])
    got = with_end_inputs(got, got.schema)
    expr = ends_with_end_token(tuple(pad_tokens), tuple(end_tokens)).alias(ENDS)
    return tuple(got.select(expr).get_column(ENDS).to_list())


def repetition_units(store: RunStore) -> list[str]:
    """The units the run's repetitions were counted in (tokens, characters, words: see
    :func:`data.metrics.degeneration.response_repetition`), from the per-step summary (cached on the store
    version: a read of a column of every step, ~2.5 ms at 25,000 steps, for each reward page)."""
    return list(_units(StoreKey(store)))


@shared(16, disk=False)
def _units(v: StoreKey) -> tuple[str, ...]:
    return tuple(summary_units(v.store.steps_columns(("step", "repetition_units"))))
