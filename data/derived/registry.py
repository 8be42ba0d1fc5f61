"""Every derived kind of a store, once: its name (its key in the manifest's ``derived``), the pattern of its
files in the store, their format, the module that builds and reads it, and why it exists. docs/store.md
has one row per kind (a test holds the two equal); a kind added later registers here in the same commit."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    """One derived kind: ``pattern`` (glob of its files, from the store's folder), ``format`` and ``module``
    (the module of data.derived that builds and reads it)."""

    name: str
    pattern: str
    format: str
    module: str
    why: str


KINDS: tuple[Kind, ...] = (
    Kind(
        "steps",
        "steps-g*.parquet",
        "Parquet (LZ4)",
        "data.derived.steps",
        "run-level curves read no response",
    ),
    Kind(
        "cells",
        "cells-g*.parquet",
        "Parquet (LZ4)",
        "data.derived.cells",
        "every step's heatmap from a small file",
    ),
    Kind(
        "ends",
        "ends-g*.parquet",
        "Parquet (LZ4)",
        "data.derived.ends",
        "truncation curve without token lists",
    ),
    Kind("prompts", "prompts-g*.parquet", "Parquet", "data.derived.prompts", "the prompts page's list"),
    Kind("matches", "matches-g*.parquet", "Parquet", "data.derived.matches", "compare two runs' prompts"),
    Kind("facts", "facts-g*.json", "JSON", "data.store.index", "a fresh worker reads no footer"),
    Kind("pidx", "pidx-g*.arrow", "Arrow IPC", "data.derived.pidx", "one prompt's history reads its rows"),
    Kind(
        "topk",
        "topk-g*.parquet",
        "Parquet (zstd)",
        "data.derived.topk",
        "first rows of each sort, every step",
    ),
    Kind("text", "text/*.arrow", "Arrow IPC", "data.derived.text", "regex search over every step"),
    Kind("texttop", "texttop-g*.arrow", "Arrow IPC", "data.derived.text", "first block of such a search"),
)
REGISTRY = {k.name: k for k in KINDS}
