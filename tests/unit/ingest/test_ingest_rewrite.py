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


def _chain_by_hand(data: bytes, block: int) -> tuple[int, str, int, str]:
    """The digest of ``data`` as data/ingest/digest.py's docstring defines it, computed here on its own:
    ``chain = sha256-128(chain + block)`` over whole blocks, then sha256-128(chain + rest + length)
    (SHA-256 cut to its first 16 bytes; BLAKE2b-128 before STORE_FORMAT 19)."""
    import hashlib

    chain, at = b"", 0
    while len(data) - at >= block:
        chain = hashlib.sha256(chain + data[at : at + block]).digest()[:16]
        at += block
    final = hashlib.sha256(chain + data[at:] + len(data).to_bytes(8, "little"))
    return at, chain.hex(), len(data), final.hexdigest()[:32]


def test_rewrite006_digest_read_on_equals_digest_of_the_whole(tmp_path, monkeypatch):
    """The digest brought up to date a read at a time, from bytes fed in pieces (across block boundaries
    and inside one block, with gaps it reads from the file and overlaps it passes over), is the digest of
    the whole computed by hand, and another byte anywhere gives another digest. (Changed with the digest
    hashed from the bytes ingest read: ``Running`` replaced ``extended``, which read the file again.)"""
    from data.ingest import digest

    monkeypatch.setattr(digest, "BLOCK", 1000)
    again: list[tuple[int, int]] = []  # what is read from the file
    real = digest._pieces
    monkeypatch.setattr(digest, "_pieces", lambda p, a, b: again.append((a, b)) or real(p, a, b))
    path = tmp_path / "f"
    data = bytes(range(256)) * 20  # 5,120 bytes: five whole blocks and a part
    path.write_bytes(data)
    entry: dict = {}
    # each read: the pieces fed ((start, end), in order) and where it ends; a gap (1001-1500, 3500-3600)
    # is read from the file, an overlap (2500-3000 is hashed already; 3700-3800 fed twice) passed over
    reads = [([(0, 10)], 10), ([(10, 999)], 999), ([], 1000), ([(1000, 1001)], 1001)]
    reads += [([(1500, 3500)], 3500), ([(2500, 3500), (3600, 3800), (3700, 4100)], 4100), ([], 5120)]
    for pieces, upto in reads:
        running = digest.Running(path, entry)
        for a, b in pieces:
            running.feed(a, data[a:b])
        running.finish(entry, upto)
        assert tuple(entry["digest"]) == _chain_by_hand(data[:upto], 1000), upto
    # only the gaps and the part block hashed last time: (0, 10) and (0, 1000) that part, (1000, 1500) it
    # and a gap, (3500, 3600) a gap, (4000, 5120) a part block and what was not fed
    assert again == [(0, 10), (0, 1000), (1000, 1500), (3500, 3600), (4000, 5120)]
    again.clear()
    assert digest.unchanged(path, entry)
    for at in (0, 1500, 5119):
        path.write_bytes(data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :])
        assert not digest.unchanged(path, entry)
    assert not digest.unchanged(path, {})


def test_rewrite007_ingest_hashes_the_bytes_it_read(tmp_path, monkeypatch):
    """Ingest hashes the bytes it parsed, not a second read of the file: a first read reads nothing again
    for the digest, a read on only the part block hashed last time (and a line over the limit it read past);
    the digest in the manifest is that of the file's bytes up to where it was read, by hand, each time."""
    from data.ingest import digest
    from data.store.manifest import read_manifest

    monkeypatch.setattr(digest, "BLOCK", 4096)
    monkeypatch.setenv("RLBOARD_MAX_LINE_BYTES", "3000")
    again: list[tuple[int, int]] = []
    real = digest._pieces
    monkeypatch.setattr(digest, "_pieces", lambda p, a, b: again.append((a, b)) or real(p, a, b))
    run = tmp_path / "run"
    run.mkdir()
    path = run / "rank0.jsonl"
    data = _lines(range(0, 30), "a")
    path.write_bytes(data)
    cache = tmp_path / "cache"

    def stored() -> tuple:
        res = ingest_run(run, cache, PADS, chunk_bytes=5000)
        return tuple(read_manifest(res.store_dir).data["files"]["rank0.jsonl"]["digest"])

    assert stored() == _chain_by_hand(data, 4096) and again == []
    long = b'{"prompt": "p", "response": "' + b"z" * 5000 + b'", "step": 30, "reward": 0}\n'
    more = _lines(range(31, 33), "a") + long + _lines(range(34, 36), "a") + b'{"prompt": "q", "response": "t"'
    with open(path, "ab") as f:
        f.write(more)
    assert stored() == _chain_by_hand(data + more[: more.rindex(b"\n") + 1], 4096)
    line_at = len(data) + len(_lines(range(31, 33), "a"))
    assert again == [(len(data) // 4096 * 4096, len(data)), (line_at, line_at + len(long))]
    again.clear()
    with open(path, "ab") as f:
        f.write(b', "step": 36, "reward": 1}\n')
    whole = path.read_bytes()
    assert stored() == _chain_by_hand(whole, 4096)
    assert all(b - a <= 4096 for a, b in again)


def test_rewrite008_token_notes_exactly():
    """The notes on unequal token arrays, by hand: one per row whose lengths differ (not the pad window),
    its detail each present array's length, nulls left out; with one file's name, and with each row's
    source and part. (Written after the filter since the detail is built for the noted rows only.)"""
    from data.ingest.parts import UNEQUAL_LENGTHS, _token_notes

    df = pl.DataFrame(
        {
            "source": ["a", "b", "c", "d", "e"],
            "part": [7, 7, 8, 8, 9],
            "line": [1, 2, 3, 4, 5],
            "response_tokens": [["x", "y"], ["x", "y", "z"], ["x", "<pad>"], None, ["x"]],
            "logprobs": [[-1.0, -1.0], [-1.0], [-1.0], [-1.0, -2.0, -3.0], [-1.0]],
            "ref_logprobs": [[-1.0, -1.0], None, [-1.0], [-1.0], [-1.0]],
        }
    )
    got = _token_notes(df, "f.jsonl", ("<pad>",))
    assert got.columns == ["source", "line", "severity", "reason", "detail"]
    assert got.rows() == [
        ("f.jsonl", 2, "note", UNEQUAL_LENGTHS, "response_tokens 3, logprobs 1"),
        ("f.jsonl", 4, "note", UNEQUAL_LENGTHS, "logprobs 3, ref_logprobs 1"),
    ]
    got = _token_notes(df, None, ())
    assert got.columns == ["source", "line", "severity", "reason", "detail", "part"]
    assert got.rows() == [
        ("b", 2, "note", UNEQUAL_LENGTHS, "response_tokens 3, logprobs 1", 7),
        ("c", 3, "note", UNEQUAL_LENGTHS, "response_tokens 2, logprobs 1, ref_logprobs 1", 8),
        ("d", 4, "note", UNEQUAL_LENGTHS, "logprobs 3, ref_logprobs 1", 8),
    ]
    assert _token_notes(df.filter(pl.col("line") == 1), "f.jsonl").height == 0
