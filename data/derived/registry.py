"""Every derived kind of a store, once: its name (its key in the manifest's ``derived``), the pattern of its
files in the store, their format, how a commit builds it and how a commit collects its files no manifest
names any more, and why it exists. A commit builds the kinds in this order (a kind may read what an
earlier one wrote: the prompt list reads the steps summary). docs/store.md has one row per kind (a test
holds the two equal); a kind added later registers here and adds its row in the same commit."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from data.derived import cells, ends, facts, matches, pidx, prompts, steps, text, tokens, tokscale, topk
from data.derived.base import Commit


@dataclass(frozen=True)
class Kind:
    """One derived kind: ``pattern`` (glob of its files, from the store's folder), ``format``,
    ``build(commit)`` (None: written by another kind's build) and ``collect(commit, removable)``."""

    name: str
    pattern: str
    format: str
    build: Callable[[Commit], None] | None
    collect: Callable[[Commit, Callable[[Path], bool]], None]
    why: str


KINDS: tuple[Kind, ...] = (
    Kind("steps", "steps-g*.parquet", "Parquet (LZ4)", steps.build, steps.collect, "curves read no response"),
    Kind("cells", "cells-g*.parquet", "Parquet (LZ4)", cells.build, cells.collect, "heatmaps from one file"),
    Kind("ends", "ends-g*.parquet", "Parquet (LZ4)", ends.build, ends.collect, "truncation without tokens"),
    Kind("pidx", "pidx-g*.arrow", "Arrow IPC (LZ4)", pidx.build, pidx.collect, "one prompt's rows"),
    Kind("topk", "topk-g*.parquet", "Parquet (zstd)", topk.build, topk.collect, "first rows of each sort"),
    Kind("prompts", "prompts-g*.parquet", "Parquet", prompts.build, prompts.collect, "the prompts page"),
    Kind("matches", "matches-g*.parquet", "Parquet", None, matches.collect, "compare two runs' prompts"),
    Kind(
        "tokscale", "tokscale-g*.json", "JSON", tokscale.build, tokscale.collect, "a fresh token page's scale"
    ),
    Kind("facts", "facts-g*.json", "JSON", facts.build, facts.collect, "a fresh worker reads no footer"),
    Kind("text", "text/*.arrow", "Arrow IPC", text.build, text.collect, "regex over every step"),
    Kind(
        "tokens",
        "tokens/*.arrow",
        "Arrow IPC",
        tokens.build,
        tokens.collect,
        "a token filter over every step",
    ),
    Kind(
        "texttop", "texttop-g*.arrow", "Arrow IPC", text.build_top, text.collect_top, "a search's first block"
    ),
)
REGISTRY = {k.name: k for k in KINDS}


def build_all(c: Commit) -> None:
    """Build every kind of the commit ``c``, in order."""
    for kind in KINDS:
        if kind.build is not None:
            kind.build(c)


def collect_all(c: Commit, removable: Callable[[Path], bool]) -> None:
    """Remove every kind's files that neither this commit nor the last one names."""
    for kind in KINDS:
        kind.collect(c, removable)
