"""A prompt-keyed copy of the store's scalars, written at each commit, so that one prompt's history (the
prompts page with a prompt selected) reads that prompt's rows instead of every response of the run.

The index is a list of files beside the store (``pidx-g<N>-<i>-<tag>.parquet``), each holding the
:data:`COLUMNS` of some parts' rows sorted by ``prompt_key`` in row groups of :data:`ROW_GROUP` rows: a
read filtered on one key opens each file's footer and only the row groups whose key range holds it (Parquet
statistics). The manifest names them under :data:`INDEX_KEY` with ``upto``, the first part id not indexed.

A commit indexes only the parts applied since the last one (``upto`` on), in files of at most
:data:`FILE_ROWS` rows, and appends their names: it never rewrites what earlier commits wrote, except that
small files at the end of the list are merged as a binary counter merges (two files are merged when the
newer holds at least half the older's rows and both hold at most :data:`FILE_ROWS` together). A live run
committing a few rows at a time thus keeps a logarithmic number of small files, and each row is copied a
logarithmic number of times; a large run's files stay at :data:`FILE_ROWS` rows (one such file's rows are
what a commit holds in memory).

Rows of parts dropped since they were indexed (a file read again) and of steps not shown yet stay in the
files: the reader keeps only the rows of parts the manifest has, below ``visible_below``, as a scan does.
A store committed without an index (or with one that does not cover its parts) is read by the scan.
"""

from __future__ import annotations

import io
from pathlib import Path

import polars as pl

from data.ingest.summary import scan_part_scalars
from data.metrics.registry import stored_columns
from data.store.manifest import write_atomic

# The manifest's entry: {"files": [{"name", "rows", "lo", "hi"}], "upto": the first part id not indexed}, the
# files in part order, each holding rows of parts lo..hi.
INDEX_KEY = "prompt_index"
PATTERN = "pidx-g*.parquet"
# The store's scalars and the files' own group id and advantage: what one prompt's history reads.
COLUMNS = (*stored_columns(), "group_id", "advantage")
ROW_GROUP = 2048
FILE_ROWS = 200_000


def _scalars_of(store_dir: Path, data: dict, ids: list[int]) -> pl.DataFrame:
    """The :data:`COLUMNS` the scalars of parts ``ids`` have (their loose files, or their pack's rows)."""
    frames = [
        f.select(c for c in COLUMNS if c in f.collect_schema())
        for f in scan_part_scalars(store_dir, data, ids)
    ]
    return pl.concat(frames, how="diagonal_relaxed").collect()


def _write(store_dir: Path, name: str, rows: pl.DataFrame) -> None:
    buf = io.BytesIO()
    rows.sort("prompt_key", "part", "row", nulls_last=True).write_parquet(
        buf, compression="zstd", compression_level=1, row_group_size=ROW_GROUP, statistics=True
    )
    write_atomic(store_dir / name, buf.getvalue())


def update(store_dir: Path, data: dict, gen: int, tag: str) -> tuple[dict, list[str]]:
    """The :data:`INDEX_KEY` entry of a commit of manifest ``data`` (generation ``gen``, writer ``tag``)
    and the names of the files it wrote: the last commit's entry, plus the parts with rows from its
    ``upto`` to ``data["next_part"]``."""
    old = data.get(INDEX_KEY) or {"files": [], "upto": 0}
    files = [dict(f) for f in old["files"]]
    upto, top = int(old["upto"]), int(data["next_part"])
    parts = data["parts"]
    ids = [i for i in range(upto, top) if str(i) in parts and parts[str(i)]["rows"]]
    written: list[str] = []
    k = 0

    def name() -> str:
        nonlocal k
        k += 1
        return f"pidx-g{gen:06d}-{k}-{tag}.parquet"

    # A file whose parts were all dropped since (a file read again) is left out.
    live = {int(p) for p, e in parts.items() if e["rows"]}
    files = [f for f in files if any(f["lo"] <= p <= f["hi"] for p in live)]
    batch: list[int] = []
    rows = 0
    for n, i in enumerate(ids):
        batch.append(i)
        rows += parts[str(i)]["rows"]
        if rows >= FILE_ROWS or n == len(ids) - 1:
            f = {"name": name(), "rows": rows, "lo": batch[0], "hi": batch[-1]}
            _write(store_dir, f["name"], _scalars_of(store_dir, data, batch))
            written.append(f["name"])
            files.append(f)
            batch, rows = [], 0
            # Merge small files at the end (a binary counter): the parts they hold that are still there.
            while len(files) >= 2:
                a, b = files[-2], files[-1]
                if a["rows"] + b["rows"] > FILE_ROWS or 2 * b["rows"] < a["rows"]:
                    break
                merged = pl.concat(
                    [pl.read_parquet(store_dir / x["name"]) for x in (a, b)], how="diagonal_relaxed"
                ).filter(pl.col("part").is_in(sorted(live)))
                f = {"name": name(), "rows": merged.height, "lo": a["lo"], "hi": b["hi"]}
                _write(store_dir, f["name"], merged)
                written.append(f["name"])
                files[-2:] = [f]
    return {"files": files, "upto": max(upto, top)}, written


def read(store, key: str, columns: list[str]) -> pl.DataFrame | None:
    """The rows of prompt ``key`` the store shows (``columns`` of them, the scan's types), in part and row
    order, read from the index; None when the store's last commit wrote none that covers its parts."""
    data = store.manifest.data
    entry = data.get(INDEX_KEY)
    if not entry or int(entry["upto"]) < int(data["next_part"]):
        return None
    schema = store.schema()
    cols = [c for c in dict.fromkeys(("part", "row", *columns)) if c in schema]
    live = [int(p) for p, e in data["parts"].items() if e["rows"]]
    below = data.get("visible_below")
    frames = []
    try:
        for f in entry["files"]:
            lf = pl.scan_parquet(Path(store.dir) / f["name"]).filter(pl.col("prompt_key") == key)
            have = lf.collect_schema()
            frames.append(lf.select(c for c in cols if c in have).collect())
    except FileNotFoundError:
        return None  # a later commit merged and collected it: the caller scans
    if not frames:
        rows = pl.DataFrame(schema={c: schema[c] for c in cols})
    else:
        rows = pl.concat(frames, how="diagonal_relaxed")
    for c in cols:
        if c not in rows.columns:
            rows = rows.with_columns(pl.lit(None, schema[c]).alias(c))
    rows = rows.filter(pl.col("part").is_in(live))
    if below is not None:
        rows = rows.filter(pl.col("step") < below)
    rows = rows.sort("part", "row").select(pl.col(c).cast(schema[c]) for c in cols)
    return rows.select(c for c in dict.fromkeys(columns) if c in schema)


def collect_garbage(store_dir: Path, data: dict, old: dict | None, removable) -> None:
    """Remove index files neither ``data``'s entry nor the last commit's (``old``) names and that
    ``removable`` says may go."""
    keep = {f["name"] for e in (data.get(INDEX_KEY), old) if e for f in e["files"]}
    for p in Path(store_dir).glob(PATTERN):
        if p.name not in keep and removable(p):
            p.unlink(missing_ok=True)
