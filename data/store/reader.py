"""Read access to one run's committed store: its scalars (cached per process), steps, issues and rows.

Readers only ever follow the manifest, so they see the last committed state while a writer works.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path

import orjson
import polars as pl
import pyarrow.parquet as pq

from data.store.layout import ISSUE_SCHEMA, ROW_GROUP_SIZE, SCALAR_DTYPES, part_name
from data.store.manifest import MANIFEST, Manifest, has_issues, packed_parts

_SCALARS_CACHE: OrderedDict[str, tuple[tuple[int, ...], pl.DataFrame]] = OrderedDict()
_SCALARS_LOCK = threading.Lock()
_MAX_CACHED_RUNS = 8
_VISIBLE_CACHE: dict[str, tuple[tuple, pl.DataFrame]] = {}


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
        return self.manifest.data.get("unreadable", {})

    def part_ids(self) -> list[int]:
        return sorted(int(k) for k in self.manifest.data["parts"])

    @property
    def visible_below(self) -> int | None:
        """Steps from this one on are hidden: they may still be partial (see ``ingest_run(complete=...)``)."""
        return self.manifest.data.get("visible_below")

    def scalars(self) -> pl.DataFrame:
        """The responses shown: all of them but those of steps that may still be partial (usually none).

        No texts and no token arrays; in (source, line) order; cached per process.
        """
        below = self.visible_below
        if below is None:
            return self.all_scalars()
        ids = tuple(self.part_ids())
        key = (str(self.dir), ids, below)
        with _SCALARS_LOCK:
            hit = _VISIBLE_CACHE.get(str(self.dir))
        if hit is not None and hit[0] == key:
            return hit[1]
        df = self.all_scalars().filter(pl.col("step") < below)
        with _SCALARS_LOCK:
            _VISIBLE_CACHE[str(self.dir)] = (key, df)
            while len(_VISIBLE_CACHE) > _MAX_CACHED_RUNS:
                _VISIBLE_CACHE.pop(next(iter(_VISIBLE_CACHE)))
        return df

    def packs(self) -> list[dict]:
        """The packs: ``{"name", "parts"}``, one file in ``scalars/`` and one in ``issues/`` each holding the
        rows of many small parts (see :data:`PACK_AT`)."""
        return self.manifest.data.get("packs", [])

    def all_scalars(self) -> pl.DataFrame:
        """Every committed response (partial last steps included), in part and row order; cached per
        process.

        The cache is extended with only the new parts when the store grows.
        """
        ids = tuple(self.part_ids())
        key = str(self.dir)
        with _SCALARS_LOCK:
            cached = _SCALARS_CACHE.get(key)
        if cached is not None and cached[0] == ids:
            return cached[1]
        packed = packed_parts(self.packs())
        if cached is not None and set(cached[0]) <= set(ids):
            # New parts have higher ids than every cached one: appending them keeps the order.
            new = [i for i in ids if i not in set(cached[0])]
            frames = [cached[1], self._read_scalars(new, packed)]
        else:
            frames = [self._read_scalars(list(ids), packed)]
        frames = [f for f in frames if f.height or f.width]
        # One chunk: a live run adds a part per file at every step, and queries over thousands of chunks
        # are several times slower (top-50 of a step at 2,000 chunks: 25 ms, against 2 ms; rechunking 270,000
        # responses takes ~12 ms).
        df = (
            pl.concat(frames, how="diagonal_relaxed").rechunk()
            if frames
            else pl.DataFrame(schema=SCALAR_DTYPES)  # no usable response: every column, no row
        )
        with _SCALARS_LOCK:
            _SCALARS_CACHE[key] = (ids, df)
            _SCALARS_CACHE.move_to_end(key)
            while len(_SCALARS_CACHE) > _MAX_CACHED_RUNS:
                _SCALARS_CACHE.popitem(last=False)
        return df

    def _read_scalars(self, ids: list[int], packed: set[int]) -> pl.DataFrame:
        """The scalars of parts ``ids`` (those with rows) in one frame (empty when none has rows).

        One lazy concatenation reads the files in parallel: a live run has a part per file and step, and
        reading 2,600 parts one by one took 2.7 s, against 0.9 s. Parts in a pack are read from it, and the
        frame is then put in part and row order (a pack may hold parts on both sides of one left out).
        """
        parts = self.manifest.data["parts"]
        wanted = set(ids)
        scans = self._pack_scans("scalars", wanted)
        scans += [
            pl.scan_parquet(self.dir / "scalars" / part_name(i))
            for i in ids
            if i not in packed and parts[str(i)]["rows"]
        ]
        if not scans:
            return pl.DataFrame()
        df = pl.concat(scans, how="diagonal_relaxed").collect()
        return df.sort("part", "row") if len(scans) > 1 and wanted & packed else df

    def _pack_scans(self, sub: str, wanted: set[int]) -> list[pl.LazyFrame]:
        """The rows of parts ``wanted`` in the packs (a pack may still hold parts dropped since)."""
        out = []
        for pack in self.packs():
            keep = wanted.intersection(pack["parts"])
            if keep:
                scan = pl.scan_parquet(self.dir / sub / pack["name"])
                out.append(scan.filter(pl.col("part").is_in(sorted(keep))))
        return out

    def scan_parts(self) -> pl.LazyFrame:
        """Lazy scan of every committed part (all columns)."""
        paths = [str(p) for p in self.part_files()]
        if not paths:
            return pl.LazyFrame(
                schema={"sample_id": pl.String, "step": pl.Int64, "prompt": pl.String, "response": pl.String}
            )
        lf = pl.scan_parquet(paths, missing_columns="insert", extra_columns="ignore")
        return lf.filter(pl.col("part").is_in(self.part_ids())) if self.shares_files() else lf

    def part_file(self, part: int) -> Path:
        """The file of ``parts/`` that holds part ``part``'s rows: its own, or the one it was written into
        with others (``in``, see ``ingest.writer._Writer._write_shared``; rows are then numbered in that
        file)."""
        return self.dir / "parts" / part_name(self.manifest.data["parts"][str(part)].get("in", part))

    def part_files(self) -> list[Path]:
        """The files of ``parts/`` holding the committed rows, each once. A file written with others may
        still hold rows of parts dropped since: filter on ``part`` (:meth:`part_ids`) when
        :meth:`shares_files`."""
        parts = self.manifest.data["parts"]
        return list(dict.fromkeys(self.part_file(i) for i in self.part_ids() if parts[str(i)]["rows"]))

    def shares_files(self) -> bool:
        """Whether some parts were written into one file of ``parts/`` (see :meth:`part_file`)."""
        return any("in" in e for e in self.manifest.data["parts"].values())

    def steps(self) -> pl.DataFrame:
        """The per-step summary (see :func:`data.metrics.step.step_summary`), sorted by step; ingest writes it
        at every commit, and a store is opened only once a manifest was committed."""
        return pl.read_parquet(self.dir / self.manifest.data["steps_file"])

    def issues(self) -> pl.DataFrame:
        """Unusable lines (``severity == "error"``) and data-quality notes, with file and line."""
        # Only parts that recorded an issue have any (parts written before the counts existed are read).
        parts = self.manifest.data["parts"]
        ids = self.part_ids()
        packed = packed_parts(self.packs())
        scans = [s.drop("part") for s in self._pack_scans("issues", set(ids))]
        scans += [
            pl.scan_parquet(self.dir / "issues" / part_name(i))
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
            for f, p in self.manifest.data.get("pending", {}).items()
        ]
        frames = [f for f in frames if f.height]
        if pending:
            frames.append(pl.DataFrame(pending, schema=ISSUE_SCHEMA))
        if not frames:
            return pl.DataFrame(schema=ISSUE_SCHEMA)
        return pl.concat(frames, how="diagonal_relaxed").sort("source", "line")

    def extra_columns(self) -> list[str]:
        """Scalar extra columns found in the files (e.g. ``ground_truth``, ``group_id``, ``advantage``)."""
        return list(self.manifest.data.get("extra_columns", []))

    def token_extras(self) -> list[str]:
        """Per-token fields of the trainer's own found in the files (TRL's PPO ``advantages``, ``returns``),
        kept in the parts beside the contract's token arrays."""
        return list(self.manifest.data.get("token_extras", []))

    def has_column(self, name: str) -> bool:
        df = self.scalars()
        return name in df.columns and df.get_column(name).null_count() < df.height

    def lookup(self, sample: str) -> tuple[int, int] | None:
        """``(part, row)`` of a sample id, or None when the store has no such (visible) sample.

        One vectorised comparison over the run's ids: ~2 ms at 270,000 responses, with nothing to build
        first (a dict of every id took ~0.3 s to build after each new step, and ~48 MB to keep).
        """
        if not isinstance(sample, str):
            return None
        df = self.scalars()
        if "sample_id" not in df.columns:
            return None
        hit = df.lazy().filter(pl.col("sample_id") == sample).select("part", "row").collect()
        if not hit.height:
            return None
        part, row = hit.row(0)
        return int(part), int(row)

    def read_rows(self, part: int, rows: list[int], columns: list[str] | None = None) -> pl.DataFrame:
        """Full rows (texts, token arrays) of one part, reading only the row groups that hold them."""
        pf = pq.ParquetFile(self.part_file(part))
        size = self.manifest.data.get("row_group_size", ROW_GROUP_SIZE)
        groups = sorted({r // size for r in rows})
        if columns is not None:
            columns = [c for c in columns if c in pf.schema_arrow.names]
        table = pf.read_row_groups(groups, columns=columns)
        df = pl.from_arrow(table)
        offsets = {g: i * size for i, g in enumerate(groups)}
        # Row groups are full except the last one of a part, so a row's position is direct.
        take = [offsets[r // size] + r % size for r in rows]
        return df[take]

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
    with _SCALARS_LOCK:
        hit = _MANIFESTS.get(str(path))
    if hit is not None and hit[0] == data:
        return RunStore(store_dir, hit[1])
    m = Manifest(orjson.loads(data))
    with _SCALARS_LOCK:
        _MANIFESTS[str(path)] = (data, m)
        _MANIFESTS.move_to_end(str(path))
        while len(_MANIFESTS) > _MAX_CACHED_RUNS:
            _MANIFESTS.popitem(last=False)
    return RunStore(store_dir, m)
