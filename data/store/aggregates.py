"""Reading the aggregates a commit writes beside a store's parts (see data.ingest.prompt_summary): the
prompt list with its trend threshold, the compare page's prompts of the run and the steps' histogram cells.
None where a store was committed without them (the pages then compute them from the scalars)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

# The manifest's entries naming the prompt list and the threshold it was classified with, and the prompts
# of the compare page (see data.compare.prompts.run_prompt_matches).
FILE_KEY = "prompts_file"
THRESHOLD_KEY = "prompts_threshold"
MATCHES_KEY = "prompt_matches_file"
# The steps' histogram cells (data.ingest.hist_cells), written with the steps summary.
CELLS_KEY = "cells_file"


def read_prompt_list(store) -> tuple[pl.DataFrame, float] | None:
    """``(table, threshold)``: the prompt list a commit wrote beside the store (None for a store committed
    without one)."""
    table = _read_named(store, "prompts")
    if table is None:
        return None
    return table, float(store.manifest.derived["prompts"].meta.get("threshold") or 0.0)


def _read_named(store, kind: str) -> pl.DataFrame | None:
    """The file of derived kind ``kind`` the store's last commit named; None when it named none, or when a
    later commit collected it (that commit's own file is read instead)."""
    name = store.manifest.derived_name(kind)
    if not name:
        return None
    try:
        return pl.read_parquet(Path(store.dir) / name)
    except FileNotFoundError:
        return None


def read_prompt_matches(store) -> pl.DataFrame | None:
    """The compare page's prompts of a store as its last commit wrote them (None: not written)."""
    return _read_named(store, "matches")


def read_hist_cells(store) -> pl.DataFrame | None:
    """The steps' histogram cells as the store's last commit wrote them (see data.ingest.hist_cells): the
    steps shown, nothing else; None for a store committed without them."""
    return _read_named(store, "cells")
