"""The streamed export on real Parquet files: in file order by windows of steps, sorted through rank buckets
on disk, against a definitional export (every row read whole, sorted, texts joined); the number of bucket
files; the cut-off at its time limit in every format; and the setting that bounds it."""

from __future__ import annotations

import csv
import io
import json

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data import export, export_turns
from data.config import SettingsError, load_settings
from data.ingest import ingest_run
from data.queries import ResponseFilter
from data.store import open_store

PADS = ("<pad>",)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Two rank files of 12 steps of 5 responses each, ingested in three reads (several parts per file)."""
    root = tmp_path_factory.mktemp("export")
    run = root / "run"
    run.mkdir()
    res = None
    for chunk in range(3):
        for rank in (0, 1):
            with open(run / f"rank{rank}.jsonl", "a") as f:
                for step in range(chunk * 4, chunk * 4 + 4):
                    for k in range(5):
                        rec = {
                            "prompt": f"=q{k} of {step}",  # a formula-looking text: quoted in CSV
                            "response": f"answer {rank}-{step}-{k}" + (" needle" if k == 2 else ""),
                            "reward": float((step * 13 + k * 7 + rank * 3) % 10) / 2,
                            "ref_reward": 1.0,
                            "step": step,
                            "note": f"n{k}",
                        }
                        f.write(json.dumps(rec) + "\n")
        res = ingest_run(run, root / "cache", PADS)
    return open_store(res.store_dir)


def definitional(store, flt: ResponseFilter, sort: str | None, descending: bool) -> pl.DataFrame:
    """Every shown row read whole (scalars and parts' texts), filtered, sorted, as the export's columns."""
    scalars = store.scalars()
    parts = pl.concat(
        [pl.read_parquet(f, columns=["part", "row", "prompt", "response"]) for f in store.part_files()]
    )
    rows = scalars.filter(flt.scalar_expr()).join(parts, on=["part", "row"], how="left")
    if flt.q:
        rows = rows.filter(pl.col("prompt").str.contains(flt.q) | pl.col("response").str.contains(flt.q))
    if sort:
        rows = rows.sort([sort, "sample_id"], descending=[descending, False], nulls_last=True)
    else:
        rows = rows.sort("step", "source", "line")
    cols = export.export_columns(store)
    return rows.with_columns(pl.lit(None, pl.String).alias("ref_response")).select(
        *cols, *export.TEXT_COLUMNS
    )


@pytest.mark.parametrize(
    "flt, sort, descending",
    [
        (ResponseFilter(), None, False),
        (ResponseFilter(), "reward", True),
        (ResponseFilter(reward_min=1.0, reward_max=4.0), "reward_gain", False),
        (ResponseFilter(q="needle"), None, False),
        (ResponseFilter(q="needle", step=5), "reward", True),
        (ResponseFilter(step=7), None, False),
    ],
)
def test_export001_batches_equal_the_definitional_export(store, monkeypatch, flt, sort, descending):
    """Small windows, batches and buckets (every path taken) give exactly the definitional rows and order."""
    monkeypatch.setattr(export, "BATCH", 7)
    monkeypatch.setattr(export, "SPILL_ROWS", 9)
    monkeypatch.setattr(export, "WINDOW_ROWS", 12)
    got = list(export.export_batches(store, flt, sort, descending))
    assert all(b.height <= 7 for b in got)
    assert pl.concat(got).equals(definitional(store, flt, sort, descending))


def test_export002_bucket_files_are_bounded(store, monkeypatch):
    """A sorted export spills into at most MAX_BUCKETS files, however many parts and rows (before: one
    file per part and per bucket of ranks)."""
    monkeypatch.setattr(export, "BATCH", 4)
    monkeypatch.setattr(export, "SPILL_ROWS", 1)
    monkeypatch.setattr(export, "MAX_BUCKETS", 3)
    opened: list[str] = []
    real = pa.OSFile

    def counting(path, mode="r"):
        if mode == "wb":
            opened.append(path)
        return real(path, mode)

    monkeypatch.setattr(export.pa, "OSFile", counting)
    got = pl.concat(export.export_batches(store, ResponseFilter(), "reward", True))
    assert got.equals(definitional(store, ResponseFilter(), "reward", True)) and got.height == 120
    assert len(store.part_ids()) >= 6 and len(set(opened)) == 3


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_export003_cut_off_at_its_limit(store, monkeypatch, fmt):
    """Past its time limit an export stops between batches and says so last: a CSV cell, a JSON line, or
    Parquet metadata; what was sent before is whole rows."""
    monkeypatch.setattr(export, "BATCH", 10)
    clock = iter(range(1000))
    monkeypatch.setattr(export.time, "monotonic", lambda: float(next(clock)))
    data = b"".join(export.export_stream(store, ResponseFilter(), fmt, "reward", True, limit=2.5))
    reason = export.stopped_reason(2.5)
    if fmt == "csv":
        rows = list(csv.reader(io.StringIO(data.decode())))
        assert rows[-1] == [f"{export.STOPPED_MARK} {reason}"]
        assert 1 < len(rows) - 2 < 120 and all(len(r) == len(rows[0]) for r in rows[1:-1])
    elif fmt == "jsonl":
        lines = [json.loads(x) for x in data.decode().splitlines()]
        assert lines[-1] == {export.STOPPED_KEY: reason} and 0 < len(lines) - 1 < 120
    else:
        f = pq.ParquetFile(io.BytesIO(data))
        assert f.metadata.metadata[export.STOPPED_KEY.encode()].decode() == reason
        assert 0 < f.metadata.num_rows < 120


def test_export004_parquet_streams_whole_rows(store, monkeypatch):
    """Parquet is written as it streams (a row group a batch, sent once written) and reads back as the
    definitional export."""
    monkeypatch.setattr(export, "BATCH", 16)
    chunks = list(export.export_stream(store, ResponseFilter(), "parquet", "reward", True))
    assert len(chunks) > 3 and chunks[0].startswith(b"PAR1")
    table = pl.read_parquet(io.BytesIO(b"".join(chunks)))
    assert table.equals(definitional(store, ResponseFilter(), "reward", True))


def test_export005_export_seconds_setting():
    """RLBOARD_EXPORT_SECONDS sets the limit; a value that is not a positive number is refused."""
    assert load_settings({}).export_seconds == 600.0
    assert load_settings({"RLBOARD_EXPORT_SECONDS": "30"}).export_seconds == 30.0
    for bad in ("soon", "0", "-5"):
        with pytest.raises(SettingsError, match="RLBOARD_EXPORT_SECONDS"):
            load_settings({"RLBOARD_EXPORT_SECONDS": bad})


def test_export006_first_bytes_before_the_whole_order(store, monkeypatch):
    """The CSV header goes out before any row is looked for, and a sorted export's first rows (the top of
    the order) before the whole order is sorted and spilled: the download starts at once at any size."""
    calls: list[str] = []
    real_batches, real_spilled = export.export_batches, export._spilled_batches

    def batches(*a, **kw):
        calls.append("batches")
        yield from real_batches(*a, **kw)

    def spilled(*a, **kw):
        calls.append("spilled")
        yield from real_spilled(*a, **kw)

    monkeypatch.setattr(export, "export_batches", batches)
    monkeypatch.setattr(export, "_spilled_batches", spilled)
    monkeypatch.setattr(export, "HEAD_ROWS", 5)
    stream = export.export_stream(store, ResponseFilter(), "csv", "reward", True)
    header = next(stream)
    assert header.decode().rstrip("\n").split(",") == export.export_names(store) and calls == []
    first = next(stream)
    assert len(first.decode().splitlines()) == 5 and calls == ["batches"]
    rest = b"".join(stream)
    assert calls == ["batches", "spilled"]
    rows = list(csv.reader(io.StringIO((header + first + rest).decode())))
    want = definitional(store, ResponseFilter(), "reward", True)
    ids = [r[rows[0].index("sample_id")] for r in rows[1:]]
    assert ids == want.get_column("sample_id").to_list()


@pytest.mark.parametrize("spill_bytes", [1, 1 << 40])
def test_export007_rows_held_or_written_at_each_part_give_the_same_export(store, monkeypatch, spill_bytes):
    """Bucket pieces written at each part (several batches a bucket file) or held until the end (one batch
    each) give exactly the definitional rows and order."""
    monkeypatch.setattr(export, "BATCH", 5)
    monkeypatch.setattr(export, "SPILL_ROWS", 8)
    monkeypatch.setattr(export, "SPILL_BYTES", spill_bytes)
    batches: list[int] = []
    real = export.ipc.new_stream

    def counting(sink, schema, options=None):
        writer = real(sink, schema, options=options)
        write = writer.write_table
        writer.write_table = lambda t: batches.append(t.num_rows) or write(t)  # type: ignore[method-assign]
        return writer

    monkeypatch.setattr(export.ipc, "new_stream", counting)
    flt = ResponseFilter(reward_min=0.5)
    got = pl.concat(export.export_batches(store, flt, "reward", False))
    assert got.equals(definitional(store, flt, "reward", False))
    buckets = -(-(got.height - min(export.HEAD_ROWS, 5)) // 8)
    assert len(batches) > buckets if spill_bytes == 1 else len(batches) == buckets


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_export008_a_served_export_takes_turns_and_rests_while_pages_are_answered(store, monkeypatch, fmt):
    """A server's export (``shared=True``) has the bytes of the plain one; two of them in one process never
    make a batch at the same time, and while a page is answered (export_turns.PAGES) each rests after a batch as
    long as the batch took (EXPORT_REST 1), at most MAX_REST; with no page to give way to, none rests."""
    import threading
    import time

    monkeypatch.setattr(export, "BATCH", 7)  # several batches
    plain = b"".join(export.export_stream(store, ResponseFilter(), fmt, "reward", True))
    assert b"".join(export.export_stream(store, ResponseFilter(), fmt, "reward", True, shared=True)) == plain

    busy, overlaps, rests = [], [], []

    def chunks(name):
        for k in range(5):
            busy.append(name)
            if len(busy) > 1:
                overlaps.append(list(busy))
            threading.Event().wait(0.01)  # a batch's work (time.sleep is the spy below)
            busy.remove(name)
            yield f"{name}{k}".encode()

    real_sleep = time.sleep
    monkeypatch.setattr(export.time, "sleep", lambda s: rests.append(s) or real_sleep(min(s, 0.001)))
    out: dict[str, bytes] = {}

    def run(name):
        out[name] = b"".join(export_turns.taking_turns(chunks(name)))

    def both() -> None:
        threads = [threading.Thread(target=run, args=(n,)) for n in "ab"]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    with export_turns.PAGES:  # a page's request under way
        both()
    assert out == {"a": b"a0a1a2a3a4", "b": b"b0b1b2b3b4"}
    assert overlaps == []
    assert len(rests) >= 8 and all(0.009 <= r <= export_turns.MAX_REST for r in rests)
    assert not export_turns.PAGES.busy()
    rests.clear()
    out.clear()
    both()  # no page: no rest
    assert out == {"a": b"a0a1a2a3a4", "b": b"b0b1b2b3b4"}
    assert overlaps == [] and rests == []
