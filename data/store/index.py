"""Where a committed store's rows are, without reading them: per part, the file of ``scalars/`` that holds
its rows (its own, or a pack it shares), its source file, and the range of its steps and lines.

The ranges come from each file's Parquet footer (a pack's from its ``part, step, line`` columns), read once
per file and process: a file is never rewritten under the same name, size and time. A query then opens only
the files that can hold its steps, and a sample id (``<file prefix>-<line>``) leads to its part directly.
"""

from __future__ import annotations

import base64
import io
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import orjson
import polars as pl
import pyarrow.parquet as pq

from data.store.layout import entry_name


@dataclass(frozen=True)
class PartRange:
    """One part's rows in a file of ``scalars/``: how many, and its smallest and largest step and line (None
    when it has no such value)."""

    rows: int
    step_min: int | None
    step_max: int | None
    line_min: int | None
    line_max: int | None

    def holds_steps(self, lo: int | None, hi: int | None) -> bool:
        """Whether some row may have ``lo <= step <= hi`` (a bound None is open)."""
        if self.step_min is None or self.step_max is None:
            return self.rows > 0
        return (lo is None or self.step_max >= lo) and (hi is None or self.step_min <= hi)


@dataclass(frozen=True)
class FileFacts:
    """What the footer of one file of ``scalars/`` says: its Polars ``schema`` (names and types in order),
    its rows, each part's :class:`PartRange` and, for a file of one part, each column's null count."""

    schema: tuple[tuple[str, pl.DataType], ...]
    rows: int
    parts: dict[int, PartRange]
    nulls: dict[str, int] | None
    # Per numeric column: its smallest and largest value other than NaN (None: no such value) and how many
    # NaN it holds, read from the columns (a footer's statistics leave NaN out); None: not read (facts kept
    # by a commit before these existed).
    bounds: dict[str, tuple[float | None, float | None, int]] | None = None


_FACTS: OrderedDict[tuple, FileFacts] = OrderedDict()
_FACTS_LOCK = threading.Lock()
_MAX_FACTS = 100_000  # a few hundred bytes each: a live run of 10,000 parts holds ~3 MB
FOOTER_THREADS = 4


def _column_range(md: pq.FileMetaData, name: str) -> tuple[int | None, int | None, int] | None:
    """``(min, max, nulls)`` of an integer column over every row group from the footer's statistics, or None
    when a row group has no statistics for it (it is then read)."""
    paths = [md.schema.column(i).path for i in range(md.num_columns)]
    if name not in paths:
        return (None, None, md.num_rows)
    i = paths.index(name)
    lo = hi = None
    nulls = 0
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        s = rg.column(i).statistics
        if s is None or not s.has_null_count:
            return None
        nulls += s.null_count
        if s.has_min_max:
            lo = s.min if lo is None else min(lo, s.min)
            hi = s.max if hi is None else max(hi, s.max)
        elif s.null_count < rg.num_rows:
            return None
    return lo, hi, nulls


def _read_facts(path: Path, part: int | None) -> FileFacts:
    md = pq.read_metadata(path)
    # The Polars types of the columns, from the Arrow schema Polars wrote into the footer (one read).
    schema = tuple(pl.from_arrow(md.schema.to_arrow_schema().empty_table()).schema.items())
    names = [n for n, _ in schema]
    if part is not None:
        step, line = _column_range(md, "step"), _column_range(md, "line")
        nulls = _null_counts(md, names)
        if step is not None and line is not None and nulls is not None:
            rng = PartRange(md.num_rows, step[0], step[1], line[0], line[1])
            return FileFacts(schema, md.num_rows, {part: rng}, nulls)
    # A pack (or a file whose footer lacks statistics): its parts' ranges from the columns themselves.
    cols = [c for c in ("part", "step", "line") if c in names]
    df = pl.read_parquet(path, columns=cols)
    if "part" not in df.columns:
        df = df.with_columns(pl.lit(part, pl.Int64).alias("part"))

    def agg(c: str, how: str) -> pl.Expr:
        return getattr(pl.col(c), how)() if c in df.columns else pl.lit(None, pl.Int64)

    ranges = df.group_by("part").agg(
        pl.len().alias("n"),
        agg("step", "min").alias("s0"),
        agg("step", "max").alias("s1"),
        agg("line", "min").alias("l0"),
        agg("line", "max").alias("l1"),
    )
    parts = {
        int(r["part"]): PartRange(int(r["n"]), r["s0"], r["s1"], r["l0"], r["l1"])
        for r in ranges.iter_rows(named=True)
    }
    nulls = None
    if part is not None:
        nulls = {
            n: c for n, c in zip(names, pl.scan_parquet(path).null_count().collect().row(0), strict=True)
        }
    return FileFacts(schema, df.height, parts, nulls)


def _bounds(path: Path, schema) -> dict[str, tuple[float | None, float | None, int]]:
    """:attr:`FileFacts.bounds` of a file (one read of its numeric columns)."""
    nums = [n for n, t in schema if t.is_numeric() and n not in ("part", "row")]
    if not nums:
        return {}
    exprs = []
    for n, t in schema:
        if n not in nums:
            continue
        c = pl.col(n)
        nan = c.is_nan() if t.is_float() else pl.lit(False)
        kept = c.filter(~nan) if t.is_float() else c
        exprs += [kept.min().alias(f"lo:{n}"), kept.max().alias(f"hi:{n}"), nan.sum().alias(f"nan:{n}")]
    row = pl.scan_parquet(path).select(exprs).collect().row(0, named=True)
    return {n: (row[f"lo:{n}"], row[f"hi:{n}"], int(row[f"nan:{n}"] or 0)) for n in nums}


def _null_counts(md: pq.FileMetaData, names: list[str]) -> dict[str, int] | None:
    """Each column's null count from the footer's statistics (None when one lacks them, or is nested)."""
    top = set(names)
    out: dict[str, int] = {}
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        for i in range(rg.num_columns):
            col = rg.column(i)
            s = col.statistics
            if s is None or not s.has_null_count or col.path_in_schema not in top:
                return None  # no statistics, or a nested column (a leaf's nulls are not the column's)
            out[col.path_in_schema] = out.get(col.path_in_schema, 0) + s.null_count
    return out


def file_facts(path: Path, part: int | None = None, bounds: bool = False) -> FileFacts:
    """:class:`FileFacts` of a file of ``scalars/`` (``part``: the part a file of one part holds; None for a
    pack), read once per file (name, size, time and inode) and process. ``bounds``: with its columns'
    bounds (a read of its numbers, made at the commit: see :func:`write_facts`)."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns, st.st_ino, part)
    with _FACTS_LOCK:
        hit = _FACTS.get(key)
        if hit is not None and (not bounds or hit.bounds is not None):
            _FACTS.move_to_end(key)
            return hit
    facts = hit or _read_facts(path, part)
    if bounds:
        facts = replace(facts, bounds=_bounds(path, facts.schema))
    with _FACTS_LOCK:
        _FACTS[key] = facts
        while len(_FACTS) > _MAX_FACTS:
            _FACTS.popitem(last=False)
    return facts


@dataclass(frozen=True)
class Segment:
    """Consecutive parts (in part order) whose rows are in one file of ``scalars/``: ``file`` its name,
    ``parts`` their ids, ``packed`` whether the file is a pack (which may hold other parts too)."""

    file: str
    parts: tuple[int, ...]
    packed: bool
    ranges: tuple[PartRange, ...]
    schema: tuple[tuple[str, pl.DataType], ...]
    bounds: dict[str, tuple[float | None, float | None, int]] | None = None  # the file's (FileFacts)
    nulls: dict[str, int] | None = None  # the file's null counts (FileFacts; a file of one part only)

    def holds_steps(self, lo: int | None, hi: int | None) -> bool:
        return any(r.holds_steps(lo, hi) for r in self.ranges)

    @property
    def step_max(self) -> int | None:
        highs = [r.step_max for r in self.ranges if r.step_max is not None]
        return max(highs) if highs else None


class StoreIndex:
    """Every committed part with rows, as :class:`Segment` s in part order (see :func:`build_index`)."""

    def __init__(self, segments: list[Segment], sources: dict[int, str]):
        self.segments = segments
        self.sources = sources  # part -> its source file
        self._by_part = {p: (s, r) for s in segments for p, r in zip(s.parts, s.ranges, strict=True)}

    def part_range(self, part: int) -> PartRange | None:
        hit = self._by_part.get(part)
        return None if hit is None else hit[1]

    def segment_of(self, part: int) -> Segment | None:
        hit = self._by_part.get(part)
        return None if hit is None else hit[0]

    def select(self, lo: int | None = None, hi: int | None = None) -> list[Segment]:
        """The segments that may hold a row with ``lo <= step <= hi``, each cut to those of its parts that
        may (in part order)."""
        out = []
        for s in self.segments:
            keep = [(p, r) for p, r in zip(s.parts, s.ranges, strict=True) if r.holds_steps(lo, hi)]
            if len(keep) == len(s.parts):
                out.append(s)
            elif keep:
                parts, ranges = zip(*keep, strict=True)
                out.append(Segment(s.file, tuple(parts), True, tuple(ranges), s.schema, s.bounds, s.nulls))
        return out

    def parts_of_line(self, source: str, line: int, parts: Iterable[int]) -> list[int]:
        """Those of ``parts`` (a source file's, from the manifest) that may hold ``line`` of ``source``."""
        out = []
        for p in parts:
            r = self.part_range(p)
            if r is None or self.sources.get(p) != source:
                continue
            if r.line_min is None or r.line_max is None or r.line_min <= line <= r.line_max:
                out.append(p)
        return out


# The manifest's entry naming the file in which a commit kept the footers' facts of every file of
# ``scalars/`` (see :func:`write_facts`): a fresh process then reads one small file, not every footer
# (~0.3-9 ms each, hundreds for a run of millions of responses).
FACTS_KEY = "facts_file"


def _wanted_files(parts: Mapping[str, dict], packs: Iterable[dict]) -> list[tuple[str, int | None]]:
    """``(file of scalars/, part)`` of every committed part with rows (``part`` None for a pack)."""
    in_pack = {p: pack["name"] for pack in packs for p in pack["parts"]}
    ids = sorted(int(k) for k, e in parts.items() if e["rows"] or int(k) in in_pack)
    where = {
        pid: (in_pack[pid], None) if pid in in_pack else (entry_name(pid, parts[str(pid)]), pid)
        for pid in ids
    }
    return list(dict.fromkeys(where.values()))


def write_facts(store_dir: Path, manifest: dict, name: str) -> None:
    """Keep the :class:`FileFacts` of every file a manifest's parts are in, each with the file's size and
    time, in ``name`` beside the store (JSON: a store written by one host is data to every other, so
    nothing in it is unpickled; see :func:`facts_to_json`)."""
    out = {}
    kept = _kept_facts(store_dir, manifest.get(FACTS_KEY))  # the last commit's, with their bounds
    for file, part in _wanted_files(manifest["parts"], manifest.get("packs", [])):
        path = Path(store_dir) / "scalars" / file
        st = path.stat()
        hit = kept.get((file, part))
        if hit is None or hit[:2] != (st.st_size, st.st_mtime_ns) or hit[2].bounds is None:
            hit = (st.st_size, st.st_mtime_ns, file_facts(path, part, bounds=True))
        out[(file, part)] = hit
    tmp = Path(store_dir) / f".{name}.tmp"
    tmp.write_bytes(facts_to_json(out))
    os.replace(tmp, Path(store_dir) / name)


def _schema_bytes(schema: tuple[tuple[str, pl.DataType], ...]) -> str:
    """A Polars schema as the Arrow IPC stream of an empty frame (base64): it keeps Polars' own types."""
    buf = io.BytesIO()
    pl.DataFrame(schema=dict(schema)).write_ipc_stream(buf)
    return base64.b64encode(buf.getvalue()).decode()


def _schema_of(text: str) -> tuple[tuple[str, pl.DataType], ...]:
    return tuple(pl.read_ipc_stream(io.BytesIO(base64.b64decode(text))).schema.items())


def facts_to_json(facts: dict) -> bytes:
    """``{(file, part): (size, mtime_ns, FileFacts)}`` as JSON. Files of one schema share one entry of
    ``schemas``, which a reader decodes once (a run's hundreds of files have a handful of schemas)."""
    schemas: dict = {}
    files = []
    for (file, part), (size, mtime, f) in facts.items():
        files.append(
            {
                "file": file,
                "part": part,
                "size": size,
                "mtime_ns": mtime,
                "schema": schemas.setdefault(f.schema, len(schemas)),
                "rows": f.rows,
                "parts": [
                    [p, r.rows, r.step_min, r.step_max, r.line_min, r.line_max] for p, r in f.parts.items()
                ],
                "nulls": f.nulls,
                "bounds": f.bounds,
            }
        )
    doc = {"schemas": [_schema_bytes(s) for s in schemas], "files": files}
    # (Python's json writes a bound of ±inf as Infinity, and reads it back: the bounds keep them.)
    return json.dumps(doc, separators=(",", ":")).encode()


def facts_from_json(data: bytes) -> dict:
    """What :func:`facts_to_json` wrote. Parsed by orjson (~2.4x faster than json on the 686 KB file of a
    2.56M-response store: 19 -> 8 ms of a fresh worker's first page); by json where orjson refuses it (the
    bounds of a column with an infinite value, which json writes as ``Infinity``)."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        doc = json.loads(data)
    schemas = [_schema_of(s) for s in doc["schemas"]]
    out = {}
    for e in doc["files"]:
        bounds = e["bounds"]
        facts = FileFacts(
            schemas[e["schema"]],
            e["rows"],
            {int(r[0]): PartRange(*r[1:]) for r in e["parts"]},
            e["nulls"],
            None if bounds is None else {k: tuple(v) for k, v in bounds.items()},
        )
        out[(e["file"], e["part"])] = (e["size"], e["mtime_ns"], facts)
    return out


def _kept_facts(store_dir: Path, name: str | None) -> dict:
    """The facts a commit kept in file ``name`` (see :func:`write_facts`), ``{}`` when it kept none or
    they are gone."""
    if not name:
        return {}
    try:
        return facts_from_json((Path(store_dir) / name).read_bytes())
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _kept_facts_of(store_dir: Path, fp: tuple[str, int | None], kept: dict) -> FileFacts | None:
    """The facts of file ``fp`` as kept by the commit, when the file's size and time are those it had."""
    hit = kept.get(fp)
    if hit is not None:
        st = (Path(store_dir) / "scalars" / fp[0]).stat()  # a file gone raises, as reading its footer would
        if (st.st_size, st.st_mtime_ns) == hit[:2]:
            return hit[2]
    return None


def _facts_of(store_dir: Path, fp: tuple[str, int | None], kept: dict) -> FileFacts:
    """The facts of file ``fp``: as kept by the commit when the file's size and time are those it had."""
    hit = _kept_facts_of(store_dir, fp, kept)
    return hit if hit is not None else file_facts(Path(store_dir) / "scalars" / fp[0], fp[1])


def build_index(
    store_dir: Path, parts: Mapping[str, dict], packs: Iterable[dict], facts: str | None
) -> StoreIndex:
    """The :class:`StoreIndex` of a committed manifest's ``parts`` (those with rows) and ``packs`` (those
    they are in), from the footers' facts its commit kept in file ``facts`` (None: read every footer)."""
    in_pack = {p: pack["name"] for pack in packs for p in pack["parts"]}
    segments: list[Segment] = []
    facts_of: dict[str, FileFacts] = {}
    ids = sorted(int(k) for k, e in parts.items() if e["rows"] or int(k) in in_pack)
    current: list[tuple[str, int, bool]] = []

    def close() -> None:
        if not current:
            return
        file, _, packed = current[0]
        facts = facts_of[file]
        ranges = tuple(facts.parts.get(p, PartRange(0, None, None, None, None)) for _, p, _ in current)
        keep = [(p, r) for (_, p, _), r in zip(current, ranges, strict=True) if r.rows]
        if keep:
            ps, rs = zip(*keep, strict=True)
            segments.append(
                Segment(file, tuple(ps), packed, tuple(rs), facts.schema, facts.bounds, facts.nulls)
            )
        current.clear()

    where = {
        pid: (in_pack[pid], None) if pid in in_pack else (entry_name(pid, parts[str(pid)]), pid)
        for pid in ids
    }
    wanted = list(dict.fromkeys(where.values()))
    # Footers read a few at once (pyarrow reads and parses them without the GIL): ~0.3 ms each alone.
    # The facts the commit kept need only a stat each: found here, not through the pool (whose hand-offs
    # cost more than the stats: ~20 ms for 300 files).
    kept = _kept_facts(store_dir, facts)
    known = {fp: _kept_facts_of(store_dir, fp, kept) for fp in wanted}
    missing = [fp for fp, facts in known.items() if facts is None]
    if missing:
        with ThreadPoolExecutor(max_workers=FOOTER_THREADS) as pool:
            known.update(
                zip(missing, pool.map(lambda fp: _facts_of(store_dir, fp, kept), missing), strict=True)
            )
    facts_of.update((f, known[(f, p)]) for f, p in wanted)
    for pid in ids:
        packed = pid in in_pack
        file = where[pid][0]
        if current and (current[0][0] != file or not packed):
            close()
        current.append((file, pid, packed))
        if not packed:
            close()
    close()
    sources = {int(k): e.get("file") for k, e in parts.items()}
    return StoreIndex(segments, sources)


def unified_schema(segments: Iterable[Segment]) -> pl.Schema:
    """The schema of the segments' rows together: columns in first-seen order, each of the supertype of its
    types (what ``pl.concat(..., how="diagonal_relaxed")`` gives)."""
    schemas = list(dict.fromkeys(s.schema for s in segments))
    if not schemas:
        return pl.Schema()
    if len(schemas) == 1:
        return pl.Schema(dict(schemas[0]))
    frames = [pl.LazyFrame(schema=dict(s)) for s in schemas]
    return pl.concat(frames, how="diagonal_relaxed").collect_schema()
