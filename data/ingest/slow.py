"""The slow path: a chunk read line by line, so that exactly the bad lines are recorded (file, line,
reason) and every good line is kept; the good lines still go to Polars together where they can."""

from __future__ import annotations

import json
import re

import orjson
import polars as pl

from data import schema
from data.ingest.fast import ChunkResult, _fast_path, _line_of_rows


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


def _slow_path(
    lines: list[bytes],
    line_nos: list[int],
    step: int | None = None,
    dialect: schema.Dialect = schema.CONTRACT,
    reading: schema.Reading | None = None,
) -> ChunkResult:
    plain = [_plain_json(raw) for raw in lines]
    if any(plain) and not all(plain) and dialect.frame is not None:
        # NaN / Infinity literals (an -inf log-prob), which Polars does not read: the other lines in one
        # call when they go together, and only these one by one.
        even = [i for i, p in enumerate(plain) if p]
        fast = _fast_path(
            [lines[i] for i in even], [line_nos[i] for i in even], step=step, dialect=dialect, reading=reading
        )
        if fast is not None:
            odd = [i for i, p in enumerate(plain) if not p]
            rest = _line_by_line(
                [lines[i] for i in odd],
                [line_nos[i] for i in odd],
                [False] * len(odd),
                step,
                dialect,
                reading,
            )
            frames = [f for f in (fast.frame, rest.frame) if f.height]
            frame = pl.concat(frames, how="diagonal_relaxed").sort("line") if frames else pl.DataFrame()
            return ChunkResult(frame, fast.issues + rest.issues, fast.ignored | rest.ignored)
    return _line_by_line(lines, line_nos, plain, step, dialect, reading)


def _line_by_line(
    lines: list[bytes],
    line_nos: list[int],
    plain: list[bool],
    step: int | None = None,
    dialect: schema.Dialect = schema.CONTRACT,
    reading: schema.Reading | None = None,
) -> ChunkResult:
    """Parse and check each line; the good lines without NaN / Infinity (``plain``) are then read in one
    Polars call where they go together."""
    records, rec_lines, issues, ignored = [], [], [], set()
    good_raw, good_lines, good_recs = [], [], []
    for raw, ln, is_plain in zip(lines, line_nos, plain, strict=True):
        try:
            obj, note = _parse_line(raw)
            if dialect.rows is not None:
                issues.extend(
                    _line_of_rows(obj, ln, note, step, dialect, reading, records, rec_lines, ignored)
                )
                continue
            twice: list[str] = []
            rec, ign = schema.validate_record(obj, step, twice, dialect, reading)
        except schema.BadLine as e:
            issues.append({"line": ln, "severity": "error", "reason": e.reason, "detail": _snippet(raw)})
            continue
        ignored.update(ign)
        if note:
            issues.append({"line": ln, "severity": "note", "reason": note, "detail": ""})
        issues.extend({"line": ln, "severity": "note", "reason": t, "detail": ""} for t in twice)
        if twice:
            note = note or twice[0]  # built from its record (Polars would keep the other value)
        if note is None and is_plain:
            good_raw.append(raw)
            good_lines.append(ln)
            good_recs.append(rec)
        else:
            records.append(rec)
            rec_lines.append(ln)
    frames = []
    if good_raw:
        fast = _fast_path(good_raw, good_lines, step=step, dialect=dialect, reading=reading)
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
    # In order within a line too (the responses of a line that holds several, see Dialect.rows).
    frame = (
        pl.concat(frames, how="diagonal_relaxed").sort("line", maintain_order=True)
        if frames
        else pl.DataFrame()
    )
    return ChunkResult(frame, issues, ignored)


def _plain_json(raw: bytes) -> bool:
    return b"NaN" not in raw and b"Infinity" not in raw


def _snippet(raw: bytes, n: int = 120) -> str:
    """The start of a raw line, kept to show why it could not be read (its secrets' texts masked)."""
    text = raw[: n * 4].decode("utf-8", errors="replace")
    return schema.mask_text(text[:n]) + ("…" if len(text) > n or len(raw) > n * 4 else "")
