"""The token index: what the token filter (``tok=…``, :mod:`data.search.tokens`) scans instead of decoding
every token string of the parts.

Per file of ``parts/``, an uncompressed Arrow IPC file ``tokens/<block>.<part>.arrow`` of ``part, row, step,
ids``:
each response's tokens as numbers into that file's vocabulary (its distinct token strings, sorted, kept as
JSON in the schema's metadata under :data:`VOCAB_KEY`), UInt16 where the vocabulary has fewer than 65,536
strings, else UInt32. A filter matches its pattern against the vocabulary (a few thousand strings), skips a
file none of whose strings match, and scans the numbers of the others memory-mapped: the parts' token
strings cost 2.6 s to decode at 2.56M responses, their numbers are read in a fraction of that.

Written by ingest at each commit for the files of ``parts/`` that commit holds and no token file has yet
(as the text index is, see :mod:`data.derived.text`); a file of ``parts/`` never changes, so neither does its
token file, which is collected with it. A part file without token strings has a token file with an empty
vocabulary and null ``ids``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.ipc as ipc

from data.derived.base import Commit, index_missing
from data.store.manifest import replaced

FOLDER = "tokens"  # in the store
VOCAB_KEY = b"rlboard.vocab"  # the schema metadata holding the file's vocabulary (a JSON list of strings)


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


def write(src: Path, dst: Path) -> None:
    """The token file of the file ``src`` of ``parts/``, written so that a reader sees a whole file or none."""
    names = set(pl.read_parquet_schema(src))
    cols = [c for c in ("part", "row", "step", "response_tokens") if c in names]
    table, vocab = token_table(pl.read_parquet(src, columns=cols))
    arrow = table.to_arrow()
    schema = arrow.schema.with_metadata({VOCAB_KEY: json.dumps(vocab, ensure_ascii=False)})
    with replaced(dst, sync=False) as tmp, pa.OSFile(str(tmp), "wb") as sink:
        with ipc.new_file(sink, schema) as writer:
            writer.write_table(arrow.cast(schema))


def vocabulary(path: Path) -> list[str]:
    """The vocabulary of a token file (its schema's metadata: no column is read)."""
    with pa.memory_map(str(path)) as source:
        meta = ipc.open_file(source).schema.metadata or {}
    return json.loads(meta.get(VOCAB_KEY, b"[]"))


def index_new_parts(store_dir: Path, rels: Iterable[str]) -> list[Path]:
    """Write the token files of the files ``rels`` of ``parts/`` that have none yet; returns those written."""
    return index_missing(store_dir, FOLDER, rels, in_store, write)


def token_files(store_dir: Path, part_files: Iterable[Path]) -> list[Path] | None:
    """The token file of each of ``part_files``; None when one is missing (the filter then decodes the
    parts' strings, as for a store without the index)."""
    out = [in_store(store_dir, Path(src)) for src in part_files]
    return out if all(p.exists() for p in out) else None


def build(c: Commit) -> None:
    """The token files of the files of ``parts/`` new in this commit (ready before the manifest names it)."""
    files = index_new_parts(c.dir, c.state)
    c.written += files  # a refused commit's, removed with its parts (whose names may come again)
    c.named |= set(files)


def collect(c: Commit, removable) -> None:
    """Remove the token files whose file of ``parts/`` is gone (collected by ingest)."""
    folder = c.dir / FOLDER
    if not folder.is_dir():
        return
    for p in folder.glob("*.arrow"):
        block, _, part = p.stem.partition(".")
        if not (c.dir / "parts" / block / f"{part}.parquet").exists():
            p.unlink(missing_ok=True)
