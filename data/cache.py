"""Caching of small computed results (aggregates, one response's view), keyed on the store version, never
a whole table.

:func:`shared` caches a function of a :class:`StoreKey` twice: in the process (a small LRU, for the
callbacks of one page load) and on disk in the cache folder, beside the stores (a diskcache bounded to
``RESULTS_BYTES``), so that every gunicorn worker reads what one of them computed. Two keys are equal
when they name the same store folder at the same version (and commit): every ``RunStore`` object of one committed
state shares the entry, and a new commit misses it (old entries age out of the bounded cache).
"""

from __future__ import annotations

import functools
import hashlib
import os
import sqlite3
import threading
from pathlib import Path

import diskcache

RESULTS = "results-cache"  # the folder, in the cache folder beside the stores
RESULTS_BYTES = 256 << 20  # diskcache evicts the least recently stored entries past this size
_MISS = object()
_OPEN: dict[tuple[int, str], diskcache.Cache] = {}
_OPEN_LOCK = threading.Lock()


@functools.cache
def code_version() -> str:
    """A digest of the source of ``data/`` (every ``.py`` file, by content): part of every results cache key,
    so that a board updated to new code never serves a result its old code computed, even where the store's
    format stays the same (a cached function that now returns another shape or other numbers)."""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parent
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


class StoreKey:
    """Hashable handle on a ``RunStore`` for cache keys: equal when folder and version are equal."""

    __slots__ = ("key", "store")

    def __init__(self, store):
        self.store = store
        # The commit's time as well: a store folder deleted and built again counts its versions afresh.
        self.key = (str(store.dir), store.version, store.manifest.updated)

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other) -> bool:
        return isinstance(other, StoreKey) and self.key == other.key

    def __reduce__(self):
        # Pickled (as an argument in a results cache entry's key) as the tuple that names the store's state,
        # never with its store: a large run's RunStore pickled to 55 KB, which diskcache took ~0.5 s to store
        # as a key (the compare page's first answer at 2.56M responses).
        return (tuple, (self.key,))


def results(cache_dir: Path) -> diskcache.Cache | None:
    """The shared results cache of a cache folder, opened once per process (a forked worker opens its
    own); None when it cannot be opened (a read-only folder): results are then computed each time."""
    key = (os.getpid(), str(cache_dir))
    with _OPEN_LOCK:
        cache = _OPEN.get(key)
        if cache is None:
            try:
                cache = diskcache.Cache(
                    str(Path(cache_dir) / RESULTS), size_limit=RESULTS_BYTES, tag_index=True
                )
            except (OSError, sqlite3.Error):
                return None
            _OPEN[key] = cache
        return cache


def shared(maxsize: int, disk: bool = True):
    """Decorator for ``fn(key: StoreKey, *args)`` with hashable, picklable arguments and a picklable result.

    The result is kept in an LRU of ``maxsize`` entries in the process (none for ``maxsize=0``: a result
    too large to keep in every worker, read from disk each time) and in the results cache of the store's
    cache folder, under ``(fn's name, store folder, version, args)``. ``cache_clear()`` forgets both
    (benchmarks time the computation itself); ``peek(key, *args)`` returns the result kept on disk or None,
    computing nothing. A disk that fails is no error: the result is computed.

    ``disk=False``: kept in the process only (a result that is as quick to read again from the store as from
    the results cache, but slow to pickle: a whole steps summary).

    A computation that finds a file of its committed state gone (a later commit collected it) runs again
    on the state committed now (``key.store.reopened()``); that result is not kept.
    """

    on_disk = disk

    def decorate(fn):
        name = f"{fn.__module__}.{fn.__qualname__}"

        def compute(key: StoreKey, *args):
            try:
                return fn(key, *args), True
            except FileNotFoundError:
                reopen = getattr(key.store, "reopened", None)
                fresh = reopen() if reopen is not None else None
                if fresh is None or StoreKey(fresh) == key:
                    raise
                return fn(StoreKey(fresh), *args), False

        def lookup(key: StoreKey, *args):
            disk = results(Path(key.store.dir).parent) if on_disk else None
            entry = (name, code_version(), *key.key, *args)
            if disk is not None:
                try:
                    hit = disk.get(entry, default=_MISS, retry=True)
                except (OSError, sqlite3.Error, EOFError, ValueError):  # an unreadable entry: computed again
                    hit = _MISS
                if hit is not _MISS:
                    return hit
            out, keep = compute(key, *args)
            if disk is not None and keep:
                try:
                    disk.set(entry, out, retry=True, tag=name)
                except (OSError, sqlite3.Error):
                    pass
            return out

        if maxsize:
            cached = functools.lru_cache(maxsize=maxsize)(lookup)
            lru_clear = cached.cache_clear
        else:
            cached = functools.wraps(fn)(lookup)

            def lru_clear() -> None:
                pass

        def cache_clear() -> None:
            lru_clear()
            with _OPEN_LOCK:
                caches = [c for (pid, _), c in _OPEN.items() if pid == os.getpid()]
            for cache in caches:
                try:
                    cache.evict(name, retry=True)
                except (OSError, sqlite3.Error):
                    pass

        def peek(key: StoreKey, *args):
            """The result kept in the results cache, or None (nothing is computed)."""
            disk = results(Path(key.store.dir).parent)
            if disk is None:
                return None
            try:
                hit = disk.get((name, code_version(), *key.key, *args), default=_MISS, retry=True)
            except (OSError, sqlite3.Error, EOFError, ValueError):
                return None
            return None if hit is _MISS else hit

        cached.cache_clear = cache_clear
        cached.peek = peek
        cached.__wrapped__ = fn
        return cached

    return decorate
