"""The token index: what the token filter (``tok=…``, :mod:`data.search.tokens`) scans instead of decoding
every token string of the parts.

Per file of ``parts/``, an uncompressed Arrow IPC file ``tokens/<block>.<part>.arrow`` of ``part, row, step,
ids``:
each response's tokens as numbers into that file's vocabulary (its distinct token strings, sorted, kept as
JSON in the schema's metadata under :data:`VOCAB_KEY`), UInt16 where the vocabulary has fewer than 65,536
strings, else UInt32. A filter matches its pattern against the vocabulary (a few thousand strings), skips a
file none of whose strings match, and scans the numbers of the others memory-mapped: the parts' token
strings cost 2.6 s to decode at 2.56M responses, their numbers are read in a fraction of that.

Beside it, for the tokens rare in that file (in at most :data:`POSTED_SHARE` of its rows, the rarest first
within :data:`POSTED_BUDGET` of its positions), their postings
``tokens/<block>.<part>.post.arrow``: one row per position holding one (``id, part, row, step, pos``), sorted
by ``id``, with the value there of every per-token metric the filter offers (:data:`POSTED_METRICS`, computed
by :mod:`data.metrics.token`'s own functions over the whole response; a metric null at every posting is left
out). The token file's metadata lists the posted numbers (:data:`POSTED_KEY`). A filter whose matching
strings are all posted in a file reads a few KB of postings, memory-mapped, instead of that file's rows: a
token in 0.5 % of 256k responses answers in 0.7 s (9.5 s before), one posted in each of a 2.56M run's 608
files in 0.6 s (10 s+ before; ``bench_token_filter``, benchmarks/RESULTS.md, under load).

Written by ingest at each commit for the files of ``parts/`` that commit holds and no token file has yet
(as the text index is, see :mod:`data.derived.text`); a file of ``parts/`` never changes, so neither does its
token file, which is collected with it. A part file without token strings has a token file with an empty
vocabulary and null ``ids``.
"""

from __future__ import annotations

import bisect
import itertools
import json
from collections.abc import Callable, Iterable
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from data.derived.base import Commit, index_missing
from data.metrics.token import INFERENCE_LOGPROB_FIELDS, TOKEN_COLUMNS, explode_tokens, token_metrics
from data.store.manifest import replaced
from data.token_frames import HOVER_METRICS

FOLDER = "tokens"  # in the store
VOCAB_KEY = b"rlboard.vocab"  # the schema metadata holding the file's vocabulary (a JSON list of strings)
POSTED_KEY = b"rlboard.posted"  # the numbers whose postings the file has (a JSON list, sorted)
POSTINGS = ".post"  # a token file's postings: tokens/<block>.<part>.post.arrow
# A token is posted in a file where at most this share of its rows hold it (1 % of a run's responses is
# 40 +- 6 of a 4,000-row file's; 2 % leaves room). A common token's postings would be the file's rows again.
POSTED_SHARE = 0.02
# At most this share of a file's positions is posted (the rarest tokens first): a posting is ~100 bytes, so
# the postings stay under ~1 byte a position (the token file's numbers take ~2.5), whatever the vocabulary.
# A generated run posted every token under 8 % of a file's rows without it: 5.1 GB at 2.56M responses.
POSTED_BUDGET = 0.01
# The per-token metrics a posting carries: every one the token filter offers (the token page's).
POSTED_METRICS = HOVER_METRICS


def in_store(store_dir: Path, part_file: Path) -> Path:
    """The token file in the store of the file ``part_file`` of ``parts/``."""
    return store_dir / FOLDER / f"{part_file.parent.name}.{part_file.stem}.arrow"


def token_table(parts: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """``(part, row, step, ids)`` of a file's rows (``part, row, step, response_tokens``) and its vocabulary: each token
    string's number is its index in the sorted distinct strings (a null string stays null)."""
    if "response_tokens" not in parts.columns:
        return parts.select("part", "row", "step", pl.lit(None, pl.List(pl.UInt16)).alias("ids")), []
    vocab = parts.get_column("response_tokens").explode().drop_nulls().unique().sort().to_list()
    dtype = pl.UInt16 if len(vocab) < (1 << 16) else pl.UInt32
    # An Enum of the vocabulary numbers each string by its place in it.
    numbers = pl.col("response_tokens").cast(pl.List(pl.Enum(vocab))).list.eval(pl.element().to_physical())
    return parts.select("part", "row", "step", numbers.cast(pl.List(dtype)).alias("ids")), vocab


def posted_ids(table: pl.DataFrame) -> list[int]:
    """The numbers of a :func:`token_table`'s tokens held by at most :data:`POSTED_SHARE` of its rows, the
    rarest first, as many as :data:`POSTED_BUDGET` of its positions hold."""
    limit = int(POSTED_SHARE * table.height)
    if limit < 1:
        return []
    ids = table.get_column("ids")
    # Each row's distinct numbers, counted: 10x faster than the distinct (row, number) pairs of the file.
    rows = ids.list.unique().explode().drop_nulls().value_counts(name="n")
    at = ids.explode().drop_nulls().value_counts(name="k")
    budget = POSTED_BUDGET * ids.list.len().sum()
    rare = rows.filter(pl.col("n") <= limit).join(at, on="ids").sort("n", "ids")
    return sorted(rare.filter(pl.col("k").cum_sum() <= budget).get_column("ids").to_list())


def postings(
    rows_at: Callable[[list[int], list[str]], pl.DataFrame],
    names: dict,
    table: pl.DataFrame,
    posted: list[int],
) -> pl.DataFrame:
    """``id, part, row, step, pos`` and :data:`POSTED_METRICS` of every position of a file of ``parts/``
    (``names``: its schema; ``table``: its :func:`token_table`; ``rows_at(rows, columns)``: ``row`` and
    ``columns`` of at least its rows ``rows``, see :func:`_rows_at`) holding a ``posted`` number, by ``id``:
    the metrics of the rows holding one, as the filter computes them (its own functions, over the whole
    response)."""
    at = table.with_row_index("i").filter(pl.col("ids").list.eval(pl.element().is_in(posted)).list.any())
    lists = [c for c in TOKEN_COLUMNS if c in names and c != "response_tokens"]
    extras = [c for c in INFERENCE_LOGPROB_FIELDS if c in names]
    rows = rows_at(at.get_column("i").to_list(), [*lists, *extras]).join(
        at.select(pl.col("i").alias("row"), pl.col("ids").alias("response_tokens")), on="row"
    )
    long = token_metrics(explode_tokens(rows, (), extras)).filter(pl.col("token").is_in(posted))
    out = long.join(at.select(pl.col("i").alias("row"), "part", pl.col("row").alias("key"), "step"), on="row")
    metrics = [m for m in POSTED_METRICS if out.get_column(m).null_count() < out.height]
    out = out.select(
        pl.col("token").cast(pl.UInt32).alias("id"),
        pl.col("part").cast(pl.UInt32),
        pl.col("key").cast(pl.UInt32).alias("row"),
        "step",
        pl.col("pos").cast(pl.UInt32),
        *(pl.col(m).cast(pl.Float64) for m in metrics),
    )
    return out.sort("id", "part", "row", "pos")


def _rows_at(src: Path, rows: list[int], columns: list[str]) -> pl.DataFrame:
    """``row`` (the row's place in the file) and ``columns`` of the row groups of ``src`` holding ``rows``:
    what the postings' metrics read (pyarrow, reading only those row groups: about half the CPU time of
    Polars reading these lists whole, less where a rare token leaves row groups out)."""
    meta = pq.ParquetFile(src)
    sizes = [meta.metadata.row_group(g).num_rows for g in range(meta.num_row_groups)]
    starts = list(itertools.accumulate(sizes, initial=0))
    groups = sorted({bisect.bisect_right(starts, r) - 1 for r in rows})
    table = pl.from_arrow(meta.read_row_groups(groups, columns=columns, use_threads=False))
    at = pl.concat([pl.int_range(starts[g], starts[g] + sizes[g], eager=True) for g in groups])
    return table.with_columns(at.cast(pl.Int64).alias("row"))


def _write_ipc(table: pa.Table, dst: Path, meta: dict[bytes, str]) -> None:
    schema = table.schema.with_metadata(meta)
    with replaced(dst, sync=False) as tmp, pa.OSFile(str(tmp), "wb") as sink:
        with ipc.new_file(sink, schema) as writer:
            writer.write_table(table.cast(schema))


_KEYS = ("part", "row", "step", "response_tokens")  # the columns of a file of parts/ its token file reads


def write(src: Path, dst: Path) -> None:
    """The token file of the file ``src`` of ``parts/`` and its postings (first: a reader that sees the token
    file sees them), each written so that a reader sees a whole file or none."""
    names = pl.read_parquet_schema(src)
    keys = pl.read_parquet(src, columns=[c for c in _KEYS if c in names])
    _write(keys, names, lambda rows, columns: _rows_at(src, rows, columns), dst)


def write_rows(rows: pl.DataFrame, dst: Path) -> list[Path]:
    """:func:`write` from the rows of a file of ``parts/`` as they were written there (ingest's worker,
    which holds them: the file's token strings are not read and decoded again, ~0.5 of the index's 1.7
    CPU-s at 256k responses). Returns the files written (the token file, and its postings if any)."""
    keys = rows.select(c for c in _KEYS if c in rows.columns)
    dst.parent.mkdir(exist_ok=True)

    def rows_at(at: list[int], columns: list[str]) -> pl.DataFrame:
        return rows[at].select(columns).with_columns(pl.Series("row", at, dtype=pl.Int64))

    _write(keys, rows.schema, rows_at, dst)
    return [dst, *([postings_of(dst)] if postings_of(dst).exists() else [])]


def _write(keys: pl.DataFrame, names, rows_at, dst: Path) -> None:
    table, vocab = token_table(keys)
    posted = posted_ids(table) if vocab else []
    if posted:
        _write_ipc(postings(rows_at, names, table, posted).to_arrow(), postings_of(dst), {})
    meta = {VOCAB_KEY: json.dumps(vocab, ensure_ascii=False), POSTED_KEY: json.dumps(posted)}
    _write_ipc(table.to_arrow(), dst, meta)


def postings_of(path: Path) -> Path:
    """The postings file of the token file ``path``."""
    return path.with_name(path.stem + POSTINGS + path.suffix)


def _meta(path: Path) -> dict:
    with pa.memory_map(str(path)) as source:
        return ipc.open_file(source).schema.metadata or {}


def vocabulary(path: Path) -> list[str]:
    """The vocabulary of a token file (its schema's metadata: no column is read)."""
    return json.loads(_meta(path).get(VOCAB_KEY, b"[]"))


def vocabulary_posted(path: Path) -> tuple[list[str], frozenset[int]]:
    """The vocabulary of a token file and the numbers its postings hold (none for a file without them)."""
    meta = _meta(path)
    return json.loads(meta.get(VOCAB_KEY, b"[]")), frozenset(json.loads(meta.get(POSTED_KEY, b"[]")))


def index_new_parts(store_dir: Path, rels: Iterable[str]) -> list[Path]:
    """Write the token files of the files ``rels`` of ``parts/`` that have none yet; returns those written."""
    return index_missing(store_dir, FOLDER, rels, in_store, write)


def token_files(store_dir: Path, part_files: Iterable[Path]) -> list[Path] | None:
    """The token file of each of ``part_files``; None when one is missing (the filter then decodes the
    parts' strings, as for a store without the index)."""
    out = [in_store(store_dir, Path(src)) for src in part_files]
    return out if all(p.exists() for p in out) else None


def build(c: Commit) -> None:
    """The token files of the files of ``parts/`` new in this commit that have none yet (ready before the
    manifest names it). Ingest's workers write most of them beside their part files (:func:`write_rows`,
    among the files the writer wrote); the commit names them all."""
    files = index_new_parts(c.dir, c.state)
    files += [p for p in map(postings_of, files) if p.exists()]
    c.written += files  # a refused commit's, removed with its parts (whose names may come again)
    mine = {in_store(c.dir, c.dir / rel) for rel in c.state}
    c.named |= mine | {postings_of(p) for p in mine}


def collect(c: Commit, removable) -> None:
    """Remove the token files whose file of ``parts/`` is gone (collected by ingest)."""
    folder = c.dir / FOLDER
    if not folder.is_dir():
        return
    for p in folder.glob("*.arrow"):
        block, _, part = p.stem.removesuffix(POSTINGS).partition(".")
        if not (c.dir / "parts" / block / f"{part}.parquet").exists():
            p.unlink(missing_ok=True)
