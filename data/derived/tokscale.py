"""The token strip's run-wide colour scale (:mod:`data.token_scale`) of the state committed
(``tokscale-g<N>-<tag>.json``): the token page's first strip of a fresh worker reads this small file instead
of 8 row groups of token arrays (~75-200 ms at 256k responses). None for a commit made mid-read (a live
run's frequent ones): readers compute it if asked, as for the prompt list."""

from __future__ import annotations

from data.derived.base import Commit, collect_named
from data.token_scale import compute, to_json

FILE_KEY = "token_scale_file"


def build(c: Commit) -> None:
    """The scale of the state committed (its steps summary written: the responses shown)."""
    name = None
    if c.aggregates:
        name = c.file("tokscale", "json")
        c.put(name, to_json(compute(c.store())))
    c.set({FILE_KEY: name})


def collect(c: Commit, removable) -> None:
    collect_named(c, removable, "tokscale-g*.json", FILE_KEY)
