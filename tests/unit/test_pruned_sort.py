"""The all-steps sort read file by file in the order of the files' bounds (data.responses.pruned_head):
exactly the rows and order of the full sort, ties by sample id included, reading fewer files."""

from __future__ import annotations

import json

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from data import responses
from data.config import DEFAULT_PAD_TOKENS
from data.ingest import ingest_run
from data.queries import ResponseFilter
from data.search import order as search_order
from data.store import open_store
from tests.conftest import fixture_or_demo

PADS = DEFAULT_PAD_TOKENS


def _full(store, flt, sort, descending, k):
    return search_order._sorted_keys(store, flt, sort, descending, 30.0).head(k).collect()


def _ties_run(tmp_path, nan: bool = False):
    """Six files (one part each): rewards 0..9 with many ties across files, a null, one file of high ones."""
    run = tmp_path / "run"
    run.mkdir(parents=True)
    for f in range(6):
        recs = [
            {"prompt": f"p{i}", "response": "r", "reward": float((i * 7 + f) % 10) if f < 5 else 20.0 + i % 2,
             "response_length": i, "step": f}
            for i in range(12)
        ]  # fmt: skip
        recs[0]["reward"] = None
        if nan and f == 2:
            recs[1]["reward"] = float("nan")
        (run / f"rank{f}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)


def test_prune001_ties_and_stops_early(tmp_path, monkeypatch):
    """Same keys and order as the full sort for every k and direction; when the best file's rows fill the
    head and beat every other file's bound, no other file is read."""
    store = _ties_run(tmp_path)
    assert len(store.segments()) == 6
    for k in (1, 3, 12, 13, 40, 100):
        for desc in (True, False):
            for sort in ("reward", "response_length"):
                got = search_order.pruned_head(store, ResponseFilter(), sort, desc, k, 30.0)
                assert_frame_equal(got, _full(store, ResponseFilter(), sort, desc, k))
    read = []
    real = search_order.matching

    def matching(*a, files=None, **kw):
        if files is not None:
            read.append(sorted(files))
        return real(*a, files=files, **kw)

    monkeypatch.setattr(search_order, "matching", matching)
    got = search_order.pruned_head(store, ResponseFilter(), "reward", True, 10, 30.0)
    assert_frame_equal(got, _full(store, ResponseFilter(), "reward", True, 10))
    assert len(read) == 1  # the file of rewards 20 and 21 alone: its 11 values beat every other file's 9


def test_prune002_filters_steps_and_nan(tmp_path):
    """A step and a range filter give the full sort's rows; a NaN reward (first in a descending sort, left
    out of the bounds) leaves the sort to read every row."""
    store = _ties_run(tmp_path)
    for flt in (ResponseFilter(step=3), ResponseFilter(reward_min=2.0, reward_max=8.0)):
        for desc in (True, False):
            got = search_order.pruned_head(store, flt, "reward", desc, 7, 30.0)
            assert_frame_equal(got, _full(store, flt, "reward", desc, 7))
    nan_store = _ties_run(tmp_path / "nan", nan=True)
    assert search_order.pruned_head(nan_store, ResponseFilter(), "reward", True, 5, 30.0) is None
    assert search_order.pruned_head(store, ResponseFilter(q="r"), "reward", True, 5, 30.0) is None


@pytest.mark.parametrize("run", ["trl-ppo-small", "real-verl-gsm8k-tools", None])
def test_prune003_equal_to_the_full_sort(fixtures_dir, tmp_path, run):
    """On real runs and the demo, every sortable column both ways: the full sort's first rows."""
    src = fixture_or_demo(fixtures_dir, tmp_path / "root", run, steps=8)
    store = open_store(ingest_run(src, tmp_path / "cache", PADS).store_dir)
    for sort in responses.sortable_columns(store):
        for desc in (True, False):
            got = search_order.pruned_head(store, ResponseFilter(), sort, desc, 25, 30.0)
            if got is None:  # a column not a number, or holding NaN: the full sort
                dtype = store.schema()[sort]
                assert not dtype.is_numeric() or (
                    dtype.is_float()
                    and store.scan([sort]).select(pl.col(sort).is_nan().any()).collect().item()
                )
                continue
            assert_frame_equal(got, _full(store, ResponseFilter(), sort, desc, 25))
