"""One rollout file read from the byte offset it reached last time (re-read from 0 when it shrank or was
replaced), a block of complete lines at a time, handed to the writer; a Parquet or compressed file read
whole, and again whole when it changed. Each file is matched to its dialect when it is first read."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import polars as pl

from data import schema
from data.config import ReadLimits, read_limits
from data.ingest import companions
from data.ingest.blocks import BOM, SNIPPET_BYTES, Oversized, RawBlock, _next_block, parse_chunk, segments
from data.ingest.digest import Running, _edited_in_place, _file_changed, _fingerprint
from data.ingest.fast import ChunkResult, _count_newlines
from data.ingest.parquet import read_bounded as read_parquet
from data.ingest.slow import _snippet
from data.ingest.writer import _Writer
from data.remote import WHOLE_READ_BYTES, RemotePath
from data.schema.dialects.mapping import step_of

COMPRESSED = (".jsonl.gz", ".jsonl.zst")
PARQUET = ".parquet"
FIRST_RECORD_BYTES = 256 << 20  # read at most this far for a file's first record (its fields: its dialect)


def _read_to_end(entry: dict, path, st) -> None:
    """Record in a file's manifest ``entry`` that it was read to its end as ``st`` found it: the offset, the
    stat identity and the fingerprint the next ingest checks it against."""
    entry.update(
        offset=st.st_size,
        size=st.st_size,
        mtime=st.st_mtime_ns,
        dev=st.st_dev,
        ino=st.st_ino,
        print=_fingerprint(path, st.st_size),
    )


def _open_raw(path: Path):
    """A seekable binary reader of a file as it is stored (on an object store: one ranged GET a read)."""
    return path.open("rb") if isinstance(path, RemotePath) else open(path, "rb")


def _open_text(path: Path):
    """A binary file object of a rollout file's JSON lines, decompressed where it is compressed (on an
    object store, read in GETs of ``WHOLE_READ_BYTES``, of 1 MiB for a plain file's first lines: the
    decompressors and a line reader read in small pieces)."""
    if isinstance(path, RemotePath):
        source = path.open("rb", WHOLE_READ_BYTES if path.name.endswith(COMPRESSED) else 1 << 20)
    else:
        source = path
    if path.name.endswith(".gz"):
        import gzip

        return gzip.open(source, "rb")
    if path.name.endswith(".zst"):
        import io

        import zstandard

        # Buffered: zstandard's reader has no readline (the first record's fields were never read, so a
        # compressed file of any dialect was guessed the contract); it reads on across frames (prime-rl's
        # sealed chunks are seekable zstd, one frame per 4 MiB).
        return io.BufferedReader(zstandard.open(source, "rb"))
    return open(path, "rb") if source is path else source


def _first_fields(path: Path) -> frozenset[str]:
    """The keys of a file's first record (a Parquet file's columns): what its dialect is told by."""
    try:
        if path.name.endswith(PARQUET):
            import pyarrow.parquet as pq

            if isinstance(path, RemotePath):
                with path.open("rb") as f:  # the footer only: a few ranged GETs
                    return frozenset(pq.read_schema(f).names)
            return frozenset(pq.read_schema(path).names)
        # A line is read no further than the limit (a 3 GiB first line was read whole, twice the memory).
        most = min(FIRST_RECORD_BYTES, read_limits().line_bytes)
        with _open_text(path) as f:
            while raw := f.readline(most + 1):
                if len(raw) > most:
                    break
                if raw.strip():
                    obj = _loads(raw)
                    return frozenset(obj) if isinstance(obj, dict) else frozenset()
    except Exception:  # noqa: BLE001 - an unreadable start: no fields (read, the lines say why)
        return frozenset()
    return frozenset()


def _loads(raw: bytes):
    try:
        return orjson.loads(raw.removeprefix(BOM))
    except orjson.JSONDecodeError:
        import json

        try:
            return json.loads(raw.removeprefix(BOM).decode("utf-8", errors="replace"))
        except (ValueError, RecursionError):
            return None


def match_file(writer: _Writer, path: Path, rel: str, entry: dict) -> None:
    """Record in a file's manifest entry its dialect (how it was matched) and the step of its lines that
    have none: its path's where the path is laid out as a trainer lays out its steps (see
    :func:`schema.step_from_path`), else 0 where its first record has no step (an evaluation dump, or a
    layout the board does not know: step 0, said on every page of the run)."""
    fields, fm = None, writer.reading.fields
    if "dialect" not in entry:
        fields = _first_fields(path)
        m = schema.detect(rel, fields, writer.options.dialect, writer.options.default)
        # The run's own [fields] before any guess; the root's only where no dialect is sure or named.
        if fm is not None and (fm.where == "run" or m.how == "guessed"):
            m = schema.Match(schema.MAPPED, "mapped")
        entry.update(dialect=m.dialect.name, matched=m.how, also=list(m.others))
    if "step" not in entry:
        dialect = schema.by_name(entry["dialect"])
        step, how = step_of(fm, rel) if dialect is schema.MAPPED and fm is not None else (None, "")
        if dialect.own_steps is not None and dialect.own_steps(rel):
            entry.update(step=None, step_from=None)
        elif how:  # the mapping's: from the path ("fields"), none there ("none": 0), or the lines' own
            entry.update(step=step, step_from=how if how != "lines" else None)
        elif (step := schema.step_from_path(rel)) is not None:
            entry.update(step=step, step_from="path")
        else:  # none in the first record either (an empty file has none yet: its lines decide)
            fields = _first_fields(path) if fields is None else fields
            lacks = bool(fields) and "step" not in {*fields, *dialect.renames(fields).values()}
            entry.update(step=0 if dialect.stepless or lacks else None)
            entry.update(step_from="none" if dialect.stepless or lacks else None)


def ingest_file(
    writer: _Writer, run_dir: Path, path: Path, chunk_bytes: int, limit: int | None = None
) -> Iterator[int]:
    """Read what is new in one file, up to byte ``limit`` when given, yielding the bytes each chunk
    consumed (so that several files can be read a chunk at a time, in turn)."""
    rel = path.relative_to(run_dir).as_posix()
    files = writer.m.data["files"]
    if rel in files and companions.changed(writer.reading, run_dir, rel, files[rel], read_limits()):
        writer.drop_file(rel)  # its lines are read again, joined to the companion as it is now
    if path.name.endswith(PARQUET) or path.name.endswith(COMPRESSED):
        yield from ingest_whole_file(writer, path, rel, chunk_bytes, run_dir)
        return
    st = path.stat()
    size = st.st_size if limit is None else min(limit, st.st_size)
    files = writer.m.data["files"]
    prev = files.get(rel)
    if prev is not None and (_file_changed(path, st, prev) or _edited_in_place(path, st, prev)):
        writer.drop_file(rel)
        prev = None
    if prev is not None and prev["size"] == size and (limit is not None or prev["mtime"] == st.st_mtime_ns):
        return
    entry = prev or {"offset": 0, "lines": 0, "parts": [], "tail_open": False}
    match_file(writer, path, rel, entry)
    limits = read_limits()
    companions.load(writer.reading, run_dir, rel, entry, limits)
    name_step, dialect = entry["step"], entry["dialect"]  # for its lines without a step; its dialect
    # size/mtime say "read up to here" only once the whole file is read: a commit made mid-file (or a
    # crash after it) must not make the rest look already read.
    entry.update(size=None, mtime=None, dev=st.st_dev, ino=st.st_ino)
    start = entry["offset"]
    digest = Running(path, entry)  # hashed from the bytes read below: the file is not read twice
    with _open_raw(path) as f:
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
                # Read up to here, even when no whole line follows yet: the next read starts after the
                # newline (from before it, the newline would count again as a blank line, and every line
                # after it one too far).
                entry["offset"] = start
                entry["print"] = _fingerprint(path, start)
            else:
                start = size if not rest.strip() else start
        while (chunk := _next_block(f, start, size, chunk_bytes, limits.line_bytes)) is not None:
            offset_after, block = chunk
            if isinstance(block, Oversized):
                entry["parts"].append(writer.write_chunk(rel, _oversized(entry["lines"] + 1, block, limits)))
                entry["lines"] += 1
            else:
                n_lines = _count_newlines(block)
                at_start = start == 0 and entry["lines"] == 0
                raw = RawBlock(block, entry["lines"] + 1, at_start, n_lines, name_step, dialect)
                entry["parts"].append(writer.write_chunk(rel, raw))
                entry["lines"] += n_lines
                del raw
                digest.feed(start, block)  # (while a worker parses it)
            # Several files are read in turn: hold no chunk while suspended at the yield below.
            del chunk, block
            read = offset_after - start
            start = offset_after
            entry["offset"] = offset_after
            entry["print"] = _fingerprint(path, offset_after)
            files[rel] = entry
            writer.maybe_commit()
            yield read
        # An unterminated last line: taken when it is already a complete JSON object, else left pending.
        writer.m.data["pending"].pop(rel, None)
        if start < size and not entry.get("tail_open") and size - start > limits.line_bytes:
            writer.m.data["pending"][rel] = {
                "line": entry["lines"] + 1,
                "reason": f"last line over the limit of {limits.line_bytes:,} bytes "
                f"({ReadLimits.NAMES['line_bytes']}), no newline yet: not read",
                "detail": f"{size - start:,} bytes so far",
            }
        elif start < size and not entry.get("tail_open"):
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
                d = schema.by_name(dialect)
                result = parse_chunk(
                    [raw], line_no, step=name_step, dialect=d, reading=writer.reading.for_file(rel)
                )
                entry["parts"].append(writer.write_chunk(rel, result))
                digest.feed(start, tail)
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
    digest.finish(entry, entry["offset"])
    files[rel] = entry


def _oversized(line: int, block: Oversized, limits: ReadLimits) -> ChunkResult:
    """The unusable line that was longer than the limit (never held: its first bytes say what it was)."""
    return ChunkResult(
        pl.DataFrame(),
        [
            {
                "line": line,
                "severity": "error",
                "reason": f"line of {block.length:,} bytes, over the limit of {limits.line_bytes:,} "
                f"({ReadLimits.NAMES['line_bytes']}): not read",
                "detail": _snippet(block.head),
            }
        ],
        set(),
    )


def _refused_whole(
    writer: _Writer, rel: str, entry: dict, st: os.stat_result, path: Path, reason: str, detail: str = ""
) -> None:
    """A whole file read no further than a limit, or than where it is cut short or damaged: what was read
    of it is kept, the rest is said (pending until the file changes)."""
    writer.m.data["pending"][rel] = {"line": entry["lines"] + 1, "reason": reason, "detail": detail}
    _read_to_end(entry, path, st)
    writer.m.data["files"][rel] = entry


def _unreadable_whole(writer: _Writer, rel: str, entry: dict, st: os.stat_result, path: Path, error) -> None:
    """A whole file that cannot be read to its end (a Parquet or compressed file still being written, or
    damaged): :func:`_refused_whole` with the reason and the error."""
    reason = "file cut short or damaged: read again when it changes"
    _refused_whole(writer, rel, entry, st, path, reason, f"{type(error).__name__}: {error}"[:200])


def ingest_whole_file(
    writer: _Writer, path: Path, rel: str, chunk_bytes: int, run_dir: Path | None = None
) -> Iterator[int]:
    """A Parquet file (its rows, read with their types) or a compressed JSON-lines file (decompressed a
    block at a time), read whole: again from its start whenever its size, time or fingerprint changed
    (neither can be read on from an offset)."""
    st = path.stat()
    files = writer.m.data["files"]
    prev = files.get(rel)
    if prev is not None:
        same = (prev.get("size"), prev.get("mtime"), prev.get("dev"), prev.get("ino")) == (
            st.st_size,
            st.st_mtime_ns,
            st.st_dev,
            st.st_ino,
        )
        if same and prev.get("print") == _fingerprint(path, st.st_size):
            return
        writer.drop_file(rel)
    writer.m.data["pending"].pop(rel, None)
    entry = {"offset": 0, "lines": 0, "parts": [], "tail_open": False, "whole": True}
    match_file(writer, path, rel, entry)
    limits = read_limits()
    if run_dir is not None:
        companions.load(writer.reading, run_dir, rel, entry, limits)
    d = schema.by_name(entry["dialect"])
    if path.name.endswith(PARQUET):
        from data.ingest.fast import conform_chunk, parse_rows

        try:
            df, decoded = read_parquet(path, limits.parquet_bytes)
            if df is None:
                reason = (
                    f"decodes to {decoded:,} bytes or more, over the limit of {limits.parquet_bytes:,} "
                    f"({ReadLimits.NAMES['parquet_bytes']}): not read"
                )
                _refused_whole(writer, rel, entry, st, path, reason)
                return
        except Exception as e:  # noqa: BLE001 - a file still being written, or damaged: said, read again once changed
            _unreadable_whole(writer, rel, entry, st, path, e)
            return
        lines = range(1, df.height + 1)
        result = None if d.frame is None else conform_chunk(df, lines, entry["step"], d, writer.reading)
        entry["parts"].append(
            writer.write_chunk(rel, result or parse_rows(df, entry["step"], d, writer.reading.for_file(rel)))
        )
        entry["lines"] = df.height
    else:
        refused = _read_compressed(writer, path, rel, entry, chunk_bytes, limits, st)
        if refused is not None:
            if refused:
                _refused_whole(writer, rel, entry, st, path, refused)
            writer.maybe_commit()
            yield st.st_size
            return
    _read_to_end(entry, path, st)
    files[rel] = entry
    writer.maybe_commit()
    yield st.st_size


# What a damaged compressed file raises while it is read: gzip's and zlib's errors, and zstandard's where it is
# installed (a Ray worker reads with the cluster's own packages: a .gz file needs no zstandard there).
def _inflate_errors() -> tuple[type[BaseException], ...]:
    import zlib

    try:
        from zstandard import ZstdError
    except ImportError:
        return (OSError, EOFError, ValueError, zlib.error)
    return (OSError, EOFError, ValueError, zlib.error, ZstdError)


def _inflate_refusal(cap: int, limits: ReadLimits, st) -> str:
    return (
        f"inflates past {cap:,} bytes ({ReadLimits.NAMES['inflated_bytes']}, "
        f"{ReadLimits.NAMES['inflate_ratio']} {limits.inflate_ratio:g}x its {st.st_size:,} bytes): read up to there"
    )


def _read_compressed(
    writer: _Writer, path: Path, rel: str, entry: dict, chunk_bytes: int, limits: ReadLimits, st
) -> str | None:
    """Read a compressed JSON-lines file's lines a block at a time into ``entry``. Returns None when it was
    read to its end; otherwise it was read up to where it stopped and the reason is returned ("" when the
    reason is recorded already: a damaged file). A line over the limit is read past, never held; the file
    is read no further than :meth:`ReadLimits.inflate_cap` of its size."""
    cap, inflated = limits.inflate_cap(st.st_size), 0
    skipping: list | None = None  # [first bytes, length] of a line over the limit being read past
    errors = _inflate_errors()
    try:
        f = _open_text(path)
    except errors as e:
        _unreadable_whole(writer, rel, entry, st, path, e)
        return ""
    with f:
        rest = b""
        while True:
            try:
                # Never inflated past the cap (a byte beyond it tells that there is more): a piece of
                # chunk_bytes read whole first held up to 30 MB past a cap of any size.
                piece = f.read(min(chunk_bytes, cap + 1 - inflated))
            except errors as e:  # cut short (being written) or damaged
                if isinstance(e, OSError) and getattr(e, "filename", None) is not None:
                    raise
                _unreadable_whole(writer, rel, entry, st, path, e)
                return ""
            eof = not piece
            inflated += len(piece)
            capped = inflated > cap
            if capped:  # the lines up to the cap are read, the rest refused
                piece, eof = piece[: len(piece) - (inflated - cap)], False
            if skipping is not None:
                nl = piece.find(b"\n")
                skipping[1] += len(piece) if nl < 0 else nl + 1
                if nl < 0 and capped:  # the line runs past the cap: what is refused is said once
                    return _inflate_refusal(cap, limits, st)
                if nl < 0 and not eof:
                    continue
                line = Oversized(skipping[0], skipping[1])
                entry["parts"].append(writer.write_chunk(rel, _oversized(entry["lines"] + 1, line, limits)))
                entry["lines"] += 1
                skipping = None
                if eof:
                    break
                piece = piece[nl + 1 :]
            data = rest + piece
            cut = len(data) if eof else data.rfind(b"\n") + 1
            block, rest = data[:cut], data[cut:]
            if block:
                if not block.endswith(b"\n"):
                    block += b"\n"  # the last line, without its newline
                for seg in segments(block, limits.line_bytes):
                    if isinstance(seg, Oversized):
                        entry["parts"].append(
                            writer.write_chunk(rel, _oversized(entry["lines"] + 1, seg, limits))
                        )
                        entry["lines"] += 1
                        continue
                    n = _count_newlines(seg)
                    at_start = entry["lines"] == 0
                    raw = RawBlock(seg, entry["lines"] + 1, at_start, n, entry["step"], entry["dialect"])
                    entry["parts"].append(writer.write_chunk(rel, raw))
                    entry["lines"] += n
                del block
            if capped:
                return _inflate_refusal(cap, limits, st)
            if len(rest) > limits.line_bytes:
                skipping, rest = [rest[:SNIPPET_BYTES], len(rest)], b""
            if eof:
                break
    return None
