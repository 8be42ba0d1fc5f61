"""What every derived kind's reader shares: the file a store's last commit named for a kind."""

from __future__ import annotations

from pathlib import Path

import polars as pl


def read_named(store, kind: str) -> pl.DataFrame | None:
    """The Parquet file of derived kind ``kind`` the store's last commit named; None when it named none,
    or when a later commit collected it (that commit's own file is read instead)."""
    name = store.manifest.derived_name(kind)
    if not name:
        return None
    try:
        return pl.read_parquet(Path(store.dir) / name)
    except FileNotFoundError:
        return None
