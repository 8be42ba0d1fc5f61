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
        the types of :meth:`schema`; a column a part lacks is null there.

        Each file of ``parts/`` is read once for all the keys it holds: parts written together (a run of
        many small files, see ``data.ingest.part_files``) share one, and 9,990 rows of 10,000 files were
        read once a part (26-31 s)."""
        if keys.height == 0:
            schema = self.schema()
            return pl.DataFrame(schema={c: schema.get(c, pl.String) for c in columns})
        # In plain lists: a group_by over 10,000 parts of a row each cost more than reading their files.
        by_file: dict[Path, tuple[list[int], list[int]]] = {}  # file: (positions in it, indices in keys)
        blocks: dict[int, list] = {}
        shared: dict[tuple, list] = {}  # parts written together have their host's files: made once
        entries = self.manifest.parts
        parts, rows = keys.get_column("part").to_list(), keys.get_column("row").to_list()
        for k, (part, r) in enumerate(zip(parts, rows, strict=True)):
            if part not in blocks:
                entry = entries[str(part)]
                host = entry.get("in", part)
                held = (host, str(entry.get("blocks") or entries.get(str(host), entry).get("blocks")))
                if held not in shared:
                    shared[held] = self.part_blocks(int(part))
                blocks[part] = shared[held]
            for path, first, n, _, _ in blocks[part]:
                if first <= r < first + n:
                    at, ks = by_file.setdefault(path, ([], []))
                    at.append(r - first)
                    ks.append(k)
                    break
        if not by_file:  # no part holds these rows
            return self.read_keys(keys.head(0), columns)
        size = self.manifest.row_group_size
        pieces = [
            _read_file_rows(path, at, list(columns), size).with_columns(pl.Series("__k", ks, pl.UInt32))
            for path, (at, ks) in by_file.items()
        ]
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
        names = set(pf.schema_arrow.names)  # (the schema is made anew at each call)
        columns = [c for c in columns if c in names]
    table = pf.read_row_groups(groups, columns=columns)
    df = pl.from_arrow(table)
    offsets = {g: i * size for i, g in enumerate(groups)}
    # Row groups are full except the last one of a file, so a row's position is direct.
    take = [offsets[r // size] + r % size for r in rows]
    return df[take]
