"""The text index: what a regex search over every step scans instead of decompressing the parts.

Per file of ``parts/``, its ``part, row, step, prompt, response`` as an uncompressed Arrow IPC file, scanned
memory-mapped (about 5x faster than the parts on the 2 GB benchmark run). A file of ``parts/`` never changes
once written, so neither does its index file.

It is kept in two places:

- **in the store**, ``<store>/text/<block>.<part>.arrow``, written by ingest at each commit for the files of
  ``parts/`` that commit holds and no index file has yet (:func:`index_new_parts`): a commit adds its own
  parts' texts and rewrites nothing, and the index files are in place before the manifest names the commit,
  so a reader of that commit finds them ready. They go wherever the store goes (a store shared on object
  storage uploads and mirrors them with its other files, see :mod:`data.store.shared`). A file whose part
  file was collected is collected with it (:func:`collect_index`).
- **beside the store**, ``<cache>/<store>.text-index`` (:data:`data.store.layout.TEXT_INDEX`), built by the
  reader on first use for a part without an index file in the store (a store ingested before the index
  was written at ingest): each file's name carries its part file's size and mtime, so a rebuilt store never
  reads a stale one (:func:`index_files`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from pathlib import Path

import polars as pl

from data.store.layout import TEXT_INDEX, beside_store

COLUMNS = ("part", "row", "step", "prompt", "response")
FOLDER = "text"  # in the store


def _key(part_file: Path) -> str:
    """``<block>.<part>``: the files of a part in several step blocks share its name."""
    return f"{part_file.parent.name}.{part_file.stem}"


def in_store(store_dir: Path, part_file: Path) -> Path:
    """The index file in the store of the file ``part_file`` of ``parts/``."""
    return store_dir / FOLDER / f"{_key(part_file)}.arrow"


def _write(src: Path, dst: Path) -> None:
    """Write ``src``'s texts to ``dst`` so that a reader sees a whole file or none."""
    df = pl.read_parquet(src, columns=list(COLUMNS))
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        df.write_ipc(tmp)
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)


def index_new_parts(store_dir: Path, rels: Iterable[str]) -> list[Path]:
    """Write the index files of the files ``rels`` of ``parts/`` (paths in the store: the state a commit
    holds, :func:`data.store.table.table_files`) that have none yet; returns those written."""
    folder = store_dir / FOLDER
    folder.mkdir(exist_ok=True)
    have = set(os.listdir(folder))
    written = []
    for rel in rels:
        src = store_dir / rel
        dst = in_store(store_dir, src)
        if dst.name not in have:
            _write(src, dst)
            written.append(dst)
    return written


def collect_index(store_dir: Path) -> None:
    """Remove the index files in the store whose file of ``parts/`` is gone (collected by ingest)."""
    folder = store_dir / FOLDER
    if not folder.is_dir():
        return
    for p in folder.glob("*.arrow"):
        block, _, part = p.stem.partition(".")
        if not (store_dir / "parts" / block / f"{part}.parquet").exists():
            p.unlink(missing_ok=True)


def index_files(store_dir: Path, part_files: Iterable[Path], folder: Path | None = None) -> list[Path] | None:
    """The index file of each of ``part_files`` (the committed files of ``parts/``): the store's own where
    ingest wrote it, else one in ``folder`` (default ``<cache>/<store>.text-index``) built now if absent;
    None when one is missing and cannot be written (a read-only cache folder: scan the parts instead)."""
    folder = folder or beside_store(store_dir, TEXT_INDEX)
    out = []
    try:
        for src in part_files:
            own = in_store(store_dir, src)
            if own.exists():
                out.append(own)
                continue
            folder.mkdir(exist_ok=True)
            st = src.stat()
            key = _key(src)
            dst = folder / f"{key}-{st.st_size}-{st.st_mtime_ns}.arrow"
            if not dst.exists():
                for old in folder.glob(f"{key}-*.arrow"):
                    old.unlink(missing_ok=True)
                _write(src, dst)
            out.append(dst)
    except OSError:
        return None
    return out
