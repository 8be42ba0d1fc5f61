"""Bounded readers (issue 33, rows 2, 6, 7): a line, a compressed file and a Parquet file read no further
than their limits, a damaged file failing alone; every good line kept, every refusal said with the name of
the limit's setting."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest
import zstandard

from data.config import SettingsError, read_limits
from data.ingest import ingest_run
from data.store import open_store

PADS = ("<pad>",)


def _line(step: int, i: int, **kw) -> bytes:
    return (
        json.dumps({"prompt": f"p{i}", "response": f"r{i}", "reward": float(i), "step": step, **kw}) + "\n"
    ).encode()


def _good(n: int = 6) -> bytes:
    return b"".join(_line(1 + i // 3, i) for i in range(n))


def _read(run: Path, cache: Path):
    store = open_store(ingest_run(run, cache, PADS).store_dir)
    issues = store.issues()
    return store, {(r["source"], r["line"]): r["reason"] for r in issues.iter_rows(named=True)}


def test_limits001_a_long_line_is_read_past_never_held(tmp_path, monkeypatch):
    """A line over RLBOARD_MAX_LINE_BYTES (before: a 2 GB line was held whole, past 6 GB of memory) is an
    unusable line with its length and the limit named; the lines after it are read, in a plain file and in
    a compressed one, and a last line over the limit still being written waits, said."""
    monkeypatch.setenv("RLBOARD_MAX_LINE_BYTES", "1000")
    run = tmp_path / "run"
    run.mkdir()
    long = _line(1, 99, response="x" * 5000)
    body = _good(3) + long + _good(3)
    (run / "a.jsonl").write_bytes(body)
    (run / "b.jsonl.gz").write_bytes(gzip.compress(body))
    (run / "c.jsonl").write_bytes(_good(3) + b'{"prompt": "' + b"y" * 3000)
    store, issues = _read(run, tmp_path / "cache")
    assert store.scalars().height == 6 + 6 + 3
    for src in ("a.jsonl", "b.jsonl.gz"):
        assert issues[(src, 4)] == (
            f"line of {len(long):,} bytes, over the limit of 1,000 (RLBOARD_MAX_LINE_BYTES): not read"
        )
    assert issues[("c.jsonl", 4)].startswith(
        "last line over the limit of 1,000 bytes (RLBOARD_MAX_LINE_BYTES)"
    )


def test_limits002_a_compressed_bomb_is_read_no_further_than_its_cap(tmp_path, monkeypatch):
    """A small .jsonl.gz / .jsonl.zst inflating far past its size (before: 3 MB that inflated to gigabytes
    passed 6 GB of memory) is read up to the cap and the rest is refused, said with both settings' names;
    the run's other files are whole."""
    monkeypatch.setenv("RLBOARD_MAX_INFLATED_BYTES", str(200_000))
    run = tmp_path / "run"
    run.mkdir()
    bomb = _good(3) + b"\n" * 10_000_000  # 10 MB of blank lines: ~10 KB compressed
    (run / "bomb.jsonl.gz").write_bytes(gzip.compress(bomb))
    (run / "bomb.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(bomb))
    (run / "good.jsonl").write_bytes(_good())
    store, issues = _read(run, tmp_path / "cache")
    assert store.scalars().height == 6 + 3 + 3
    for src in ("bomb.jsonl.gz", "bomb.jsonl.zst"):
        reason = next(r for (s, _), r in issues.items() if s == src)
        assert reason.startswith(
            "inflates past 200,000 bytes (RLBOARD_MAX_INFLATED_BYTES, RLBOARD_MAX_INFLATE_RATIO"
        )


def test_limits003_a_damaged_compressed_file_fails_alone(tmp_path):
    """A corrupt .zst and a corrupt .gz beside good files (before: an uncaught ZstdError stopped the whole
    run) are said as damaged; every good file's rows are kept."""
    run = tmp_path / "run"
    run.mkdir()
    good = zstandard.ZstdCompressor().compress(_good())
    (run / "bad.jsonl.zst").write_bytes(good[:8] + b"\x00garbage" * 100)
    (run / "bad.jsonl.gz").write_bytes(gzip.compress(_good())[:10] + b"\xff" * 500)
    (run / "good.jsonl.zst").write_bytes(good)
    (run / "good.jsonl").write_bytes(_good())
    store, issues = _read(run, tmp_path / "cache")
    assert store.scalars().height == 12
    assert set(store.scalars().get_column("source")) == {"good.jsonl.zst", "good.jsonl"}
    for src in ("bad.jsonl.zst", "bad.jsonl.gz"):
        assert issues[(src, 1)] == "file cut short or damaged: read again when it changes"


def test_limits004_a_parquet_file_over_its_decoded_limit_is_refused(tmp_path, monkeypatch):
    """A Parquet file whose footer says it decodes past RLBOARD_MAX_PARQUET_BYTES (before: a 707 KB file
    inflated to gigabytes) is not read, said; a small one beside it is."""
    monkeypatch.setenv("RLBOARD_MAX_PARQUET_BYTES", str(100_000))
    run = tmp_path / "run" / "completions"
    run.mkdir(parents=True)
    rows = {"step": [1] * 4, "prompt": ["p"] * 4, "completion": ["c"] * 4, "reward": [1.0] * 4}
    pl.DataFrame(rows).write_parquet(run / "completions_00001.parquet")
    big = {k: v * 20_000 for k, v in rows.items()}
    big["completion"] = ["z" * 10] * len(big["step"])
    pl.DataFrame(big).write_parquet(run / "completions_00002.parquet", compression="zstd")
    store, issues = _read(tmp_path / "run", tmp_path / "cache")
    assert store.scalars().height == 4
    reason = issues[("completions/completions_00002.parquet", 1)]
    assert (
        reason.startswith("decodes to ") and "over the limit of 100,000 (RLBOARD_MAX_PARQUET_BYTES)" in reason
    )


def test_limits005_limits_are_settings():
    """Each limit is a setting; a value that is not a positive number is refused, naming it."""
    lim = read_limits({"RLBOARD_MAX_LINE_BYTES": "2048", "RLBOARD_MAX_INFLATE_RATIO": "50"})
    assert lim.line_bytes == 2048 and lim.inflate_ratio == 50.0
    assert lim.inflate_cap(10) == 64 << 20 and lim.inflate_cap(10 << 30) == lim.inflated_bytes
    for bad in ("0", "-1", "nan", "lots"):
        with pytest.raises(SettingsError, match="RLBOARD_MAX_PARQUET_BYTES"):
            read_limits({"RLBOARD_MAX_PARQUET_BYTES": bad})
