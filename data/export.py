"""Export of a run's responses (filtered and sorted) as CSV, JSON lines or Parquet, streamed in bounded
memory and in time proportional to the run, cut off cleanly past ``RLBOARD_EXPORT_SECONDS``.

In file order (``sort=None``), rows are read a window of steps at a time from the row groups that hold
them. Sorted, the first batch comes from the top of the order (no full sort) and is sent at once; then
the whole order (``part, row`` of each match, 8 bytes a row) is sorted, and one pass over the parts writes
each later row to the temporary file of its bucket of ranks (at most ``MAX_BUCKETS`` files, one open
stream each; rows are held in memory up to ``SPILL_BYTES`` and written a batch per bucket); the buckets are
read back in order.
"""

from __future__ import annotations

import io
import math
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from urllib.parse import quote

import polars as pl
import pyarrow as pa
import pyarrow.ipc as ipc

from data.config import DEFAULT_EXPORT_SECONDS, DEFAULT_SEARCH_SECONDS
from data.export_turns import taking_turns
from data.metrics.registry import exported_columns
from data.queries import ResponseFilter, sort_rows
from data.search.engine import text_hits
from data.search.order import matching
from data.search.tokens import HIT_COLUMNS, TokenHits, token_hits
from data.store import RunStore

EXPORT_COLUMNS = exported_columns()  # beside the texts; see data.metrics.registry
TEXT_COLUMNS = ("prompt", "response", "ref_response")
FORMATS = {"csv": "text/csv", "jsonl": "application/x-ndjson", "parquet": "application/vnd.apache.parquet"}
BATCH = 2000  # rows per chunk sent
HEAD_ROWS = 500  # the first rows of a sorted export (at most a batch), read directly from their row groups
SPILL_ROWS = 10000  # rows per rank bucket at least ...
MAX_BUCKETS = 128  # ... and at most this many buckets (files open at once), however large the export
SPILL_BYTES = 64 << 20  # rows held in memory (in Arrow) before they are written to their buckets' files
WINDOW_ROWS = 20000  # rows per window of steps read at once in file order
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
# An export of a step the run lacks answers the rows of the step shown instead (data.run_context's rule) and
# says so in this header, never in a data line.
NOTICE_HEADER = "X-RLBoard-Notice"
# An export cut off at its time limit ends the same way, with these.
STOPPED_MARK = "# export stopped:"
STOPPED_KEY = "export_stopped"


class ExportCut(Exception):
    """The export reached its deadline: what was sent stays, a last line says it is cut."""


def incomplete_reason(store: RunStore) -> str | None:
    """Why an export of ``store`` lacks some of the run's responses, or None when it holds all it has read."""
    below = store.visible_below
    if below is None:
        return None
    return (
        f"steps from {below} on are not included: the run is still being written or read; "
        "export again once it is read"
    )


def header_text(text: str) -> str:
    """``text`` as an HTTP header value: printable ASCII as it is, anything else (a run's name may hold
    any character, a line break too) percent-encoded, so no header can be forged or refused."""
    return "".join(c if " " <= c <= "~" and c != "%" else quote(c, safe="") for c in text)


def stopped_reason(seconds: float) -> str:
    return (
        f"the export took longer than {seconds:g} s (RLBOARD_EXPORT_SECONDS) and was cut off here; "
        "export fewer steps, or filter the rows"
    )


def export_columns(store: RunStore) -> list[str]:
    """The exported scalar columns of ``store`` (``EXPORT_COLUMNS`` it has, then its extra columns); the
    texts follow them."""
    names = store.schema()
    return [c for c in EXPORT_COLUMNS if c in names] + [c for c in store.extra_columns() if c in names]


def select_rows(
    store: RunStore,
    flt: ResponseFilter,
    sort: str | None = None,
    descending: bool = False,
    seconds: float = DEFAULT_SEARCH_SECONDS,
    hits: pl.DataFrame | None = None,
) -> pl.LazyFrame:
    """``part, row`` of the responses matching ``flt``, sorted by ``sort`` (ties by sample id; default:
    step, then file and line). A text search runs here, within ``seconds`` (raises
    :class:`data.queries.SearchStopped` after), unless its ``hits`` are given."""
    if sort:
        lf = sort_rows(matching(store, flt, [sort, "sample_id"], seconds, hits=hits), sort, descending)
    else:
        lf = matching(store, flt, ["step", "source", "line"], seconds, hits=hits)
        lf = lf.sort("step", "source", "line")
    return lf.select("part", "row")


def _check(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise ExportCut


def export_batches(
    store: RunStore,
    flt: ResponseFilter,
    sort: str | None = None,
    descending: bool = False,
    seconds: float = DEFAULT_SEARCH_SECONDS,
    deadline: float | None = None,
    hits: pl.DataFrame | None = None,
) -> Iterator[pl.DataFrame]:
    """Frames of export rows (:func:`export_columns`, then the texts), in order, at most ``BATCH`` rows
    each (the first one even when no row matches). Raises :class:`ExportCut` past ``deadline`` (a
    ``time.monotonic()`` value) and what a text search raises, before the first frame; ``hits``: the
    search's (see :func:`data.responses.text_hits`), when it ran already."""
    if flt.q and hits is None:  # the search runs (or fails) before the first frame, once
        hits = text_hits(store, flt.q, flt.step, seconds)
    if not flt.tok:
        wanted = export_names(store)
        if sort:
            yield from _sorted_batches(store, flt, sort, descending, seconds, wanted, deadline, hits)
        else:
            yield from _file_order_batches(store, flt, seconds, wanted, deadline, hits)
        return
    # A token filter: each row also says where its token is and its value (the page's columns).
    tok = token_hits(store, flt, seconds).frame
    names = export_names(store, flt)
    wanted = [c for c in names if c not in HIT_COLUMNS] + ["part", "row"]
    if sort:
        inner = _sorted_batches(store, flt, sort, descending, seconds, wanted, deadline, hits)
    else:
        inner = _file_order_batches(store, flt, seconds, wanted, deadline, hits)
    try:
        for batch in inner:
            keys = batch.select(pl.col("part").cast(pl.UInt32), pl.col("row").cast(pl.UInt32))
            at = keys.join(tok, on=["part", "row"], how="left", maintain_order="left")
            yield batch.hstack(at.select(HIT_COLUMNS)).select(names)
    finally:
        inner.close()


def export_names(store: RunStore, flt: ResponseFilter | None = None) -> list[str]:
    """The export's columns in order: :func:`export_columns`, where a token filter's token is and its value
    (``tok_pos, tok_value, tok_hits``, with one), then the texts."""
    hit = list(HIT_COLUMNS) if flt is not None and flt.tok else []
    return [*export_columns(store), *hit, *TEXT_COLUMNS]


def token_cut(hits: TokenHits | None, pattern: str | None) -> str | None:
    """Why an export of a token filter lacks some matches: the filter was cut off (None when it was not)."""
    return None if hits is None or pattern is None else hits.notice(pattern)


def _read(store: RunStore, keys: pl.DataFrame, wanted: list[str]) -> pl.DataFrame:
    """The export rows of ``keys`` (``part, row``), in their order."""
    return store.read_keys(keys, wanted).select(wanted)


def _file_order_batches(
    store: RunStore,
    flt: ResponseFilter,
    seconds: float,
    wanted: list[str],
    deadline: float | None,
    hits: pl.DataFrame | None,
) -> Iterator[pl.DataFrame]:
    """By step, then file and line: windows of whole steps of about ``WINDOW_ROWS`` rows, each read from
    the files (and row groups) of its steps only."""
    summary = store.steps()
    steps = summary.get_column("step").to_list() if summary.height else []
    counts = summary.get_column("n").to_list() if summary.height else []
    if flt.step is not None:
        steps, counts = [flt.step], [0]
    windows: list[tuple[int, int]] = []
    for step, n in zip(steps, counts, strict=True):
        if windows and windows[-1][2] + n <= WINDOW_ROWS:
            lo, _, rows = windows[-1]
            windows[-1] = (lo, step, rows + n)
        else:
            windows.append((step, step, n))
    sent = False
    # (A token filter keeps its step: its matches are found over the step asked for, as the page finds them.)
    window = flt if flt.tok and flt.step is not None else replace(flt, step=None)
    for lo, hi, _ in windows:
        _check(deadline)
        keys = store.retrying(
            lambda st, lo=lo, hi=hi: (
                matching(st, window, ["step", "source", "line"], seconds, (lo, hi), hits)
                .sort("step", "source", "line")
                .select("part", "row")
                .collect()
            )
        )
        for start in range(0, keys.height, BATCH):
            yield _read(store, keys.slice(start, BATCH), wanted)
            sent = True
    if not sent:
        yield _read(store, pl.DataFrame(schema={"part": pl.UInt32, "row": pl.UInt32}), wanted)


def _sorted_batches(
    store: RunStore,
    flt: ResponseFilter,
    sort: str,
    descending: bool,
    seconds: float,
    wanted: list[str],
    deadline: float | None,
    hits: pl.DataFrame | None,
) -> Iterator[pl.DataFrame]:
    """Sorted by ``sort`` (ties by sample id): the first ``HEAD_ROWS`` rows from the top of the order, read
    directly; the rest through rank buckets on disk (see the module's docstring)."""

    def order(st: RunStore) -> pl.LazyFrame:
        return select_rows(st, flt, sort, descending, seconds, hits)

    first = min(HEAD_ROWS, BATCH)
    head = store.retrying(lambda st: order(st).head(first).collect())
    yield _read(store, head, wanted)
    if head.height < first:
        return
    _check(deadline)
    keys = store.retrying(
        lambda st: order(st).select(pl.col("part").cast(pl.UInt32), pl.col("row").cast(pl.UInt32)).collect()
    )
    rest = keys.with_row_index("__rank").slice(first)
    if rest.height == 0:
        return
    yield from _spilled_batches(store, rest, wanted, deadline)


def _spilled_batches(
    store: RunStore, rest: pl.DataFrame, wanted: list[str], deadline: float | None
) -> Iterator[pl.DataFrame]:
    """Export batches of ``rest`` (``__rank, part, row``, in rank order): a sorted order scatters rows over
    every row group, so fetching texts batch by batch would decompress all texts once per batch. One pass
    over the parts puts each row in its bucket of ranks, written to the bucket's stream once
    :data:`SPILL_BYTES` of rows are held; buckets are read back in order. Memory holds one part's rows and
    ``SPILL_BYTES``, or one bucket, never the export."""
    first = int(rest.item(0, "__rank"))
    size = max(SPILL_ROWS, math.ceil(rest.height / MAX_BUCKETS))
    schema = {c: t for c, t in store.read_keys(rest.head(0).select("part", "row"), wanted).schema.items()}
    with tempfile.TemporaryDirectory(prefix="rlboard-export-") as tmp:
        writers: dict[int, tuple] = {}
        held: dict[int, list[pa.Table]] = {}  # pieces of each bucket not written yet
        held_bytes = 0

        def write_held() -> None:
            # One record batch per bucket and flush: a part's rows spread over every bucket (a few dozen
            # rows each at 2.56M responses), and a batch written per part and bucket cost more than its rows.
            nonlocal held_bytes
            for bucket, pieces in held.items():
                table = pa.concat_tables(pieces).combine_chunks()
                if bucket not in writers:
                    sink = pa.OSFile(str(Path(tmp) / f"b{bucket:06d}.arrows"), "wb")
                    opts = ipc.IpcWriteOptions(compression="lz4")
                    writers[bucket] = (sink, ipc.new_stream(sink, table.schema, options=opts))
                writers[bucket][1].write_table(table)
            held.clear()
            held_bytes = 0

        try:
            for (part,), grp in rest.group_by(["part"]):
                _check(deadline)
                got = store.read_rows(int(part), grp.get_column("row").to_list(), wanted)
                got = (
                    got.select(
                        pl.col(c).cast(t) if c in got.columns else pl.lit(None, t).alias(c)
                        for c, t in schema.items()
                    )
                    .with_columns(grp.get_column("__rank"))
                    .sort("__rank")
                )
                # Sorted by rank, each bucket's rows are one slice (no copy) of the part's rows.
                ranks = got.get_column("__rank")
                buckets = ((ranks - first) // size).unique(maintain_order=True).to_list()
                cuts = ranks.search_sorted(pl.Series([first + b * size for b in buckets], dtype=ranks.dtype))
                table = got.to_arrow()
                ends = [*cuts.to_list()[1:], got.height]
                for bucket, lo, hi in zip(buckets, cuts.to_list(), ends, strict=True):
                    piece = table.slice(lo, hi - lo)
                    held.setdefault(bucket, []).append(piece)
                    held_bytes += piece.nbytes
                if held_bytes >= SPILL_BYTES:
                    write_held()
            write_held()
        finally:
            for sink, writer in writers.values():
                writer.close()
                sink.close()
        for bucket in range(-(-rest.height // size)):
            _check(deadline)
            path = Path(tmp) / f"b{bucket:06d}.arrows"
            with pa.memory_map(str(path)) as src:
                chunk = pl.from_arrow(ipc.open_stream(src).read_all()).sort("__rank").drop("__rank")
            path.unlink()
            for sub in range(0, chunk.height, BATCH):
                yield chunk.slice(sub, BATCH).select(wanted)


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


class _Pipe(io.RawIOBase):
    """A write-only file whose bytes are taken out as they come (Parquet written as it streams)."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.pos = 0

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        self.buf += b
        self.pos += len(b)
        return len(b)

    def tell(self) -> int:
        return self.pos

    def take(self) -> bytes:
        out, self.buf = bytes(self.buf), bytearray()
        return out


def _last_line(fmt: str, key: str, mark: str, text: str) -> bytes:
    if fmt == "csv":
        return pl.DataFrame({"": [f"{mark} {text}"]}).write_csv(include_header=False).encode()
    return pl.DataFrame({key: [text]}).write_ndjson().encode()


def export_stream(
    store: RunStore,
    flt: ResponseFilter,
    fmt: str,
    sort: str | None = None,
    descending: bool = False,
    seconds: float = DEFAULT_SEARCH_SECONDS,
    limit: float | None = DEFAULT_EXPORT_SECONDS,
    shared: bool = False,
) -> Iterator[bytes]:
    """Bytes of the export in ``fmt`` (``csv``, ``jsonl`` or ``parquet``), produced batch by batch; a text
    search is given ``seconds`` (see :func:`select_rows`), before the first bytes. Past ``limit`` seconds
    (None: none) the export ends with a last line saying it was cut off (in Parquet, the key
    ``export_stopped`` in the file's metadata). ``shared``: a server's export, at a lower priority than
    the pages (see :func:`data.export_turns.taking_turns`); the same bytes."""
    chunks = _export_stream(store, flt, fmt, sort, descending, seconds, limit)
    return taking_turns(chunks) if shared else chunks


def _export_stream(
    store: RunStore,
    flt: ResponseFilter,
    fmt: str,
    sort: str | None,
    descending: bool,
    seconds: float,
    limit: float | None,
) -> Iterator[bytes]:
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r} (choose csv, jsonl or parquet)")
    deadline = None if limit is None else time.monotonic() + limit
    # A text search runs (or is stopped: the caller answers 400) before the first byte; a token filter too
    # (cut off at its time, it says so in the export's last line).
    hits = text_hits(store, flt.q, flt.step, seconds) if flt.q else None
    tok = token_hits(store, flt, seconds) if flt.tok else None
    incomplete = "; ".join(filter(None, [incomplete_reason(store), token_cut(tok, flt.tok)])) or None
    batches = export_batches(store, flt, sort, descending, seconds, deadline, hits)
    if fmt == "parquet":
        yield from _parquet(batches, incomplete, limit)
        return
    stopped = False
    if fmt == "csv":  # the header at once: the download starts before the rows are found
        names = pl.DataFrame(schema={c: pl.String for c in export_names(store, flt)})
        yield csv_safe(names).write_csv(include_header=True).encode()
    try:
        for batch in batches:
            buf = io.BytesIO()
            if fmt == "csv":
                csv_safe(batch).write_csv(buf, include_header=False)
            elif batch.height:
                batch.write_ndjson(buf)
            yield buf.getvalue()
    except ExportCut:
        stopped = True
    finally:
        batches.close()
    if stopped:
        yield _last_line(fmt, STOPPED_KEY, STOPPED_MARK, stopped_reason(limit))
    if incomplete:
        yield _last_line(fmt, INCOMPLETE_KEY, INCOMPLETE_MARK, incomplete)


def _parquet(batches: Iterator[pl.DataFrame], incomplete: str | None, limit: float | None) -> Iterator[bytes]:
    """Parquet written as it streams: each batch a row group, sent once written; the footer last."""
    import pyarrow.parquet as pq

    pipe = _Pipe()
    writer = None
    try:
        for batch in batches:
            table = batch.to_arrow()
            if writer is None:
                schema = table.schema
                if incomplete:
                    schema = schema.with_metadata({INCOMPLETE_KEY: incomplete})
                writer = pq.ParquetWriter(pipe, schema)
            writer.write_table(table.cast(writer.schema))
            yield pipe.take()
    except ExportCut:
        if writer is not None:
            writer.add_key_value_metadata({STOPPED_KEY: stopped_reason(limit)})
    finally:
        batches.close()
    if writer is not None:
        writer.close()
    yield pipe.take()
