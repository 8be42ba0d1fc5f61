"""Caching of small computed results, keyed on the store version (never a whole table).

Functions cached with ``functools.lru_cache`` take a :class:`StoreKey` in place of the store: two keys
are equal when they name the same store folder at the same version, so every ``RunStore`` object of one
committed state shares the entry, and a new commit misses it.
"""

from __future__ import annotations


class StoreKey:
    """Hashable handle on a ``RunStore`` for cache keys: equal when folder and version are equal."""

    __slots__ = ("key", "store")

    def __init__(self, store):
        self.store = store
        self.key = (str(store.dir), store.version)

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other) -> bool:
        return isinstance(other, StoreKey) and self.key == other.key
