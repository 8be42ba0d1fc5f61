"""The write side of a store: parts parsed, built and written on worker threads while the next block is
read, and commit points at which the manifest names them (a part is written before the manifest that
names it, so a crash never leaves a half-counted file). The worker side (building and writing the parts'
files and packs) is :mod:`data.ingest.part_files`; deleting what no commit names,
:mod:`data.ingest.old_files`."""

from __future__ import annotations

import secrets
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from data.derived.base import Commit
from data.derived.ends import COLUMN as ENDS_COLUMN
from data.derived.ends import END_TOKENS, EndsCounts
from data.derived.ends import MANIFEST_KEY as ENDS_WITH
from data.derived.registry import build_all
from data.derived.steps import StepSummaries, scan_part_scalars
from data.derived.text import Block
from data.ingest.blocks import RawBlock
from data.ingest.fast import ChunkResult
from data.ingest.old_files import OldFiles, _tags
from data.ingest.options import RunOptions
from data.ingest.part_files import PartFiles
from data.metrics.registry import PREVIEW_COLUMNS, table_columns
from data.store.layout import ROW_GROUP_SIZE, SCALAR_CORE, entry_name
from data.store.manifest import MANIFEST, Draft, manifest_bytes, write_atomic
from data.store.table import MANIFESTS, TABLE_VERSION, commit_table, table_files

# This process's writers' tag, in the names of the files they write: writers of one store on several hosts
# (or in several processes) never write the same file (see data.store.table).
PROCESS_TAG = secrets.token_hex(4)

WORKERS = 2  # chunks parsed, built and written at once while the reading thread reads the next block
# Blocks up to SMALL_BLOCK bytes (a file of one step, the end of a growing file) are parsed and built
# together, up to BATCH_BYTES or BATCH_PARTS of them, and then written as one part each: each call costs
# ~13 ms whatever its size, which made a run of 500 one-step files of 64 lines take 8.6 s.
SMALL_BLOCK = 1 << 20
BATCH_BYTES = 8 << 20
BATCH_PARTS = 256


@dataclass
class _CommitPoint:
    """The store's file state right after part ``pid`` was queued: committed once that part is applied."""

    pid: int
    files: dict
    pending: dict


class _Writer(PartFiles, OldFiles):
    """Accumulates committed state for one run while its files are read: queues chunks to the workers
    (:class:`~data.ingest.part_files.PartFiles`), records what they wrote in order and commits it; old files
    go at each commit (:class:`~data.ingest.old_files.OldFiles`)."""

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


def _top_block(store_dir: Path, data: dict) -> Block:
    """What the top file's rows keep besides their texts (see :data:`data.derived.text.BLOCK_KEY`): the
    columns the responses grid's block shows (``source, line``, the metric and extra columns, the
    previews, how each ended; :func:`data.responses._block`), read from the scalars of the parts of manifest
    ``data``."""
    cols = ["source", "line", *table_columns(), *data.get("extra_columns", []), *PREVIEW_COLUMNS, ENDS_COLUMN]
    parts = data["parts"]

    def scans(pids: list[int]) -> list[pl.LazyFrame]:
        # (A file of parts/ written with others may hold rows of parts dropped since: not read, not shown.)
        return scan_part_scalars(store_dir, data, [p for p in pids if str(p) in parts])

    return list(dict.fromkeys(cols)), scans
