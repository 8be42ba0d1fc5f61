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


def _unsampled_line(data: bytes) -> tuple[int, int]:
    """The start and end of a whole line of ``data`` that no range of the fingerprint covers."""
    from data.ingest.digest import _print_ranges

    ranges = _print_ranges(len(data))
    start = 0
    while (end := data.index(b"\n", start) + 1) < len(data):
        if all(end <= a or start >= b for a, b in ranges):
            return start, end
        start = end
    raise AssertionError("every line touches a sampled range")


def test_rewrite004_same_size_edit_between_samples_is_read_again(tmp_path):
    """One line between the fingerprint's samples is edited in place to the same size and the file's
    modification time moves: the full digest tells the edit (before: never picked up, the store kept the
    old line), and the store holds exactly the file's rows."""
    run = tmp_path / "run"
    run.mkdir()
    path = run / "rank0.jsonl"
    data = _lines(range(0, 60), "aaa")
    path.write_bytes(data)
    st = path.stat()
    cache = tmp_path / "cache"
    ingest_run(run, cache, PADS)
    start, end = _unsampled_line(data)
    edited = data[start:end].replace(b'"aaa ', b'"bbb ')
    assert edited != data[start:end] and len(edited) == end - start
    with open(path, "r+b") as f:
        f.seek(start)
        f.write(edited)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert path.stat().st_size == st.st_size
    res = ingest_run(run, cache, PADS)
    rows = _rows(open_store(res.store_dir))
    assert rows == _fresh(tmp_path, run)
    assert [r[0] for r in rows if r[2].startswith("bbb")] == [data[:start].count(b"\n") + 1]


def test_rewrite005_full_digest_only_when_the_time_moved_at_the_same_size(tmp_path, monkeypatch):
    """The whole file is hashed again only when its size is the same and its time moved: not for a file
    left alone nor for one that grew; a file only touched (same bytes, new time) is not read again."""
    from data.ingest import digest

    run = tmp_path / "run"
    run.mkdir()
    path = run / "rank0.jsonl"
    path.write_bytes(_lines(range(0, 40), "a"))
    cache = tmp_path / "cache"
    ingest_run(run, cache, PADS)
    checks = []
    real = digest.unchanged
    monkeypatch.setattr(digest, "unchanged", lambda p, e: checks.append(p) or real(p, e))
    assert ingest_run(run, cache, PADS).bytes_read == 0
    with open(path, "ab") as f:
        f.write(_lines(range(40, 42), "a"))
    assert ingest_run(run, cache, PADS).bytes_read == len(_lines(range(40, 42), "a"))
    assert checks == []
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    res = ingest_run(run, cache, PADS)
    assert checks == [path] and res.bytes_read == 0
    assert open_store(res.store_dir).scalars().height == 42 * 16
    assert ingest_run(run, cache, PADS).bytes_read == 0 and checks == [path]


def test_rewrite006_digest_read_on_equals_digest_of_the_whole(tmp_path, monkeypatch):
    """The digest brought up to date a piece at a time (across block boundaries and inside one block) is
    the digest of the whole, and another byte anywhere gives another digest."""
    from data.ingest import digest
    from data.store.manifest import FileDigest

    monkeypatch.setattr(digest, "BLOCK", 1000)
    path = tmp_path / "f"
    data = bytes(range(256)) * 20  # 5,120 bytes: five whole blocks and a part
    path.write_bytes(data)
    entry: dict = {}
    for upto in (0, 10, 999, 1000, 1001, 3500, 5120):
        digest.extended(path, entry, upto)
        whole: dict = {}
        digest.extended(path, whole, upto)
        assert entry == whole
        state = FileDigest.of(entry["digest"])
        assert (state.at, state.upto) == (upto // 1000 * 1000, upto)
    assert digest.unchanged(path, entry)
    for at in (0, 1500, 5119):
        path.write_bytes(data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :])
        assert not digest.unchanged(path, entry)
    assert not digest.unchanged(path, {})
