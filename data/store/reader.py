"""Read access to one run's committed store: lazy scans of its scalars (only the files that can hold the
steps asked for), its steps, issues and rows; nothing of a run is kept in memory between requests.

Readers only ever follow the manifest, so they see the last committed state while a writer works.
"""

from __future__ import annotations

import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import TypeVar

import orjson
import polars as pl
import pyarrow.parquet as pq

from data.store.index import Segment, StoreIndex, build_index, unified_schema
from data.store.layout import (
    ISSUE_SCHEMA,
    SCALAR_DTYPES,
    entry_name,
    file_prefix,
    part_file_path,
    part_name,
)
from data.store.manifest import MANIFEST, Manifest, has_issues, of_this_format, packed_parts

_LOCK = threading.Lock()
_MAX_CACHED_RUNS = 8
# Per committed state of a store (folder, generation, commit time): its index, and what it derives from it.
_INDEXES: OrderedDict[tuple, dict] = OrderedDict()
SAMPLE_ID = re.compile(r"([0-9a-f]{8})-([0-9]+)")
T = TypeVar("T")


class RunStore:
    """Read access to one committed store; cheap to create (reads only the manifest)."""

    def __init__(self, store_dir: Path, manifest: Manifest):
        self.dir = Path(store_dir)
        self.manifest = manifest

    @property
    def generation(self) -> int:
        return self.manifest.generation

    @property
    def version(self) -> str:
        """Changes whenever the committed content changes; the key of cached results."""
        return f"{self.dir.name}:{self.manifest.generation}"

    def unreadable(self) -> dict[str, str]:
        """Files of the run that the last ingest could not read: ``{file: reason}`` (see data.access)."""
        return self.manifest.unreadable

    def part_ids(self) -> list[int]:
        return sorted(int(k) for k in self.manifest.parts)

    @property
    def visible_below(self) -> int | None:
        """Steps from this one on are hidden: they may still be partial (see ``ingest_run(complete=...)``)."""
        return self.manifest.visible_below

    def reopened(self) -> RunStore | None:
        """The store as last committed now (None when it is gone): a query that found a file of this state
        deleted by a later commit runs again on it."""
        return open_store(self.dir)

    def retrying(self, fn: Callable[[RunStore], T]) -> T:
        """``fn(self)``; when a file of this committed state is gone (a later commit packed a part's rows
        and collected its own file), ``fn`` of the state committed now."""
        try:
            return fn(self)
        except FileNotFoundError:
            fresh = self.reopened()
            if fresh is None or fresh.version == self.version:
                raise
            return fn(fresh)

    # ---- the index: which file holds which parts, steps and lines ------------------------------------

    def _memo(self) -> dict:
        key = (str(self.dir), self.manifest.generation, self.manifest.updated)
        with _LOCK:
            hit = _INDEXES.get(key)
            if hit is not None:
                _INDEXES.move_to_end(key)
                return hit
        m = self.manifest
        memo = {"index": build_index(self.dir, m.parts, m.packs, m.derived_name("facts"))}
        with _LOCK:
            memo = _INDEXES.setdefault(key, memo)
            _INDEXES.move_to_end(key)
            while len(_INDEXES) > _MAX_CACHED_RUNS:
                _INDEXES.popitem(last=False)
        return memo

    def index(self) -> StoreIndex:
        """The :class:`~data.store.index.StoreIndex` of this committed state (built once per process)."""
        return self._memo()["index"]

    def schema(self) -> pl.Schema:
        """Names and types of the scalar columns (every committed part's together, in first-seen order)."""
        memo = self._memo()
        if "schema" not in memo:
            schema = unified_schema(self.index().segments)
            # No usable response (a run of only bad lines): every column, no row.
            memo["schema"] = schema if len(schema) else pl.Schema(SCALAR_DTYPES)
        return memo["schema"]

    def scan(
        self,
        columns: list[str] | tuple[str, ...] | None = None,
        step: int | None = None,
        steps: tuple[int | None, int | None] | None = None,
        hidden: bool = False,
        files: Collection[str] | None = None,
    ) -> pl.LazyFrame:
        """Lazy scan of the scalars of the responses shown (no texts, no token arrays), in part and row order
        (the files' order: by source file and line within a part).

        Only the files that can hold ``step`` (or ``lo <= step <= hi`` for ``steps=(lo, hi)``) are opened,
        and only ``columns`` (those of :meth:`schema` among them; all by default) are read. ``hidden``: the
        rows of steps not shown yet (see :attr:`visible_below`) too. ``files``: only the rows in these files
        of ``scalars/`` (see :meth:`segments`). Types are :meth:`schema`'s.
        """
        schema = self.schema()
        cols = list(schema) if columns is None else [c for c in dict.fromkeys(columns) if c in schema]
        lo, hi = (step, step) if step is not None else (steps or (None, None))
        below = None if hidden else self.visible_below
        if below is not None:
            hi = below - 1 if hi is None else min(hi, below - 1)
        cond = []
        if step is not None:
            cond.append(pl.col("step") == step)
        else:
            if lo is not None:
                cond.append(pl.col("step") >= lo)
            if hi is not None:
                cond.append(pl.col("step") <= hi)
        segments = self.index().select(lo, hi) if lo is None or hi is None or lo <= hi else []
        if files is not None:
            segments = [seg for seg in segments if seg.file in files]
        frames = []
        loose: list[str] = []
        loose_schema = None

        def flush() -> None:
            if loose:
                frames.append(_frame(pl.scan_parquet(list(loose)), dict(loose_schema), cols, cond, schema))
                loose.clear()

        paths = [str(self.dir / "scalars" / seg.file) for seg in segments]
        if not all(os.path.exists(p) for p in paths):
            # A later commit collected a file of this state: its rows are in the state committed now.
            fresh = self.reopened()
            if fresh is not None and fresh.version != self.version:
                return fresh.scan(columns, step, steps, hidden, files)
        for seg, path in zip(segments, paths, strict=True):
            if seg.packed:
                flush()
                part = [pl.col("part").is_in(list(seg.parts))]
                frames.append(_frame(pl.scan_parquet(path), dict(seg.schema), cols, part + cond, schema))
                continue
            if loose and seg.schema != loose_schema:
                flush()
            loose.append(path)
            loose_schema = seg.schema
        flush()
        if not frames:
            return pl.LazyFrame(schema={c: schema[c] for c in cols})
        lf = frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal_relaxed")
        return lf.select(pl.col(c).cast(schema[c]) for c in cols)

    def segments(self, step: int | None = None) -> list[Segment]:
        """The :class:`~data.store.index.Segment` s :meth:`scan` reads for ``step`` (None: every step shown)."""
        hi = (
            step
            if self.visible_below is None
            else (self.visible_below - 1 if step is None else min(step, self.visible_below - 1))
        )
        if step is not None and hi < step:
            return []
        return self.index().select(step, hi)

    def scalars(self) -> pl.DataFrame:
        """Every response shown, all scalar columns, in part and row order: read whole, each call (tests,
        small runs). Pages query :meth:`scan` instead."""
        return self.scan().collect()

    def packs(self) -> list[dict]:
        """The packs: ``{"name", "parts"}``, one file in ``scalars/`` and one in ``issues/`` each holding the
        rows of many small parts (see :data:`PACK_AT`)."""
        return list(self.manifest.packs)

    def all_scalars(self) -> pl.DataFrame:
        """Every committed response (partial last steps included), in part and row order; read whole, each
        call (ingest reads the committed state it extends)."""
        return self.scan(hidden=True).collect()

    def _pack_scans(self, sub: str, wanted: set[int]) -> list[pl.LazyFrame]:
        """The rows of parts ``wanted`` in the packs (a pack may still hold parts dropped since)."""
        out = []
        for pack in self.packs():
            keep = wanted.intersection(pack["parts"])
            if keep:
                scan = pl.scan_parquet(self.dir / sub / pack["name"])
                out.append(scan.filter(pl.col("part").is_in(sorted(keep))))
        return out

    def scan_parts(
        self,
        columns: list[str] | tuple[str, ...] | None = None,
        steps: tuple[int | None, int | None] | None = None,
    ) -> pl.LazyFrame:
        """Lazy scan of the committed parts' full rows (texts and token arrays too; partial last steps
        included), opening only the files of the parts that can hold ``lo <= step <= hi`` (``steps``) and
        reading only ``columns`` (all by default; the first file's columns, others filled with nulls)."""
        lo, hi = steps or (None, None)
        index = self.index()
        parts = self.manifest.parts
        if steps is None:
            ids = self.part_ids()
        else:
            ids = [p for s in index.select(lo, hi) for p in s.parts]
        paths = [
            str(f)
            for f in dict.fromkeys(
                f for i in ids if parts[str(i)]["rows"] for f in self.part_files_of(i, steps=(lo, hi))
            )
        ]
        if not paths:
            schema = {"sample_id": pl.String, "step": pl.Int64, "prompt": pl.String, "response": pl.String}
            if columns is not None:
                schema = {c: schema.get(c, pl.String) for c in columns}
            return pl.LazyFrame(schema=schema)
        lf = pl.scan_parquet(paths, missing_columns="insert", extra_columns="ignore")
        if steps is not None or self.shares_files():
            # A file written with others may hold rows of parts dropped since, or of steps not asked for.
            lf = lf.filter(pl.col("part").is_in(ids))
        if lo is not None:
            lf = lf.filter(pl.col("step") >= lo)
        if hi is not None:
            lf = lf.filter(pl.col("step") <= hi)
        return lf if columns is None else lf.select(columns)

    def part_blocks(self, part: int) -> list[tuple[Path, int, int, int | None, int | None]]:
        """The files of ``parts/`` that hold part ``part``'s rows: ``(path, first row, rows, smallest step,
        largest step)`` each, one per step block (``parts/step_block=<n>/``), in row order. A part written
        with others (``in``, see ``ingest.writer._Writer._write_shared``) is in its host's files, whose rows
        are numbered across them."""
        parts = self.manifest.parts
        entry = parts[str(part)]
        host = entry.get("in", part)
        hosted = entry if "blocks" in entry else parts.get(str(host), entry)
        blocks = hosted.get("blocks")
        if blocks is None:  # a part file of its own, at the top of parts/ (a store made by hand)
            return [(self.dir / "parts" / part_name(host, hosted.get("tag")), 0, hosted["rows"], None, None)]
        return [
            (self.dir / part_file_path(host, hosted.get("tag"), b), first, n, lo, hi)
            for b, first, n, lo, hi in blocks
        ]

    def part_files_of(self, part: int, steps: tuple[int | None, int | None] | None = None) -> list[Path]:
        """The files of ``parts/`` holding part ``part``'s rows (those that can hold ``lo <= step <= hi``)."""
        lo, hi = steps or (None, None)
        return [
            path
            for path, _, _, s0, s1 in self.part_blocks(part)
            if s0 is None or s1 is None or ((lo is None or s1 >= lo) and (hi is None or s0 <= hi))
        ]

    def part_files(self) -> list[Path]:
        """The files of ``parts/`` holding the committed rows, each once. A file written with others may
        still hold rows of parts dropped since: filter on ``part`` (:meth:`part_ids`) when
        :meth:`shares_files`."""
        parts = self.manifest.parts
        return list(
            dict.fromkeys(f for i in self.part_ids() if parts[str(i)]["rows"] for f in self.part_files_of(i))
        )

    def shares_files(self) -> bool:
        """Whether some parts were written into one file of ``parts/`` (see :meth:`part_file`)."""
        return any("in" in e for e in self.manifest.parts.values())

    def steps(self) -> pl.DataFrame:
        """The per-step summary (see :func:`data.metrics.step.step_summary`), sorted by step; ingest writes it
        at every commit, and a store is opened only once a manifest was committed."""
        return pl.read_parquet(self.dir / self.manifest.derived["steps"].name)

    def steps_scan(self) -> pl.LazyFrame:
        """:meth:`steps` as a lazy scan, to read a few of its columns."""
        return pl.scan_parquet(self.dir / self.manifest.derived["steps"].name)

    def steps_columns(self, columns: Iterable[str]) -> pl.DataFrame:
        """Those of ``columns`` the per-step summary has, read alone, sorted by step."""
        lf = self.steps_scan()
        have = set(lf.collect_schema().names())
        return lf.select(c for c in columns if c in have).collect()

    def issues(self) -> pl.DataFrame:
        """Unusable lines (``severity == "error"``) and data-quality notes, with file and line."""
        # Only parts that recorded an issue have any.
        parts = self.manifest.parts
        ids = self.part_ids()
        packed = packed_parts(self.packs())
        scans = [s.drop("part") for s in self._pack_scans("issues", set(ids))]
        scans += [
            pl.scan_parquet(self.dir / "issues" / entry_name(i, parts[str(i)]))
            for i in ids
            if i not in packed and has_issues(parts[str(i)])
        ]
        frames = [pl.concat(scans, how="diagonal_relaxed").collect()] if scans else []
        pending = [
            {
                "source": f,
                "line": p["line"],
                "severity": "pending",
                "reason": p["reason"],
                "detail": p.get("detail", ""),
            }
            for f, p in self.manifest.pending.items()
        ]
        frames = [f for f in frames if f.height]
        if pending:
            frames.append(pl.DataFrame(pending, schema=ISSUE_SCHEMA))
        if not frames:
            return pl.DataFrame(schema=ISSUE_SCHEMA)
        return pl.concat(frames, how="diagonal_relaxed").sort("source", "line")

    def extra_columns(self) -> list[str]:
        """Scalar extra columns found in the files (e.g. ``ground_truth``, ``group_id``, ``advantage``)."""
        return list(self.manifest.extra_columns)

    def token_extras(self) -> list[str]:
        """Per-token fields of the trainer's own found in the files (TRL's PPO ``advantages``, ``returns``),
        kept in the parts beside the contract's token arrays."""
        return list(self.manifest.token_extras)

    def non_null_columns(self) -> frozenset[str]:
        """The scalar columns with a value (not null) in some response shown: from the files' statistics
        where a file is wholly shown, by reading the others' columns (packs, a partial last step)."""
        memo = self._memo()
        below = self.visible_below
        key = ("non_null", below)
        if key in memo:
            return memo[key]
        found: set[str] = set()
        unknown = False
        for seg in self.index().segments:
            # A file of one part: its null counts, kept with the index (from the commit's facts).
            nulls = None if seg.packed else seg.nulls
            shown = below is None or (seg.step_max is not None and seg.step_max < below)
            if nulls is None or not shown:
                unknown = True
                continue
            rows = sum(r.rows for r in seg.ranges)
            found.update(c for c, n in nulls.items() if n < rows)
        if unknown:
            rest = [c for c in self.schema() if c not in found]
            if rest:
                row = self.scan(rest).select(pl.col(c).is_not_null().any() for c in rest).collect()
                found.update(c for c, v in zip(rest, row.row(0), strict=True) if v)
        out = frozenset(c for c in self.schema() if c in found)
        memo[key] = out
        return out

    def has_column(self, name: str) -> bool:
        """Whether some response shown has a value in scalar column ``name``."""
        return name in self.non_null_columns()

    def lookup(self, sample: str) -> tuple[int, int] | None:
        """``(part, row)`` of a sample id, or None when the store has no such (visible) sample.

        A sample id is ``<file prefix>-<line>`` (see :func:`data.store.layout.sample_id`): the manifest
        names the files of that prefix and their parts, and the index the parts whose lines hold the line,
        so one small file (usually) is read, whatever the run's size.
        """
        if not isinstance(sample, str):
            return None
        return self.retrying(lambda store: store._lookup(sample))

    def _lookup(self, sample: str) -> tuple[int, int] | None:
        m = SAMPLE_ID.fullmatch(sample)
        if m is None:
            return None
        prefix, line = m.group(1), int(m.group(2))
        files = self.manifest.files
        memo = self._memo()
        if "prefixes" not in memo:
            prefixes: dict[str, list[str]] = {}
            for rel in files:
                prefixes.setdefault(file_prefix(rel), []).append(rel)
            memo["prefixes"] = prefixes
        index = self.index()
        below = self.visible_below
        for rel in memo["prefixes"].get(prefix, []):
            for part in index.parts_of_line(rel, line, files[rel].get("parts", [])):
                seg = index.segment_of(part)
                cond = (pl.col("part") == part) & (pl.col("sample_id") == sample)
                if below is not None:
                    cond &= pl.col("step") < below
                hit = (
                    pl.scan_parquet(self.dir / "scalars" / seg.file)
                    .filter(cond)
                    .select("part", "row")
                    .collect()
                )
                if hit.height:
                    got_part, row = hit.row(0)
                    return int(got_part), int(row)
        return None

    def read_rows(self, part: int, rows: list[int], columns: list[str] | None = None) -> pl.DataFrame:
        """Full rows (texts, token arrays) of one part, in the order of ``rows``, reading only the row groups
        that hold them (in the files of the step blocks that hold them)."""
        size = self.manifest.row_group_size
        blocks = self.part_blocks(part)
        if len(blocks) == 1:
            return _read_file_rows(blocks[0][0], [r - blocks[0][1] for r in rows], columns, size)
        pieces = []
        for path, first, n, _, _ in blocks:
            mine = [(k, r - first) for k, r in enumerate(rows) if first <= r < first + n]
            if mine:
                got = _read_file_rows(path, [r for _, r in mine], columns, size)
                pieces.append(got.with_columns(pl.Series("__k", [k for k, _ in mine], pl.Int64)))
        if not pieces:
            return _read_file_rows(blocks[0][0], [], columns, size)
        return pl.concat(pieces, how="diagonal_relaxed").sort("__k").drop("__k")

    def read_keys(self, keys: pl.DataFrame, columns: list[str]) -> pl.DataFrame:
        """``columns`` of the rows ``keys`` (``part, row``) names, in the order of ``keys``, read from the
        parts' row groups that hold them (a few rows of any run cost a few row groups). Scalar columns have
        the types of :meth:`schema`; a column a part lacks is null there."""
        if keys.height == 0:
            schema = self.schema()
            return pl.DataFrame(schema={c: schema.get(c, pl.String) for c in columns})
        pieces = []
        for (part,), grp in keys.select("part", "row").with_row_index("__k").group_by(["part"]):
            rows = grp.get_column("row").to_list()
            got = self.read_rows(int(part), rows, list(columns))
            pieces.append(got.with_columns(grp.get_column("__k")))
        df = pl.concat(pieces, how="diagonal_relaxed").sort("__k")
        schema = self.schema()

        def column(c: str) -> pl.Expr:
            if c not in df.columns:  # no part of these rows has it
                return pl.lit(None, schema.get(c, pl.String)).alias(c)
            return pl.col(c).cast(schema[c]) if c in schema else pl.col(c)

        return df.select(column(c) for c in columns)

    def sample(self, sample: str) -> dict | None:
        """One response with every column (texts and token arrays as Python lists), or None."""
        loc = self.lookup(sample)
        if loc is None:
            return None
        part, row = loc
        df = self.read_rows(part, [row])
        return df.row(0, named=True) if df.height else None


_MANIFESTS: OrderedDict[str, tuple[bytes, Manifest]] = OrderedDict()


def open_store(store_dir: Path) -> RunStore | None:
    """The last committed store in ``store_dir`` (None when nothing is committed), for reading only.

    Its manifest is parsed once per commit in a process: it names every file and part, 4 MB for a run of
    10,000 files, which each page request parsed again (two to four times, ~35 ms each). The file's bytes
    are read each time and compared with those parsed (its inode, size and time could repeat between two
    quick commits)."""
    path = Path(store_dir) / MANIFEST
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):  # no store (yet), or no cache folder to hold one
        return None
    with _LOCK:
        hit = _MANIFESTS.get(str(path))
    if hit is not None and hit[0] == data:
        return RunStore(store_dir, hit[1])
    parsed = orjson.loads(data)
    if not of_this_format(parsed):  # written by another version: rebuilt by ingest, never read
        return None
    m = Manifest.from_dict(parsed)
    with _LOCK:
        _MANIFESTS[str(path)] = (data, m)
        _MANIFESTS.move_to_end(str(path))
        while len(_MANIFESTS) > _MAX_CACHED_RUNS:
            _MANIFESTS.popitem(last=False)
    return RunStore(store_dir, m)


def _read_file_rows(path: Path, rows: list[int], columns: list[str] | None, size: int) -> pl.DataFrame:
    """Rows at positions ``rows`` of one file of ``parts/`` (in that order), reading only their row groups."""
    pf = pq.ParquetFile(path)
    groups = sorted({r // size for r in rows})
    if columns is not None:
        columns = [c for c in columns if c in pf.schema_arrow.names]
    table = pf.read_row_groups(groups, columns=columns)
    df = pl.from_arrow(table)
    offsets = {g: i * size for i, g in enumerate(groups)}
    # Row groups are full except the last one of a file, so a row's position is direct.
    take = [offsets[r // size] + r % size for r in rows]
    return df[take]


def _frame(lf: pl.LazyFrame, own: dict, cols: list[str], cond: list[pl.Expr], schema) -> pl.LazyFrame:
    """``lf`` (files of schema ``own``) filtered by ``cond``, with ``cols``: nulls of ``schema``'s type
    where the files lack one."""
    for c in cond:
        lf = lf.filter(c)
    return lf.select(pl.col(c) if c in own else pl.lit(None, schema[c]).alias(c) for c in cols)


def forget_indexes() -> None:
    """Forget every index, manifest and file footer this process read (benchmarks time a fresh worker)."""
    from data.store import index

    with _LOCK:
        _INDEXES.clear()
        _MANIFESTS.clear()
    with index._FACTS_LOCK:
        index._FACTS.clear()
