"""Blocks of complete lines as read from a file, and their parsing: whole by Polars where a block goes so
(:mod:`data.ingest.fast`), else line by line (:mod:`data.ingest.slow`)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import polars as pl

from data import schema
from data.ingest.fast import ChunkResult, _count_newlines, _fast_path
from data.ingest.slow import _slow_path

PEEK_BYTES = 64 * 1024  # read to find a block's last newline (see _next_block)
BOM = b"\xef\xbb\xbf"


class RawBlock(NamedTuple):
    """Complete lines as read (the arguments of :func:`parse_block`)."""

    data: bytes
    first_line: int
    at_file_start: bool
    lines: int
    step: int | None = None  # the step of its lines that have none (from the file's path)
    dialect: str = schema.CONTRACT.name  # its file's (see data.schema.dialects)


def parse_chunk(
    lines: list[bytes],
    first_line: int,
    tried_whole: bool = False,
    step: int | None = None,
    dialect: schema.Dialect = schema.CONTRACT,
    reading: schema.Reading | None = None,
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
    result = None if tried_whole else _fast_path(lines, line_nos, step=step, dialect=dialect, reading=reading)
    return result if result is not None else _slow_path(lines, line_nos, step, dialect, reading)


def parse_block(
    block: bytes,
    first_line: int,
    at_file_start: bool,
    lines: int | None = None,
    step: int | None = None,
    dialect: str = schema.CONTRACT.name,
    reading: schema.Reading | None = None,
) -> tuple[ChunkResult, int]:
    """Validate and convert a block of complete lines (ending in a newline) numbered from ``first_line``;
    returns the result and the number of lines the block held (``lines``: that number, when known).
    ``step``: the step of its lines that have none (from the file's path); ``dialect``: its file's name.

    A plain block (no CR, no BOM, no empty line) goes to Polars as it is, without splitting it into
    lines; any other block, or one Polars does not take whole, is split and read by :func:`parse_chunk`.
    """
    if at_file_start and block.startswith(BOM):
        block = block[len(BOM) :]
    n = _count_newlines(block) if lines is None else lines
    d = schema.by_name(dialect)
    # Polars skips empty lines, so a block with one gives fewer rows than lines and goes the slow way.
    tried = _goes_whole(block, n) and d.frame is not None
    if tried:
        result = _fast_path(None, range(first_line, first_line + n), block, step, d, reading)
        if result is not None:
            return result, n
    lines = _split_lines(block)
    return parse_chunk(lines, first_line, tried_whole=tried, step=step, dialect=d, reading=reading), len(
        lines
    )


def _goes_whole(block: bytes, lines: int) -> bool:
    """Whether a block of ``lines`` complete lines may go to Polars in one call (Polars reads no CR line
    ends; a block with an empty line is caught after, by its row count)."""
    return bool(lines) and b"\r" not in block


class BlocksResult(NamedTuple):
    """Several blocks parsed in one call (see :func:`parse_blocks`)."""

    frame: pl.DataFrame  # good rows of every block, with "line" (in its file) and "__item" (its block)
    issues: list[list[dict]]  # per block
    ignored: set[str]


def parse_blocks(blocks: list[RawBlock], reading: schema.Reading | None = None) -> BlocksResult | None:
    """Parse several small blocks (of one file or several) in one Polars call, or None when they do not go
    together (a bad line, a CR, an empty line, types that differ; see ``_Writer._write_together``).

    Their lines are numbered one after the other for the call, and numbered in their files again after.
    """
    dialects = {b.dialect for b in blocks}
    if len(dialects) != 1 or schema.by_name(dialects.pop()).frame is None:
        return None  # files of different dialects, or one read line by line: each on its own
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
    d = schema.by_name(blocks[0].dialect)
    result = _fast_path(None, range(total), b"".join(parts), steps, d, reading)
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


class Oversized(NamedTuple):
    """One line longer than the limit, skipped without being held: its first bytes and its length."""

    head: bytes
    length: int


def _next_block(
    f, start: int, end: int, chunk_bytes: int, max_line: int | None = None
) -> tuple[int, bytes | Oversized] | None:
    """``(offset_after, block)``: the complete lines from ``start`` of about ``chunk_bytes`` (more when one
    line is longer), or None when ``[start, end)`` holds no complete line. A line longer than ``max_line``
    is read past in pieces, never held: ``(offset_after, Oversized(...))``.

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
                return _first_segment(start, block, max_line)
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
            return _first_segment(start, data[: cut + 1], max_line)
        if max_line is not None and len(data) > max_line:
            return _past_line(f, start, pos, end, chunk_bytes, data[:SNIPPET_BYTES])
    return None


SNIPPET_BYTES = 200  # of an oversized line, kept to say what it was


def segments(block: bytes, max_line: int | None) -> list[bytes | Oversized]:
    """A block of complete lines as runs of lines within ``max_line`` bytes (newline included) and, between
    them, each line over it as :class:`Oversized`; ``[block]`` when none is (found without copying the
    block: only a block longer than the limit can hold such a line)."""
    if max_line is None or len(block) <= max_line:
        return [block]
    ends = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10) + 1
    starts = np.concatenate(([0], ends[:-1]))
    long = np.flatnonzero(ends - starts > max_line)
    if long.size == 0:
        return [block]
    out: list[bytes | Oversized] = []
    at = 0
    for i in long.tolist():
        a, b = int(starts[i]), int(ends[i])
        if a > at:
            out.append(block[at:a])
        out.append(Oversized(block[a : a + SNIPPET_BYTES], b - a))
        at = b
    if at < len(block):
        out.append(block[at:])
    return out


def _first_segment(start: int, block: bytes, max_line: int | None) -> tuple[int, bytes | Oversized]:
    """``(offset after, segment)`` of a block's first segment (see :func:`segments`): the next read starts
    after it."""
    first = segments(block, max_line)[0]
    return start + (first.length if isinstance(first, Oversized) else len(first)), first


def _past_line(f, start: int, pos: int, end: int, chunk_bytes: int, head: bytes):
    """Read on from ``pos`` to the end of a line that began at ``start``, holding one piece at a time."""
    while pos < end:
        piece = f.read(min(chunk_bytes, end - pos))
        if not piece:
            break
        nl = piece.find(b"\n")
        if nl >= 0:
            return pos + nl + 1, Oversized(head, pos + nl + 1 - start)
        pos += len(piece)
    return None  # not ended yet (a line still being written): the caller sees no complete line


def _split_lines(block: bytes) -> list[bytes]:
    """The lines of a block (BOM already removed), without their newline or a trailing CR."""
    lines = block.split(b"\n")
    lines.pop()  # the empty string after the final newline
    return [ln[:-1] if ln.endswith(b"\r") else ln for ln in lines]
