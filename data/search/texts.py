"""What a text search reads: the text index of a store (see :mod:`data.derived.text`) and the top of the
reward order kept with its texts at ingest, from which a search over every step shows its first matches."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import polars as pl

from data.cache import StoreKey, shared
from data.derived import text as text_index
from data.queries import ResponseFilter, search
from data.store import RunStore

# ---- text index: what a regex search scans (see data.derived.text) ----------------------------------------

TEXT_INDEX_COLUMNS = text_index.COLUMNS


def text_index_files(store: RunStore) -> list[Path]:
    """Per committed file of ``parts/``, its ``part, row, step, prompt, response`` as an uncompressed Arrow
    IPC file, as ingest wrote it in the store (see :func:`data.derived.text.index_files`)."""
    return text_index.index_files(store.dir, store.part_files())


KEYS = {"part": pl.UInt32, "row": pl.UInt32}


def fast_case(flt: ResponseFilter, sort: str, descending: bool) -> bool:
    """Whether the first matches of ``flt`` in this order can come from the top of the reward order: a
    search over every step and nothing else, sorted by reward, best first."""
    return (
        bool(flt.q)
        and flt.step is None
        and sort == text_index.TOP_SORT
        and descending
        and replace(flt, q=None).is_default()
    )


@shared(64)
def _fast_head(key: StoreKey, pattern: str, seconds: float) -> tuple[pl.DataFrame, bool] | None:
    """``(part, row of the first matches of pattern in the default order, whether they are all)``, from the
    store's top file; None for a store without one (ingested before it was kept)."""
    store = key.store
    entry = text_index.top_entry(store.manifest)
    path = store.dir / entry["name"] if entry else None
    if path is None or not path.exists():
        return None
    # Only the rows shown: a file of parts/ written with others may hold rows of parts dropped since.
    lf = pl.scan_ipc(path).with_row_index("__i").filter(pl.col("part").is_in(list(store.part_ids())))
    if store.visible_below is not None:
        lf = lf.filter(pl.col("step") < store.visible_below)
    hit = pl.col("prompt").str.contains(pattern) | pl.col("response").str.contains(pattern)
    found = search(lf.filter(hit).select("__i", "part", "row"), pattern, seconds).sort("__i")
    keys = found.select(pl.col(c).cast(t) for c, t in KEYS.items())
    return keys, int(entry["rows"]) == int(entry["of"])


def _top_rows(store: RunStore, keys: pl.DataFrame, cols: list[str]) -> pl.DataFrame | None:
    """``cols`` of the rows ``keys`` (from :func:`fast_keys`) as the top file keeps them, with the types
    of :meth:`RunStore.schema` (as :meth:`RunStore.read_keys` gives them); None for a top file written
    before it kept them."""
    got = text_index.top_rows(store.dir, text_index.top_entry(store.manifest), keys, cols)
    if got is None:
        return None
    schema = store.schema()
    return got.select(pl.col(c).cast(schema[c]) if c in schema else pl.col(c) for c in cols)
