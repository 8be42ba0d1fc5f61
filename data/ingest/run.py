"""Incremental ingest of a run: each source file read from the byte offset reached last time, a chunk of
complete lines validated, its metrics derived and a part appended, under the store's lock."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson
import polars as pl
from filelock import FileLock, Timeout

from data.access import reason_of
from data.ingest import companions
from data.ingest.files import ingest_file
from data.ingest.options import load_options
from data.ingest.writer import _Writer
from data.remote import as_path
from data.store import RunStore, open_store, run_files, store_dir_for
from data.store.manifest import (
    MANIFEST,
    REBUILT_FROM,
    Draft,
    manifest_bytes,
    read_manifest,
    remove_older_formats,
    write_atomic,
)
from data.store.runs import VALIDATION, VALIDATION_SUFFIX
from data.store.shared import LostCommit, SharedStores
from data.store.table import (
    TABLE_VERSION,
    CommitConflict,
    TableAt,
    committed_manifest,
    last_version,
    open_table,
)

# Bytes read at a time: under glibc's largest threshold for allocating by mmap (32 MiB). A block of 32 MiB
# was mapped afresh at every read (24-28 ms a read, against ~8 ms into reused memory): ingesting the
# 2.1 GB benchmark run took 663,000 page faults instead of 532,000 and peaked at 894-945 MB of RSS
# instead of 882-910 MB (three runs each).
CHUNK_BYTES = 30 * 1024 * 1024
BIG_CATCH_UP = 64 * 1024 * 1024

Progress = Callable[[int, int], None]
# Reads a run's files into a writer's manifest: (writer, run folder, files, chunk bytes, limits, progress, total
# bytes) -> (bytes read, {file: why it could not be read}). See read_files.
Spread = Callable[..., tuple[int, dict[str, str]]]


@dataclass
class IngestResult:
    """What one ingest call did and what the store now holds."""

    run: str
    store_dir: Path
    files: int = 0
    samples: int = 0
    steps: int = 0
    tokens: int = 0
    bad_lines: int = 0
    new_rows: int = 0
    bytes_read: int = 0
    seconds: float = 0.0
    skipped_locked: bool = False
    # Another writer (a replica on another host) committed the run's table first: this call's commit was
    # refused, its files deleted, and the result is the committed state (see data.store.table).
    lost_commit: bool = False
    generation: int = 0
    # The store is on object storage and another replica committed first: its commit is what the store
    # now holds (this call's reading was dropped).
    lost: bool = False
    # The store is on object storage and another replica committed it lately: the run is left to it (only
    # its commits were mirrored).
    deferred: bool = False

    def summary(self) -> dict:
        return {
            "run": self.run,
            "files": self.files,
            "samples": self.samples,
            "steps": self.steps,
            "tokens": self.tokens,
            "bad_lines": self.bad_lines,
        }


def ingest_run(
    run_dir: Path,
    cache_dir: Path,
    pad_tokens: tuple[str, ...],
    progress: Progress | None = None,
    wait: bool = True,
    chunk_bytes: int = CHUNK_BYTES,
    limits: dict[str, int] | None = None,
    complete: bool = True,
    split: str = "train",
    dialect: str | None = None,
    reward_weights: tuple[tuple[str, float], ...] | None = None,
    tokenizer: Path | None = None,
    local_lock: bool = True,
    shared: SharedStores | None = None,
    spread: Spread | None = None,
    root: Path | None = None,
) -> IngestResult:
    """Bring the store of ``run_dir`` up to date with its files and return what it now holds.

    Only one process writes a store at a time (a file lock). With ``wait=False`` a call that finds the
    lock taken returns at once with ``skipped_locked=True`` and the last committed state. ``limits``
    (``{file: size}``) reads each file only up to that size: a cut of the files taken at one moment, so
    that lines appended meanwhile wait for the next call. ``complete=False`` says the files may end in a
    partial step (a trainer still writing): the last step of each file is then hidden until a later call
    with ``complete=True``. Commits made during a long read always hide it. ``split``: which of the
    folder's files make the run (``"validation"``: its validation files, see data.store.runs);
    ``dialect``, ``reward_weights`` and ``tokenizer``: the settings (see :func:`data.ingest.options.load_options`).
    ``spread``: reads the files instead of :func:`read_files`, in other processes (``ingest --ray``); the
    commit is made here all the same. ``root``: the rollout root the run folder lies in, whose
    rlboard.toml ``[fields]`` applies to the run where the run's own has none (None: not read).

    The file lock guards one host; writers on several hosts sharing the store are kept apart by the table's
    commit protocol: of two that read the same commit only one commits the next, the other returns with
    ``lost_commit=True`` (``local_lock=False``: without the file lock, as two hosts are).

    ``shared``: the stores are on object storage (``--cache-dir s3://…``), ``cache_dir`` holding their local
    working copies. The copy is first brought to the last commit there (another replica's, say); each
    commit is then published there, only if no other replica committed that generation first (if one did,
    the reading stops and the copy becomes the winner's: ``lost``). While another replica keeps committing
    the store, the run is not read: its commits are only mirrored (``deferred``, see
    :data:`data.store.shared.LEASE_SECONDS`).
    """
    t0 = time.perf_counter()
    run_dir = as_path(run_dir)
    store_dir = store_dir_for(cache_dir, run_dir, pad_tokens, split)
    store_dir.mkdir(parents=True, exist_ok=True)
    name = run_dir.name + (VALIDATION_SUFFIX if split == VALIDATION else "")
    result = IngestResult(run=name, store_dir=store_dir)
    lock = FileLock(str(store_dir / ".lock"))
    try:
        if local_lock:
            lock.acquire(timeout=-1 if wait else 0)
    except Timeout:
        result.skipped_locked = True
        _fill_result(result, store_dir)
        return result
    writer = None
    recovery, rebuilt = None, []
    try:
        if shared is not None:
            shared.pull(store_dir)
            recovery = shared.recovery(store_dir)  # the bucket lost this copy's commits: a rebuild
            if shared.deferring(store_dir):  # another replica is reading the run: its commits are mirrored
                result.deferred = True
                _fill_result(result, store_dir)
                result.seconds = time.perf_counter() - t0
                return result
        options = load_options(run_dir, dialect, reward_weights, tokenizer, root)
        table, draft = _committed(store_dir)
        committed = None if draft is None else draft.data
        # The key as the manifest keeps it (JSON: tuples come back as lists), so that equal options compare equal.
        key = orjson.loads(orjson.dumps(options.key()))
        if draft is not None and draft.data.get("options") != key:
            # Read with other options (another dialect named, other weights): read again from the start,
            # into parts of new names (readers of the committed state still open its files).
            old = draft.data
            draft = Draft.empty(run_dir.name, str(run_dir.resolve()), pad_tokens)
            draft.data.update(next_part=old["next_part"], generation=old["generation"])
        if draft is None:
            draft = Draft.empty(run_dir.name, str(run_dir.resolve()), pad_tokens)
            older = remove_older_formats(store_dir, draft)
            if older is not None:  # said on the runs page (data.store.reading.understood)
                draft.data[REBUILT_FROM] = older
            if recovery is not None:  # committed above the generations the bucket holds, and said
                draft.data.update(generation=max(draft.data["generation"], recovery[1]))
                rebuilt = [recovery[0]]
        fm = options.fields
        draft.data.update(options=key, split=split, problems=options.problems + rebuilt)
        draft.data["fields_map"] = None if fm is None else {"table": fm.table, "where": fm.where}
        writer = _Writer(store_dir, draft, pad_tokens, options, table, committed)
        if shared is not None:
            writer.on_commit = lambda data: shared.publish(store_dir, data)
        if draft.data.get("reward_formed"):
            options.reading.formed.update(draft.data["reward_formed"])
        aside: list[tuple[str, str]] = []
        paths = run_files(run_dir, split, aside)
        if aside:  # said on the runs page (data.store.reading.understood), not counted as bad lines
            draft.data["problems"] = [*options.problems, side_files_note(aside)]
        rels = {p: p.relative_to(run_dir).as_posix() for p in paths}
        on_disk = set(rels.values())
        changed = False
        for rel in list(draft.data["files"]):
            if rel not in on_disk:
                writer.drop_file(rel)
                changed = True
        limits = limits or {}
        sizes = {}  # one stat a file (a run of one file per step has thousands)
        for p, rel in rels.items():
            try:
                sizes[rel] = min(p.stat().st_size, limits.get(rel, 1 << 62))
            except FileNotFoundError:
                sizes[rel] = 0
        files = draft.data["files"]
        total = sum(max(0, size - files.get(rel, {}).get("offset", 0)) for rel, size in sizes.items())
        # A small catch-up (a live run's new steps) is committed once, whole; a big one now and then too,
        # so that pages show the steps read so far.
        writer.commit_every = 2.0 if total >= BIG_CATCH_UP else float("inf")
        writer.sources = {rel for rel, size in sizes.items() if size > 0}

        def state() -> bytes:
            data = draft.data
            return orjson.dumps([data["files"], data["pending"], data.get("unreadable", {})])

        before = state()
        if spread is None:
            done, unreadable = read_files(writer, run_dir, paths, chunk_bytes, limits, progress, total)
        else:  # elsewhere (data.ingest.distributed: on a Ray cluster), recorded in this writer's draft
            done, unreadable = spread(writer, run_dir, paths, chunk_bytes, limits, progress, total)
        draft.data["unreadable"] = unreadable
        writer.flush()  # the dialects note how they formed the reward while the parts are built
        companions.count_joined(options.reading, draft.data["files"])
        # What was joined to the companions, and what could not be: said on the runs page, beside the note
        # on side files. A note that changed (a side file come or gone) is committed even when no line is new.
        draft.data["problems"] = [*draft.data["problems"], *companions.notes(draft.data["files"])]
        problems = list(committed.get("problems") or []) if committed is not None else None
        changed = changed or (problems is not None and problems != draft.data["problems"])
        if options.reading.formed:
            draft.data["reward_formed"] = dict(options.reading.formed)
        draft.data["tokenizer"] = options.reading.tokenizer
        changed = changed or before != state()
        if changed or draft.generation == 0:
            writer.commit(complete=complete)
        elif complete and draft.data.get("visible_below") is not None:
            # Nothing new, and the files are still: the steps hidden by an earlier commit are whole.
            writer.commit(complete=True)
        # (Nothing new while the files keep changing: what is shown stays as it is. Hiding the last step
        # again would change the store's version back and forth for nothing.)
        if recovery is not None:
            shared.recovered(store_dir)  # the rebuilt store is committed (and says why on the runs page)
        result.bytes_read = done
        result.new_rows = writer.new_rows
        if progress:
            progress(total, total)
    except CommitConflict:
        # Another writer committed first: what this one wrote is named by no commit. The run is left to
        # the winner (its next call starts from the winner's commit).
        result.lost_commit = True
    except LostCommit:
        result.lost = True
    finally:
        try:
            if writer is not None:
                writer.close()
                if result.lost_commit or result.lost:
                    writer.remove_written()
            if result.lost:
                shared.pull(store_dir)  # the winner's commit, in place of what this call wrote
                shared.recovered(store_dir)
            if result.lost_commit:
                # The winner copies its manifest to manifest.json only after its commit: read the log's.
                _committed(store_dir)
        finally:
            if local_lock:
                lock.release()
    _fill_result(result, store_dir)
    result.seconds = time.perf_counter() - t0
    return result


def _committed(store_dir: Path) -> tuple:
    """The store's table and the manifest of its last commit. While ``manifest.json`` names the table's last
    version (no later commit in the log), it is trusted and the table is opened only if a commit needs it
    (:class:`TableAt`). Else the log is: ``manifest.json`` is put right when a writer died between its commit
    and the copy, or an older copy overtook a newer, and names the version from then on."""
    draft = read_manifest(store_dir)
    if draft is not None:
        version = last_version(store_dir, draft.data)
        if version is not None:
            return TableAt(store_dir, version), draft
    table = open_table(store_dir)
    if table is None:
        return None, draft
    generation, data = committed_manifest(store_dir, table)
    if data is None:
        return table, draft
    if draft is None or draft.generation != generation:
        draft = Draft(data)
    if draft.data.get(TABLE_VERSION) != table.version():
        draft.data[TABLE_VERSION] = table.version()
        write_atomic(store_dir / MANIFEST, manifest_bytes(draft.data))
    return table, draft


def read_files(
    writer: _Writer,
    run_dir: Path,
    paths: list[Path],
    chunk_bytes: int,
    limits: dict[str, int],
    progress: Progress | None = None,
    total: int = 0,
) -> tuple[int, dict[str, str]]:
    """Read what is new in ``paths`` (files of ``run_dir``) into ``writer``, each file up to its size in
    ``limits``; returns the bytes read and the files that could not be read, with why."""
    done = 0
    unreadable: dict[str, str] = {}
    rels = {p: p.relative_to(run_dir).as_posix() for p in paths}
    # Rank files are read a chunk each in turn, so that the steps committed during a long first read
    # hold every rank's responses (see _Writer._watermark).
    readers = {p: ingest_file(writer, run_dir, p, chunk_bytes, limits.get(rels[p])) for p in paths}
    while readers:
        for p, reader in list(readers.items()):
            try:
                done += next(reader)
            except StopIteration:
                del readers[p]
                continue
            except OSError as e:
                if e.filename is None or str(e.filename) != str(p):
                    raise  # not the source file (the cache, say): the ingest fails and says so
                # A file the board may not read (another user's, mode 0600): listed with its reason
                # on the runs page; the run's other files still load.
                unreadable[rels[p]] = reason_of(e)
                del readers[p]
                continue
            if progress:
                progress(done, total)
    return done, unreadable


def side_files_note(aside: list[tuple[str, str]], shown: int = 5) -> str:
    """The runs page's note on a framework's side files in the run folder, which are not read as rollouts (a
    companion among them is read to join its rollout file's lines: data.ingest.companions)."""
    items = "; ".join(f"{rel} ({why})" for rel, why in aside[:shown])
    more = f"; and {len(aside) - shown:,} more" if len(aside) > shown else ""
    return f"Not read as rollouts: {items}{more}."


def _fill_result(result: IngestResult, store_dir: Path) -> None:
    # The committed manifest as readers hold it (parsed once per commit in a process) and the sums of its
    # steps summary (once per summary file: a commit writes a new one). A check of a run that finds
    # nothing new ends here, every few seconds while its pages are open.
    store = open_store(store_dir)
    if store is None:
        return
    m = store.manifest
    result.files = len(m.files)
    result.generation = m.generation
    result.steps, result.samples, result.tokens = _step_totals(store)
    result.bad_lines = m.unusable_lines


_TOTALS: dict[tuple, tuple[int, int, int]] = {}


def _step_totals(store: RunStore) -> tuple[int, int, int]:
    """Steps, responses and KL tokens of a store's steps summary (three of its columns read)."""
    path = store.dir / store.manifest.derived["steps"].name
    st = path.stat()
    key = (path, st.st_size, st.st_mtime_ns)
    hit = _TOTALS.get(key)
    if hit is not None:
        return hit
    steps = store.steps_scan()
    has_tokens = "n_kl_tokens" in steps.collect_schema().names()
    got = steps.select(
        pl.len().alias("steps"),
        pl.col("n").sum().alias("n"),
        (pl.col("n_kl_tokens").fill_null(0).sum() if has_tokens else pl.lit(0)).alias("tokens"),
    ).collect()
    totals = tuple(int(v or 0) for v in got.row(0))
    if len(_TOTALS) >= 64:
        _TOTALS.clear()
    _TOTALS[key] = totals
    return totals
