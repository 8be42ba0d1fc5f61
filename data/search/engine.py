"""Text searches of this process, their state in one :class:`SearchEngine` (:func:`engine`): the background
build of a store's text index, the hits of a regular expression (each search once at a time, its hits
kept), searches stopped at their deadline, the progress of the searches over every step and the
background counts. No module-level mutable state: it would be shared, unseen, by every user of a server."""

from __future__ import annotations

import functools
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from data import bounded
from data.cache import StoreKey, results
from data.queries import STOPPED_HINT, QueryError, SearchStopped, check_regex, search
from data.search.texts import TEXT_INDEX_COLUMNS, _fast_head, text_index_files
from data.store import RunStore

# Store versions whose text index was found whole, their last few: a visit starts no thread for them.
WARMED_KEPT = 64

# Searches stopped at their deadline, by (store key, pattern, step): each grid block and the summary ask for
# the same search, and a search that just took all its time is not run again before STOPPED_SECONDS.
STOPPED_SECONDS = 60.0

# Hits of text searches kept in the process, up to this many rows in all (8 bytes each: 32 MB): a broad
# pattern over a large run matches millions of responses. The page's summary and its first block ask for the
# same hits (at the same time, from a browser): the second waits for the first's search and reuses its hits,
# so that a run whose matches outgrow a small bound is not searched twice.
HITS_KEPT = 4_000_000

# A search over every step reads the text index this many files at a time (each in the search helper), so
# that the page can show how far it got and a worker holds only the keys of the matches.
CHUNK_FILES = 64

# How long a worker trusts another worker's note of a search under way (refreshed at each chunk).
PROGRESS_FRESH = 10.0


@dataclass
class Job:
    """A background count: its thread, then its result or its error."""

    thread: threading.Thread
    result: object | None = None
    error: QueryError | None = None


class SearchEngine:
    """The text searches of one process and what they keep: created once (:func:`engine`), its state guarded
    by its locks, so that threads of several users share searches without sharing module globals."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # hits, searches under way, stopped searches, progress
        self._warming: set[str] = set()  # text indexes being built in the background (one thread per store)
        self._warmed: OrderedDict[str, None] = OrderedDict()
        self._warming_lock = threading.Lock()
        self._stopped: dict[tuple, tuple[float, str]] = {}
        self._searching: dict[tuple, threading.Lock] = {}  # searches under way, by memo (one at a time each)
        self._hits: OrderedDict[tuple, pl.DataFrame] = OrderedDict()
        # Progress of the searches over every step under way, by (store key, pattern): files read, of.
        self._progress: dict[tuple, tuple[int, int]] = {}
        self._jobs_lock = threading.Lock()  # background counts and first blocks
        self._fast_locks: dict[tuple, threading.Lock] = {}
        self._jobs: dict[tuple, Job] = {}  # background counts, by (store key, filter, seconds)

    def warm_text_index(self, store: RunStore) -> None:
        """Build the text index of ``store`` in a background thread (once at a time), so a first search is
        fast; only the search helper to start where ingest wrote it. Once a version's index was found whole,
        later visits do nothing: the look (a stat of each of a 2.56M run's 296 index files, beside the
        page's own callbacks) was made at every visit of the responses page."""
        key = store.version
        with self._warming_lock:
            if key in self._warming or key in self._warmed:
                return
            self._warming.add(key)

        def build():
            try:
                bounded.warm()  # and a search helper, so that a first search need not start one
                whole = text_index_files(store) is not None
            finally:
                with self._warming_lock:
                    self._warming.discard(key)
            if whole:
                with self._warming_lock:
                    self._warmed[key] = None
                    while len(self._warmed) > WARMED_KEPT:
                        self._warmed.popitem(last=False)

        threading.Thread(target=build, name=f"text-index-{store.dir.name}", daemon=True).start()

    def hits(self, key: StoreKey, pattern: str, step: int | None, seconds: float) -> pl.DataFrame:
        """``(part, row)`` of the responses whose prompt or response matches (integers join faster than
        ids), found within ``seconds`` (raises :class:`data.queries.SearchStopped`)."""
        memo = (key, pattern, step, seconds)
        with self._lock:
            hit = self._hits.get(memo)
            if hit is not None:
                self._hits.move_to_end(memo)
                return hit
            running = self._searching.setdefault(memo, threading.Lock())
        with running:
            with self._lock:
                hit = self._hits.get(memo)  # found by the search this one waited for
            if hit is not None:
                return hit
            try:
                hits = self._search_texts(key, pattern, step, seconds)
                with self._lock:
                    if hits.height <= HITS_KEPT:
                        self._hits[memo] = hits
                        while len(self._hits) > 16 or sum(h.height for h in self._hits.values()) > HITS_KEPT:
                            self._hits.popitem(last=False)
            finally:
                with self._lock:
                    self._searching.pop(memo, None)
        return hits

    def clear_hits(self) -> None:
        """Forget the hits kept (tests and benchmarks time the search itself)."""
        with self._lock:
            self._hits.clear()

    def _search_texts(self, key: StoreKey, pattern: str, step: int | None, seconds: float) -> pl.DataFrame:
        memo = (key, pattern, step)
        with self._lock:
            when, message = self._stopped.get(memo, (None, ""))
        if when is not None and time.monotonic() - when < STOPPED_SECONDS:
            raise SearchStopped(message)
        hit = pl.col("prompt").str.contains(pattern) | pl.col("response").str.contains(pattern)
        files = None
        if step is not None:
            # One step: the parts' row-group statistics skip every other step, so they are the faster source.
            lf = key.store.scan_parts(TEXT_INDEX_COLUMNS, steps=(step, step)).filter(pl.col("step") == step)
        else:
            files = text_index_files(key.store)
            lf = None if files else key.store.scan_parts().select(*TEXT_INDEX_COLUMNS)
        try:
            if files:
                found = self._scan_chunks(key, pattern, [str(f) for f in files], hit, seconds)
            else:
                found = search(lf.filter(hit).select("part", "row"), pattern, seconds)
        except SearchStopped as e:
            with self._lock:
                if len(self._stopped) > 64:
                    self._stopped.clear()
                self._stopped[memo] = (time.monotonic(), str(e))
            raise
        return found.select(pl.col("part").cast(pl.UInt32), pl.col("row").cast(pl.UInt32))

    def _scan_chunks(
        self, key: StoreKey, pattern: str, files: list[str], hit: pl.Expr, seconds: float
    ) -> pl.DataFrame:
        """``part, row`` of the rows of the index ``files`` that ``hit`` holds for, read CHUNK_FILES files at
        a time within ``seconds`` in all (raises SearchStopped), noting the progress (see
        :meth:`progress`)."""
        deadline = time.monotonic() + seconds
        memo = (key, pattern)
        found = []
        stopped = f"the search for {pattern!r} was stopped after {seconds:g} s: {STOPPED_HINT}"
        try:
            for i in range(0, len(files), CHUNK_FILES):
                self._note_progress(key, pattern, i, len(files))
                chunk = pl.scan_ipc(files[i : i + CHUNK_FILES]).filter(hit).select("part", "row")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SearchStopped(stopped)
                try:
                    found.append(search(chunk, pattern, left))
                except SearchStopped:
                    raise SearchStopped(stopped) from None  # the whole search's time, not this chunk's
        finally:
            with self._lock:
                self._progress.pop(memo, None)
        return pl.concat(found) if found else pl.DataFrame(schema={"part": pl.Int64, "row": pl.Int64})

    def _note_progress(self, key: StoreKey, pattern: str, done: int, of: int) -> None:
        with self._lock:
            self._progress[(key, pattern)] = (done, of)
        disk = results(Path(key.store.dir).parent)
        if disk is not None:  # other workers show it rather than search again (see count_or_progress)
            try:
                note = (done, of, os.getpid())
                disk.set(("search-progress", *key.key, pattern), note, expire=PROGRESS_FRESH, retry=True)
            except (OSError, sqlite3.Error):
                pass

    def progress(self, key: StoreKey, pattern: str) -> tuple[int, int] | None:
        """``(files read, of)`` of this process's search of ``pattern`` over every step under way, or None."""
        with self._lock:
            return self._progress.get((key, pattern))

    def fast_first(self, key: StoreKey, pattern: str, seconds: float) -> tuple[pl.DataFrame, bool] | None:
        """:func:`data.search.texts._fast_head`, computed once when several callers ask at once (the grid's
        block and the count, which waits for it before it starts)."""
        memo = (key, pattern, seconds)
        with self._jobs_lock:
            lock = self._fast_locks.setdefault(memo, threading.Lock())
        try:
            with lock:
                return _fast_head(key, pattern, seconds)
        finally:
            with self._jobs_lock:
                if not lock.locked():
                    self._fast_locks.pop(memo, None)

    def job(self, memo: tuple) -> Job | None:
        """The background count of ``memo`` started in this process, or None."""
        with self._jobs_lock:
            return self._jobs.get(memo)

    def drop_job(self, memo: tuple) -> None:
        with self._jobs_lock:
            self._jobs.pop(memo, None)

    def start_job(self, memo: tuple, work: Callable[[Job], None]) -> Job:
        """The background count of ``memo``, started here (``work(job)`` in a thread) unless one is."""
        with self._jobs_lock:
            job = self._jobs.get(memo)
            if job is not None:
                return job
            job = Job(threading.Thread(target=lambda: work(job), name="search-count", daemon=True))
            self._jobs[memo] = job
            if len(self._jobs) > 64:  # finished ones nobody asked for again
                for m in [m for m, j in self._jobs.items() if not j.thread.is_alive()][:32]:
                    self._jobs.pop(m, None)
        job.thread.start()
        return job

    def running_jobs(self) -> list[tuple]:
        """The memos of the background counts kept (tests check that one was dropped)."""
        with self._jobs_lock:
            return list(self._jobs)


@functools.cache
def engine() -> SearchEngine:
    """The one :class:`SearchEngine` of this process, created at first use."""
    return SearchEngine()


def warm_text_index(store: RunStore) -> None:
    """:meth:`SearchEngine.warm_text_index` of the process's engine."""
    engine().warm_text_index(store)


def text_hits(store: RunStore, pattern: str, step: int | None, seconds: float) -> pl.DataFrame:
    """``part, row`` of the responses (of ``step``, or of every step) whose prompt or response matches the
    regular expression ``pattern``, found within ``seconds`` (raises SearchStopped / QueryError)."""
    check_regex(pattern)
    return engine().hits(StoreKey(store), pattern, step, seconds)
