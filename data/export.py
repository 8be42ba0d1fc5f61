"""Export of a run's responses (filtered and sorted) as CSV, JSON lines or Parquet, in bounded memory.

Rows are produced in batches: the order comes from the in-memory scalars; the texts of a large export are
read in one pass over the parts into rank buckets on disk, then streamed bucket by bucket, so 100,000 rows
stream without being held at once.
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import Iterator
from pathlib import Path

import polars as pl

from data.config import DEFAULT_SEARCH_SECONDS
from data.metrics.registry import exported_columns
from data.queries import ResponseFilter, sort_rows, text_match
from data.store import RunStore

EXPORT_COLUMNS = exported_columns()  # beside the texts; see data.metrics.registry
TEXT_COLUMNS = ("prompt", "response", "ref_response")
FORMATS = {"csv": "text/csv", "jsonl": "application/x-ndjson", "parquet": "application/vnd.apache.parquet"}
BATCH = 2000
SPILL_ROWS = 10000
# CSV injection (OWASP): a spreadsheet runs a cell that starts with = + - @ TAB or CR as a formula. Such a
# text cell is written with a leading single quote, which spreadsheets show as text and never evaluate; a
# cell that is a plain number ("-0.5", a 64-bit-overflowing integer kept as its digits) stays as it is, and
# numeric columns are numbers already.
FORMULA_START = r"^[=+\-@\t\r]"
PLAIN_NUMBER = r"^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$"
# An export of a store whose last steps are not shown yet (a run still being written, or read for the first
# time) says so: in this HTTP header, in a last line (CSV: one cell starting with INCOMPLETE_MARK; JSON
# lines: an object with only INCOMPLETE_KEY) and, in Parquet, in the file's key-value metadata.
INCOMPLETE_HEADER = "X-RLBoard-Incomplete"
INCOMPLETE_MARK = "# incomplete export:"
INCOMPLETE_KEY = "incomplete_export"


def incomplete_reason(store: RunStore) -> str | None:
    """Why an export of ``store`` lacks some of the run's responses, or None when it holds all it has read."""
    below = store.visible_below
    if below is None:
        return None
    return (
        f"steps from {below} on are not included: the run is still being written or read; "
        "export again once it is read"
    )


def select_rows(
    store: RunStore,
    flt: ResponseFilter,
    sort: str | None = None,
    descending: bool = False,
    seconds: float = DEFAULT_SEARCH_SECONDS,
) -> pl.LazyFrame:
    """Scalars of the responses matching ``flt``, sorted by ``sort`` (default: step, then file and line).
    A text search runs here, within ``seconds`` (raises :class:`data.queries.SearchStopped` after)."""
    lf = store.scalars().lazy().filter(flt.scalar_expr())
    if flt.q:
        hits = text_match(store.scan_parts(), flt.q, flt.step, seconds)
        lf = lf.join(hits.lazy(), on="sample_id", how="semi")
    if sort:
        return sort_rows(lf, sort, descending)
    return lf.sort("step", "source", "line")


def _with_texts(store: RunStore, batch: pl.DataFrame) -> pl.DataFrame:
    pieces = []
    for (part,), grp in batch.group_by(["part"], maintain_order=True):
        rows = grp.get_column("row").to_list()
        texts = store.read_rows(int(part), rows, ["sample_id", *TEXT_COLUMNS])
        pieces.append(texts)
    texts = pl.concat(pieces, how="diagonal_relaxed")
    return batch.join(texts, on="sample_id", how="left", maintain_order="left")


def export_batches(
    store: RunStore,
    flt: ResponseFilter,
    sort: str | None = None,
    descending: bool = False,
    seconds: float = DEFAULT_SEARCH_SECONDS,
) -> Iterator[pl.DataFrame]:
    """Frames of export rows (``EXPORT_COLUMNS`` present in the store, extras, then texts), in order."""
    lf = select_rows(store, flt, sort, descending, seconds)
    names = lf.collect_schema().names()
    extras = [c for c in store.extra_columns() if c in names]
    cols = [c for c in EXPORT_COLUMNS if c in names] + extras
    # Only the exported scalars (and where each row lives) are held: not the previews, not the texts.
    rows = lf.select(*dict.fromkeys([*cols, "sample_id", "part", "row"])).collect()
    if rows.height <= BATCH:
        full = (
            _with_texts(store, rows)
            if rows.height
            else rows.with_columns(*(pl.lit(None, dtype=pl.String).alias(c) for c in TEXT_COLUMNS))
        )
        yield full.select(*cols, *TEXT_COLUMNS)
        return
    yield from _spilled_batches(store, rows, cols)


def _spilled_batches(store: RunStore, rows: pl.DataFrame, cols: list[str]) -> Iterator[pl.DataFrame]:
    """Export batches of many rows: a sorted order scatters rows over every row group, so fetching texts
    batch by batch would decompress all texts once per batch. Instead one pass over the parts writes each
    row's texts to the temporary file of its bucket of SPILL_ROWS ranks; buckets are read back in order.
    Memory holds one part's texts or one bucket, never the export."""
    rows = rows.with_row_index("__rank")
    with tempfile.TemporaryDirectory(prefix="rlboard-export-") as tmp:
        for (part,), grp in rows.select("__rank", "part", "row").group_by(["part"]):
            texts = store.read_rows(int(part), grp.get_column("row").to_list(), list(TEXT_COLUMNS))
            texts = texts.with_columns(
                *(pl.lit(None, dtype=pl.String).alias(c) for c in TEXT_COLUMNS if c not in texts.columns),
                grp.get_column("__rank"),
            ).select("__rank", *TEXT_COLUMNS)
            for (bucket,), piece in texts.group_by(pl.col("__rank") // SPILL_ROWS):
                piece.write_ipc(Path(tmp) / f"b{bucket:08d}-p{int(part):08d}.arrow", compression="lz4")
        for bucket in range(-(-rows.height // SPILL_ROWS)):
            files = sorted(Path(tmp).glob(f"b{bucket:08d}-*.arrow"))
            texts = pl.concat([pl.read_ipc(f) for f in files], how="vertical_relaxed")
            chunk = rows.slice(bucket * SPILL_ROWS, SPILL_ROWS).join(
                texts, on="__rank", how="left", maintain_order="left"
            )
            for f in files:
                f.unlink()
            for sub in range(0, chunk.height, BATCH):
                yield chunk.slice(sub, BATCH).select(*cols, *TEXT_COLUMNS)


def csv_safe(batch: pl.DataFrame) -> pl.DataFrame:
    """``batch`` with every text cell (and column name) a spreadsheet would run as a formula prefixed with a
    single quote (see :data:`FORMULA_START`); other cells unchanged."""
    text = [c for c, t in batch.schema.items() if t == pl.String]
    if text:
        batch = batch.with_columns(
            pl.when(pl.col(c).str.contains(FORMULA_START) & ~pl.col(c).str.contains(PLAIN_NUMBER))
            .then(pl.lit("'") + pl.col(c))
            .otherwise(pl.col(c))
            .alias(c)
            for c in text
        )
    names = pl.Series(batch.columns, dtype=pl.String)
    risky = names.str.contains(FORMULA_START).to_list()
    return batch.rename({c: "'" + c for c, r in zip(batch.columns, risky, strict=True) if r})


def export_stream(
    store: RunStore,
    flt: ResponseFilter,
    fmt: str,
    sort: str | None = None,
    descending: bool = False,
    seconds: float = DEFAULT_SEARCH_SECONDS,
) -> Iterator[bytes]:
    """Bytes of the export in ``fmt`` (``csv``, ``jsonl`` or ``parquet``), produced batch by batch; a text
    search is given ``seconds`` (see :func:`select_rows`), before the first bytes."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r} (choose csv, jsonl or parquet)")
    incomplete = incomplete_reason(store)
    if fmt == "parquet":
        # Parquet needs a footer over all row groups: collect the (bounded) batches into one writer.
        import pyarrow.parquet as pq

        buf = io.BytesIO()
        writer = None
        for batch in export_batches(store, flt, sort, descending, seconds):
            table = batch.to_arrow()
            if writer is None:
                schema = table.schema
                if incomplete:
                    schema = schema.with_metadata({INCOMPLETE_KEY: incomplete})
                writer = pq.ParquetWriter(buf, schema)
            writer.write_table(table.cast(writer.schema))
        if writer is not None:
            writer.close()
        yield buf.getvalue()
        return
    first = True
    for batch in export_batches(store, flt, sort, descending, seconds):
        buf = io.BytesIO()
        if fmt == "csv":
            csv_safe(batch).write_csv(buf, include_header=first)
        else:
            if batch.height:
                batch.write_ndjson(buf)
        first = False
        yield buf.getvalue()
    if incomplete:
        if fmt == "csv":
            yield (
                pl.DataFrame({"": [f"{INCOMPLETE_MARK} {incomplete}"]})
                .write_csv(include_header=False)
                .encode()
            )
        else:
            yield pl.DataFrame({INCOMPLETE_KEY: [incomplete]}).write_ndjson().encode()
