"""The write side of a store: parts parsed, built and written on worker threads while the next block is
read, and commit points at which the manifest names them (a part is written before the manifest that
names it, so a crash never leaves a half-counted file)."""

from __future__ import annotations

import io
import secrets
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import polars as pl

from data import schema
from data.derived.base import Commit
from data.derived.ends import END_TOKENS, EndsCounts, ends_counts
from data.derived.ends import FILE_KEY as ENDS_FILE
from data.derived.ends import MANIFEST_KEY as ENDS_WITH
from data.derived.registry import build_all, collect_all
from data.derived.steps import CELLS_KEY, StepSummaries, scan_part_scalars
from data.derived.text import Block
from data.ingest.blocks import RawBlock, _goes_whole, parse_block, parse_blocks
from data.ingest.fast import ChunkResult
from data.ingest.options import RunOptions
from data.ingest.parts import (
    _issues_with_part,
    _part_issues,
    _token_notes,
    build_part,
    derive_chunk,
    scalar_columns,
)
from data.metrics.registry import PREVIEW_COLUMNS, table_columns
from data.store.layout import (
    ISSUE_SCHEMA,
    PACK_AT,
    PACK_ROWS,
    ROW_GROUP_SIZE,
    SCALAR_CORE,
    entry_name,
    file_prefix,
    name_id,
    name_tag,
    pack_name,
    part_file_path,
    part_name,
    step_block,
    write_part_file,
)
from data.store.manifest import MANIFEST, Draft, has_issues, manifest_bytes, packed_parts, write_atomic
from data.store.table import MANIFESTS, TABLE_VERSION, commit_table, table_files

# This process's writers' tag, in the names of the files they write: writers of one store on several hosts
# (or in several processes) never write the same file (see data.store.table).
PROCESS_TAG = secrets.token_hex(4)
# A file of the store no committed manifest names is deleted by the writer that wrote it, or by any writer
# once it is this old (another writer's, left by a crash or a lost commit; or one that readers of an older
# commit may still open).
GRACE_SECONDS = 600
# A loose part's file that a pack replaced is deleted once its part is this many parts behind the newest: a
# reader of an older commit may still open it until then.
KEEP_BEHIND = 64

WORKERS = 2  # chunks parsed, built and written at once while the reading thread reads the next block
# Blocks up to SMALL_BLOCK bytes (a file of one step, the end of a growing file) are parsed and built
# together, up to BATCH_BYTES or BATCH_PARTS of them, and then written as one part each: each call costs
# ~13 ms whatever its size, which made a run of 500 one-step files of 64 lines take 8.6 s.
SMALL_BLOCK = 1 << 20
BATCH_BYTES = 8 << 20
BATCH_PARTS = 256
# A batch of at least SHARE_AT small blocks (a run of one small file per step) is written as one file of rows
# and one pack (see _Writer._write_shared); fewer (the new lines of a live run's rank files) as a part each.
SHARE_AT = 16


class _Built(NamedTuple):
    """A part built on a worker, not written yet."""

    full: pl.DataFrame | None  # its rows (None: no usable row)
    issues: list[dict]
    ignored: set[str]


class _Written(NamedTuple):
    """What a worker wrote of one part, for :meth:`_Writer._apply` to record in the manifest."""

    scalars: pl.DataFrame | None  # None: no usable row, or written with others (see _Writer._write_shared)
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


@dataclass
class _CommitPoint:
    """The store's file state right after part ``pid`` was queued: committed once that part is applied."""

    pid: int
    files: dict
    pending: dict


class _Writer:
    """Accumulates committed state for one run while its files are read."""

    def __init__(
        self,
        store_dir: Path,
        draft: Draft,
        pad_tokens: tuple[str, ...],
        options: RunOptions | None = None,
        table=None,
        committed: dict | None = None,
    ):
        self.dir = store_dir
        self.m = draft
        # This writer's files are named with its process's tag: two writers of one store (two replicas)
        # never write the same file, and the one whose commit is refused deletes those it wrote.
        self.tag = PROCESS_TAG
        self._written: list[Path] = []  # every file this writer wrote (appended to by the worker threads)
        self._committed_tags = {self.tag} | _tags(committed)
        # The store's Delta table as last read or committed (a TableAt: not opened until a commit; None: no
        # commit yet).
        self.table = table
        self._table_state = table_files(committed) if committed else {}  # the files it holds
        self._columns: dict[str, pl.DataType] = {}  # the columns of the files this writer wrote
        self.pad_tokens = pad_tokens
        self.options = options or RunOptions()  # the run's reading options (see data.ingest.options)
        self.reading = self.options.reading
        for sub in ("parts", "scalars", "issues"):
            (store_dir / sub).mkdir(parents=True, exist_ok=True)
        self.row_group_size = draft.data.setdefault("row_group_size", ROW_GROUP_SIZE)
        # The parts' counts of ended and cut responses (see data.derived.ends); made with other end
        # tokens, they are no use: read again.
        self.ends = EndsCounts(store_dir, draft.data)
        if draft.data.get(ENDS_WITH) != list(END_TOKENS):
            self.ends.forget()
            draft.data[ENDS_WITH] = list(END_TOKENS)
        # The per-step summary, summarised again only where rows came or went (see data.derived.steps):
        # no whole-run table is held, so memory stays flat as the run grows.
        self.summaries = StepSummaries(store_dir, draft.data)
        self._step_ranges: dict[int, list[int]] = {}  # of parts whose scalars came before their entry
        self.new_rows = 0
        self.last_commit = time.monotonic()
        self.commit_every = 2.0
        self.last_commit_cost = 0.0  # wall seconds the last commit took
        # Files of the run that have lines (set by ingest_run); see _watermark.
        self.sources: set[str] = set()
        # Chunks are parsed, derived, built and written by WORKERS threads while the next block is read
        # (Polars releases the GIL), and their results are taken in order (_apply), so that the store
        # grows as if the chunks were written one after the other.
        self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="ingest-writer")
        # (part, file, the task writing it, its index in the task's results when it writes several)
        self._pending: deque[tuple[int, str, Future, int | None]] = deque()
        self._batch: list[tuple[int, str, RawBlock]] = []  # small blocks not yet handed to a worker
        self._batch_bytes = 0
        self._due: _CommitPoint | None = None
        # Called with each committed manifest's data once its files are in place (a store on object
        # storage publishes the commit there, see data.store.shared); may raise to stop the ingest.
        self.on_commit: Callable[[dict], None] | None = None

    def drop_file(self, rel: str) -> None:
        self.flush()
        entry = self.m.data["files"].pop(rel, None)
        self.m.data["pending"].pop(rel, None)
        if entry:
            for pid in entry["parts"]:
                part = self.m.data["parts"].pop(str(pid), None)
                if part is not None and part["rows"]:
                    self.summaries.touch_range(*part["steps"])

    def write_chunk(self, rel: str, chunk: ChunkResult | RawBlock) -> int:
        """Queue a chunk (a block of lines, or lines already parsed) to become part ``pid`` (returned at
        once), parsed, built and written on a worker thread while the next block is read. At most WORKERS
        tasks wait (memory); small blocks wait to be handed over together (see ``SMALL_BLOCK``)."""
        pid = self.m.data["next_part"]
        self.m.data["next_part"] = pid + 1
        while self._pending and self._pending[0][2].done():  # take what is written (and commit it) now
            self._apply(self._pending.popleft())
        if isinstance(chunk, RawBlock) and len(chunk.data) <= SMALL_BLOCK:
            self._batch.append((pid, rel, chunk))
            self._batch_bytes += len(chunk.data)
            if self._batch_bytes >= BATCH_BYTES or len(self._batch) >= BATCH_PARTS:
                self._submit_batch()
            return pid
        self._submit_batch()
        self._wait_for_room()
        self._pending.append((pid, rel, self._pool.submit(self._write_part, pid, rel, chunk), None))
        return pid

    def _submit_batch(self) -> None:
        if not self._batch:
            return
        items, self._batch, self._batch_bytes = self._batch, [], 0
        self._wait_for_room()
        future = self._pool.submit(self._write_batch, items)
        self._pending.extend((pid, rel, future, k) for k, (pid, rel, _) in enumerate(items))

    def _wait_for_room(self) -> None:
        while len({id(item[2]) for item in self._pending}) >= WORKERS:
            self._apply(self._pending.popleft())

    def flush(self) -> None:
        """Wait for the queued chunks to be written and take their results (raises what writing raised)."""
        self._submit_batch()
        while self._pending:
            self._apply(self._pending.popleft())

    def close(self) -> None:
        """Finish or abandon writing; no thread is left writing into the store afterwards."""
        self._due = None  # after a failure, no commit point may be committed past the failed part
        try:
            self.flush()
        finally:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pending.clear()
            self._batch = []

    def adopt(self, found: dict) -> None:
        """Record parts another process wrote into this store (a Ray task: data.ingest.distributed) as
        :meth:`_apply` records its own; ``found`` is that process's writer's manifest data: its ``parts``
        (ids this writer handed out and does not use), their counts of ended and cut responses (``ends``),
        ``packs``, extra and per-token columns and ignored fields, and that writer's ``columns`` (of the files it wrote) and ``written`` (the files, deleted
        with this writer's should its commit be refused). The next commit names them and summarises their
        steps."""
        self.flush()
        for c, t in found.get("columns", {}).items():
            self._columns.setdefault(c, t)
        self._written += found.get("written", [])
        data = self.m.data
        for pid, entry in found["parts"].items():
            data["parts"][str(pid)] = entry
            self.new_rows += entry["rows"]
            if entry["rows"]:
                self.summaries.touch_range(*entry["steps"])
        for pid, counts in found.get("ends", {}).items():
            self.ends.add(int(pid), counts)
        data.setdefault("packs", []).extend(found.get("packs", []))
        data["ignored_fields"] = sorted(set(data["ignored_fields"]) | set(found.get("ignored_fields", [])))
        for key in ("extra_columns", "token_extras"):
            known = data.setdefault(key, [])
            known.extend(c for c in found.get(key, []) if c not in known)

    def _build(self, pid: int, rel: str, chunk: ChunkResult | RawBlock) -> _Built:
        """Worker thread: parse, derive and build part ``pid`` (touches no shared state)."""
        result = parse_block(*chunk, reading=self.reading)[0] if isinstance(chunk, RawBlock) else chunk
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
            ends = ends_counts(full, self.pad_tokens).get(pid)
            per_token = schema.trainer_token_fields(full, with_values=True)
            full, blocks = self.write_blocks(full, pid)
            scal = full.select(scalar_columns(full))
            self._written.append(self.dir / "scalars" / name)
            scal.write_parquet(self.dir / "scalars" / name, compression="zstd", compression_level=1)
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
            ends = ends_counts(whole, self.pad_tokens)
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
        scal.write_parquet(self.dir / "scalars" / name, compression="zstd", compression_level=1)
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

    def _apply(self, item: tuple[int, str, Future, int | None]) -> None:
        pid, rel, future, k = item
        scal, issues, n, ignored, per_token, host, pack, counts, ends, blocks, columns = (
            future.result() if k is None else future.result()[k]
        )
        for c, t in (columns or {}).items():
            self._columns.setdefault(c, t)
        if counts is None:
            severity = issues.get_column("severity")
            counts = (int((severity == "error").sum()), int((severity == "note").sum()))
        if scal is not None:
            # The steps of its parts (several when written together): what the next commit summarises.
            ranges = scal.group_by("part").agg(
                pl.col("step").min().alias("lo"), pl.col("step").max().alias("hi")
            )
            for part, lo, hi in ranges.iter_rows():
                self._step_ranges[int(part)] = [int(lo), int(hi)]
            self.summaries.touch(scal.get_column("step").unique().to_list())
            extras = self.m.data.setdefault("extra_columns", [])
            for c in scal.columns:
                if c not in SCALAR_CORE and c not in extras:
                    extras.append(c)
        if pack is not None:
            self.m.data.setdefault("packs", []).append({"name": pack[0], "parts": pack[1]})
        self.m.data["ignored_fields"] = sorted(set(self.m.data["ignored_fields"]) | ignored)
        known = self.m.data.setdefault("token_extras", [])
        known.extend(c for c in per_token if c not in known)
        entry = {
            "file": rel,
            "rows": n,
            "errors": counts[0],
            "notes": counts[1],
            "tag": self.tag,
        }
        if blocks:
            entry["blocks"] = blocks
        if n:
            entry["steps"] = self._step_ranges.pop(pid)
            if ends is not None:
                self.ends.add(pid, ends)
        if host is not None and host != pid:
            entry["in"] = host
        self.m.data["parts"][str(pid)] = entry
        self.new_rows += n
        if self._due is not None and pid >= self._due.pid:
            self._commit_due()

    def maybe_commit(self) -> None:
        """Commit now and then during a long ingest, so that readers see the steps already read.

        Called after each chunk's file state is recorded. When a commit is due, that state is taken as a
        commit point: the commit is made when the chunk's part has been applied (:meth:`_apply`), with the
        files as they were then, so it never waits for the workers. Such a commit is taken mid-read, so
        its last steps may be partial: it shows only complete ones. It summarises every step read so far
        (0.2-0.4 CPU-s at 250,000 responses); spacing commits at least 19 times their wall time apart keeps
        them to a few percent of a long ingest's CPU (two cores) while a 2 GB run still shows new steps
        every few seconds.
        """
        if self._due is not None:
            return
        if time.monotonic() - self.last_commit >= max(self.commit_every, 19 * self.last_commit_cost):
            data = self.m.data
            self._due = _CommitPoint(
                pid=data["next_part"] - 1,
                files={rel: {**e, "parts": list(e["parts"])} for rel, e in data["files"].items()},
                pending=dict(data["pending"]),
            )
            self._submit_batch()  # it holds the commit point's part: hand it over now, not when full
            if not self._pending:
                self._commit_due()

    def _commit_due(self) -> None:
        point, self._due = self._due, None
        data = {**self.m.data, "files": point.files, "pending": point.pending, "next_part": point.pid + 1}
        # Taken mid-read, while workers hold chunks: the prompt aggregates (a pass over the whole store)
        # wait for the commit that ends the read; readers of this one compute them if asked.
        self._commit(data, complete=False, aggregates=False)

    def _watermark(self) -> int | None:
        """The first step that may still be partial: the smallest of the files' last steps.

        Each file is read in order, so every step below the last step of every file is whole; the last
        one may be missing lines of a rank file still being read or written. Read from the parts' step
        ranges (no row is read).
        """
        last: dict[str, int] = {}
        first = None
        for e in self.m.data["parts"].values():
            if e["rows"]:
                lo, hi = e["steps"]
                last[e["file"]] = max(hi, last.get(e["file"], hi))
                first = lo if first is None else min(first, lo)
        if not last:
            return None
        if self.sources - set(last):
            # A file with lines not read yet could hold any step: nothing is known to be whole.
            return first
        return min(last.values())

    def commit(self, complete: bool = True) -> None:
        """Commit what was read. ``complete=False``: the files may hold a partial last step (read mid-way,
        or a trainer still writing), so readers are shown only the steps below :meth:`_watermark`."""
        self._due = None  # this commit covers it
        self.flush()
        self._pack()
        self._commit(self.m.data, complete)

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
                frame.write_parquet(buf, compression="zstd", compression_level=1)
                write_atomic(self.dir / sub / name, buf.getvalue())
            packs.append({"name": name, "parts": small})
        if packs or "packs" in data:
            data["packs"] = packs

    def _commit(self, data: dict, complete: bool, aggregates: bool = True) -> None:
        """Write every derived kind of the manifest ``data`` (the state of every applied part; see
        data.derived.registry) and the manifest, and commit the table's files of that state with the
        manifest's generation (see :func:`data.store.table.commit_table`; raises ``CommitConflict`` when
        another writer committed first: nothing of this commit is then visible). ``manifest.json`` is
        replaced only after the commit. ``aggregates``: also the prompt lists (a pass over the whole
        store; see :mod:`data.derived.prompts`)."""
        started = time.monotonic()
        gen = self.m.data["generation"] + 1
        name = f"g{gen:06d}-{self.tag}.json"
        below = None if complete else self._watermark()
        c = Commit(
            self.dir,
            data,
            self.m.data,
            gen,
            self.tag,
            below,
            aggregates,
            self.summaries,
            self.ends,
            lambda: _top_block(self.dir, data),
            table_files(data),
            old=dict(self.m.data),
            written=self._written,
        )
        c.set({"visible_below": below, "generation": gen, "manifest_file": name})
        build_all(c)
        data["updated"] = time.time()
        (self.dir / MANIFESTS).mkdir(exist_ok=True)
        self._written.append(self.dir / MANIFESTS / name)
        for d in (self.m.data, data):
            d.pop(TABLE_VERSION, None)  # not known before the commit (an alteration of the schema adds one)
        write_atomic(self.dir / MANIFESTS / name, manifest_bytes(data))
        self.table = commit_table(self.dir, self.table, self._table_state, c.state, self._columns, gen, name)
        self._table_state = c.state
        # What this commit names is no longer this writer's to delete should a later commit be refused.
        named = {self.dir / rel for rel in c.state} | {self.dir / MANIFESTS / name} | c.named
        named |= {
            self.dir / sub / entry_name(int(k), e)
            for k, e in data["parts"].items()
            for sub in ("scalars", "issues")
        }
        named |= {self.dir / sub / p["name"] for p in data.get("packs", []) for sub in ("scalars", "issues")}
        self._written[:] = [p for p in self._written if p not in named]
        # manifest.json also names the table's version that holds this state: a later check of the run trusts
        # it without opening the table while the log has no later commit.
        for d in (self.m.data, data):
            d[TABLE_VERSION] = self.table.version()
        write_atomic(self.dir / MANIFEST, manifest_bytes(data))
        self._collect_garbage(c)
        if self.on_commit is not None:
            self.on_commit(data)
        self.last_commit = time.monotonic()
        self.last_commit_cost = self.last_commit - started

    def _removable(self, path: Path) -> bool:
        """Whether a file no committed manifest names may be deleted: this writer's or a committed writer's,
        or an old one. (A file of another tag may be a writer's that read this commit and has not committed
        yet: it may still win the next commit.)"""
        if name_tag(path.name) in self._committed_tags:
            return True
        try:
            return time.time() - path.stat().st_mtime > GRACE_SECONDS
        except FileNotFoundError:
            return False

    def _collect_garbage(self, c: Commit) -> None:
        """Remove files no committed manifest names any more (kept one generation for slow readers)."""
        parts = self.m.data["parts"]
        packs = self.m.data.get("packs", [])
        loose = {int(k) for k in parts} - packed_parts(packs)
        names = {pack["name"] for pack in packs}
        kept = {entry_name(i, parts[str(i)]) for i in loose} | names
        floor = self.m.data["next_part"]
        held = set(self._table_state)
        self._committed_tags |= _tags(self.m.data)
        for p in (self.dir / "parts").glob("*/p*.parquet"):
            rel = p.relative_to(self.dir).as_posix()
            if rel not in held and name_id(p.name) < floor - KEEP_BEHIND and self._removable(p):
                p.unlink(missing_ok=True)
        for sub in ("scalars", "issues"):
            for p in (self.dir / sub).glob("*.parquet"):
                if p.name in kept:
                    continue
                # A pack whose parts were all dropped, or left by a crash; a loose part's file once it is
                # no newer than the last KEEP_BEHIND parts.
                if (p.name.startswith("k") or name_id(p.name) < floor - KEEP_BEHIND) and self._removable(p):
                    p.unlink(missing_ok=True)
        for p in (self.dir / MANIFESTS).glob("g*.json"):
            if p.name not in (self.m.data["manifest_file"], c.old.get("manifest_file")) and self._removable(
                p
            ):
                p.unlink(missing_ok=True)
        collect_all(c, self._removable)

    def remove_written(self) -> None:
        """Delete every file this writer wrote (its commit was refused: no manifest names them)."""
        for p in self._written:
            p.unlink(missing_ok=True)


def _top_block(store_dir: Path, data: dict) -> Block:
    """What the top file's rows keep besides their texts (see :data:`data.derived.text.BLOCK_KEY`): the
    columns the responses grid's block shows (``source, line``, the metric and extra columns, the
    previews; :func:`data.responses._block`), read from the scalars of the parts of manifest ``data``."""
    cols = ["source", "line", *table_columns(), *data.get("extra_columns", []), *PREVIEW_COLUMNS]
    parts = data["parts"]

    def scans(pids: list[int]) -> list[pl.LazyFrame]:
        # (A file of parts/ written with others may hold rows of parts dropped since: not read, not shown.)
        return scan_part_scalars(store_dir, data, [p for p in pids if str(p) in parts])

    return list(dict.fromkeys(cols)), scans


def _tags(data: dict | None) -> set[str | None]:
    """The tags of the writers whose files a manifest's ``data`` names (committed writers)."""
    if not data:
        return set()
    names = [p["name"] for p in data.get("packs", [])] + [
        data.get("steps_file") or "",
        data.get(CELLS_KEY) or "",
        data.get(ENDS_FILE) or "",
        data.get("manifest_file") or "",
    ]
    return {e.get("tag") for e in data["parts"].values()} | {name_tag(n) for n in names if n}
