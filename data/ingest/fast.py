"""The fast path: a chunk of complete lines parsed by Polars in one call, and the checks that it read every
line as the contract wants (else the chunk goes to the slow path, :mod:`data.ingest.slow`)."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import polars as pl

from data import schema


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
    dialect: schema.Dialect = schema.CONTRACT,
    reading: schema.Reading | None = None,
) -> ChunkResult | None:
    """Parse the lines in one Polars call (``data``: the same lines already joined, when at hand; then
    ``lines`` may be None). ``step``: the step of the lines that have none (one for all, or one per
    line), as :func:`schema.conform_frame` takes it. ``dialect``: the file's; one without a ``frame``
    form reads its lines one by one (None)."""
    if not line_nos:
        return ChunkResult(pl.DataFrame(), [], set())
    if dialect.frame is None:
        return None
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
    if keys is None or df.height != len(line_nos) or not schema.frame_is_conformant(df, dialect):
        return None  # a key Polars left out (or spacing the count does not see), or a type not allowed
    if not _strings_parsed(parsed.strings, keys, marks):
        return None  # a number, bool, array or object became text: the line-by-line path names the line
    return conform_chunk(df, line_nos, step, dialect, reading)


def conform_chunk(
    df: pl.DataFrame,
    line_nos: list[int] | range,
    step: int | pl.Series | None,
    dialect: schema.Dialect,
    reading: schema.Reading | None,
) -> ChunkResult | None:
    """A parsed chunk (or a Parquet file's rows) mapped by its ``dialect`` and conformed: its good rows
    and its unusable ones; None when a cast fails (then it goes line by line)."""
    try:
        made = dialect.frame(df, reading or schema.Reading())
        working = frozenset(c for c in (schema.PROMPT_LEAD, schema.RESPONSE_OWN) if c in made.columns) - set(
            df.columns
        )
        frame, reasons, ignored = schema.conform_frame(made, step, dialect, working)
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


NO_RESPONSE = "a record without a response (such as an episode that failed before any trace): nothing to show"


def _line_of_rows(
    obj,
    ln: int,
    note: str | None,
    step,
    dialect: schema.Dialect,
    reading,
    records: list,
    rec_lines: list,
    ignored: set,
) -> list[dict]:
    """A line that holds several responses (``Dialect.rows``): each record checked on its own, numbered
    within the line (``IN_LINE``) and added to ``records``; returns the line's issues (a bad record of the
    line costs none of the others). Raises BadLine for a line that is no such record."""
    issues = [{"line": ln, "severity": "note", "reason": note, "detail": ""}] if note else []
    parts = dialect.rows(obj)
    if not parts:  # written by the trainer as it is: said, not counted as a bad line
        issues.append({"line": ln, "severity": "note", "reason": NO_RESPONSE, "detail": ""})
    for k, part in enumerate(parts):
        twice: list[str] = []
        try:
            rec, ign = schema.validate_record(part, step, twice, dialect, reading)
        except schema.BadLine as e:
            issues.append(
                {"line": ln, "severity": "error", "reason": f"response {k}: {e.reason}", "detail": ""}
            )
            continue
        ignored.update(ign)
        issues.extend(
            {"line": ln, "severity": "note", "reason": f"response {k}: {t}", "detail": ""} for t in twice
        )
        rec[schema.IN_LINE] = k
        records.append(rec)
        rec_lines.append(ln)
    return issues


def parse_rows(
    df: pl.DataFrame, step: int | None, dialect: schema.Dialect, reading: schema.Reading | None
) -> ChunkResult:
    """A Parquet file's rows one by one (lines numbered from 1), as the line-by-line path reads JSON lines:
    for a table whose rows do not go whole, so that exactly its bad rows are named."""
    records, lines, issues, ignored = [], [], [], set()
    for n, row in enumerate(df.iter_rows(named=True), start=1):
        if dialect.rows is not None:
            try:
                issues.extend(_line_of_rows(row, n, None, step, dialect, reading, records, lines, ignored))
            except schema.BadLine as e:
                issues.append({"line": n, "severity": "error", "reason": e.reason, "detail": ""})
            continue
        twice: list[str] = []
        try:
            rec, ign = schema.validate_record(row, step, twice, dialect, reading)
        except schema.BadLine as e:
            issues.append({"line": n, "severity": "error", "reason": e.reason, "detail": ""})
            continue
        ignored.update(ign)
        issues.extend({"line": n, "severity": "note", "reason": t, "detail": ""} for t in twice)
        records.append(rec)
        lines.append(n)
    frame = (
        schema.records_frame(records).with_columns(pl.Series("line", lines, dtype=pl.Int64))
        if records
        else pl.DataFrame()
    )
    return ChunkResult(frame, issues, ignored)
