"""Per part and step, how many responses ended with an end token and how many were cut (see
:func:`data.metrics.degeneration.ends_with_end_token`), counted by ingest when it writes a part (its rows
are in memory then) and kept, for every part of a commit, in a file beside the store's parts that the
manifest names (``"ends_file"``: ``part, step, n, ended, truncated``; see :class:`EndsCounts`).

The reward page's truncation curve (:func:`data.signals.truncation_by_step`) needs every response's last
token: read from the parts, that is every response's token list, the largest read of the page, growing
with the run. Summed from the counts instead, it costs a few numbers per part and step. The counts hold for
the store's pad tokens and :data:`END_TOKENS` (the board's default end tokens, named in the manifest as
``"ends_with"``); a board set with other end tokens reads the parts as before.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from data.config import DEFAULT_END_TOKENS
from data.derived.base import Commit, collect_named
from data.metrics.degeneration import ends_with_end_token, with_end_inputs
from data.store.manifest import Manifest

END_TOKENS = DEFAULT_END_TOKENS
MANIFEST_KEY = "ends_with"  # the end tokens the parts' counts were made with
FILE_KEY = "ends_file"  # the commit's file of counts
SCHEMA = {"part": pl.Int64, "step": pl.Int64, "n": pl.UInt32, "ended": pl.Int64, "truncated": pl.Int64}


COLUMN = "ends_with_end"  # of the scalars: each response's end with END_TOKENS (data.metrics.registry)


def ends_column(df: pl.DataFrame, pad_tokens: tuple[str, ...]) -> pl.Series:
    """:data:`COLUMN` of a part frame's rows (for ingest): whether each ends with one of :data:`END_TOKENS`
    (null: pads only), from its token strings where it has them, else its text."""
    lf = df.lazy().select(*(c for c in ("response_tokens", "response") if c in df.columns))
    return (
        with_end_inputs(lf, df.schema)
        .select(ends_with_end_token(tuple(pad_tokens), END_TOKENS).alias(COLUMN))
        .collect()
        .to_series()
    )


def ends_counts(full: pl.DataFrame) -> dict[int, list[list[int]]]:
    """``{part: [[step, n, ended, truncated], ...]}`` (by step) of a part file's rows ``full`` (one part or
    several written together: its ``part`` column). ``n`` counts every response, ``ended`` / ``truncated``
    those that can be told (a response of pads only is neither)."""
    if full is None or full.height == 0:
        return {}
    ends = full.get_column(COLUMN)  # made by ingest with the part (see ends_column)
    e = pl.col("__ends")
    counts = (
        full.lazy()
        .select("part", "step", ends.alias("__ends"))
        .group_by("part", "step")
        .agg(pl.len().alias("n"), e.sum().alias("ended"), e.not_().sum().alias("truncated"))
        .sort("part", "step")
        .collect()
    )
    out: dict[int, list[list[int]]] = {}
    for part, step, n, ended, truncated in counts.iter_rows():
        out.setdefault(int(part), []).append([int(step), int(n), int(ended), int(truncated)])
    return out


def _frame(counts: dict[int, list[list[int]]]) -> pl.DataFrame:
    """``counts`` (``{part: [[step, n, ended, truncated], ...]}``) as rows of :data:`SCHEMA`."""
    rows = [[part, *c] for part, cs in counts.items() for c in cs]
    return pl.DataFrame(rows, schema=SCHEMA, orient="row")


class EndsCounts:
    """A writer's counts of every part it knows (read from the last commit's file at the first part applied
    or commit: a check that finds nothing new reads none), the new parts' added as they are applied."""

    def __init__(self, store_dir: Path, data: dict):
        self.dir = Path(store_dir)
        self._data = data
        self._old: pl.DataFrame | None = None
        self._new: dict[int, list[list[int]]] = {}

    def _committed(self) -> pl.DataFrame:
        if self._old is None:
            name = self._data.get(FILE_KEY)
            self._old = pl.read_parquet(self.dir / name) if name else _frame({})
        return self._old

    def forget(self) -> None:
        """Every count so far was made with other end tokens: none is kept."""
        self._old = _frame({})
        self._new = {}
        self._data.pop(FILE_KEY, None)

    def add(self, part: int, counts: list[list[int]]) -> None:
        self._new[part] = counts

    def added(self) -> dict[int, list[list[int]]]:
        """The counts of the parts added since the last :meth:`frame` (a Ray task's, for its driver)."""
        return dict(self._new)

    def frame(self, parts: dict) -> pl.DataFrame | None:
        """The counts of the parts with rows of ``parts`` (a manifest's), by part and step; None when some
        part has none (made with other end tokens): readers then read
        the parts' token lists. What is kept from now on is this frame."""
        df = pl.concat([self._committed(), _frame(self._new)])
        live = [int(k) for k, e in parts.items() if e["rows"]]
        df = df.filter(pl.col("part").is_in(live)).sort("part", "step")
        self._old, self._new = df, {}
        if set(live) - set(df.get_column("part").unique().to_list()):
            return None
        return df


def counted_with(m: Manifest, pad_tokens: tuple[str, ...], end_tokens: tuple[str, ...]) -> bool:
    """Whether every part with rows of manifest ``m`` has counts made with these tokens."""
    if tuple(m.ends_with or ()) != tuple(end_tokens):
        return False
    if tuple(m.pad_tokens) != tuple(pad_tokens):
        return False
    return "ends" in m.derived


def truncation_from_counts(store_dir: Path, m: Manifest) -> pl.DataFrame:
    """Per step shown (below ``visible_below``), sorted: ``step, n, ended, truncated, y`` (truncated / n)
    summed from the parts' counts (the commit's file); the columns and types of
    :func:`data.signals.truncation_by_step`."""
    below = m.visible_below
    df = pl.read_parquet(
        Path(store_dir) / m.derived["ends"].name, columns=["step", "n", "ended", "truncated"]
    )
    if below is not None:
        df = df.filter(pl.col("step") < below)
    return (
        df.group_by("step")
        .agg(pl.col("n", "ended", "truncated").sum())
        .with_columns((pl.col("truncated") / pl.col("n")).alias("y"))
        .sort("step")
    )


# ---- at a commit ---------------------------------------------------------------------------------------


def build(c: Commit) -> None:
    """The parts' counts of ended and cut responses, when every part has some (else no file)."""
    ends = c.ends.frame(c.data["parts"])
    name = c.file("ends", "parquet") if ends is not None else None
    if ends is not None:
        c.put_frame(name, ends)
    c.set({FILE_KEY: name})


def collect(c: Commit, removable) -> None:
    collect_named(c, removable, "ends-g*.parquet", FILE_KEY)
