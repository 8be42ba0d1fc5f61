"""Text searches of this process: the background build of a store's text index, the hits of a regular
expression (each search once at a time, its hits kept), searches stopped at their deadline and the
progress of the searches over every step."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections import OrderedDict
from pathlib import Path

import polars as pl

from data import bounded
from data.cache import StoreKey, results
from data.queries import (
    STOPPED_HINT,
    SearchStopped,
    check_regex,
    search,
)
from data.search.texts import TEXT_INDEX_COLUMNS, _fast_head, text_index_files
from data.store import RunStore

_WARMING: set[str] = set()  # text indexes being built in the background (one thread per store)
_WARMING_LOCK = threading.Lock()
# Store versions whose text index was found whole (their last few): a visit starts no thread for them.
_WARMED: OrderedDict[str, None] = OrderedDict()
_WARMED_KEPT = 64


def warm_text_index(store: RunStore) -> None:
    """Build the text index of ``store`` in a background thread (once at a time), so a first search is fast;
    only the search helper to start where ingest wrote it. Once a version's index was found whole, later
    visits do nothing: the look (a stat of each of a 2.56M run's 296 index files, beside the page's own
    callbacks) was made at every visit of the responses page."""
    key = store.version
    with _WARMING_LOCK:
        if key in _WARMING or key in _WARMED:
            return
        _WARMING.add(key)

    def build():
        try:
            bounded.warm()  # and a search helper, so that a first search need not start one
            whole = text_index_files(store) is not None
        finally:
            with _WARMING_LOCK:
                _WARMING.discard(key)
        if whole:
            with _WARMING_LOCK:
                _WARMED[key] = None
                while len(_WARMED) > _WARMED_KEPT:
                    _WARMED.popitem(last=False)

    threading.Thread(target=build, name=f"text-index-{store.dir.name}", daemon=True).start()


# Searches stopped at their deadline, by (store key, pattern, step): each grid block and the summary ask for
# the same search, and a search that just took all its time is not run again before STOPPED_SECONDS.
STOPPED_SECONDS = 60.0
_STOPPED: dict[tuple, tuple[float, str]] = {}
_STOPPED_LOCK = threading.Lock()


# Hits of text searches kept in the process, up to this many rows in all (8 bytes each: 32 MB): a broad
# pattern over a large run matches millions of responses. The page's summary and its first block ask for the
# same hits (at the same time, from a browser): the second waits for the first's search and reuses its hits,
# so that a run whose matches outgrow a small bound is not searched twice.
HITS_KEPT = 4_000_000
_SEARCHING: dict[tuple, threading.Lock] = {}  # searches under way, by memo (one at a time each)


def _text_hits(key: StoreKey, pattern: str, step: int | None, seconds: float) -> pl.DataFrame:
    """``(part, row)`` of the responses whose prompt or response matches (integers join faster than ids),
    found within ``seconds`` (raises :class:`data.queries.SearchStopped`)."""
    memo = (key, pattern, step, seconds)
    with _STOPPED_LOCK:
        hit = _HITS.get(memo)
        if hit is not None:
            _HITS.move_to_end(memo)
            return hit
        running = _SEARCHING.setdefault(memo, threading.Lock())
    with running:
        with _STOPPED_LOCK:
            hit = _HITS.get(memo)  # found by the search this one waited for
        if hit is not None:
            return hit
        try:
            hits = _search_texts(key, pattern, step, seconds)
            with _STOPPED_LOCK:
                if hits.height <= HITS_KEPT:
                    _HITS[memo] = hits
                    while len(_HITS) > 16 or sum(h.height for h in _HITS.values()) > HITS_KEPT:
                        _HITS.popitem(last=False)
        finally:
            with _STOPPED_LOCK:
                _SEARCHING.pop(memo, None)
    return hits


def text_hits(store: RunStore, pattern: str, step: int | None, seconds: float) -> pl.DataFrame:
    """``part, row`` of the responses (of ``step``, or of every step) whose prompt or response matches the
    regular expression ``pattern``, found within ``seconds`` (raises SearchStopped / QueryError)."""
    check_regex(pattern)
    return _text_hits(StoreKey(store), pattern, step, seconds)


def _clear_hits() -> None:
    with _STOPPED_LOCK:
        _HITS.clear()


_HITS: OrderedDict[tuple, pl.DataFrame] = OrderedDict()
_text_hits.cache_clear = _clear_hits


def _search_texts(key: StoreKey, pattern: str, step: int | None, seconds: float) -> pl.DataFrame:
    memo = (key, pattern, step)
    with _STOPPED_LOCK:
        when, message = _STOPPED.get(memo, (None, ""))
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
            found = _scan_chunks(key, pattern, [str(f) for f in files], hit, seconds)
        else:
            found = search(lf.filter(hit).select("part", "row"), pattern, seconds)
    except SearchStopped as e:
        with _STOPPED_LOCK:
            if len(_STOPPED) > 64:
                _STOPPED.clear()
            _STOPPED[memo] = (time.monotonic(), str(e))
        raise
    return found.select(pl.col("part").cast(pl.UInt32), pl.col("row").cast(pl.UInt32))


# A search over every step reads the text index this many files at a time (each in the search helper), so
# that the page can show how far it got and a worker holds only the keys of the matches.
CHUNK_FILES = 64
# Progress of the searches over every step under way in this process, by (store key, pattern): files read, of.
_PROGRESS: dict[tuple, tuple[int, int]] = {}


def _scan_chunks(key: StoreKey, pattern: str, files: list[str], hit: pl.Expr, seconds: float) -> pl.DataFrame:
    """``part, row`` of the rows of the index ``files`` that ``hit`` holds for, read CHUNK_FILES files at a
    time within ``seconds`` in all (raises SearchStopped), noting the progress (see :func:`search_progress`)."""
    deadline = time.monotonic() + seconds
    memo = (key, pattern)
    found = []
    stopped = f"the search for {pattern!r} was stopped after {seconds:g} s: {STOPPED_HINT}"
    try:
        for i in range(0, len(files), CHUNK_FILES):
            _note_progress(key, pattern, i, len(files))
            chunk = pl.scan_ipc(files[i : i + CHUNK_FILES]).filter(hit).select("part", "row")
            left = deadline - time.monotonic()
            if left <= 0:
                raise SearchStopped(stopped)
            try:
                found.append(search(chunk, pattern, left))
            except SearchStopped:
                raise SearchStopped(stopped) from None  # the whole search's time, not this chunk's
    finally:
        with _STOPPED_LOCK:
            _PROGRESS.pop(memo, None)
    return pl.concat(found) if found else pl.DataFrame(schema={"part": pl.Int64, "row": pl.Int64})


def _note_progress(key: StoreKey, pattern: str, done: int, of: int) -> None:
    with _STOPPED_LOCK:
        _PROGRESS[(key, pattern)] = (done, of)
    disk = results(Path(key.store.dir).parent)
    if disk is not None:  # other workers show it rather than search again (see count_or_progress)
        try:
            note = (done, of, os.getpid())
            disk.set(("search-progress", *key.key, pattern), note, expire=PROGRESS_FRESH, retry=True)
        except (OSError, sqlite3.Error):
            pass


# How long a worker trusts another worker's note of a search under way (refreshed at each chunk).
PROGRESS_FRESH = 10.0

_FAST_LOCKS: dict[tuple, threading.Lock] = {}


def fast_first(key: StoreKey, pattern: str, seconds: float) -> tuple[pl.DataFrame, bool] | None:
    """:func:`_fast_head`, computed once when several callers ask at once (the grid's block and the count,
    which waits for it before it starts)."""
    memo = (key, pattern, seconds)
    with _JOBS_LOCK:
        lock = _FAST_LOCKS.setdefault(memo, threading.Lock())
    try:
        with lock:
            return _fast_head(key, pattern, seconds)
    finally:
        with _JOBS_LOCK:
            if not lock.locked():
                _FAST_LOCKS.pop(memo, None)


_JOBS_LOCK = threading.Lock()
