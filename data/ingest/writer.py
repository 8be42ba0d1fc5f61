"""The write side of a store: parts parsed, built and written on worker threads while the next block is
read, and commit points at which the manifest names them (a part is written before the manifest that
names it, so a crash never leaves a half-counted file)."""

from __future__ import annotations

import io
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import polars as pl

from data import schema
from data.ingest.blocks import RawBlock, _goes_whole, parse_block, parse_blocks
from data.ingest.fast import ChunkResult
from data.ingest.parts import (
    _issue_frame,
    _issues_with_part,
    _token_notes,
    build_part,
    derive_chunk,
    scalar_columns,
)
from data.metrics.step import step_summary
from data.store import RunStore
from data.store.layout import (
    PACK_AT,
    PACK_ROWS,
    ROW_GROUP_SIZE,
    SCALAR_CORE,
    file_prefix,
    pack_name,
    part_name,
    write_part_file,
)
from data.store.manifest import Manifest, commit_manifest, has_issues, packed_parts, write_atomic

WORKERS = 2  # chunks parsed, built and written at once while the reading thread reads the next block
# Blocks up to SMALL_BLOCK bytes (a file of one step, the end of a growing file) are parsed and built
# together, up to BATCH_BYTES or BATCH_PARTS of them, and then written as one part each: each call costs
# ~13 ms whatever its size, which made a run of 500 one-step files of 64 lines take 8.6 s.
SMALL_BLOCK = 1 << 20
BATCH_BYTES = 8 << 20
BATCH_PARTS = 256


class _Written(NamedTuple):
    """What a worker wrote of one part, for :meth:`_Writer._apply` to record in the manifest."""

    scalars: pl.DataFrame | None  # None: no usable row
    issues: pl.DataFrame
    rows: int
    ignored: set[str]  # fields not read
    per_token: list[str]  # per-token fields of the trainer's own that some row has


@dataclass
class _CommitPoint:
    """The store's file state right after part ``pid`` was queued: committed once that part is applied."""

    pid: int
    files: dict
    pending: dict


class _Writer:
    """Accumulates committed state for one run while its files are read."""

    def __init__(self, store_dir: Path, manifest: Manifest, pad_tokens: tuple[str, ...]):
        self.dir = store_dir
        self.m = manifest
        self.pad_tokens = pad_tokens
        for sub in ("parts", "scalars", "issues"):
            (store_dir / sub).mkdir(parents=True, exist_ok=True)
        self.row_group_size = manifest.data.setdefault("row_group_size", ROW_GROUP_SIZE)
        self._scalars: pl.DataFrame | None = None
        self._added: list[pl.DataFrame] = []  # scalars of the parts applied since, joined when read
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

    @property
    def scalars(self) -> pl.DataFrame:
        """The committed scalars plus what this ingest added; read only when something changes.

        The parts' scalars are joined to them when read, all at once: joining each part as it came copied
        the whole table each time (a run of 500 one-step files spent 4 s on it)."""
        if self._scalars is None:
            self._load_committed()
        if self._added:
            frames = [f for f in (self._scalars, *self._added) if f.height]
            self._scalars = pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()
            self._added = []
        return self._scalars

    @scalars.setter
    def scalars(self, value: pl.DataFrame) -> None:
        self._scalars = value
        self._added = []

    def _load_committed(self) -> None:
        """Read the scalars of the parts in the manifest (before any part of this ingest joins it)."""
        prev = RunStore(self.dir, self.m)
        self._scalars = prev.all_scalars() if self.m.data["parts"] else pl.DataFrame()

    def drop_file(self, rel: str) -> None:
        self.flush()
        entry = self.m.data["files"].pop(rel, None)
        self.m.data["pending"].pop(rel, None)
        if entry:
            for pid in entry["parts"]:
                self.m.data["parts"].pop(str(pid), None)
            if self.scalars.height and "source" in self.scalars.columns:
                self.scalars = self.scalars.filter(pl.col("source") != rel)

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

    def _write_part(self, pid: int, rel: str, chunk: ChunkResult | RawBlock) -> _Written:
        """Worker thread: parse, derive and build the part, write its files.

        Touches no shared state: :meth:`_apply` takes the results in order on the reading thread."""
        result = parse_block(*chunk)[0] if isinstance(chunk, RawBlock) else chunk
        full = None
        if result.frame.height:
            full = build_part(derive_chunk(result.frame, self.pad_tokens), rel, pid, self.pad_tokens)
        return self._write_files(pid, rel, full, result.issues, result.ignored)

    def _write_batch(self, items: list[tuple[int, str, RawBlock]]) -> list[_Written]:
        """Worker thread: :meth:`_write_part` of several small blocks. Those without CR line ends are
        parsed, derived and built at once where they go together (:func:`parse_blocks`; where they do
        not, each half is tried again), then written as one part each; the rest one by one."""
        results: list[_Written | None] = [None] * len(items)
        self._write_together(
            items, [k for k, (_, _, c) in enumerate(items) if _goes_whole(c.data, c.lines)], results
        )
        for k, (pid, rel, chunk) in enumerate(items):
            if results[k] is None:
                results[k] = self._write_part(pid, rel, chunk)
        return results

    def _write_together(
        self, items: list[tuple[int, str, RawBlock]], ks: list[int], results: list[_Written | None]
    ) -> None:
        """Fill ``results[k]`` for the blocks ``items[k]``, ``k`` in ``ks``, that go together in halves."""
        if len(ks) < 2:
            return
        parsed = parse_blocks([items[k][2] for k in ks])
        if parsed is None:  # a bad line, or a field of another type: find the blocks that do go together
            half = len(ks) // 2
            self._write_together(items, ks[:half], results)
            self._write_together(items, ks[half:], results)
            return
        fulls: dict[int, pl.DataFrame] = {}
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
            by_block = full.partition_by("__item", maintain_order=True, include_key=False, as_dict=True)
            for (j,), part in by_block.items():
                fulls[j] = part.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias("row"))
        for j, k in enumerate(ks):
            pid, rel, _ = items[k]
            results[k] = self._write_files(pid, rel, fulls.get(j), parsed.issues[j], parsed.ignored)

    def _write_files(
        self, pid: int, rel: str, full: pl.DataFrame | None, found: list[dict], ignored: set[str]
    ) -> _Written:
        """Write the part, scalars and issues files of part ``pid`` (``full``: its rows, if any)."""
        name = part_name(pid)
        issues = _issue_frame(found, rel)
        n = 0 if full is None else full.height
        scal = None
        per_token = []
        if n:
            per_token = schema.trainer_token_fields(full, with_values=True)
            issues = pl.concat([issues, _token_notes(full, rel)]).sort("line", maintain_order=True)
            write_part_file(full, self.dir / "parts" / name, self.row_group_size)
            scal = full.select(scalar_columns(full))
            scal.write_parquet(self.dir / "scalars" / name, compression="zstd", compression_level=1)
        if issues.height:  # readers open the issues file only of a part whose entry counts some
            issues.write_parquet(self.dir / "issues" / name)
        return _Written(scal, issues, n, ignored, per_token)

    def _apply(self, item: tuple[int, str, Future, int | None]) -> None:
        pid, rel, future, k = item
        scal, issues, n, ignored, per_token = future.result() if k is None else future.result()[k]
        severity = issues.get_column("severity")
        if scal is not None:
            if self._scalars is None:
                self._load_committed()
            self._added.append(scal)
            extras = self.m.data.setdefault("extra_columns", [])
            for c in scal.columns:
                if c not in SCALAR_CORE and c not in extras:
                    extras.append(c)
        self.m.data["ignored_fields"] = sorted(set(self.m.data["ignored_fields"]) | ignored)
        known = self.m.data.setdefault("token_extras", [])
        known.extend(c for c in per_token if c not in known)
        self.m.data["parts"][str(pid)] = {
            "file": rel,
            "rows": n,
            "errors": int((severity == "error").sum()),
            "notes": int((severity == "note").sum()),
        }
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
        self._commit(data, complete=False)

    def _watermark(self) -> int | None:
        """The first step that may still be partial: the smallest of the files' last steps.

        Each file is read in order, so every step below the last step of every file is whole; the last
        one may be missing lines of a rank file still being read or written.
        """
        sc = self.scalars
        if not sc.height or "source" not in sc.columns:
            return None
        last = sc.group_by("source").agg(pl.col("step").max())
        if self.sources - set(last.get_column("source").to_list()):
            # A file with lines not read yet could hold any step: nothing is known to be whole.
            return int(sc.get_column("step").min())
        return int(last.get_column("step").min())

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
            name = pack_name(small)
            scalars = [
                pl.scan_parquet(self.dir / "scalars" / part_name(i)) for i in small if parts[str(i)]["rows"]
            ]
            with_issues = [i for i in small if has_issues(parts[str(i)])]
            frames = {
                "scalars": pl.concat(scalars, how="diagonal_relaxed").collect()
                if scalars
                else pl.DataFrame(schema={"part": pl.Int64}),
                "issues": _issues_with_part(
                    [self.dir / "issues" / part_name(i) for i in with_issues], with_issues
                ),
            }
            for sub, frame in frames.items():
                buf = io.BytesIO()
                frame.write_parquet(buf, compression="zstd", compression_level=1)
                write_atomic(self.dir / sub / name, buf.getvalue())
            packs.append({"name": name, "parts": small})
        if packs or "packs" in data:
            data["packs"] = packs

    def _commit(self, data: dict, complete: bool) -> None:
        """Write the steps summary and the manifest ``data`` (the state of every applied part)."""
        started = time.monotonic()
        gen = self.m.data["generation"] + 1
        steps_name = f"steps-g{gen:06d}.parquet"
        below = None if complete else self._watermark()
        shown = self.scalars if below is None else self.scalars.filter(pl.col("step") < below)
        if shown.height:
            steps = step_summary(shown.lazy()).collect()
        else:
            steps = pl.DataFrame(schema={"step": pl.Int64, "n": pl.UInt32})
        buf = io.BytesIO()
        steps.write_parquet(buf)
        write_atomic(self.dir / steps_name, buf.getvalue())
        old = self.m.data.get("steps_file")
        for d in (self.m.data, data):
            d.update(visible_below=below, steps_file=steps_name, generation=gen)
        commit_manifest(self.dir, Manifest(data))
        self._collect_garbage(old)
        self.last_commit = time.monotonic()
        self.last_commit_cost = self.last_commit - started

    def _collect_garbage(self, old_steps: str | None) -> None:
        """Remove files no committed manifest names any more (kept one generation for slow readers)."""
        ids = {int(k) for k in self.m.data["parts"]}
        packs = self.m.data.get("packs", [])
        loose = ids - packed_parts(packs)
        names = {pack["name"] for pack in packs}
        floor = self.m.data["next_part"]
        for sub, keep in (("parts", ids), ("scalars", loose), ("issues", loose)):
            for p in (self.dir / sub).glob("p*.parquet"):
                if int(p.stem[1:]) not in keep and int(p.stem[1:]) < floor - 64:
                    p.unlink(missing_ok=True)
            if sub != "parts":
                for p in (self.dir / sub).glob("k*.parquet"):
                    if p.name not in names:  # of a pack whose parts were all dropped, or left by a crash
                        p.unlink(missing_ok=True)
        for p in self.dir.glob("steps-g*.parquet"):
            if p.name not in (self.m.data["steps_file"], old_steps):
                p.unlink(missing_ok=True)
