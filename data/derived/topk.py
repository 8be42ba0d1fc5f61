"""The first rows of every sort of the responses page's unfiltered all-steps view, kept at each commit, so
that the view's first blocks read a small file instead of every file of the run.

A commit writes ``topk-g<N>-<tag>.parquet`` beside the store: the **candidates**, the rows that are among
the first :data:`KEEP` of the view sorted by some column :func:`columns` tracks, in either order (as
:func:`data.queries.sort_rows` sorts: nulls last, ties by ``sample_id``), with ``part, row, sample_id,
step`` and every tracked column. The first ``k`` of a sort are those of the candidates sorted the same way:
the true first ``k`` are candidates, and every other candidate is a row of the run that comes after them.

The first ``k`` of a union of rows are among the union of each one's first ``k``, so a commit merges the
candidates of the last commit with the rows of its new parts (in batches of :data:`BATCH_ROWS`) without
reading old parts. Rows of parts dropped since (a file read again) leave the first ``k`` exact unless one
of them was a candidate: the candidates are then made again from every part.

The rows among the first :data:`FIRST` of some sort (the grid's first block) also keep their other columns
(texts' previews, ``source``, ``line``; ``__full`` true), so that block needs no read of the parts.

The candidates are made from every row of the parts, including the steps a live run does not show yet
(``visible_below``): the reader keeps the first ``k`` only when none of them is hidden (or the run holds
fewer than ``k`` rows, all candidates). A column that appears in a later commit (an extra field) was null
in the rows before it, which were not candidates for it: its first ``k`` are kept only when they are ``k``
non-null values (nulls come last). The reader returns None in every case it cannot tell (a store committed
before this, a column not tracked, a file collected): the caller then sorts the files as before.
"""

from __future__ import annotations

import io
from pathlib import Path

import polars as pl

from data.derived.base import Commit
from data.derived.steps import scan_part_scalars
from data.metrics.registry import table_columns
from data.store.layout import rows_at
from data.store.manifest import write_atomic

# The manifest's entry: {"file", "k", "first", "parts": [[lo, hi], ...] (the part ids covered, as ranges),
# "columns": {column: tracked since the first row}}.
KEY = "topk"
PATTERN = "topk-g*.parquet"
KEEP = 2000  # data.responses.HEAD_ROWS: the rows of an order the grid's first blocks read
FIRST = 100  # components.tables.BLOCK_SIZE: the rows of the grid's first block, whose columns are all kept
BATCH_ROWS = 200_000  # the new parts' rows merged at once (what a commit holds in memory)
FULL = "__full"
KEYS = ("part", "row", "sample_id", "step")
# Columns never sorted by: bookkeeping, texts, the prompt's hash.
NOT_SORTED = frozenset(
    ("sample_id", "source", "line", "part", "row", "prompt_key", "prompt_preview", "response_preview")
)


def sort_rows(lf: pl.LazyFrame, column: str, descending: bool) -> pl.LazyFrame:
    """Sort by ``column`` (nulls last), ties broken by ``sample_id`` so paging is stable."""
    return lf.sort([column, "sample_id"], descending=[descending, False], nulls_last=True)


def columns(names, data: dict) -> list[str]:
    """The columns of ``names`` (a batch of rows) whose first rows are kept: the table's metric columns and
    the files' extra fields (what the responses page may sort by)."""
    extras = [c for c in data.get("extra_columns", []) if c not in NOT_SORTED]
    return [c for c in dict.fromkeys([*table_columns(), *extras]) if c in names]


def _ranges(ids) -> list[list[int]]:
    out: list[list[int]] = []
    for i in sorted(ids):
        if out and out[-1][1] == i - 1:
            out[-1][1] = i
        else:
            out.append([i, i])
    return out


def _ids(ranges) -> set[int]:
    return {i for lo, hi in ranges for i in range(lo, hi + 1)}


def _top(rows: pl.DataFrame, cols: list[str], k: int) -> pl.DataFrame:
    """The rows of ``rows`` among the first ``k`` of some column of ``cols``, in either order."""
    if rows.height <= k:
        return rows
    # Sorted as data.queries.sort_rows sorts (ties by sample id), with the ids' rank for the ids: the same
    # order, and a numeric key sorts several times faster than a text one.
    lf = rows.lazy().with_columns(pl.col("sample_id").rank("dense").alias("__id"))
    heads = [
        lf.sort([c, "__id"], descending=[d, False], nulls_last=True).head(k).select("part", "row")
        for c in cols
        for d in (True, False)
    ]
    if not heads:
        return rows.clear()
    picked = pl.concat(heads).unique()
    return rows.join(picked.collect(), on=["part", "row"], how="semi")


def _light(lf: pl.LazyFrame, data: dict) -> pl.LazyFrame:
    """What sorting reads of ``lf``: :data:`KEYS` and the tracked columns."""
    have = lf.collect_schema().names()
    return lf.select(c for c in dict.fromkeys([*KEYS, *columns(have, data)]) if c in have)


def update(store_dir: Path, data: dict, gen: int, tag: str) -> tuple[dict, str]:
    """The :data:`KEY` entry of a commit of manifest ``data`` (generation ``gen``, writer ``tag``) and the
    name of the file it wrote: the last commit's candidates merged with the rows of the parts it did not
    cover (or made again from every part, see the module's doc). Only what sorting reads of the new parts'
    rows is held (in batches of :data:`BATCH_ROWS`); the other columns are read for the first blocks' rows."""
    store_dir = Path(store_dir)
    parts = data["parts"]
    live = {int(p) for p, e in parts.items() if e["rows"]}
    old = data.get(KEY)
    cands, covered, tracked = None, set(), {}
    if old and int(old.get("k", 0)) == KEEP:
        try:
            kept = pl.scan_parquet(store_dir / old["file"])
            cands = kept.select(
                c for c in kept.collect_schema().names() if c in (*KEYS, *old["columns"])
            ).collect()
        except FileNotFoundError:
            cands = None
        if cands is not None and set(cands.get_column("part").unique().to_list()) <= live:
            covered, tracked = _ids(old["parts"]) & live, dict(old["columns"])
        else:
            cands = None  # a candidate's part was dropped: made again from every part
    new = sorted(live - covered)
    had_rows = cands is not None and cands.height > 0
    batch: list[int] = []
    rows = 0
    for n, i in enumerate(new):
        batch.append(i)
        rows += parts[str(i)]["rows"]
        if rows < BATCH_ROWS and n < len(new) - 1:
            continue
        scans = [_light(lf, data) for lf in scan_part_scalars(store_dir, data, batch)]
        frame = pl.concat(scans, how="diagonal_relaxed").collect()
        for c in columns(frame.columns, data):
            if c not in tracked:
                tracked[c] = not had_rows  # rows before this had no value of it
        had_rows = had_rows or frame.height > 0
        both = frame if cands is None else pl.concat([cands, frame], how="diagonal_relaxed")
        cands = _top(both, [c for c in tracked if c in both.columns], KEEP)
        batch, rows = [], 0
    if cands is None:
        cands = pl.DataFrame(schema={"part": pl.Int64, "row": pl.Int64})
    cols = [c for c in tracked if c in cands.columns]
    # The grid's first block of each sort keeps every column: the last commit's kept rows, a new part's read.
    lf = cands.lazy()
    heads = [sort_rows(lf, c, d).head(FIRST).select("part", "row") for c in cols for d in (True, False)]
    first = pl.concat(heads).unique().collect() if heads else cands.select("part", "row").clear()
    full = []
    if covered and first.height:
        kept = pl.scan_parquet(store_dir / old["file"]).filter(pl.col(FULL))
        full.append(kept.join(first.lazy(), on=["part", "row"], how="semi").drop(FULL).collect())
    fresh = first.filter(pl.col("part").is_in(new))
    if fresh.height:
        scans = scan_part_scalars(store_dir, data, sorted(set(fresh.get_column("part").to_list())))
        # Filtered on the row numbers first: the files' row-group statistics skip most of their rows.
        want = fresh.get_column("row").unique().sort().to_list()
        rows_of = pl.concat([lf.filter(pl.col("row").is_in(want)) for lf in scans], how="diagonal_relaxed")
        full.append(rows_of.join(fresh.lazy(), on=["part", "row"], how="semi").collect())
    light = set(cands.columns)
    if full:
        extra = pl.concat(full, how="diagonal_relaxed")
        extra = extra.select("part", "row", *(c for c in extra.columns if c not in light))
        cands = cands.join(extra.with_columns(pl.lit(True).alias(FULL)), on=["part", "row"], how="left")
        cands = cands.with_columns(pl.col(FULL).fill_null(False))
    else:
        cands = cands.with_columns(pl.lit(False).alias(FULL))
    name = f"topk-g{gen:06d}-{tag}.parquet"
    buf = io.BytesIO()
    cands.sort("part", "row").write_parquet(buf, compression="zstd", compression_level=1)
    write_atomic(store_dir / name, buf.getvalue())
    entry = {
        "file": name,
        "k": KEEP,
        "first": FIRST,
        "parts": _ranges(covered | set(new)),
        "columns": tracked,
    }
    return entry, name


def _entry(store) -> dict | None:
    """The store's :data:`KEY` entry when it covers every part with rows, else None."""
    m = store.manifest
    if "topk" not in m.derived:
        return None
    entry = m.derived["topk"].meta
    live = {int(p) for p, e in m.parts.items() if e["rows"]}
    if not live <= _ids(entry["parts"]):
        return None
    return entry


def head(store, sort: str, descending: bool, k: int) -> pl.DataFrame | None:
    """``part, row`` of the first ``k`` responses of every step shown, sorted by ``sort`` (ties by sample
    id, as :func:`data.queries.sort_rows`), read from the kept candidates; None where they cannot tell
    (see the module's doc)."""
    entry = _entry(store)
    schema = store.schema()
    if entry is None or k > int(entry["k"]) or sort not in entry["columns"] or sort not in schema:
        return None
    try:
        lf = pl.scan_parquet(Path(store.dir) / entry["file"])
        have = lf.collect_schema()
        if sort not in have:
            return None
        got = lf.select(*(c for c in KEYS if c != sort), pl.col(sort).cast(schema[sort])).collect()
    except FileNotFoundError:
        return None  # a later commit collected it
    keep = int(entry["k"])
    top = sort_rows(got.lazy(), sort, descending).head(keep).collect()
    if not entry["columns"][sort] and (top.height < keep or top.item(keep - 1, sort) is None):
        return None  # rows before the column appeared (null there) could come next
    below = store.manifest.visible_below
    if below is not None:
        hidden = top.get_column("step") >= below
        if hidden.any():
            if top.height >= keep:
                return None  # a hidden row holds a place a shown one would take
            top = top.filter(~hidden)
    return top.head(k).select(pl.col("part").cast(pl.UInt32), pl.col("row").cast(pl.UInt32))


def first_rows(store, keys: pl.DataFrame, cols: list[str]) -> pl.DataFrame | None:
    """``cols`` of the rows ``keys`` (``part, row``, in order) from the kept candidates, with the types of
    :meth:`RunStore.schema`; None unless every one of them kept its every column (see :data:`FIRST`)."""
    entry = _entry(store)
    if entry is None or keys.height > int(entry["first"]):
        return None
    schema = store.schema()
    try:
        lf = pl.scan_parquet(Path(store.dir) / entry["file"])
        have = lf.collect_schema()
        if any(c not in have for c in cols):
            return None
        got = rows_at(lf.filter(pl.col(FULL)), keys, cols)
    except FileNotFoundError:
        return None
    if got is None:
        return None
    return got.select(pl.col(c).cast(schema[c]) if c in schema else pl.col(c) for c in cols)


def collect_garbage(store_dir: Path, data: dict, old: dict | None, removable) -> None:
    """Remove candidate files neither ``data``'s entry nor the last commit's (``old``) names and that
    ``removable`` says may go."""
    keep = {e["file"] for e in (data.get(KEY), old) if e}
    for p in Path(store_dir).glob(PATTERN):
        if p.name not in keep and removable(p):
            p.unlink(missing_ok=True)


# ---- at a commit ---------------------------------------------------------------------------------------


def build(c: Commit) -> None:
    """This commit's parts merged into the candidates (see :func:`update`)."""
    entry, name = update(c.dir, c.data, c.gen, c.tag)
    c.written.append(c.dir / name)
    c.named.add(c.dir / name)
    c.set({KEY: entry})


def collect(c: Commit, removable) -> None:
    collect_garbage(c.dir, c.draft, c.old.get(KEY), removable)
