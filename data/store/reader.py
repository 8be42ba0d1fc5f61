"""Read access to one run's committed store: lazy scans of its scalars (only the files that can hold the
steps asked for), its steps, issues and rows (the parts' files and issues in :mod:`data.store.part_scans`,
rows by sample id in :mod:`data.store.rows`); nothing of a run is kept in memory between requests.

Readers only ever follow the manifest, so they see the last committed state while a writer works.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import TypeVar

import orjson
import polars as pl

from data.store.index import Segment, StoreIndex, build_index, unified_schema
from data.store.layout import SCALAR_DTYPES
from data.store.manifest import MANIFEST, Manifest, of_this_format
from data.store.part_scans import PartScans
from data.store.rows import RowReads

_LOCK = threading.Lock()
_MAX_CACHED_RUNS = 8
# Per committed state of a store (folder, generation, commit time): its index, and what it derives from it.
_INDEXES: OrderedDict[tuple, dict] = OrderedDict()
T = TypeVar("T")


class RunStore(PartScans, RowReads):
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

    def all_scalars(self) -> pl.DataFrame:
        """Every committed response (partial last steps included), in part and row order; read whole, each
        call (ingest reads the committed state it extends)."""
        return self.scan(hidden=True).collect()

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
