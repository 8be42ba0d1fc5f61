"""The text index: what a regex search over every step scans instead of decompressing the parts.

Per file of ``parts/``, its ``part, row, step, prompt, response`` as an uncompressed Arrow IPC file, scanned
memory-mapped (about 5x faster than the parts on the 2 GB benchmark run). A file of ``parts/`` never changes
once written, so neither does its index file.

It is kept in the store, ``<store>/text/<block>.<part>.arrow``, written by ingest at each commit for the
files of ``parts/`` that commit holds and no index file has yet (:func:`index_new_parts`): a commit adds its
own parts' texts and rewrites nothing, and the index files are in place before the manifest names the
commit, so a reader of that commit finds them ready. They go wherever the store goes (a store shared on
object storage uploads and mirrors them with its other files, see :mod:`data.store.shared`). A file whose
part file was collected is collected with it (:func:`collect_index`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path

import polars as pl

from data.derived.base import Commit, index_missing
from data.store.layout import rows_at
from data.store.manifest import replaced

COLUMNS = ("part", "row", "step", "prompt", "response")
# part and row as 32-bit (what a search answers, data.search.texts.KEYS): 2 MB of the 104 at 256k responses.
KEY_TYPES = {"part": pl.UInt32, "row": pl.UInt32}
FOLDER = "text"  # in the store


def _key(part_file: Path) -> str:
    """``<block>.<part>``: the files of a part in several step blocks share its name."""
    return f"{part_file.parent.name}.{part_file.stem}"


def in_store(store_dir: Path, part_file: Path) -> Path:
    """The index file in the store of the file ``part_file`` of ``parts/``."""
    return store_dir / FOLDER / f"{_key(part_file)}.arrow"


def _write(src: Path, dst: Path) -> None:
    """Write ``src``'s texts to ``dst`` so that a reader sees a whole file or none."""
    _write_texts(pl.read_parquet(src, columns=list(COLUMNS)), dst)


def write_rows(rows: pl.DataFrame, dst: Path) -> Path:
    """:func:`_write` from the rows of a file of ``parts/`` as they were written there (ingest's worker,
    which holds them: the file's texts are not read and decompressed again at the commit, on its one
    thread). Returns ``dst``."""
    dst.parent.mkdir(exist_ok=True)
    _write_texts(rows.select(COLUMNS), dst)
    return dst


def _write_texts(df: pl.DataFrame, dst: Path) -> None:
    _write_ipc(df.with_columns(pl.col(c).cast(t) for c, t in KEY_TYPES.items()), dst)


def _write_ipc(df: pl.DataFrame, dst: Path) -> None:
    """``df`` as the Arrow file ``dst``, written beside it first so that a reader sees a whole file or none."""
    with replaced(dst, sync=False) as tmp:
        df.write_ipc(tmp)


def index_new_parts(store_dir: Path, rels: Iterable[str]) -> list[Path]:
    """Write the index files of the files ``rels`` of ``parts/`` (paths in the store: the state a commit
    holds, :func:`data.store.table.table_files`) that have none yet; returns those written."""
    return index_missing(store_dir, FOLDER, rels, in_store, _write)


def collect_index(store_dir: Path) -> None:
    """Remove the index files in the store whose file of ``parts/`` is gone (collected by ingest)."""
    folder = store_dir / FOLDER
    if not folder.is_dir():
        return
    for p in folder.glob("*.arrow"):
        block, _, part = p.stem.partition(".")
        if not (store_dir / "parts" / block / f"{part}.parquet").exists():
            p.unlink(missing_ok=True)


def index_files(store_dir: Path, part_files: Iterable[Path]) -> list[Path]:
    """The index file in the store of each of ``part_files`` (the committed files of ``parts/``). One
    missing raises ``FileNotFoundError``: the commit that names its part wrote it (a later commit may
    have collected both: the state committed now is read again, see :func:`data.cache.shared`)."""
    out = [in_store(store_dir, src) for src in part_files]
    for p in out:
        if not p.exists():
            raise FileNotFoundError(p)
    return out


# ---- the top of the reward order ----------------------------------------------------------------------------
#
# The responses page's default view sorts by reward, best first (ties by sample id). Under a search over every
# step its first block is the first matches in that order: the matches among the run's first rows in that order
# are exactly those (every row after them comes after every match among them). So each commit also writes
# ``texttop-g<N>-<tag>.arrow``, beside the manifest that names it (``text_top``): the ``part, row, step,
# reward, sample_id, prompt, response`` of the first rows of the whole run in that order, at most TOP_ROWS
# rows and TOP_BYTES of texts, whatever the run's size; a search reads that, not every text, for its first
# block (see :func:`data.responses.fast_head`).
#
# Each row also keeps the other columns the grid's block shows (:data:`BLOCK_KEY`: ``source, line``, the
# metric and extra columns, the previews), read from the parts' scalars at the commit that first keeps it,
# so that the first block of such a search reads no part (see :func:`top_rows`).

TOP_KEY = "text_top"  # manifest: {"name", "rows", "of": rows of the state, "covers": index files' keys,
# "block": the other columns its rows keep}
BLOCK_KEY = "block"
TOP_ROWS = 32_768
TOP_BYTES = 32 << 20
TOP_COLUMNS = ("part", "row", "step", "reward", "sample_id", "prompt", "response")
TOP_SCHEMA = {
    "part": pl.Int64,
    "row": pl.Int64,
    "step": pl.Int64,
    "reward": pl.Float64,
    "sample_id": pl.String,
    "prompt": pl.String,
    "response": pl.String,
}
TOP_SORT = "reward"  # the order the top file keeps: reward, best first, ties by sample id (nulls last)


def top_order(lf: pl.LazyFrame) -> pl.LazyFrame:
    """``lf`` in the responses page's default order (see :func:`data.queries.sort_rows`, reward best first)."""
    return lf.sort([TOP_SORT, "sample_id"], descending=[True, False], nulls_last=True)


def _bounded(df: pl.DataFrame) -> pl.DataFrame:
    """The first rows of ``df`` (in :func:`top_order`): at most TOP_ROWS, and TOP_BYTES of texts."""
    size = pl.col("prompt").str.len_bytes().fill_null(0) + pl.col("response").str.len_bytes().fill_null(0)
    return df.head(TOP_ROWS).filter(size.cum_sum() <= TOP_BYTES)


def _copied(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with its texts copied: a string picked from a file's rows keeps the whole file's buffer alive
    (the previews of the 296 files of 2.56M responses: +450 MB of ingest's peak)."""
    texts = [c for c, t in df.schema.items() if t == pl.String]
    return df.with_columns(pl.Series(c, df.get_column(c).to_list(), pl.String) for c in texts)


def _top_of_parts(parts: list[str], index: list[str]) -> tuple[pl.DataFrame, bool, int]:
    """``(the first rows of the files parts in top_order, bounded as by _bounded, whether they are all of
    their rows, how many rows they hold)``. The order and the texts' sizes are read streaming from the parts;
    then only the texts kept, from their ``index`` files one at a time, copied (a string filtered from a
    file keeps the file's whole buffer alive): never every text at once (ingest's peak memory)."""
    size = pl.col("prompt").str.len_bytes().fill_null(0) + pl.col("response").str.len_bytes().fill_null(0)
    lf = pl.scan_parquet(parts, missing_columns="insert", extra_columns="ignore").select(
        "part", "row", "step", "reward", "sample_id", size.alias("__bytes")
    )
    n = lf.select(pl.len()).collect().item()
    keys = top_order(lf).head(TOP_ROWS).collect(engine="streaming")
    keys = keys.filter(pl.col("__bytes").cum_sum() <= TOP_BYTES).drop("__bytes")
    want = keys.lazy().select("part", "row")
    found = []
    for f in index:  # one file at a time, each kept row's texts copied out of the file's buffers
        got = (
            pl.scan_ipc(f)
            .select(pl.col("part").cast(pl.Int64), pl.col("row").cast(pl.Int64), "prompt", "response")
            .join(want, on=["part", "row"], how="semi")
        )
        got = got.collect()
        found.append(_copied(got))
    texts = (
        pl.concat(found)
        if found
        else pl.DataFrame(schema={c: TOP_SCHEMA[c] for c in TOP_COLUMNS[:2] + TOP_COLUMNS[5:]})
    )
    top = keys.join(texts, on=["part", "row"], how="left", maintain_order="left")
    return top.select(TOP_COLUMNS), top.height == n, n


# What a commit gives write_top to read its new rows' block columns: the columns, and the scans of the
# scalars of some part ids (``data.derived.steps.scan_part_scalars``; ingest's, which this package does not
# import).
Block = tuple[list[str], Callable[[list[int]], list[pl.LazyFrame]]]


def _block_rows(keys: pl.DataFrame, block: Block) -> pl.DataFrame:
    """``part, row`` and the ``block`` columns of the rows ``keys``, read from their parts' scalars one file at
    a time (a column a file lacks is null there, as :meth:`RunStore.read_keys` gives it)."""
    cols, scans = block
    want = keys.select(pl.col("part").cast(pl.Int64), pl.col("row").cast(pl.Int64)).unique()
    found = [pl.DataFrame(schema={"part": pl.Int64, "row": pl.Int64})]
    pids = sorted(set(want.get_column("part").to_list()))
    for lf in scans(pids) if pids else []:
        have = lf.collect_schema().names()
        got = (
            lf.select(
                pl.col("part").cast(pl.Int64), pl.col("row").cast(pl.Int64), *(c for c in cols if c in have)
            )
            .join(want.lazy(), on=["part", "row"], how="semi")
            .collect()
        )
        found.append(_copied(got))
    rows = pl.concat(found, how="diagonal_relaxed")
    return rows.with_columns(pl.lit(None).alias(c) for c in cols if c not in rows.columns).select(
        "part", "row", *cols
    )


def _with_block(merged: pl.DataFrame, block: Block) -> pl.DataFrame:
    """``merged`` (with ``__b``: whether a row has its block columns already) with every row's block
    columns, in its order."""
    cols = block[0]
    merged = merged.with_row_index("__o")
    done = merged.filter(pl.col("__b"))
    todo = merged.filter(~pl.col("__b")).select("__o", *TOP_COLUMNS)
    if todo.height:
        got = _block_rows(todo, block)
        todo = todo.join(got, on=["part", "row"], how="left", maintain_order="left")
    out = pl.concat([done, todo], how="diagonal_relaxed").sort("__o")
    out = out.with_columns(pl.lit(None).alias(c) for c in cols if c not in out.columns)
    return out.select(*TOP_COLUMNS, *cols)


def write_top(
    store_dir: Path, rels: Iterable[str], old: dict | None, name: str, block: Block | None = None
) -> dict | None:
    """Write the top file ``name`` (in the store) of the state whose files of ``parts/`` are ``rels``, from
    the previous top file ``old`` (its manifest entry) and the files of ``parts/`` it does not cover (all
    of them when a file it covers is gone), its rows with the ``block`` columns when given; returns its
    manifest entry."""
    files = {_key(store_dir / rel): in_store(store_dir, store_dir / rel) for rel in rels}
    covers = set(old["covers"]) if old else set()
    prev = store_dir / old["name"] if old else None
    if not old or not covers <= set(files) or prev is None or not prev.exists():
        covers, prev = set(), None
    parts = {_key(store_dir / rel): store_dir / rel for rel in rels}
    new = [k for k in sorted(files) if k not in covers]
    rows = int(old["of"]) if prev is not None else 0
    cols = [c for c in block[0] if c not in TOP_COLUMNS] if block else []
    block = (cols, block[1]) if block else None
    lists: list[tuple[pl.DataFrame, bool]] = []
    if prev is not None:
        # Its rows keep their block columns when it kept those asked for now (else they are read again).
        kept = bool(block) and set(cols) <= set((old or {}).get(BLOCK_KEY) or ())
        df = pl.read_ipc(prev, columns=[*TOP_COLUMNS, *cols] if kept else list(TOP_COLUMNS))
        lists.append((df.with_columns(pl.lit(kept).alias("__b")), int(old["rows"]) == rows))
    if new:
        got, whole, n = _top_of_parts([str(parts[k]) for k in new], [str(files[k]) for k in new])
        rows += n
        lists.append((got.with_columns(pl.lit(False).alias("__b")), whole))
    if not lists:
        merged = pl.DataFrame(schema={**TOP_SCHEMA, "__b": pl.Boolean})
    else:
        both = pl.concat([df for df, _ in lists], how="diagonal_relaxed").with_row_index("__i")
        ordered = top_order(both.lazy()).collect()
        # A list that is only the first rows of its files is exact up to its last row: cut there.
        cut = ordered.height
        start = 0
        for df, whole in lists:
            if not whole and df.height:
                at = ordered.get_column("__i").index_of(start + df.height - 1)
                cut = min(cut, int(at) + 1)
            start += df.height
        merged = _bounded(ordered.head(cut).drop("__i"))
    merged = _with_block(merged, block) if block else merged.select(TOP_COLUMNS)
    _write_ipc(merged, store_dir / name)
    entry = {"name": name, "rows": merged.height, "of": rows, "covers": sorted(files)}
    if block:
        entry[BLOCK_KEY] = cols
    return entry


def top_entry(manifest) -> dict | None:
    """The manifest's entry of the top file (:data:`TOP_KEY`), None when its commit wrote none."""
    entry = manifest.derived.get("texttop")
    return None if entry is None else dict(entry.meta)


def top_rows(store_dir: Path, entry: dict | None, keys: pl.DataFrame, cols: list[str]) -> pl.DataFrame | None:
    """``cols`` of the rows ``keys`` (``part, row``, in order; all rows of the top file ``entry`` names) as
    the top file keeps them (types as written: the caller casts them); None where it cannot tell (a column
    it does not keep, a row it does not hold, the file collected by a later commit)."""
    if not entry or BLOCK_KEY not in entry or any(c not in (*TOP_COLUMNS, *entry[BLOCK_KEY]) for c in cols):
        return None
    try:
        return rows_at(pl.scan_ipc(Path(store_dir) / entry["name"]), keys, cols)
    except FileNotFoundError:
        return None


# ---- at a commit ---------------------------------------------------------------------------------------


def build(c: Commit) -> None:
    """The texts of the files of ``parts/`` new in this commit that have none yet (ready before the manifest
    names it). Ingest's workers write most of them beside their part files (:func:`write_rows`, among the
    files the writer wrote); the commit names them all."""
    files = index_new_parts(c.dir, c.state)
    c.written += files  # a refused commit's, removed with its parts (whose names may come again)
    c.named |= {in_store(c.dir, c.dir / rel) for rel in c.state}


def collect(c: Commit, removable) -> None:
    collect_index(c.dir)


def build_top(c: Commit) -> None:
    """The first rows of the run in the responses page's default order, with their texts and the grid's
    columns (the first block of a search over every step reads them, not every text nor any part)."""
    name = c.file("texttop", "arrow")
    c.written.append(c.dir / name)
    try:
        top = write_top(c.dir, c.state, c.old.get(TOP_KEY), name, c.top_block())
    except pl.exceptions.PolarsError:  # parts it cannot order (no reward column): searches read every text
        logging.getLogger(__name__).exception("the top of the reward order was not written")
        top = None
    if top is not None:
        c.named.add(c.dir / name)
    c.set({TOP_KEY: top})


def collect_top(c: Commit, removable) -> None:
    """Remove every top file but this commit's. The last commit's is not kept for its readers (as other
    kinds' files are), since none needs it to answer right: one that opened it still reads it; one that
    finds it gone searches every text, as for a commit without one (``data.search.texts._fast_head``), or,
    gone mid-read, reads the state committed now (``data.cache.shared``); :func:`top_rows` then reads the
    parts. Keeping it cost a second copy of the top rows' texts (27 MB of a 700 MB store at 256k
    responses) for the speed of a search that straddles a commit."""
    keep = {(c.draft.get(TOP_KEY) or {}).get("name")}
    for p in c.dir.glob("texttop-g*.arrow"):
        if p.name not in keep and removable(p):
            p.unlink(missing_ok=True)
