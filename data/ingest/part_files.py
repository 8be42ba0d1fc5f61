"""Writing a part's files (on a worker thread): its rows in ``parts/`` by step block, its scalars and
issues beside them; many small parts together as one file of rows and one pack; the packs of small parts
made before a commit. Mixed into :class:`data.ingest.writer._Writer`, whose state it uses."""

from __future__ import annotations

import io
from typing import NamedTuple

import polars as pl

from data import schema
from data.derived import text, tokens
from data.derived.ends import ends_counts
from data.ingest.blocks import RawBlock, _goes_whole, parse_block, parse_blocks
from data.ingest.fast import ChunkResult
from data.ingest.parts import (
    _issues_with_part,
    _part_issues,
    _token_notes,
    build_part,
    derive_chunk,
    scalar_columns,
)
from data.store.index import file_facts
from data.store.layout import (
    ISSUE_SCHEMA,
    PACK_AT,
    PACK_ROWS,
    SCALAR_COMPRESSION_LEVEL,
    entry_name,
    file_prefix,
    pack_name,
    part_file_path,
    part_name,
    step_block,
    write_part_file,
)
from data.store.manifest import has_issues, packed_parts, write_atomic

# A batch of at least SHARE_AT small blocks (a run of one small file per step) is written as one file of rows
# and one pack (see PartFiles._write_shared); fewer (the new lines of a live run's rank files) as a part each.
SHARE_AT = 16


class _Built(NamedTuple):
    """A part built on a worker, not written yet."""

    full: pl.DataFrame | None  # its rows (None: no usable row)
    issues: list[dict]
    ignored: set[str]


class _Written(NamedTuple):
    """What a worker wrote of one part, for :meth:`data.ingest.writer._Writer._apply` to record in the
    manifest."""

    scalars: pl.DataFrame | None  # None: no usable row, or written with others (see PartFiles._write_shared)
    issues: pl.DataFrame | None  # None: written with others (counted in ``counts``)
    rows: int
    ignored: set[str]  # fields not read
    per_token: list[str]  # per-token fields of the trainer's own that some row has
    host: int | None = None  # the part whose file holds its rows, when written with others
    pack: tuple[str, list[int]] | None = None  # the pack of scalars and issues it and others went to
    counts: tuple[int, int] | None = None  # its unusable lines and notes, when ``issues`` is None
    ends: list[list[int]] | None = None  # per step: responses, ended, cut (see data.derived.ends)
    blocks: list[list[int]] | None = None  # its files of parts/: [step block, first row, rows, steps]
    columns: dict[str, pl.DataType] | None = None  # the columns of those files


class PartFiles:
    """The worker side of :class:`data.ingest.writer._Writer`: builds and writes parts and packs. Uses the
    writer's ``dir``, ``tag``, ``m`` (its draft manifest), ``pad_tokens``, ``reading``, ``row_group_size``
    and ``_written`` (every file it wrote)."""

    def _build(self, pid: int, rel: str, chunk: ChunkResult | RawBlock) -> _Built:
        """Worker thread: parse, derive and build part ``pid`` (touches no shared state)."""
        result = (
            parse_block(*chunk, reading=self.reading.for_file(rel))[0]
            if isinstance(chunk, RawBlock)
            else chunk
        )
        full = None
        if result.frame.height:
            full = build_part(derive_chunk(result.frame, self.pad_tokens), rel, pid, self.pad_tokens)
        return _Built(full, result.issues, result.ignored)

    def _write_part(self, pid: int, rel: str, chunk: ChunkResult | RawBlock) -> _Written:
        """Worker thread: build the part and write its files.

        Touches no shared state: :meth:`_apply` takes the results in order on the reading thread."""
        return self._write_files(pid, rel, *self._build(pid, rel, chunk))

    def _write_batch(self, items: list[tuple[int, str, RawBlock]]) -> list[_Written]:
        """Worker thread: :meth:`_write_part` of several small blocks. Those without CR line ends are
        parsed, derived and built at once where they go together (:func:`parse_blocks`; where they do
        not, each half is tried again), the rest one by one; they are then written together (see
        :meth:`_write_shared`), or as one part each when they are few."""
        built: list[_Built | None] = [None] * len(items)
        groups: list[pl.DataFrame] = []
        by_dialect: dict[str, list[int]] = {}  # blocks go together only with blocks of their dialect
        for k, (_, _, c) in enumerate(items):
            if _goes_whole(c.data, c.lines) and schema.by_name(c.dialect).frame is not None:
                by_dialect.setdefault(c.dialect, []).append(k)
        for ks in by_dialect.values():
            self._build_together(items, ks, built, groups)
        for k, (pid, rel, chunk) in enumerate(items):
            if built[k] is None:
                built[k] = self._build(pid, rel, chunk)
        if len(items) >= SHARE_AT:
            written = self._write_shared(items, built, groups)
            if written is not None:
                return written
        for group in groups:  # one part each: the rows of each block, numbered from 0
            by_block = group.partition_by("__item", maintain_order=True, include_key=False, as_dict=True)
            for (k,), part in by_block.items():
                full = part.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias("row"))
                built[k] = built[k]._replace(full=full)
        return [self._write_files(pid, rel, *b) for (pid, rel, _), b in zip(items, built, strict=True)]

    def _build_together(
        self,
        items: list[tuple[int, str, RawBlock]],
        ks: list[int],
        built: list[_Built | None],
        groups: list[pl.DataFrame],
    ) -> None:
        """Build the blocks ``items[k]``, ``k`` in ``ks``, that go together in halves: their rows go to
        ``groups`` (a frame each time, ``__item`` giving each row's ``k``), their issues to ``built[k]``."""
        if len(ks) < 2:
            return
        parsed = parse_blocks([items[k][2] for k in ks], self.reading)
        if parsed is None:  # a bad line, or a field of another type: find the blocks that do go together
            half = len(ks) // 2
            self._build_together(items, ks[:half], built, groups)
            self._build_together(items, ks[half:], built, groups)
            return
        if parsed.frame.height:
            index = list(range(len(ks)))

            def each(values: list, dtype: pl.DataType) -> pl.Expr:  # the value of each row's block
                return pl.col("__item").replace_strict(index, values, return_dtype=dtype)

            rels = [items[k][1] for k in ks]
            full = build_part(
                derive_chunk(parsed.frame, self.pad_tokens),
                each(rels, pl.String),
                each([items[k][0] for k in ks], pl.Int64),
                self.pad_tokens,
                prefix=each([file_prefix(rel) for rel in rels], pl.String),
            )
            groups.append(full.with_columns(each(ks, pl.Int64)))
        for j, k in enumerate(ks):
            built[k] = _Built(None, parsed.issues[j], parsed.ignored)

    def _write_files(
        self, pid: int, rel: str, full: pl.DataFrame | None, found: list[dict], ignored: set[str]
    ) -> _Written:
        """Write the part, scalars and issues files of part ``pid`` (``full``: its rows, if any)."""
        name = part_name(pid, self.tag)
        issues = _part_issues(full, found, rel, self.pad_tokens)
        n = 0 if full is None else full.height
        scal = None
        per_token = []
        ends = None
        blocks = None
        if n:
            ends = ends_counts(full).get(pid)
            per_token = schema.trainer_token_fields(full, with_values=True)
            full, blocks = self.write_blocks(full, pid)
            scal = full.select(scalar_columns(full))
            self._written.append(self.dir / "scalars" / name)
            scal.write_parquet(
                self.dir / "scalars" / name, compression="zstd", compression_level=SCALAR_COMPRESSION_LEVEL
            )
            # The facts the commit keeps of it (data.derived.facts), read here into the process's cache of
            # them rather than on the commit's one thread (~3 ms a file: ~2 s of a 2.56M read's last commit).
            file_facts(self.dir / "scalars" / name, pid, bounds=True)
        if issues.height:  # readers open the issues file only of a part whose entry counts some
            self._written.append(self.dir / "issues" / name)
            issues.write_parquet(self.dir / "issues" / name)
        columns = None if full is None else dict(full.schema)
        return _Written(scal, issues, n, ignored, per_token, ends=ends, blocks=blocks, columns=columns)

    def write_blocks(self, full: pl.DataFrame, pid: int) -> tuple[pl.DataFrame, list[list[int]]]:
        """Write the rows ``full`` of part ``pid`` to ``parts/``: one file per step block they have
        (``parts/step_block=<n>/``), the rows of a block together in their order, and ``row`` numbering
        them across the part's files in block order (a row is at ``row - first`` in its block's file).
        Returns the rows so numbered and the files' ``[block, first row, rows, smallest step, largest
        step]`` (the part's manifest entry's ``blocks``). Safe on any thread: it only adds the files to
        those this writer wrote."""
        b = step_block(pl.col("step")).fill_null(0)
        if not full.select(b).to_series().is_sorted():
            full = full.sort(b, maintain_order=True)
        full = full.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias("row"))
        # The blocks' runs of rows: each file is a slice of the part (no copy).
        runs = full.select(b.rle().alias("r")).unnest("r")
        blocks, first = [], 0
        for n, block in runs.iter_rows():
            frame = full.slice(first, n)
            path = self.dir / part_file_path(pid, self.tag, int(block))
            path.parent.mkdir(exist_ok=True)
            self._written.append(path)
            write_part_file(frame, path, self.row_group_size)
            # Its token file (data.derived.tokens) and text file (data.derived.text) from the rows at hand,
            # not read back at the commit.
            self._written.extend(tokens.write_rows(frame, tokens.in_store(self.dir, path)))
            self._written.append(text.write_rows(frame, text.in_store(self.dir, path)))
            lo, hi = frame.select(pl.col("step").min().alias("lo"), pl.col("step").max().alias("hi")).row(0)
            blocks.append(
                [int(block), first, n, None if lo is None else int(lo), None if hi is None else int(hi)]
            )
            first += n
        return full, blocks

    def _write_shared(
        self, items: list[tuple[int, str, RawBlock]], built: list[_Built], groups: list[pl.DataFrame]
    ) -> list[_Written] | None:
        """Write many small parts (a run of one file per step) as one: their rows in one file of ``parts/``
        (named after the first part with rows; the others' manifest entries point to it with ``in``), their
        scalars and issues in one pack (see ``PACK_AT``). Written one by one, 10,000 one-line files cost
        30,000 files of a few ms each and a pack of them all at the end. None when their columns do not go
        in one file (a field of another type in each); they are then written one by one."""
        pids = [pid for pid, _, _ in items]
        frames = groups + [
            b.full.with_columns(pl.lit(k, pl.Int64).alias("__item"))
            for k, b in enumerate(built)
            if b.full is not None and b.full.height
        ]
        try:
            whole = pl.concat(frames, how="diagonal_relaxed") if frames else None
        except pl.exceptions.PolarsError:
            return None
        rows = [0] * len(items)
        host = None
        blocks = None
        columns = None
        per_token: list[str] = []
        notes = _token_notes(pl.DataFrame(schema={"source": pl.String, "line": pl.Int64, "part": pl.Int64}))
        ends: dict[int, list[list[int]]] = {}
        if whole is not None:
            # Rows in block order (a block's rows keep theirs), numbered in the file.
            whole = whole.sort("__item", maintain_order=True)
            for k, n in whole.group_by("__item").len().iter_rows():
                rows[k] = n
            whole = whole.drop("__item")
            host = next(pid for pid, n in zip(pids, rows, strict=True) if n)
            per_token = schema.trainer_token_fields(whole, with_values=True)
            ends = ends_counts(whole)
            whole, blocks = self.write_blocks(whole, host)
            columns = dict(whole.schema)
            scal = whole.select(scalar_columns(whole))
            notes = _token_notes(whole, pads=self.pad_tokens)
        else:
            scal = pl.DataFrame(schema={"part": pl.Int64})
        found = pl.DataFrame(
            [
                {**i, "source": rel, "part": pid}
                for (pid, rel, _), b in zip(items, built, strict=True)
                for i in b.issues
            ],
            schema={**ISSUE_SCHEMA, "part": pl.Int64},
        )
        issues = pl.concat([found, notes.select(found.columns)]).sort("part", "line", maintain_order=True)
        counts = {
            (pid, severity): n for pid, severity, n in issues.group_by("part", "severity").len().iter_rows()
        }
        name = pack_name(pids, self.tag)
        self._written += [self.dir / "scalars" / name, self.dir / "issues" / name]
        scal.write_parquet(
            self.dir / "scalars" / name, compression="zstd", compression_level=SCALAR_COMPRESSION_LEVEL
        )
        issues.write_parquet(self.dir / "issues" / name)
        return [
            _Written(
                scal if k == 0 and scal.height else None,
                None,
                rows[k],
                built[k].ignored,
                per_token if k == 0 else [],
                host if rows[k] else None,
                (name, pids) if k == 0 else None,
                (counts.get((pid, "error"), 0), counts.get((pid, "note"), 0)),
                ends=ends.get(pid),
                blocks=blocks if rows[k] else None,  # the host's files, where its rows are too
                columns=columns if k == 0 else None,
            )
            for k, pid in enumerate(pids)
        ]

    def _pack(self) -> None:
        """Copy the scalars and issues of many small parts into one pack (see ``PACK_AT``), named in the
        manifest by the commit that follows; packs lose the parts dropped since (a file re-read)."""
        data = self.m.data
        parts = data["parts"]
        packs = [{**p, "parts": [i for i in p["parts"] if str(i) in parts]} for p in data.get("packs", [])]
        packs = [p for p in packs if p["parts"]]
        packed = packed_parts(packs)
        small = sorted(int(k) for k, p in parts.items() if int(k) not in packed and p["rows"] <= PACK_ROWS)
        if len(small) >= PACK_AT:
            name = pack_name(small, self.tag)
            scalars = [
                pl.scan_parquet(self.dir / "scalars" / entry_name(i, parts[str(i)]))
                for i in small
                if parts[str(i)]["rows"]
            ]
            with_issues = [i for i in small if has_issues(parts[str(i)])]
            frames = {
                "scalars": pl.concat(scalars, how="diagonal_relaxed").collect()
                if scalars
                else pl.DataFrame(schema={"part": pl.Int64}),
                "issues": _issues_with_part(
                    [self.dir / "issues" / entry_name(i, parts[str(i)]) for i in with_issues], with_issues
                ),
            }
            for sub, frame in frames.items():
                self._written.append(self.dir / sub / name)
                buf = io.BytesIO()
                frame.write_parquet(buf, compression="zstd", compression_level=SCALAR_COMPRESSION_LEVEL)
                write_atomic(self.dir / sub / name, buf.getvalue())
            packs.append({"name": name, "parts": small})
        if packs or "packs" in data:
            data["packs"] = packs
