"""Incremental ingest: read new complete lines of each rollout file, validate, derive metrics, append parts.

Each source file is read from the byte offset reached last time. A chunk of complete lines goes through
Polars in one call (fast path); only when that fails, or the chunk breaks the contract, is it read line by
line so that exactly the bad lines are recorded and every good line is kept (slow path). A part is written
before the manifest that names it, so a crash never leaves a half-counted file.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import orjson
import polars as pl
from filelock import FileLock, Timeout

from data import schema
from data.access import reason_of
from data.metrics.degeneration import repetition_of
from data.metrics.response import CLEAN_RESPONSE, derive_response_metrics, prompt_key_text, strip_pads
from data.metrics.step import step_summary
from data.store import RunStore, run_files, store_dir_for
from data.store.layout import (
    ISSUE_SCHEMA,
    PACK_AT,
    PACK_ROWS,
    PREVIEW_CHARS,
    ROW_GROUP_SIZE,
    SCALAR_CORE,
    file_prefix,
    pack_name,
    part_name,
    write_part_file,
)
from data.store.manifest import (
    Manifest,
    commit_manifest,
    has_issues,
    packed_parts,
    read_manifest,
    remove_older_formats,
    write_atomic,
)

# Bytes read at a time: under glibc's largest threshold for allocating by mmap (32 MiB). A block of 32 MiB
# was mapped afresh at every read (24-28 ms a read, against ~8 ms into reused memory): ingesting the
# 2.1 GB benchmark run took 663,000 page faults instead of 532,000 and peaked at 894-945 MB of RSS
# instead of 882-910 MB (three runs each).
CHUNK_BYTES = 30 * 1024 * 1024
WORKERS = 2  # chunks parsed, built and written at once while the reading thread reads the next block
# Blocks up to SMALL_BLOCK bytes (a file of one step, the end of a growing file) are parsed and built
# together, up to BATCH_BYTES or BATCH_PARTS of them, and then written as one part each: each call costs
# ~13 ms whatever its size, which made a run of 500 one-step files of 64 lines take 8.6 s.
SMALL_BLOCK = 1 << 20
BATCH_BYTES = 8 << 20
BATCH_PARTS = 256
BIG_CATCH_UP = 64 * 1024 * 1024
PEEK_BYTES = 64 * 1024  # read to find a block's last newline (see _next_block)
BOM = b"\xef\xbb\xbf"
HEAD_BYTES = 65536

Progress = Callable[[int, int], None]


@dataclass
class IngestResult:
    """What one ingest call did and what the store now holds."""

    run: str
    store_dir: Path
    files: int = 0
    samples: int = 0
    steps: int = 0
    tokens: int = 0
    bad_lines: int = 0
    new_rows: int = 0
    bytes_read: int = 0
    seconds: float = 0.0
    skipped_locked: bool = False
    generation: int = 0

    def summary(self) -> dict:
        return {
            "run": self.run,
            "files": self.files,
            "samples": self.samples,
            "steps": self.steps,
            "tokens": self.tokens,
            "bad_lines": self.bad_lines,
        }


# ---- parsing one chunk ---------------------------------------------------------------------------------


def _parse_line(raw: bytes) -> tuple[object, str | None]:
    """Parse one line; returns ``(object, note)``. Raises BadLine for unusable JSON."""
    try:
        return orjson.loads(raw), None
    except orjson.JSONDecodeError:
        pass
    notes = []
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("utf-8", errors="replace")
        notes.append("invalid UTF-8 bytes replaced by U+FFFD")
    try:
        # The standard library accepts the NaN / Infinity literals that Python trainers write, and
        # escapes of lone surrogates (a text cut inside a UTF-16 pair), which no text column can hold.
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise schema.BadLine(f"invalid JSON: {e.msg} (column {e.colno})") from None
    except RecursionError:
        raise schema.BadLine("invalid JSON: nested too deeply") from None
    obj, replaced = _replace_surrogates(obj)
    if replaced:
        notes.append("lone surrogate escapes replaced by U+FFFD")
    return obj, "; ".join(notes) or None


_SURROGATE = re.compile("[\ud800-\udfff]")


def _replace_surrogates(obj) -> tuple[object, int]:
    """``obj`` with each lone surrogate in its strings (keys too) replaced by U+FFFD, and how many strings
    changed. (``json.loads`` joins the escapes of a valid pair into one character.)"""
    changed = 0

    def walk(v):
        nonlocal changed
        if isinstance(v, str):
            new, n = _SURROGATE.subn("\ufffd", v)
            changed += n > 0
            return new
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, dict):
            return {walk(k): walk(x) for k, x in v.items()}
        return v

    return walk(obj), changed


class _Written(NamedTuple):
    """What a worker wrote of one part, for :meth:`_Writer._apply` to record in the manifest."""

    scalars: pl.DataFrame | None  # None: no usable row
    issues: pl.DataFrame
    rows: int
    ignored: set[str]  # fields not read
    per_token: list[str]  # per-token fields of the trainer's own that some row has


class RawBlock(NamedTuple):
    """Complete lines as read (the arguments of :func:`parse_block`)."""

    data: bytes
    first_line: int
    at_file_start: bool
    lines: int
    step: int | None = None  # the step of its lines that have none (from the file's name)


@dataclass
class ChunkResult:
    frame: pl.DataFrame  # conformed good rows with a "line" column
    issues: list[dict]
    ignored: set[str]


def _fast_path(
    lines: list[bytes] | None,
    line_nos: list[int] | range,
    data: bytes | None = None,
    step: int | pl.Series | None = None,
) -> ChunkResult | None:
    """Parse the lines in one Polars call (``data``: the same lines already joined, when at hand; then
    ``lines`` may be None). ``step``: the step of the lines that have none (one for all, or one per
    line), as :func:`schema.conform_frame` takes it."""
    if not line_nos:
        return ChunkResult(pl.DataFrame(), [], set())
    data = b"\n".join(lines) if data is None else data
    marks = _marks(data)
    if marks.lone_surrogates:
        return None  # which Polars reads as NUL or fails on: the line-by-line path replaces them, noted
    try:
        # Inferring the schema from the first rows is ~4x faster than from all rows. A type that changes
        # later (an integer reward, then 0.5; nulls, then numbers) makes that read fail, and a key that
        # only appears later is caught by counting keys below: both are read again with the schema
        # inferred from all rows (a type that still does not fit -> line-by-line path).
        try:
            df = pl.read_ndjson(io.BytesIO(data))
            full = False
        except pl.exceptions.PolarsError:
            df = pl.read_ndjson(io.BytesIO(data), infer_schema_length=None)
            full = True
        parsed = _parsed(df)
        keys = _key_count(data, parsed.values, marks)
        if keys is None and not full:
            df = pl.read_ndjson(io.BytesIO(data), infer_schema_length=None)
            parsed = _parsed(df)
            keys = _key_count(data, parsed.values, marks)
    except Exception:  # noqa: BLE001 - any parse failure sends the chunk to the line-by-line path
        return None
    df = schema.unwrap_batch_of_one_frame(df)
    if keys is None or df.height != len(line_nos) or not schema.frame_is_conformant(df):
        return None  # a key Polars left out (or spacing the count does not see), or a type not allowed
    if not _strings_parsed(parsed.strings, keys, marks):
        return None  # a number, bool, array or object became text: the line-by-line path names the line
    try:
        frame, reasons, ignored = schema.conform_frame(df, step)
    except pl.exceptions.PolarsError:  # a cast the checks above did not foresee: line by line, not a crash
        return None
    frame = frame.with_columns(pl.Series("line", line_nos, dtype=pl.Int64))
    issues = []
    if reasons.null_count() < len(reasons):
        bad = (
            frame.select("line").with_columns(reasons.alias("reason")).filter(pl.col("reason").is_not_null())
        )
        issues = [{"line": ln, "severity": "error", "reason": r, "detail": ""} for ln, r in bad.iter_rows()]
        frame = frame.filter(reasons.is_null())
    return ChunkResult(frame, issues, set(ignored))


class _Marks(NamedTuple):
    """How often the marks that delimit JSON strings occur in a chunk (see :func:`_marks`)."""

    quotes: int  # "
    keys: int  # ": where the quote closes a string (see _marks)
    escaped: int  # \"
    doubled: int  # \\" (an escaped backslash before a quote)
    lone_surrogates: bool  # a \uD800-\uDFFF escape outside a surrogate pair


SCAN_SLICE = 1 << 20  # bytes compared at a time by _marks and _count_newlines

# Bytes before the opening quote of a string (after at most one space): a string that starts with a colon
# (a ":" token) also makes a `":`, which is not the end of a key.
_BEFORE_STRING = np.zeros(256, bool)
_BEFORE_STRING[list(b"[,:{")] = True
# The third hex digit of a \uDxxx escape: a high surrogate (D800-DBFF) or a low one (DC00-DFFF).
_HIGH_SURROGATE = np.zeros(256, bool)
_HIGH_SURROGATE[list(b"89abAB")] = True
_LOW_SURROGATE = np.zeros(256, bool)
_LOW_SURROGATE[list(b"cdefCDEF")] = True


def _marks(data: bytes) -> _Marks:
    """Count the chunk's quotes, ``":``, ``\\"`` and ``\\\\"`` in one pass, a slice of ``SCAN_SLICE`` bytes at a
    time (numpy compares bytes about four times as fast as ``bytes.count`` finds two-byte patterns).

    A ``":`` counts as a key's end unless the byte before its quote (or, after a space, the one before
    that) is one of ``[,:{``: then the quote opens a string that starts with a colon. (A key that ends in
    one of them is not counted, which only sends its chunk the slower way.) It also tells whether a
    ``\\uD800``-``\\uDFFF`` escape stands outside a surrogate pair.
    """
    arr = np.frombuffer(data, np.uint8)
    quotes = keys = escaped = doubled = 0
    highs, lows = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
    for s in range(0, len(arr), SCAN_SLICE):
        a = arr[s : s + SCAN_SLICE + 2]  # two bytes more: the patterns that start in this slice
        m = min(SCAN_SLICE, len(a))
        q = a[:m] == 34
        quotes += int(np.count_nonzero(q))
        k = np.flatnonzero(q[: len(a) - 1] & (a[1 : m + 1] == 58)) + s  # where `":` starts, in arr
        before = arr[np.maximum(k - 1, 0)]
        spaced = (before == 32) & (k >= 2)
        before[spaced] = arr[k[spaced] - 2]
        keys += int(np.count_nonzero(~(_BEFORE_STRING[before] & (k >= 1))))
        b = np.flatnonzero(a[:m] == 92)  # backslashes are few: look at the bytes after each
        b = b[b + 2 < len(a)]  # in valid JSON a backslash is never among the last two bytes
        after = a[b + 1]
        escaped += int(np.count_nonzero(after == 34))
        doubled += int(np.count_nonzero((after == 92) & (a[b + 2] == 34)))
        u = b[after == 117] + s  # \u escapes, in arr
        u = u[u + 5 < len(arr)]
        u = u[arr[u + 2] | 32 == 100]  # \ud or \uD
        highs.append(u[_HIGH_SURROGATE[arr[u + 3]]])
        lows.append(u[_LOW_SURROGATE[arr[u + 3]]])
    high, low = np.concatenate(highs), np.concatenate(lows)
    # Each high one must be followed by a low one, and each low one preceded by a high one.
    lone = len(high) != len(low) or not np.array_equal(high + 6, low)
    return _Marks(quotes, keys, escaped, doubled, lone)


def _count_newlines(block: bytes) -> int:
    """``block.count(b"\\n")`` at a third of the cost (and without holding the GIL throughout)."""
    arr = np.frombuffer(block, np.uint8)
    return sum(int(np.count_nonzero(arr[s : s + SCAN_SLICE] == 10)) for s in range(0, len(arr), SCAN_SLICE))


class _Parsed(NamedTuple):
    """What a parsed chunk holds, to compare with the marks of its text (see :func:`_parsed`)."""

    values: int  # non-null values under a key, at any depth
    strings: list[pl.Series]  # every column or nested field of strings, one string per row


def _holds_text_or_objects(dtype: pl.DataType) -> bool:
    if dtype == pl.String or isinstance(dtype, pl.Struct):
        return True
    return isinstance(dtype, pl.List) and _holds_text_or_objects(dtype.inner)


def _parsed(df: pl.DataFrame) -> _Parsed:
    """The values under a key and the strings of a chunk Polars parsed, objects nested in lines included.

    Each non-null column value is under a top-level key; each non-null field of a (non-null) object, in a
    column or in a list, is under a nested key. Lists of numbers are not walked (they hold neither).
    """
    values = sum(df.height - n for n in df.null_count().row(0))
    strings: list[pl.Series] = []
    todo = [df.get_column(c) for c, t in df.schema.items() if _holds_text_or_objects(t)]
    while todo:
        s = todo.pop()
        if s.dtype == pl.String:
            strings.append(s)
        elif isinstance(s.dtype, pl.List):
            todo.append(s.explode(empty_as_null=False, keep_nulls=False))
        else:  # an object: its fields
            s = s.drop_nulls()
            for name in s.struct.fields:
                field = s.struct.field(name)
                values += field.len() - field.null_count()
                if _holds_text_or_objects(field.dtype):
                    todo.append(field)
    return _Parsed(values, strings)


def _key_count(data: bytes, values: int, marks: _Marks) -> int | None:
    """The number of ``"key":`` in the chunk when every one became one of the parsed ``values`` (no key was
    left out), else None.

    Inside JSON strings a quote is escaped, so ``":`` occurs only after a key (``\\":`` is text). Each
    key is either a non-null value (at any depth, see :func:`_parsed`) or an explicit ``null``. Unusual
    spacing makes the counts differ, which only costs a slower path.
    """
    keys = marks.keys
    if keys == values:  # the common case
        return keys
    keys -= data.count(b'\\":')
    nulls = data.count(b'":null') + data.count(b'": null')
    return keys if keys == values + nulls else None


def _strings_parsed(strings: list[pl.Series], keys: int, marks: _Marks) -> bool:
    """True when the chunk's JSON strings are exactly its ``keys`` keys and the parsed ``strings``.

    Polars turns a number, bool, array or object into text where the first rows had a string
    (``"prompt": 5`` becomes ``"5"``); the contract makes that line unusable. Every JSON string has two
    unescaped quotes, and each ``\\"`` escape adds one, so the chunk's quotes number twice its strings
    plus its escaped quotes; text made from a number adds a string without its quotes, and text made
    from an array or object of strings has fewer strings and keys than its quotes. Without ``\\\\"``
    in the chunk, every ``\\"`` is an escaped quote; otherwise the quotes inside the parsed strings are
    counted instead (a ``\\u0022`` escape then makes the counts differ: line-by-line path).
    """
    n = inner = 0
    for s in strings:
        n += s.len() - s.null_count()
        if marks.doubled:
            inner += s.str.count_matches('"', literal=True).sum() or 0
    return marks.quotes == 2 * (keys + n) + (inner if marks.doubled else marks.escaped)


def _slow_path(lines: list[bytes], line_nos: list[int], step: int | None = None) -> ChunkResult:
    plain = [_plain_json(raw) for raw in lines]
    if any(plain) and not all(plain):
        # NaN / Infinity literals (an -inf log-prob), which Polars does not read: the other lines in one
        # call when they go together, and only these one by one.
        even = [i for i, p in enumerate(plain) if p]
        fast = _fast_path([lines[i] for i in even], [line_nos[i] for i in even], step=step)
        if fast is not None:
            odd = [i for i, p in enumerate(plain) if not p]
            rest = _line_by_line(
                [lines[i] for i in odd], [line_nos[i] for i in odd], [False] * len(odd), step
            )
            frames = [f for f in (fast.frame, rest.frame) if f.height]
            frame = pl.concat(frames, how="diagonal_relaxed").sort("line") if frames else pl.DataFrame()
            return ChunkResult(frame, fast.issues + rest.issues, fast.ignored | rest.ignored)
    return _line_by_line(lines, line_nos, plain, step)


def _line_by_line(
    lines: list[bytes], line_nos: list[int], plain: list[bool], step: int | None = None
) -> ChunkResult:
    """Parse and check each line; the good lines without NaN / Infinity (``plain``) are then read in one
    Polars call where they go together."""
    records, rec_lines, issues, ignored = [], [], [], set()
    good_raw, good_lines, good_recs = [], [], []
    for raw, ln, is_plain in zip(lines, line_nos, plain, strict=True):
        try:
            obj, note = _parse_line(raw)
            rec, ign = schema.validate_record(obj, step)
        except schema.BadLine as e:
            issues.append({"line": ln, "severity": "error", "reason": e.reason, "detail": _snippet(raw)})
            continue
        ignored.update(ign)
        if note:
            issues.append({"line": ln, "severity": "note", "reason": note, "detail": ""})
        if note is None and is_plain:
            good_raw.append(raw)
            good_lines.append(ln)
            good_recs.append(rec)
        else:
            records.append(rec)
            rec_lines.append(ln)
    frames = []
    if good_raw:
        fast = _fast_path(good_raw, good_lines, step=step)
        if fast is None:
            # Lines that are valid one by one but not together (e.g. an extra field whose type changes):
            # build them from the validated records instead.
            records.extend(good_recs)
            rec_lines.extend(good_lines)
        else:
            frames.append(fast.frame)
            issues.extend(fast.issues)
            ignored.update(fast.ignored)
    if records:
        rf = schema.records_frame(records).with_columns(pl.Series("line", rec_lines, dtype=pl.Int64))
        frames.append(rf)
    frames = [f for f in frames if f.height]
    frame = pl.concat(frames, how="diagonal_relaxed").sort("line") if frames else pl.DataFrame()
    return ChunkResult(frame, issues, ignored)


def _plain_json(raw: bytes) -> bool:
    return b"NaN" not in raw and b"Infinity" not in raw


def _snippet(raw: bytes, n: int = 120) -> str:
    text = raw[: n * 4].decode("utf-8", errors="replace")
    return text[:n] + ("…" if len(text) > n or len(raw) > n * 4 else "")


def parse_chunk(
    lines: list[bytes], first_line: int, tried_whole: bool = False, step: int | None = None
) -> ChunkResult:
    """Validate and convert complete lines numbered from ``first_line``; blank lines are skipped.

    ``tried_whole``: the same lines already failed to go to Polars in one call (then they are not tried so
    again unless blank lines were left out). ``step``: the step of the lines that have none.
    """
    line_nos = list(range(first_line, first_line + len(lines)))
    keep = [i for i, raw in enumerate(lines) if raw.strip()]
    if len(keep) != len(lines):
        lines = [lines[i] for i in keep]
        line_nos = [line_nos[i] for i in keep]
        tried_whole = False
    result = None if tried_whole else _fast_path(lines, line_nos, step=step)
    return result if result is not None else _slow_path(lines, line_nos, step)


def parse_block(
    block: bytes, first_line: int, at_file_start: bool, lines: int | None = None, step: int | None = None
) -> tuple[ChunkResult, int]:
    """Validate and convert a block of complete lines (ending in a newline) numbered from ``first_line``;
    returns the result and the number of lines the block held (``lines``: that number, when known).
    ``step``: the step of its lines that have none (from the file's name).

    A plain block (no CR, no BOM, no empty line) goes to Polars as it is, without splitting it into
    lines; any other block, or one Polars does not take whole, is split and read by :func:`parse_chunk`.
    """
    if at_file_start and block.startswith(BOM):
        block = block[len(BOM) :]
    n = _count_newlines(block) if lines is None else lines
    # Polars skips empty lines, so a block with one gives fewer rows than lines and goes the slow way.
    tried = _goes_whole(block, n)
    if tried:
        result = _fast_path(None, range(first_line, first_line + n), block, step)
        if result is not None:
            return result, n
    lines = _split_lines(block)
    return parse_chunk(lines, first_line, tried_whole=tried, step=step), len(lines)


def _goes_whole(block: bytes, lines: int) -> bool:
    """Whether a block of ``lines`` complete lines may go to Polars in one call (Polars reads no CR line
    ends; a block with an empty line is caught after, by its row count)."""
    return bool(lines) and b"\r" not in block


class BlocksResult(NamedTuple):
    """Several blocks parsed in one call (see :func:`parse_blocks`)."""

    frame: pl.DataFrame  # good rows of every block, with "line" (in its file) and "__item" (its block)
    issues: list[list[dict]]  # per block
    ignored: set[str]


def parse_blocks(blocks: list[RawBlock]) -> BlocksResult | None:
    """Parse several small blocks (of one file or several) in one Polars call, or None when they do not go
    together (a bad line, a CR, an empty line, types that differ; see ``_Writer._write_together``).

    Their lines are numbered one after the other for the call, and numbered in their files again after.
    """
    parts = []
    for b in blocks:
        data = b.data[len(BOM) :] if b.at_file_start and b.data.startswith(BOM) else b.data
        if not _goes_whole(data, b.lines):
            return None
        parts.append(data)
    counts = np.array([b.lines for b in blocks], np.int64)
    total = int(counts.sum())
    steps = None  # each line's step from its file's name (for those without one)
    if any(b.step is not None for b in blocks):
        steps = pl.Series([b.step for b in blocks], dtype=pl.Int64).gather(
            np.repeat(np.arange(len(blocks)), counts)
        )
    result = _fast_path(None, range(total), b"".join(parts), steps)
    if result is None:
        return None
    ends = np.cumsum(counts)
    starts = ends - counts
    first = np.array([b.first_line for b in blocks], np.int64)

    def where(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # rows: 0-based in the call
        item = np.searchsorted(ends, rows, side="right")
        return item, first[item] + rows - starts[item]

    frame = result.frame
    item, line = where(frame.get_column("line").to_numpy())
    frame = frame.with_columns(
        pl.Series("line", line, dtype=pl.Int64), pl.Series("__item", item, dtype=pl.Int64)
    )
    issues: list[list[dict]] = [[] for _ in blocks]
    if result.issues:
        items, lines = where(np.array([i["line"] for i in result.issues], np.int64))
        for issue, k, ln in zip(result.issues, items.tolist(), lines.tolist(), strict=True):
            issues[k].append({**issue, "line": ln})
    return BlocksResult(frame, issues, result.ignored)


# ---- building a part -----------------------------------------------------------------------------------


def _prompt_keys(texts: pl.Series) -> pl.Series:
    uniq = texts.unique()
    mapping = {
        t: hashlib.blake2b(t.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
        for t in uniq.to_list()
    }
    return texts.replace_strict(mapping, return_dtype=pl.String)


def _preview(expr: pl.Expr) -> pl.Expr:
    """The start of a text (pads already removed) on one line: each run of white space becomes one space.

    Cut before collapsing white space: the preview needs only the start of a long text. The pattern
    leaves single spaces alone (replacing each of them by itself is 8x slower).
    """
    text = expr.str.slice(0, PREVIEW_CHARS * 4)
    return text.str.replace_all(r"[^\S ]\s*| \s+", " ").str.strip_chars().str.slice(0, PREVIEW_CHARS)


def derive_chunk(frame: pl.DataFrame, pad_tokens: tuple[str, ...]) -> pl.DataFrame:
    """A chunk's good rows with the row index and the derived per-response metrics (on a worker)."""
    df = frame.with_row_index("row").with_columns(pl.col("row").cast(pl.Int64))
    return derive_response_metrics(df, pad_tokens, keep_clean=True)


def build_part(
    derived: pl.DataFrame,
    rel: str | pl.Expr,
    part_id: int | pl.Expr,
    pad_tokens: tuple[str, ...],
    prefix: pl.Expr | None = None,
) -> pl.DataFrame:
    """Add repetition, ids, prompt keys and previews to a :func:`derive_chunk` frame; returns the full part
    frame. ``rel``, ``part_id``: the source file and part of every row, or (for several small blocks built
    at once) expressions giving each row's, with ``prefix`` giving each row's :func:`file_prefix`."""
    if isinstance(rel, str):
        prefix = pl.lit(file_prefix(rel))
        rel = pl.lit(rel)
    if isinstance(part_id, int):
        part_id = pl.lit(part_id, dtype=pl.Int64)
    clean = derived.get_column(CLEAN_RESPONSE)
    key_text = derived.select(prompt_key_text(pad_tokens)).to_series()
    # A prompt of several chat messages is previewed by its question (schema.PROMPT_LEAD).
    prompt_shown = strip_pads(pl.col("prompt"), pad_tokens)
    if schema.PROMPT_LEAD in derived.columns:
        prompt_shown = pl.coalesce(strip_pads(pl.col(schema.PROMPT_LEAD), pad_tokens), prompt_shown)
    return derived.with_columns(
        repetition_of(clean).alias("repetition"),
        (prefix + pl.lit("-") + pl.col("line").cast(pl.String)).alias("sample_id"),
        rel.alias("source"),
        part_id.cast(pl.Int64).alias("part"),
        _prompt_keys(key_text).alias("prompt_key"),
        _preview(prompt_shown).alias("prompt_preview"),
        _preview(pl.col(CLEAN_RESPONSE)).alias("response_preview"),
        pl.any_horizontal(*(pl.col(c).is_not_null() for c in schema.TOKEN_FIELDS)).alias("has_tokens"),
    ).drop(CLEAN_RESPONSE, schema.PROMPT_LEAD, strict=False)


def scalar_columns(df: pl.DataFrame) -> list[str]:
    """The columns of a part frame kept in its scalars: not the texts, the token arrays or the trainer's own
    per-token fields (kept in the part only)."""
    lists = set(schema.trainer_token_fields(df))
    extras = [c for c in df.columns if c not in schema.CANONICAL and c not in SCALAR_CORE and c not in lists]
    return [c for c in SCALAR_CORE if c in df.columns] + extras


def _issue_frame(issues: list[dict], rel: str) -> pl.DataFrame:
    return pl.DataFrame([{**i, "source": rel} for i in issues], schema=ISSUE_SCHEMA)


UNEQUAL_LENGTHS = "token arrays of unequal lengths (aligned from the first token)"


def _token_notes(df: pl.DataFrame, rel: str) -> pl.DataFrame:
    """A data-quality note (an issue frame) for each response whose token arrays have different lengths
    (kept, aligned). Built column-wise: in some trainers' files nearly every response has one."""
    present = [
        c for c in schema.TOKEN_FIELDS if c in df.columns and df.get_column(c).null_count() < df.height
    ]
    if len(present) < 2 or not df.height:
        return pl.DataFrame(schema=ISSUE_SCHEMA)
    lens = [pl.col(c).list.len() for c in present]
    detail = pl.concat_str(
        [pl.lit(f"{c} ") + pl.col(c).list.len().cast(pl.String) for c in present],
        separator=", ",
        ignore_nulls=True,
    )
    # Select before filtering: filtering the whole part would copy its token arrays.
    return (
        df.select(
            pl.lit(rel).alias("source"),
            "line",
            pl.lit("note").alias("severity"),
            pl.lit(UNEQUAL_LENGTHS).alias("reason"),
            detail.alias("detail"),
            (pl.max_horizontal(*lens) != pl.min_horizontal(*lens)).alias("unequal"),
        )
        .filter("unequal")
        .drop("unequal")
    )


def _issues_with_part(paths: list[Path], ids: list[int]) -> pl.DataFrame:
    """The issue files of parts ``ids`` in one frame, with a ``part`` column.

    One scan of all the files: adding the column to each file's own scan made Polars take ~20 ms a file
    to plan (53 s for 2,600 parts).
    """
    if not paths:
        return pl.DataFrame(schema={**ISSUE_SCHEMA, "part": pl.Int64})
    try:
        df = pl.scan_parquet(paths, include_file_paths="__file").collect()
    except pl.exceptions.PolarsError:  # files with different columns: one by one
        return pl.concat(
            [
                pl.read_parquet(p).with_columns(pl.lit(i, pl.Int64).alias("part"))
                for p, i in zip(paths, ids, strict=True)
            ],
            how="diagonal_relaxed",
        )
    by_path = {str(p): i for p, i in zip(paths, ids, strict=True)}
    part = pl.col("__file").replace_strict(by_path, return_dtype=pl.Int64).alias("part")
    return df.with_columns(part).drop("__file")


# ---- ingest of a run -----------------------------------------------------------------------------------


def _head_hash(path: Path, upto: int) -> str:
    with open(path, "rb") as f:
        return hashlib.blake2b(f.read(min(upto, HEAD_BYTES)), digest_size=16).hexdigest()


def _file_changed(path: Path, st: os.stat_result, prev: dict) -> bool:
    """True when a file shrank or was replaced since it was last read (it is then read again from 0)."""
    if st.st_size < prev["offset"]:
        return True
    if (st.st_dev, st.st_ino) != (prev.get("dev"), prev.get("ino")):
        return True
    return _head_hash(path, prev["offset"]) != prev.get("head")


@dataclass
class _CommitPoint:
    """The store's file state right after part ``pid`` was queued: committed once that part is applied."""

    pid: int
    files: dict
    pending: dict


class _Writer:
    """Accumulates committed state for one run while its files are read."""

    def __init__(self, store_dir: Path, manifest: Manifest, pad_tokens: tuple[str, ...]):
        self.dir = store_dir
        self.m = manifest
        self.pad_tokens = pad_tokens
        for sub in ("parts", "scalars", "issues"):
            (store_dir / sub).mkdir(parents=True, exist_ok=True)
        self.row_group_size = manifest.data.setdefault("row_group_size", ROW_GROUP_SIZE)
        self._scalars: pl.DataFrame | None = None
        self._added: list[pl.DataFrame] = []  # scalars of the parts applied since, joined when read
        self.new_rows = 0
        self.last_commit = time.monotonic()
        self.commit_every = 2.0
        self.last_commit_cost = 0.0  # wall seconds the last commit took
        # Files of the run that have lines (set by ingest_run); see _watermark.
        self.sources: set[str] = set()
        # Chunks are parsed, derived, built and written by WORKERS threads while the next block is read
        # (Polars releases the GIL), and their results are taken in order (_apply), so that the store
        # grows as if the chunks were written one after the other.
        self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="ingest-writer")
        # (part, file, the task writing it, its index in the task's results when it writes several)
        self._pending: deque[tuple[int, str, Future, int | None]] = deque()
        self._batch: list[tuple[int, str, RawBlock]] = []  # small blocks not yet handed to a worker
        self._batch_bytes = 0
        self._due: _CommitPoint | None = None

    @property
    def scalars(self) -> pl.DataFrame:
        """The committed scalars plus what this ingest added; read only when something changes.

        The parts' scalars are joined to them when read, all at once: joining each part as it came copied
        the whole table each time (a run of 500 one-step files spent 4 s on it)."""
        if self._scalars is None:
            self._load_committed()
        if self._added:
            frames = [f for f in (self._scalars, *self._added) if f.height]
            self._scalars = pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()
            self._added = []
        return self._scalars

    @scalars.setter
    def scalars(self, value: pl.DataFrame) -> None:
        self._scalars = value
        self._added = []

    def _load_committed(self) -> None:
        """Read the scalars of the parts in the manifest (before any part of this ingest joins it)."""
        prev = RunStore(self.dir, self.m)
        self._scalars = prev.all_scalars() if self.m.data["parts"] else pl.DataFrame()

    def drop_file(self, rel: str) -> None:
        self.flush()
        entry = self.m.data["files"].pop(rel, None)
        self.m.data["pending"].pop(rel, None)
        if entry:
            for pid in entry["parts"]:
                self.m.data["parts"].pop(str(pid), None)
            if self.scalars.height and "source" in self.scalars.columns:
                self.scalars = self.scalars.filter(pl.col("source") != rel)

    def write_chunk(self, rel: str, chunk: ChunkResult | RawBlock) -> int:
        """Queue a chunk (a block of lines, or lines already parsed) to become part ``pid`` (returned at
        once), parsed, built and written on a worker thread while the next block is read. At most WORKERS
        tasks wait (memory); small blocks wait to be handed over together (see ``SMALL_BLOCK``)."""
        pid = self.m.data["next_part"]
        self.m.data["next_part"] = pid + 1
        while self._pending and self._pending[0][2].done():  # take what is written (and commit it) now
            self._apply(self._pending.popleft())
        if isinstance(chunk, RawBlock) and len(chunk.data) <= SMALL_BLOCK:
            self._batch.append((pid, rel, chunk))
            self._batch_bytes += len(chunk.data)
            if self._batch_bytes >= BATCH_BYTES or len(self._batch) >= BATCH_PARTS:
                self._submit_batch()
            return pid
        self._submit_batch()
        self._wait_for_room()
        self._pending.append((pid, rel, self._pool.submit(self._write_part, pid, rel, chunk), None))
        return pid

    def _submit_batch(self) -> None:
        if not self._batch:
            return
        items, self._batch, self._batch_bytes = self._batch, [], 0
        self._wait_for_room()
        future = self._pool.submit(self._write_batch, items)
        self._pending.extend((pid, rel, future, k) for k, (pid, rel, _) in enumerate(items))

    def _wait_for_room(self) -> None:
        while len({id(item[2]) for item in self._pending}) >= WORKERS:
            self._apply(self._pending.popleft())

    def flush(self) -> None:
        """Wait for the queued chunks to be written and take their results (raises what writing raised)."""
        self._submit_batch()
        while self._pending:
            self._apply(self._pending.popleft())

    def close(self) -> None:
        """Finish or abandon writing; no thread is left writing into the store afterwards."""
        self._due = None  # after a failure, no commit point may be committed past the failed part
        try:
            self.flush()
        finally:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pending.clear()
            self._batch = []

    def _write_part(self, pid: int, rel: str, chunk: ChunkResult | RawBlock) -> _Written:
        """Worker thread: parse, derive and build the part, write its files.

        Touches no shared state: :meth:`_apply` takes the results in order on the reading thread."""
        result = parse_block(*chunk)[0] if isinstance(chunk, RawBlock) else chunk
        full = None
        if result.frame.height:
            full = build_part(derive_chunk(result.frame, self.pad_tokens), rel, pid, self.pad_tokens)
        return self._write_files(pid, rel, full, result.issues, result.ignored)

    def _write_batch(self, items: list[tuple[int, str, RawBlock]]) -> list[_Written]:
        """Worker thread: :meth:`_write_part` of several small blocks. Those without CR line ends are
        parsed, derived and built at once where they go together (:func:`parse_blocks`; where they do
        not, each half is tried again), then written as one part each; the rest one by one."""
        results: list[_Written | None] = [None] * len(items)
        self._write_together(
            items, [k for k, (_, _, c) in enumerate(items) if _goes_whole(c.data, c.lines)], results
        )
        for k, (pid, rel, chunk) in enumerate(items):
            if results[k] is None:
                results[k] = self._write_part(pid, rel, chunk)
        return results

    def _write_together(
        self, items: list[tuple[int, str, RawBlock]], ks: list[int], results: list[_Written | None]
    ) -> None:
        """Fill ``results[k]`` for the blocks ``items[k]``, ``k`` in ``ks``, that go together in halves."""
        if len(ks) < 2:
            return
        parsed = parse_blocks([items[k][2] for k in ks])
        if parsed is None:  # a bad line, or a field of another type: find the blocks that do go together
            half = len(ks) // 2
            self._write_together(items, ks[:half], results)
            self._write_together(items, ks[half:], results)
            return
        fulls: dict[int, pl.DataFrame] = {}
        if parsed.frame.height:
            index = list(range(len(ks)))

            def each(values: list, dtype: pl.DataType) -> pl.Expr:  # the value of each row's block
                return pl.col("__item").replace_strict(index, values, return_dtype=dtype)

            rels = [items[k][1] for k in ks]
            full = build_part(
                derive_chunk(parsed.frame, self.pad_tokens),
                each(rels, pl.String),
                each([items[k][0] for k in ks], pl.Int64),
                self.pad_tokens,
                prefix=each([file_prefix(rel) for rel in rels], pl.String),
            )
            by_block = full.partition_by("__item", maintain_order=True, include_key=False, as_dict=True)
            for (j,), part in by_block.items():
                fulls[j] = part.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias("row"))
        for j, k in enumerate(ks):
            pid, rel, _ = items[k]
            results[k] = self._write_files(pid, rel, fulls.get(j), parsed.issues[j], parsed.ignored)

    def _write_files(
        self, pid: int, rel: str, full: pl.DataFrame | None, found: list[dict], ignored: set[str]
    ) -> _Written:
        """Write the part, scalars and issues files of part ``pid`` (``full``: its rows, if any)."""
        name = part_name(pid)
        issues = _issue_frame(found, rel)
        n = 0 if full is None else full.height
        scal = None
        per_token = []
        if n:
            per_token = schema.trainer_token_fields(full, with_values=True)
            issues = pl.concat([issues, _token_notes(full, rel)]).sort("line", maintain_order=True)
            write_part_file(full, self.dir / "parts" / name, self.row_group_size)
            scal = full.select(scalar_columns(full))
            scal.write_parquet(self.dir / "scalars" / name, compression="zstd", compression_level=1)
        if issues.height:  # readers open the issues file only of a part whose entry counts some
            issues.write_parquet(self.dir / "issues" / name)
        return _Written(scal, issues, n, ignored, per_token)

    def _apply(self, item: tuple[int, str, Future, int | None]) -> None:
        pid, rel, future, k = item
        scal, issues, n, ignored, per_token = future.result() if k is None else future.result()[k]
        severity = issues.get_column("severity")
        if scal is not None:
            if self._scalars is None:
                self._load_committed()
            self._added.append(scal)
            extras = self.m.data.setdefault("extra_columns", [])
            for c in scal.columns:
                if c not in SCALAR_CORE and c not in extras:
                    extras.append(c)
        self.m.data["ignored_fields"] = sorted(set(self.m.data["ignored_fields"]) | ignored)
        known = self.m.data.setdefault("token_extras", [])
        known.extend(c for c in per_token if c not in known)
        self.m.data["parts"][str(pid)] = {
            "file": rel,
            "rows": n,
            "errors": int((severity == "error").sum()),
            "notes": int((severity == "note").sum()),
        }
        self.new_rows += n
        if self._due is not None and pid >= self._due.pid:
            self._commit_due()

    def maybe_commit(self) -> None:
        """Commit now and then during a long ingest, so that readers see the steps already read.

        Called after each chunk's file state is recorded. When a commit is due, that state is taken as a
        commit point: the commit is made when the chunk's part has been applied (:meth:`_apply`), with the
        files as they were then, so it never waits for the workers. Such a commit is taken mid-read, so
        its last steps may be partial: it shows only complete ones. It summarises every step read so far
        (0.2-0.4 CPU-s at 250,000 responses); spacing commits at least 19 times their wall time apart keeps
        them to a few percent of a long ingest's CPU (two cores) while a 2 GB run still shows new steps
        every few seconds.
        """
        if self._due is not None:
            return
        if time.monotonic() - self.last_commit >= max(self.commit_every, 19 * self.last_commit_cost):
            data = self.m.data
            self._due = _CommitPoint(
                pid=data["next_part"] - 1,
                files={rel: {**e, "parts": list(e["parts"])} for rel, e in data["files"].items()},
                pending=dict(data["pending"]),
            )
            self._submit_batch()  # it holds the commit point's part: hand it over now, not when full
            if not self._pending:
                self._commit_due()

    def _commit_due(self) -> None:
        point, self._due = self._due, None
        data = {**self.m.data, "files": point.files, "pending": point.pending, "next_part": point.pid + 1}
        self._commit(data, complete=False)

    def _watermark(self) -> int | None:
        """The first step that may still be partial: the smallest of the files' last steps.

        Each file is read in order, so every step below the last step of every file is whole; the last
        one may be missing lines of a rank file still being read or written.
        """
        sc = self.scalars
        if not sc.height or "source" not in sc.columns:
            return None
        last = sc.group_by("source").agg(pl.col("step").max())
        if self.sources - set(last.get_column("source").to_list()):
            # A file with lines not read yet could hold any step: nothing is known to be whole.
            return int(sc.get_column("step").min())
        return int(last.get_column("step").min())

    def commit(self, complete: bool = True) -> None:
        """Commit what was read. ``complete=False``: the files may hold a partial last step (read mid-way,
        or a trainer still writing), so readers are shown only the steps below :meth:`_watermark`."""
        self._due = None  # this commit covers it
        self.flush()
        self._pack()
        self._commit(self.m.data, complete)

    def _pack(self) -> None:
        """Copy the scalars and issues of many small parts into one pack (see ``PACK_AT``), named in the
        manifest by the commit that follows; packs lose the parts dropped since (a file re-read)."""
        data = self.m.data
        parts = data["parts"]
        packs = [{**p, "parts": [i for i in p["parts"] if str(i) in parts]} for p in data.get("packs", [])]
        packs = [p for p in packs if p["parts"]]
        packed = packed_parts(packs)
        small = sorted(int(k) for k, p in parts.items() if int(k) not in packed and p["rows"] <= PACK_ROWS)
        if len(small) >= PACK_AT:
            name = pack_name(small)
            scalars = [
                pl.scan_parquet(self.dir / "scalars" / part_name(i)) for i in small if parts[str(i)]["rows"]
            ]
            with_issues = [i for i in small if has_issues(parts[str(i)])]
            frames = {
                "scalars": pl.concat(scalars, how="diagonal_relaxed").collect()
                if scalars
                else pl.DataFrame(schema={"part": pl.Int64}),
                "issues": _issues_with_part(
                    [self.dir / "issues" / part_name(i) for i in with_issues], with_issues
                ),
            }
            for sub, frame in frames.items():
                buf = io.BytesIO()
                frame.write_parquet(buf, compression="zstd", compression_level=1)
                write_atomic(self.dir / sub / name, buf.getvalue())
            packs.append({"name": name, "parts": small})
        if packs or "packs" in data:
            data["packs"] = packs

    def _commit(self, data: dict, complete: bool) -> None:
        """Write the steps summary and the manifest ``data`` (the state of every applied part)."""
        started = time.monotonic()
        gen = self.m.data["generation"] + 1
        steps_name = f"steps-g{gen:06d}.parquet"
        below = None if complete else self._watermark()
        shown = self.scalars if below is None else self.scalars.filter(pl.col("step") < below)
        if shown.height:
            steps = step_summary(shown.lazy()).collect()
        else:
            steps = pl.DataFrame(schema={"step": pl.Int64, "n": pl.UInt32})
        buf = io.BytesIO()
        steps.write_parquet(buf)
        write_atomic(self.dir / steps_name, buf.getvalue())
        old = self.m.data.get("steps_file")
        for d in (self.m.data, data):
            d.update(visible_below=below, steps_file=steps_name, generation=gen)
        commit_manifest(self.dir, Manifest(data))
        self._collect_garbage(old)
        self.last_commit = time.monotonic()
        self.last_commit_cost = self.last_commit - started

    def _collect_garbage(self, old_steps: str | None) -> None:
        """Remove files no committed manifest names any more (kept one generation for slow readers)."""
        ids = {int(k) for k in self.m.data["parts"]}
        packs = self.m.data.get("packs", [])
        loose = ids - packed_parts(packs)
        names = {pack["name"] for pack in packs}
        floor = self.m.data["next_part"]
        for sub, keep in (("parts", ids), ("scalars", loose), ("issues", loose)):
            for p in (self.dir / sub).glob("p*.parquet"):
                if int(p.stem[1:]) not in keep and int(p.stem[1:]) < floor - 64:
                    p.unlink(missing_ok=True)
            if sub != "parts":
                for p in (self.dir / sub).glob("k*.parquet"):
                    if p.name not in names:  # of a pack whose parts were all dropped, or left by a crash
                        p.unlink(missing_ok=True)
        for p in self.dir.glob("steps-g*.parquet"):
            if p.name not in (self.m.data["steps_file"], old_steps):
                p.unlink(missing_ok=True)


def _next_block(f, start: int, end: int, chunk_bytes: int) -> tuple[int, bytes] | None:
    """``(offset_after, block)``: the complete lines from ``start`` of about ``chunk_bytes`` (more when one
    line is longer), or None when ``[start, end)`` holds no complete line.

    The last newline before ``start + chunk_bytes`` is found by reading only the last ``PEEK_BYTES`` of
    that range; the block is then read in one call into its own bytes. Reading a whole chunk and copying
    its complete lines out would move every byte twice (a 32 MB copy is ~30 ms on the reading thread).
    """
    want = min(chunk_bytes, end - start)
    if want > 0:
        peek_from = max(start, start + want - PEEK_BYTES)
        f.seek(peek_from)
        cut = f.read(start + want - peek_from).rfind(b"\n")
        if cut >= 0:
            n = peek_from - start + cut + 1
            f.seek(start)
            block = f.read(n)
            if len(block) == n and block.endswith(b"\n"):
                return start + n, block
    # A line longer than the peek (or a file that changed meanwhile): read on until a newline.
    f.seek(start)
    data = b""
    pos = start
    while pos < end:
        piece = f.read(min(chunk_bytes, end - pos))
        if not piece:
            break
        pos += len(piece)
        data += piece
        cut = data.rfind(b"\n")
        if cut >= 0:
            return start + cut + 1, data[: cut + 1]
    return None


def _split_lines(block: bytes) -> list[bytes]:
    """The lines of a block (BOM already removed), without their newline or a trailing CR."""
    lines = block.split(b"\n")
    lines.pop()  # the empty string after the final newline
    return [ln[:-1] if ln.endswith(b"\r") else ln for ln in lines]


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
            entry["head"] = _head_hash(path, offset_after)
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
                entry["head"] = _head_hash(path, size)
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


def ingest_run(
    run_dir: Path,
    cache_dir: Path,
    pad_tokens: tuple[str, ...],
    progress: Progress | None = None,
    wait: bool = True,
    chunk_bytes: int = CHUNK_BYTES,
    limits: dict[str, int] | None = None,
    complete: bool = True,
) -> IngestResult:
    """Bring the store of ``run_dir`` up to date with its files and return what it now holds.

    Only one process writes a store at a time (a file lock). With ``wait=False`` a call that finds the
    lock taken returns at once with ``skipped_locked=True`` and the last committed state. ``limits``
    (``{file: size}``) reads each file only up to that size: a cut of the files taken at one moment, so
    that lines appended meanwhile wait for the next call. ``complete=False`` says the files may end in a
    partial step (a trainer still writing): the last step of each file is then hidden until a later call
    with ``complete=True``. Commits made during a long read always hide it.
    """
    t0 = time.perf_counter()
    run_dir = Path(run_dir)
    store_dir = store_dir_for(cache_dir, run_dir, pad_tokens)
    store_dir.mkdir(parents=True, exist_ok=True)
    result = IngestResult(run=run_dir.name, store_dir=store_dir)
    lock = FileLock(str(store_dir / ".lock"))
    try:
        lock.acquire(timeout=-1 if wait else 0)
    except Timeout:
        result.skipped_locked = True
        _fill_result(result, store_dir)
        return result
    writer = None
    try:
        manifest = read_manifest(store_dir)
        if manifest is None:
            manifest = Manifest.empty(run_dir.name, str(run_dir.resolve()), pad_tokens)
            remove_older_formats(store_dir, manifest)
        writer = _Writer(store_dir, manifest, pad_tokens)
        paths = run_files(run_dir)
        on_disk = {p.relative_to(run_dir).as_posix() for p in paths}
        changed = False
        for rel in list(manifest.data["files"]):
            if rel not in on_disk:
                writer.drop_file(rel)
                changed = True
        limits = limits or {}

        def size_of(p: Path) -> int:
            rel = p.relative_to(run_dir).as_posix()
            return min(p.stat().st_size, limits.get(rel, 1 << 62))

        total = sum(
            max(
                0,
                size_of(p)
                - manifest.data["files"].get(p.relative_to(run_dir).as_posix(), {}).get("offset", 0),
            )
            for p in paths
        )
        # A small catch-up (a live run's new steps) is committed once, whole; a big one now and then too,
        # so that pages show the steps read so far.
        writer.commit_every = 2.0 if total >= BIG_CATCH_UP else float("inf")
        done = 0
        writer.sources = {p.relative_to(run_dir).as_posix() for p in paths if size_of(p) > 0}
        unreadable: dict[str, str] = {}

        def state() -> bytes:
            data = manifest.data
            return orjson.dumps([data["files"], data["pending"], data.get("unreadable", {})])

        before = state()
        # Rank files are read a chunk each in turn, so that the steps committed during a long first read
        # hold every rank's responses (see _Writer._watermark).
        readers = {
            p: ingest_file(writer, run_dir, p, chunk_bytes, limits.get(p.relative_to(run_dir).as_posix()))
            for p in paths
        }
        while readers:
            for p, reader in list(readers.items()):
                try:
                    done += next(reader)
                except StopIteration:
                    del readers[p]
                    continue
                except OSError as e:
                    if e.filename is None or os.fspath(e.filename) != os.fspath(p):
                        raise  # not the source file (the cache, say): the ingest fails and says so
                    # A file the board may not read (another user's, mode 0600): listed with its reason
                    # on the runs page; the run's other files still load.
                    unreadable[p.relative_to(run_dir).as_posix()] = reason_of(e)
                    del readers[p]
                    continue
                if progress:
                    progress(done, total)
        manifest.data["unreadable"] = unreadable
        changed = changed or before != state()
        if changed or manifest.generation == 0:
            writer.commit(complete=complete)
        elif complete and manifest.data.get("visible_below") is not None:
            # Nothing new, and the files are still: the steps hidden by an earlier commit are whole.
            writer.commit(complete=True)
        # (Nothing new while the files keep changing: what is shown stays as it is. Hiding the last step
        # again would change the store's version back and forth for nothing.)
        result.bytes_read = done
        result.new_rows = writer.new_rows
        if progress:
            progress(total, total)
    finally:
        try:
            if writer is not None:
                writer.close()
        finally:
            lock.release()
    _fill_result(result, store_dir)
    result.seconds = time.perf_counter() - t0
    return result


def _fill_result(result: IngestResult, store_dir: Path) -> None:
    m = read_manifest(store_dir)
    if m is None:
        return
    store = RunStore(store_dir, m)
    result.files = len(m.data["files"])
    result.generation = m.generation
    steps = store.steps()
    result.samples = int(steps.get_column("n").sum()) if steps.height else 0
    result.steps = steps.height
    result.tokens = (
        int(steps.get_column("n_kl_tokens").fill_null(0).sum()) if "n_kl_tokens" in steps.columns else 0
    )
    result.bad_lines = sum(p["errors"] for p in m.data["parts"].values())
