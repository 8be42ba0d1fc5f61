"""The files of a run's parts and packs: which files of ``parts/`` hold a part's rows, lazy scans of the
parts' full rows, and the issues of the parts and packs. Mixed into :class:`data.store.reader.RunStore`."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from data.store.layout import ISSUE_SCHEMA, entry_name, part_file_path, part_name
from data.store.manifest import has_issues, packed_parts


class PartScans:
    """The parts' and packs' files of a committed store: uses the store's ``dir``, ``manifest``,
    :meth:`~data.store.reader.RunStore.index` and :meth:`~data.store.reader.RunStore.part_ids`."""

    def packs(self) -> list[dict]:
        """The packs: ``{"name", "parts"}``, one file in ``scalars/`` and one in ``issues/`` each holding the
        rows of many small parts (see :data:`PACK_AT`)."""
        return list(self.manifest.packs)

    def _pack_scans(self, sub: str, wanted: set[int]) -> list[pl.LazyFrame]:
        """The rows of parts ``wanted`` in the packs (a pack may still hold parts dropped since)."""
        out = []
        for pack in self.packs():
            keep = wanted.intersection(pack["parts"])
            if keep:
                scan = pl.scan_parquet(self.dir / sub / pack["name"])
                out.append(scan.filter(pl.col("part").is_in(sorted(keep))))
        return out

    def scan_parts(
        self,
        columns: list[str] | tuple[str, ...] | None = None,
        steps: tuple[int | None, int | None] | None = None,
    ) -> pl.LazyFrame:
        """Lazy scan of the committed parts' full rows (texts and token arrays too; partial last steps
        included), opening only the files of the parts that can hold ``lo <= step <= hi`` (``steps``) and
        reading only ``columns`` (all by default; the first file's columns, others filled with nulls)."""
        lo, hi = steps or (None, None)
        index = self.index()
        parts = self.manifest.parts
        if steps is None:
            ids = self.part_ids()
        else:
            ids = [p for s in index.select(lo, hi) for p in s.parts]
        paths = [
            str(f)
            for f in dict.fromkeys(
                f for i in ids if parts[str(i)]["rows"] for f in self.part_files_of(i, steps=(lo, hi))
            )
        ]
        if not paths:
            schema = {"sample_id": pl.String, "step": pl.Int64, "prompt": pl.String, "response": pl.String}
            if columns is not None:
                schema = {c: schema.get(c, pl.String) for c in columns}
            return pl.LazyFrame(schema=schema)
        lf = pl.scan_parquet(paths, missing_columns="insert", extra_columns="ignore")
        if steps is not None or self.shares_files():
            # A file written with others may hold rows of parts dropped since, or of steps not asked for.
            lf = lf.filter(pl.col("part").is_in(ids))
        if lo is not None:
            lf = lf.filter(pl.col("step") >= lo)
        if hi is not None:
            lf = lf.filter(pl.col("step") <= hi)
        return lf if columns is None else lf.select(columns)

    def part_blocks(self, part: int) -> list[tuple[Path, int, int, int | None, int | None]]:
        """The files of ``parts/`` that hold part ``part``'s rows: ``(path, first row, rows, smallest step,
        largest step)`` each, one per step block (``parts/step_block=<n>/``), in row order. A part written
        with others (``in``, see ``data.ingest.part_files.PartFiles._write_shared``) is in its host's files,
        whose rows are numbered across them."""
        parts = self.manifest.parts
        entry = parts[str(part)]
        host = entry.get("in", part)
        hosted = entry if "blocks" in entry else parts.get(str(host), entry)
        blocks = hosted.get("blocks")
        if blocks is None:  # a part file of its own, at the top of parts/ (a store made by hand)
            return [(self.dir / "parts" / part_name(host, hosted.get("tag")), 0, hosted["rows"], None, None)]
        return [
            (self.dir / part_file_path(host, hosted.get("tag"), b), first, n, lo, hi)
            for b, first, n, lo, hi in blocks
        ]

    def part_files_of(self, part: int, steps: tuple[int | None, int | None] | None = None) -> list[Path]:
        """The files of ``parts/`` holding part ``part``'s rows (those that can hold ``lo <= step <= hi``)."""
        lo, hi = steps or (None, None)
        return [
            path
            for path, _, _, s0, s1 in self.part_blocks(part)
            if s0 is None or s1 is None or ((lo is None or s1 >= lo) and (hi is None or s0 <= hi))
        ]

    def part_files(self) -> list[Path]:
        """The files of ``parts/`` holding the committed rows, each once. A file written with others may
        still hold rows of parts dropped since: filter on ``part`` (:meth:`part_ids`) when
        :meth:`shares_files`."""
        parts = self.manifest.parts
        return list(
            dict.fromkeys(f for i in self.part_ids() if parts[str(i)]["rows"] for f in self.part_files_of(i))
        )

    def shares_files(self) -> bool:
        """Whether some parts were written into one file of ``parts/`` (see :meth:`part_file`)."""
        return any("in" in e for e in self.manifest.parts.values())

    def issues(self) -> pl.DataFrame:
        """Unusable lines (``severity == "error"``) and data-quality notes, with file and line."""
        # Only parts that recorded an issue have any.
        parts = self.manifest.parts
        ids = self.part_ids()
        packed = packed_parts(self.packs())
        scans = [s.drop("part") for s in self._pack_scans("issues", set(ids))]
        scans += [
            pl.scan_parquet(self.dir / "issues" / entry_name(i, parts[str(i)]))
            for i in ids
            if i not in packed and has_issues(parts[str(i)])
        ]
        frames = [pl.concat(scans, how="diagonal_relaxed").collect()] if scans else []
        pending = [
            {
                "source": f,
                "line": p["line"],
                "severity": "pending",
                "reason": p["reason"],
                "detail": p.get("detail", ""),
            }
            for f, p in self.manifest.pending.items()
        ]
        frames = [f for f in frames if f.height]
        if pending:
            frames.append(pl.DataFrame(pending, schema=ISSUE_SCHEMA))
        if not frames:
            return pl.DataFrame(schema=ISSUE_SCHEMA)
        return pl.concat(frames, how="diagonal_relaxed").sort("source", "line")
