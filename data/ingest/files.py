"""One rollout file read from the byte offset it reached last time (re-read from 0 when it shrank or was
replaced), a block of complete lines at a time, handed to the writer."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import polars as pl

from data import schema
from data.ingest.blocks import BOM, RawBlock, _next_block, parse_chunk
from data.ingest.fast import ChunkResult, _count_newlines
from data.ingest.slow import _snippet
from data.ingest.writer import _Writer

# A file's fingerprint (see _fingerprint): its first and last PRINT_WINDOW bytes up to where it was read, and
# PRINT_SAMPLES pieces of PRINT_SAMPLE bytes spread between them.
PRINT_WINDOW = 65536
PRINT_SAMPLES = 8
PRINT_SAMPLE = 4096


def _fingerprint(path: Path, upto: int) -> str:
    """A hash of what was read of a file (its first ``upto`` bytes): of all of it up to
    ``2 * PRINT_WINDOW + PRINT_SAMPLES * PRINT_SAMPLE`` bytes, else of its first and last ``PRINT_WINDOW``
    bytes and ``PRINT_SAMPLES`` pieces between. A file rewritten in place (a trainer restarted with the same
    seed reopens it with "w"), with the same start and no shorter, differs there, and most often just before
    where it was read to: the start alone took it as unchanged."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        head = min(upto, PRINT_WINDOW)
        h.update(f.read(head))
        tail = max(head, upto - PRINT_WINDOW)
        if tail - head <= PRINT_SAMPLES * PRINT_SAMPLE:
            h.update(f.read(tail - head))
        else:
            for k in range(PRINT_SAMPLES):
                f.seek(head + (tail - head - PRINT_SAMPLE) * k // (PRINT_SAMPLES - 1))
                h.update(f.read(PRINT_SAMPLE))
            f.seek(tail)
        h.update(f.read(upto - tail))
    return h.hexdigest()


def _file_changed(path: Path, st: os.stat_result, prev: dict) -> bool:
    """True when a file shrank, was replaced or was rewritten since it was last read (it is then read again
    from 0). Checked at every ingest, whatever its size and time say (see :func:`_fingerprint`)."""
    if st.st_size < prev["offset"]:
        return True
    if (st.st_dev, st.st_ino) != (prev.get("dev"), prev.get("ino")):
        return True
    return _fingerprint(path, prev["offset"]) != prev.get("print")


def ingest_file(
    writer: _Writer, run_dir: Path, path: Path, chunk_bytes: int, limit: int | None = None
) -> Iterator[int]:
    """Read what is new in one file, up to byte ``limit`` when given, yielding the bytes each chunk
    consumed (so that several files can be read a chunk at a time, in turn)."""
    rel = path.relative_to(run_dir).as_posix()
    name_step = schema.step_from_name(path.name)  # for its lines without a step
    st = path.stat()
    size = st.st_size if limit is None else min(limit, st.st_size)
    files = writer.m.data["files"]
    prev = files.get(rel)
    if prev is not None and _file_changed(path, st, prev):
        writer.drop_file(rel)
        prev = None
    if prev is not None and prev["size"] == size and (limit is not None or prev["mtime"] == st.st_mtime_ns):
        return
    entry = prev or {"offset": 0, "lines": 0, "parts": [], "tail_open": False}
    # size/mtime say "read up to here" only once the whole file is read: a commit made mid-file (or a
    # crash after it) must not make the rest look already read.
    entry.update(size=None, mtime=None, dev=st.st_dev, ino=st.st_ino)
    start = entry["offset"]
    with open(path, "rb") as f:
        if entry.get("tail_open") and start < size:
            # The last line was taken without its newline; what follows up to the newline belongs to it.
            f.seek(start)
            rest = f.read(min(size - start, 1 << 20))
            nl = rest.find(b"\n")
            if nl >= 0:
                extra = rest[:nl].strip()
                if extra:
                    result = ChunkResult(
                        pl.DataFrame(),
                        [
                            {
                                "line": entry["lines"],
                                "severity": "error",
                                "reason": "text after a complete JSON object",
                                "detail": _snippet(extra),
                            }
                        ],
                        set(),
                    )
                    entry["parts"].append(writer.write_chunk(rel, result))
                start += nl + 1
                entry["tail_open"] = False
            else:
                start = size if not rest.strip() else start
        while (chunk := _next_block(f, start, size, chunk_bytes)) is not None:
            offset_after, block = chunk
            n_lines = _count_newlines(block)
            raw = RawBlock(block, entry["lines"] + 1, start == 0 and entry["lines"] == 0, n_lines, name_step)
            entry["parts"].append(writer.write_chunk(rel, raw))
            entry["lines"] += n_lines
            # Several files are read in turn: hold no chunk while suspended at the yield below.
            del chunk, block, raw
            read = offset_after - start
            start = offset_after
            entry["offset"] = offset_after
            entry["print"] = _fingerprint(path, offset_after)
            files[rel] = entry
            writer.maybe_commit()
            yield read
        # An unterminated last line: taken when it is already a complete JSON object, else left pending.
        writer.m.data["pending"].pop(rel, None)
        if start < size and not entry.get("tail_open"):
            f.seek(start)
            tail = f.read(size - start)
            line_no = entry["lines"] + 1
            raw = tail.removeprefix(BOM) if start == 0 else tail
            raw = raw.rstrip(b"\r")
            obj = None
            if raw.strip():
                try:
                    obj = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    obj = None
            if isinstance(obj, dict):
                result = parse_chunk([raw], line_no, step=name_step)
                entry["parts"].append(writer.write_chunk(rel, result))
                entry["lines"] = line_no
                entry["tail_open"] = True
                entry["offset"] = size
                entry["print"] = _fingerprint(path, size)
                yield size - start
            elif raw.strip():
                age = time.time() - st.st_mtime
                writer.m.data["pending"][rel] = {
                    "line": line_no,
                    "reason": "last line incomplete (no newline yet)"
                    if age < 60
                    else "truncated last line: incomplete JSON and the file stopped growing",
                    "detail": f"{len(tail)} bytes, last modified {age:.0f} s ago",
                }
    entry.update(size=size, mtime=st.st_mtime_ns)
    files[rel] = entry
