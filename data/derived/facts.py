"""The footers' facts of every file of ``scalars/`` a commit holds (``facts-g<N>-<tag>.json``): a fresh
reader builds the store's index from this one small file instead of every footer (see data.store.index,
which reads them and keeps their JSON codec)."""

from __future__ import annotations

from data.derived.base import Commit, collect_named
from data.store.index import FACTS_KEY, write_facts


def build(c: Commit) -> None:
    """The facts of the state committed (the last commit's kept where a file did not change)."""
    name = c.file("facts", "json")
    c.written.append(c.dir / name)
    write_facts(c.dir, c.data, name)
    c.named.add(c.dir / name)
    c.set({FACTS_KEY: name})


def collect(c: Commit, removable) -> None:
    collect_named(c, removable, "facts-g*.json", FACTS_KEY)
