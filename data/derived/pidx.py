"""A prompt-keyed copy of the store's scalars, written at each commit, so that one prompt's history (the prompts
page with a prompt selected) reads that prompt's rows instead of every response of the run.

The index is a list of files beside the store (``pidx-g<N>-<i>-<tag>.arrow``), each holding the
:data:`COLUMNS` of some parts' rows sorted by ``prompt_key``, as an Arrow IPC file of record batches of
:data:`BATCH` rows whose schema carries the first key of every batch (:data:`FIRST_KEYS`): one prompt's rows
in a file are found by a binary search over those keys and read from one or two batches, without a footer to
parse (a Parquet file of 100 row groups and 40 columns has a 240 KB footer: ~3 ms a file, which made the
page's first answer grow with the run's count of files; an Arrow file's footer lists its batches' offsets, and
reading one costs ~0.3 ms; ~0.9 ms with its LZ4 batches). The manifest names them under :data:`INDEX_KEY` with
``upto``, the first part id not indexed.

A commit indexes only the parts applied since the last one (``upto`` on), in files of at most
:data:`FILE_ROWS` rows, and appends their names: it never rewrites what earlier commits wrote, except that
files at the end of the list are merged. Small files (fewer than half :data:`FILE_ROWS` rows: a live run's
commits of a few rows) are merged as a binary counter merges (two are merged when the newer holds at least
half the older's rows) until they make a full one; full files are merged :data:`FAN` at a time, those of one
tier (:func:`_tier`: 16 full files make one of the next), with the small files between them. A run keeps
~log2(FILE_ROWS) small files and fewer than 2 * FAN a tier (~14 files at 2.56M responses), each row copied a
logarithmic number of times; a large first read writes its full files once and merges none of them. Merging
those as a binary counter too (2 files at 2.56M instead of 14) took most of the index's CPU at the commit that
ends a large read, on that commit's one thread, to save ~0.9 ms a file of reading one prompt's history (60
prompts of the 256k run: 4.9 ms from 3 files, 12.3 ms from 11; benchmarks/RESULTS.md, "2026-11-30, ingest
within 1.1x"). Files of any size are merged a window of keys at a time (:func:`_merge`: what a commit
holds is a window's rows, ~:data:`MERGE_WINDOW` batches of each file), the trailing files a commit merges all
at once.

Rows of parts dropped since they were indexed (a file read again) and of steps not shown yet stay in the
files: the reader keeps only the rows of parts the manifest has, below ``visible_below``, as a scan does.
A store committed without an index (or with one that does not cover its parts) is read by the scan.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from data.derived.base import Commit
from data.derived.steps import scan_part_scalars
from data.metrics.registry import stored_columns
from data.store.manifest import replaced

# The manifest's entry: {"files": [{"name", "rows", "lo", "hi"}], "upto": the first part id not indexed}, the
# files in part order, each holding rows of parts lo..hi.
INDEX_KEY = "prompt_index"
PATTERN = "pidx-g*"
# The store's scalars and the files' own group id and advantage: what one prompt's history reads.
COLUMNS = (*stored_columns(), "group_id", "advantage")
FILE_ROWS = 200_000  # rows of a file written from new parts (merges make larger ones)
FAN = 16  # full files (at least half FILE_ROWS rows) of one tier merged at a time
# Rows per record batch of an index file: a prompt's rows in one file (~100 in a run of 2,000 prompts) are
# read with at most this many others. The schema's metadata under FIRST_KEYS is the JSON list of each
# batch's first key, but for the batches at the end that start with a null key (nulls sort last).
BATCH = 512
BLOCK = 64 * BATCH  # rows converted to Arrow at a time when a file is written
ORDER = ("prompt_key", "part", "row")  # of each file's rows (nulls last)
FIRST_KEYS = b"rlboard.first_keys"
# A merge reads the files' rows whose keys fall in a window of ~MERGE_WINDOW batches of them all (~32k rows,
# ~15 MB, at a time).
MERGE_WINDOW = 64
# LZ4: the index's files take half the disk of uncompressed ones (62 against 117 MB at 256k responses, the
# store's second largest kind), and one prompt's history reads in 1.07x the time, interleaved (its one or
# two batches a file decompress quickly); zstd (45 MB) read in 1.24x, rejected. benchmarks/RESULTS.md,
# "2026-11-29, store size".
COMPRESSION = "lz4"
# One prompt's rows are read from more than READ_ALONE files READ_THREADS at a time (a large read's full files
# are not merged: ~14 files at 2.56M responses, each ~1 ms to read). `benchmarks/bench_pidx_files.py
# --threads N` on the 2.56M run's store (14 files, 60 prompts, 10 rounds; two processes each): 14.3-14.4 ms
# one file after the other, 12.6-12.9 two at a time, 12.6-13.3 four; four left the process the largest
# (225-236 MB after, two 223, one 205-227).
READ_ALONE = 3
READ_THREADS = 2


def _scalars_of(store_dir: Path, data: dict, ids: list[int]) -> tuple[pl.DataFrame, pl.Series]:
    """The :data:`COLUMNS` the scalars of parts ``ids`` have (their loose files, or their pack's rows), as
    read, and the order of their rows by :data:`ORDER` (written a block at a time in that order: a sorted
    copy of a file's 200,000 rows of 43 columns held ~200 MB more at a commit)."""
    frames = []
    for f in scan_part_scalars(store_dir, data, ids):
        have = f.collect_schema()  # once a part: asked for each of COLUMNS, a scan resolved it ~40 times
        frames.append(f.select(c for c in COLUMNS if c in have))
    rows = pl.concat(frames, how="diagonal_relaxed").collect()
    return rows, rows.select(pl.arg_sort_by(list(ORDER), nulls_last=True)).to_series()


class _Batches:
    """An index file's writer (``w``, an Arrow IPC file writer of ``schema``): rows added in pieces of any
    size are written in batches of exactly :data:`BATCH` rows (the last one fewer), so that batch ``i``
    starts at row ``i * BATCH``, as the first keys in the schema say."""

    def __init__(self, w, schema: pa.Schema):
        self.w, self.metadata = w, schema.metadata
        self.pending = schema.remove_metadata().empty_table()

    def add(self, table: pa.Table) -> None:
        table = table.cast(self.pending.schema)
        if self.pending.num_rows:
            table = pa.concat_tables([self.pending, table])
        whole = table.num_rows - table.num_rows % BATCH
        self._put(table.slice(0, whole))
        self.pending = table.slice(whole)

    def close(self) -> None:
        self._put(self.pending)
        self.pending = self.pending.slice(0, 0)

    def _put(self, table: pa.Table) -> None:
        # One Arrow chunk per column, so that batches start at multiples of BATCH.
        for b in table.combine_chunks().to_batches(max_chunksize=BATCH):
            self.w.write_batch(b.replace_schema_metadata(self.metadata))


@contextmanager
def _index_file(store_dir: Path, name: str, schema: pa.Schema) -> Iterator[_Batches]:
    """The index file ``name`` beside the store, written through :class:`_Batches` and moved in place once
    whole."""
    with replaced(Path(store_dir) / name) as tmp, pa.OSFile(str(tmp), "wb") as sink:
        with ipc.new_file(sink, schema, options=ipc.IpcWriteOptions(compression=COMPRESSION)) as w:
            out = _Batches(w, schema)
            yield out
            out.close()


def _write(store_dir: Path, name: str, rows: pl.DataFrame, order: pl.Series | None = None) -> None:
    """``rows`` in :data:`ORDER` (sorted so, or in the order of the indices ``order``) as the Arrow file
    ``name``: batches of :data:`BATCH` rows, their first keys in the schema. Written to the file a block of
    rows at a time (then moved in place), so that a commit holds the rows once and a block of them as
    Arrow, not the whole file again."""
    keys = rows.get_column("prompt_key")
    if order is not None:
        keys = keys.gather(order)
    if not keys.is_sorted(nulls_last=True):
        raise ValueError("prompt index rows must be sorted by prompt_key")
    # Nulls sort last: the batches that start with one hold no other key, and have no first key.
    firsts = keys.gather_every(BATCH).drop_nulls().to_list()
    schema = rows.head(0).to_arrow().schema.with_metadata({FIRST_KEYS: json.dumps(firsts).encode()})
    with _index_file(store_dir, name, schema) as out:
        for start in range(0, rows.height, BLOCK):
            block = rows.slice(start, BLOCK) if order is None else rows[order.slice(start, BLOCK)]
            out.add(block.to_arrow())


def _read_whole(path: Path) -> pl.DataFrame:
    """Every row of one index file."""
    with pa.OSFile(str(path)) as src:
        return pl.from_arrow(ipc.open_file(src).read_all())


def _read_key(path: Path, key: str, cols: list[str]) -> pa.Table:
    """The rows of prompt ``key`` in one index file (``cols`` of them that the file has), as an Arrow table
    (converted once for all files, see :func:`read`)."""
    with pa.OSFile(str(path)) as src:  # read into memory: nothing refers to the file once closed
        reader = ipc.open_file(src)
        firsts = json.loads(reader.schema.metadata[FIRST_KEYS])
        # Batch i holds keys from firsts[i] to firsts[i + 1]: the key is in the batches from the last one
        # that starts before it to the last one that starts with it.
        lo, hi = max(0, bisect.bisect_left(firsts, key) - 1), bisect.bisect_right(firsts, key)
        have = set(reader.schema.names)
        names = [c for c in cols if c in have]
        if lo >= hi:
            return reader.schema.empty_table().select(names)
        table = pa.Table.from_batches([reader.get_batch(i) for i in range(lo, hi)], reader.schema)
    # Sorted by key: the prompt's rows are one run of them.
    at = pc.indices_nonzero(pc.fill_null(pc.equal(table.column("prompt_key"), key), False))
    if len(at) == 0:
        return table.slice(0, 0).select(names)
    return table.slice(at[0].as_py(), len(at)).select(names)


def _from_arrow(tables: list[pa.Table]) -> list[pl.DataFrame]:
    """Arrow tables as frames: one conversion of them all (~0.4 ms each otherwise), or one each where
    their types do not unify (the caller unifies the frames as it would any). Their chunks are joined
    first: a frame made of one chunk per file took ~2 ms more at 15 files (2.56M responses)."""
    if not tables:
        return []
    try:
        return [pl.from_arrow(pa.concat_tables(tables, promote_options="permissive").combine_chunks())]
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return [pl.from_arrow(t) for t in tables]


class _Source:
    """An Arrow index file open for a merge: its batches and their first keys. Read, not memory-mapped: the
    mapped pages a merge touched would stay in the process's resident memory (a whole file's)."""

    def __init__(self, path: Path):
        self.file = pa.OSFile(str(path))
        self.reader = ipc.open_file(self.file)
        self.firsts = json.loads(self.reader.schema.metadata[FIRST_KEYS])
        self.batches = self.reader.num_record_batches
        self._narrow: dict[tuple[str, ...], ipc.RecordBatchFileReader] = {}

    def _reader(self, columns: list[str] | None):
        """A reader of all the columns, or of ``columns`` alone (it reads no other column's buffers)."""
        if columns is None:
            return self.reader
        key = tuple(c for c in columns if c in self.reader.schema.names)
        if key not in self._narrow:
            at = [self.reader.schema.get_field_index(c) for c in key]
            self._narrow[key] = ipc.open_file(self.file, options=ipc.IpcReadOptions(included_fields=at))
        return self._narrow[key]

    def close(self) -> None:
        self.file.close()

    def rows(self, lo: str | None, hi: str | None, nulls: bool, columns: list[str] | None) -> pa.Table:
        """The rows whose key is in ``[lo, hi)`` (None: no bound), or with ``nulls`` those whose key is
        null, of the batches that can hold them; ``columns`` of them (None: all)."""
        f = self.firsts
        if nulls:  # the batches that start with a null key, and the one before them
            start, end = max(0, len(f) - 1), self.batches
        else:
            start = 0 if lo is None else max(0, bisect.bisect_left(f, lo) - 1)
            end = self.batches if hi is None else bisect.bisect_left(f, hi)
        reader = self._reader(columns)
        schema = reader.schema.remove_metadata()
        if start >= end:
            return schema.empty_table()
        table = pa.Table.from_batches([reader.get_batch(i) for i in range(start, end)], reader.schema)
        key = table.column("prompt_key")
        if nulls:
            keep = pc.is_null(key)
        else:
            keep = pc.is_valid(key)
            if lo is not None:
                keep = pc.and_(keep, pc.greater_equal(key, lo))
            if hi is not None:
                keep = pc.and_(keep, pc.less(key, hi))
        return table.filter(pc.fill_null(keep, False)).select(schema.names).replace_schema_metadata(None)


def _windows(sources: list[_Source]) -> list[tuple[str | None, str | None, bool]]:
    """``(lo, hi, nulls)`` of the key windows a merge of ``sources`` goes through, in key order: bounds
    among the first keys of the one with the most batches, so that a window holds ~:data:`MERGE_WINDOW`
    batches of them all (the files' keys are alike: prompts recur), then the null keys."""
    big = max(sources, key=lambda s: s.batches)
    step = max(1, MERGE_WINDOW * big.batches // max(1, sum(s.batches for s in sources)))
    bounds = sorted(set(big.firsts[step::step]))
    edges = [None, *bounds, None]
    return [(edges[i], edges[i + 1], False) for i in range(len(edges) - 1)] + [(None, None, True)]


def _merge(store_dir: Path, name: str, paths: list[Path], live: set[int]) -> int:
    """The rows of parts ``live`` of the Arrow index files ``paths`` as one index file ``name`` (sorted by
    :data:`ORDER`, batches of :data:`BATCH` rows, their first keys in the schema, as :func:`_write` writes
    them), a window of keys at a time (:func:`_windows`); returns its count of rows. The first keys go in
    the schema, which the file starts with: a first pass over the windows' keys alone tells them."""
    sources = [_Source(p) for p in paths]
    try:
        return _merge_sources(store_dir, name, sources, sorted(live))
    finally:
        for s in sources:
            s.close()


def _merge_sources(store_dir: Path, name: str, sources: list[_Source], live_parts: list[int]) -> int:
    """:func:`_merge` of the open ``sources``."""
    windows = _windows(sources)
    # The merged file's columns: those of every file, in the first's order, each of their common type.
    target = pl.concat(
        [pl.from_arrow(s.reader.schema.remove_metadata().empty_table()) for s in sources],
        how="diagonal_relaxed",
    )

    def window(lo, hi, nulls, columns) -> pl.DataFrame:
        tables = [s.rows(lo, hi, nulls, columns) for s in sources]
        frames = [target.select(c for c in target.columns if columns is None or c in columns)] + [
            pl.from_arrow(t) for t in tables if t.num_rows
        ]
        df = pl.concat(frames, how="diagonal_relaxed")
        return df.filter(pl.col("part").cast(pl.Int64).is_in(live_parts))

    firsts: list[str] = []
    total = 0
    for lo, hi, nulls in windows:
        keys = window(lo, hi, nulls, ["prompt_key", "part"]).get_column("prompt_key").sort(nulls_last=True)
        firsts += keys.gather(list(range((-total) % BATCH, keys.len(), BATCH))).drop_nulls().to_list()
        total += keys.len()
    schema = target.to_arrow().schema.with_metadata({FIRST_KEYS: json.dumps(firsts).encode()})
    with _index_file(store_dir, name, schema) as out:
        for lo, hi, nulls in windows:
            df = window(lo, hi, nulls, None).sort(ORDER, nulls_last=True)
            if df.height:
                out.add(df.select(target.columns).cast(target.schema).to_arrow())
    return total


def _tier(rows: int) -> int:
    """The tier of a full file of ``rows`` rows: 0 below :data:`FAN` times half :data:`FILE_ROWS`, 1 below
    FAN**2 times, and so on."""
    tier, size = 0, FILE_ROWS // 2 * FAN
    while rows >= size:
        tier, size = tier + 1, size * FAN
    return tier


def _merge_groups(files: list[dict]) -> list[tuple[int, int]]:
    """The runs ``(first, last)`` of ``files`` (indices, ``first < last``) a commit merges, the files taken
    one after the other as if each were just written: the last two while both are small (fewer than half
    :data:`FILE_ROWS` rows) and the newer holds at least half the older's rows (a binary counter); once the last
    :data:`FAN` full files are of one tier, those and the small files after the first of them (a commit
    that ends with a small file leaves it between full ones). A commit that writes many files thus merges
    them as it would one by one, at once; files already so merged are left as they are."""
    stack: list[tuple[int, int, int]] = []  # rows, first, last
    for i, f in enumerate(files):
        stack.append((f["rows"], i, i))
        while True:
            sizes = [e[0] for e in stack]
            fulls = [j for j, n in enumerate(sizes) if 2 * n >= FILE_ROWS]
            if len(sizes) > 1 and 2 * max(sizes[-2:]) < FILE_ROWS and 2 * sizes[-1] >= sizes[-2]:
                at = len(stack) - 2
            elif len(fulls) >= FAN and len({_tier(sizes[j]) for j in fulls[-FAN:]}) == 1:
                at = fulls[-FAN]
            else:
                break
            group = stack[at:]
            stack[at:] = [(sum(e[0] for e in group), group[0][1], group[-1][2])]
    return [(first, last) for _, first, last in stack if last > first]


def update(store_dir: Path, data: dict, gen: int, tag: str) -> tuple[dict, list[str]]:
    """The :data:`INDEX_KEY` entry of a commit of manifest ``data`` (generation ``gen``, writer ``tag``)
    and the names of the files it wrote: the last commit's entry, plus the parts with rows from its
    ``upto`` to ``data["next_part"]``."""
    old = data.get(INDEX_KEY) or {"files": [], "upto": 0}
    files = [dict(f) for f in old["files"]]
    upto, top = int(old["upto"]), int(data["next_part"])
    parts = data["parts"]
    ids = [i for i in range(upto, top) if str(i) in parts and parts[str(i)]["rows"]]
    written: list[str] = []
    k = 0

    def name() -> str:
        nonlocal k
        k += 1
        return f"pidx-g{gen:06d}-{k}-{tag}.arrow"

    # A file whose parts were all dropped since (a file read again) is left out.
    live = {int(p) for p, e in parts.items() if e["rows"]}
    files = [f for f in files if any(f["lo"] <= p <= f["hi"] for p in live)]
    batch: list[int] = []
    rows = 0
    for n, i in enumerate(ids):
        batch.append(i)
        rows += parts[str(i)]["rows"]
        if rows >= FILE_ROWS or n == len(ids) - 1:
            f = {"name": name(), "rows": rows, "lo": batch[0], "hi": batch[-1]}
            _write(store_dir, f["name"], *_scalars_of(store_dir, data, batch))
            written.append(f["name"])
            files.append(f)
            batch, rows = [], 0
    # Merge files as _merge_groups says, once the commit's new files are written: each run of files it
    # would merge, at once (each row of the commit copied once more, not once per file written after it).
    for first, last in reversed(_merge_groups(files)):
        group = files[first : last + 1]
        f = {"name": name(), "rows": 0, "lo": group[0]["lo"], "hi": group[-1]["hi"]}
        paths = [store_dir / x["name"] for x in group]
        f["rows"] = _merge(store_dir, f["name"], paths, live)
        written.append(f["name"])
        files[first : last + 1] = [f]
    return {"files": files, "upto": max(upto, top)}, written


def read(store, key: str, columns: list[str]) -> pl.DataFrame | None:
    """The rows of prompt ``key`` the store shows (``columns`` of them, the scan's types), in part and row
    order, read from the index; None when the store's last commit wrote none that covers its parts."""
    m = store.manifest
    entry = m.derived["pidx"].meta if "pidx" in m.derived else None
    if not entry or int(entry["upto"]) < int(m.next_part):
        return None
    schema = store.schema()
    cols = [c for c in dict.fromkeys(("part", "row", *columns)) if c in schema]
    live = [int(p) for p, e in m.parts.items() if e["rows"]]
    below = m.visible_below
    paths = [Path(store.dir) / f["name"] for f in entry["files"]]
    try:
        # Several files a few at a time: pyarrow reads and decompresses them without the GIL.
        if len(paths) > READ_ALONE:
            with ThreadPoolExecutor(READ_THREADS, thread_name_prefix="pidx-read") as pool:
                frames = list(pool.map(lambda p: _read_key(p, key, cols), paths))
        else:
            frames = [_read_key(p, key, cols) for p in paths]
    except FileNotFoundError:
        return None  # a later commit merged and collected it: the caller scans
    frames = _from_arrow(frames)
    if not frames:
        rows = pl.DataFrame(schema={c: schema[c] for c in cols})
    else:
        rows = pl.concat(frames, how="diagonal_relaxed")
    for c in cols:
        if c not in rows.columns:
            rows = rows.with_columns(pl.lit(None, schema[c]).alias(c))
    rows = rows.filter(pl.col("part").is_in(live))
    if below is not None:
        rows = rows.filter(pl.col("step") < below)
    rows = rows.sort("part", "row").select(pl.col(c).cast(schema[c]) for c in cols)
    return rows.select(c for c in dict.fromkeys(columns) if c in schema)


def collect_garbage(store_dir: Path, data: dict, removable) -> None:
    """Remove index files ``data``'s entry does not name and that ``removable`` says may go.

    The last commit's files are not kept for its readers (as other kinds' files are): a reader that finds
    one gone scans, as for a commit without an index (:func:`read`), and one that opened it still reads it.
    A commit that merges files would else keep each merged row twice (a 66 MB file beside the 117 MB one
    merged from it, of a store of 800 MB at 256k responses)."""
    keep = {f["name"] for f in (data.get(INDEX_KEY) or {"files": []})["files"]}
    for p in Path(store_dir).glob(PATTERN):
        if p.name not in keep and removable(p):
            p.unlink(missing_ok=True)


# ---- at a commit ---------------------------------------------------------------------------------------


def build(c: Commit) -> None:
    """This commit's new parts added to the index (see :func:`update`)."""
    entry, files = update(c.dir, c.data, c.gen, c.tag)
    c.written += [c.dir / f for f in files]
    c.named |= {c.dir / f["name"] for f in entry["files"]}
    c.set({INDEX_KEY: entry})


def collect(c: Commit, removable) -> None:
    collect_garbage(c.dir, c.draft, removable)
