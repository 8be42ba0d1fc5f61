"""One response's way from its sample id to its rows: the part and row of an id, and full rows read from
only the row groups that hold them. Mixed into :class:`data.store.reader.RunStore`."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from data.store.layout import file_prefix

# ``.<n>``: the n-th response of a line that holds several (see data.ingest.parts.build_part).
SAMPLE_ID = re.compile(r"([0-9a-f]{8})-([0-9]+)(?:\.[0-9]+)?")


class RowReads:
    """Rows of a committed store by sample id or by ``(part, row)``: uses the store's ``dir``, ``manifest``,
    :meth:`~data.store.reader.RunStore.index`, ``schema``, ``_memo`` and ``retrying``."""

    def lookup(self, sample: str) -> tuple[int, int] | None:
        """``(part, row)`` of a sample id, or None when the store has no such (visible) sample.

        A sample id is ``<file prefix>-<line>`` (see :func:`data.store.layout.sample_id`), with ``.<n>`` for
        the n-th response of a line that holds several: the manifest
        names the files of that prefix and their parts, and the index the parts whose lines hold the line,
        so one small file (usually) is read, whatever the run's size.
        """
        if not isinstance(sample, str):
            return None
        return self.retrying(lambda store: store._lookup(sample))

    def _lookup(self, sample: str) -> tuple[int, int] | None:
        m = SAMPLE_ID.fullmatch(sample)
        if m is None:
            return None
        prefix, line = m.group(1), int(m.group(2))
        files = self.manifest.files
        memo = self._memo()
        if "prefixes" not in memo:
            prefixes: dict[str, list[str]] = {}
            for rel in files:
                prefixes.setdefault(file_prefix(rel), []).append(rel)
            memo["prefixes"] = prefixes
        index = self.index()
        below = self.visible_below
        for rel in memo["prefixes"].get(prefix, []):
            for part in index.parts_of_line(rel, line, files[rel].get("parts", [])):
                seg = index.segment_of(part)
                cond = (pl.col("part") == part) & (pl.col("sample_id") == sample)
                if below is not None:
                    cond &= pl.col("step") < below
                hit = (
                    pl.scan_parquet(self.dir / "scalars" / seg.file)
                    .filter(cond)
                    .select("part", "row")
                    .collect()
                )
                if hit.height:
                    got_part, row = hit.row(0)
                    return int(got_part), int(row)
        return None

    def read_rows(self, part: int, rows: list[int], columns: list[str] | None = None) -> pl.DataFrame:
        """Full rows (texts, token arrays) of one part, in the order of ``rows``, reading only the row groups
        that hold them (in the files of the step blocks that hold them)."""
        size = self.manifest.row_group_size
        blocks = self.part_blocks(part)
        if len(blocks) == 1:
            return _read_file_rows(blocks[0][0], [r - blocks[0][1] for r in rows], columns, size)
        pieces = []
        for path, first, n, _, _ in blocks:
            mine = [(k, r - first) for k, r in enumerate(rows) if first <= r < first + n]
            if mine:
                got = _read_file_rows(path, [r for _, r in mine], columns, size)
                pieces.append(got.with_columns(pl.Series("__k", [k for k, _ in mine], pl.Int64)))
        if not pieces:
            return _read_file_rows(blocks[0][0], [], columns, size)
        return pl.concat(pieces, how="diagonal_relaxed").sort("__k").drop("__k")

    def read_keys(self, keys: pl.DataFrame, columns: list[str]) -> pl.DataFrame:
        """``columns`` of the rows ``keys`` (``part, row``) names, in the order of ``keys``, read from the
        parts' row groups that hold them (a few rows of any run cost a few row groups). Scalar columns have
        the types of :meth:`schema`; a column a part lacks is null there."""
        if keys.height == 0:
            schema = self.schema()
            return pl.DataFrame(schema={c: schema.get(c, pl.String) for c in columns})
        pieces = []
        for (part,), grp in keys.select("part", "row").with_row_index("__k").group_by(["part"]):
            rows = grp.get_column("row").to_list()
            got = self.read_rows(int(part), rows, list(columns))
            pieces.append(got.with_columns(grp.get_column("__k")))
        df = pl.concat(pieces, how="diagonal_relaxed").sort("__k")
        schema = self.schema()

        def column(c: str) -> pl.Expr:
            if c not in df.columns:  # no part of these rows has it
                return pl.lit(None, schema.get(c, pl.String)).alias(c)
            return pl.col(c).cast(schema[c]) if c in schema else pl.col(c)

        return df.select(column(c) for c in columns)

    def sample(self, sample: str) -> dict | None:
        """One response with every column (texts and token arrays as Python lists), or None."""
        loc = self.lookup(sample)
        if loc is None:
            return None
        part, row = loc
        df = self.read_rows(part, [row])
        return df.row(0, named=True) if df.height else None


def _read_file_rows(path: Path, rows: list[int], columns: list[str] | None, size: int) -> pl.DataFrame:
    """Rows at positions ``rows`` of one file of ``parts/`` (in that order), reading only their row groups."""
    pf = pq.ParquetFile(path)
    groups = sorted({r // size for r in rows})
    if columns is not None:
        columns = [c for c in columns if c in pf.schema_arrow.names]
    table = pf.read_row_groups(groups, columns=columns)
    df = pl.from_arrow(table)
    offsets = {g: i * size for i, g in enumerate(groups)}
    # Row groups are full except the last one of a file, so a row's position is direct.
    take = [offsets[r // size] + r % size for r in rows]
    return df[take]
