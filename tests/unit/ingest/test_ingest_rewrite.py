"""A rollout file rewritten in place (same inode, same start, no shorter) is read again from its start, as a
trainer restarted with the same seed that reopens its file with "w" rewrites it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import polars as pl

from data.ingest import ingest_run
from data.store import open_store

PADS = ("<pad>",)


def _lines(steps: range, tag: str) -> bytes:
    out = []
    for step in steps:
        for i in range(16):
            rec = {"prompt": f"prompt {step}-{i} " + "x" * 200, "response": f"{tag} {step}-{i}", "step": step}
            out.append(json.dumps({**rec, "reward": (step * 16 + i) % 7 / 7}).encode() + b"\n")
    return b"".join(out)


def _rows(store) -> list[tuple]:
    return store.scalars().sort("source", "line").select("line", "step", "response_preview").rows()


def _fresh(tmp_path: Path, run: Path) -> list[tuple]:
    res = ingest_run(run, tmp_path / "fresh-cache", PADS)
    return _rows(open_store(res.store_dir))


def test_rewrite001_same_inode_same_head_longer_is_read_again(tmp_path):
    """The file is truncated and written again through the same inode: the same first 64 KB and more (its
    first 30 steps as before, then other lines), ending longer than what was read. The store then holds
    exactly the file's rows (before: the old rows past 64 KB stayed, and the new ones up to the old end
    were never read)."""
    run = tmp_path / "run"
    run.mkdir()
    path = run / "rank0.jsonl"
    first = _lines(range(0, 30), "old") + _lines(range(30, 60), "old")
    path.write_bytes(first)
    ino = path.stat().st_ino
    cache = tmp_path / "cache"
    ingest_run(run, cache, PADS)
    assert len(_lines(range(0, 30), "old")) > 64 * 1024
    with open(path, "wb") as f:  # "w": truncated, same inode
        f.write(_lines(range(0, 30), "old") + _lines(range(30, 70), "new"))
    assert path.stat().st_ino == ino and path.stat().st_size > len(first)
    res = ingest_run(run, cache, PADS)
    rows = _rows(open_store(res.store_dir))
    assert rows == _fresh(tmp_path, run)
    assert sum(r[2].startswith("new") for r in rows) == 40 * 16


def test_rewrite002_same_size_same_mtime_is_read_again(tmp_path):
    """Rewritten to exactly the same size with its modification time set back (as a copy that keeps times
    does): the bytes read before are checked, not the file's size and time."""
    run = tmp_path / "run"
    run.mkdir()
    path = run / "rank0.jsonl"
    path.write_bytes(_lines(range(0, 40), "aaa"))
    st = path.stat()
    cache = tmp_path / "cache"
    ingest_run(run, cache, PADS)
    with open(path, "r+b") as f:
        f.write(_lines(range(0, 30), "aaa") + _lines(range(30, 40), "bbb"))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size
    res = ingest_run(run, cache, PADS)
    rows = _rows(open_store(res.store_dir))
    assert rows == _fresh(tmp_path, run)
    assert sum(r[2].startswith("bbb") for r in rows) == 10 * 16


def test_rewrite003_a_growing_file_is_not_read_again(tmp_path):
    """The check reads only a few windows of what was read: a file that only grew is read from where the
    last read stopped (the new bytes only)."""
    run = tmp_path / "run"
    run.mkdir()
    path = run / "rank0.jsonl"
    path.write_bytes(_lines(range(0, 40), "a"))
    cache = tmp_path / "cache"
    ingest_run(run, cache, PADS)
    more = _lines(range(40, 45), "a")
    with open(path, "ab") as f:
        f.write(more)
    res = ingest_run(run, cache, PADS)
    assert res.bytes_read == len(more)
    store = open_store(res.store_dir)
    assert store.scalars().height == 45 * 16
    assert store.scalars().select(pl.col("sample_id").n_unique()).item() == 45 * 16
