"""The per-run Parquet store: layout and ``STORE_FORMAT``, manifest, run discovery and read access.

``layout``: the store's folder, files and Parquet settings; ``manifest``: what a store holds, committed
atomically; ``runs``: the runs under the rollout root; ``reader``: :class:`RunStore`. Ingest
(:mod:`data.ingest`) is the write side. This package's face is what the rest of the app reads by.
"""

from data.store.layout import STORE_FORMAT, sample_id, store_dir_for
from data.store.reader import RunStore, open_store
from data.store.runs import (
    RootScan,
    UnknownRun,
    discover_runs,
    folder_runs,
    is_rollout_file,
    run_file_stats,
    run_files,
    scan_root,
)

__all__ = [
    "STORE_FORMAT",
    "RootScan",
    "RunStore",
    "UnknownRun",
    "discover_runs",
    "folder_runs",
    "is_rollout_file",
    "open_store",
    "run_file_stats",
    "run_files",
    "scan_root",
    "sample_id",
    "store_dir_for",
]
