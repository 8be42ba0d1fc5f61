"""A Parquet rollout file read within ``RLBOARD_MAX_PARQUET_BYTES``: its footer's sizes first, then its rows a
batch at a time, counting what they decode to. A footer is the file's own word: a dictionary-encoded column
of one long text repeated on every row decodes to far more than its sizes say (a 4 KB file that the footer
puts at 1.6 MB decodes to 800 MB)."""

from __future__ import annotations

import io
from pathlib import Path

import polars as pl

from data.remote import RemotePath

BATCH_ROWS = 1024  # rows decoded at a time: a batch past the limit is the most held beyond it


def footer_bytes(source) -> int:
    """A Parquet file's decoded size as its footer gives it (the row groups' total byte sizes)."""
    import pyarrow.parquet as pq

    meta = pq.read_metadata(source)
    return sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))


def read_bounded(path: Path, limit: int) -> tuple[pl.DataFrame | None, int]:
    """``(the file's rows, the bytes they decode to)``, or ``(None, the bytes decoded when it stopped)``
    where the footer or the rows decoded so far pass ``limit``. Raises what a damaged file raises (an
    Exception: Polars' panics become ValueError)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if isinstance(path, RemotePath):
        with path.open("rb") as f:  # the footer only, a few ranged GETs: nothing more is fetched past it
            decoded = footer_bytes(f)
    else:
        decoded = footer_bytes(path)
    if decoded > limit:
        return None, decoded
    source = io.BytesIO(path.read_bytes()) if isinstance(path, RemotePath) else path
    f = pq.ParquetFile(source)
    batches, decoded = [], 0
    for batch in f.iter_batches(batch_size=BATCH_ROWS):
        decoded += batch.nbytes
        if decoded > limit:
            return None, decoded
        batches.append(batch)
    # Checked whole (UTF-8 texts, offsets) and without the schema's metadata, which pyarrow has read: Polars
    # panics on a damaged file's invalid text or metadata, and a panic is no Exception (a BaseException).
    table = pa.Table.from_batches(batches, schema=f.schema_arrow).replace_schema_metadata(None)
    table.validate(full=True)
    try:
        rows = pl.from_arrow(table)
    except pl.exceptions.PanicException as e:
        raise ValueError(f"Polars could not take the file's rows ({str(e)[:120]})") from None
    assert isinstance(rows, pl.DataFrame)
    return rows, decoded
