"""The first rows of every sort of the all-steps view, kept at each commit (data.derived.topk): they equal
the sorted scan's on real runs, the demo, a growing run and by hand (ties, NaN, null, infinities); the page's
first block then reads no file of the run; a store committed without them sorts the files as before."""

from __future__ import annotations

import json

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from data import responses
from data.demo import write_demo_run
from data.derived import topk
from data.ingest import ingest_run
from data.queries import ResponseFilter
from data.search import order as search_order
from data.store import open_store
from data.store.manifest import DerivedEntry
from data.store.reader import RunStore
from tests.conftest import FIXTURE_RUNS, fixture_or_demo, growing_demo_stores

PADS = ("<pad>", "<|endoftext|>")
ALL = ResponseFilter(step=None)


@pytest.fixture
def small_k(monkeypatch):
    """A few rows kept per sort (7, the first block 3), so that small runs have more rows than that."""
    monkeypatch.setattr(topk, "KEEP", 7)
    monkeypatch.setattr(topk, "FIRST", 3)


def _assert_same(store, k: int = 7, first: bool = False) -> int:
    """For every sortable column in both orders, the kept head equals the sorted scan's first ``k``, and
    the kept rows of its first block (3) the parts' (when the reader can tell; ``first``: it must tell the
    rows of every head it tells); returns how many heads it could."""
    told = 0
    names = store.schema()
    cols = [c for c in dict.fromkeys(("source", "line", "sample_id", *names)) if c in names]
    for col in responses.sortable_columns(store):
        for desc in (True, False):
            want = search_order._sorted_keys(store, ALL, col, desc, 10.0).head(k).collect()
            got = topk.head(store, col, desc, k)
            if got is not None:
                told += 1
                assert_frame_equal(got, want, check_dtypes=True)
                rows = topk.first_rows(store, got.head(3), cols)
                assert rows is not None or not first
                if rows is not None:
                    assert_frame_equal(rows, store.read_keys(got.head(3), cols))
    return told


@pytest.mark.parametrize(
    "run",
    [*FIXTURE_RUNS, None],
)
def test_topk001_kept_head_is_the_sorted_scan(fixtures_dir, tmp_path, small_k, run):
    """On real runs and the demo, each sortable column's kept first rows, in both orders, are the sorted
    scan's; every one is kept."""
    src = fixture_or_demo(fixtures_dir, tmp_path / "root", run, steps=10)
    store = open_store(ingest_run(src, tmp_path / "cache", PADS).store_dir)
    assert store.manifest.derived["topk"].meta["file"]
    assert _assert_same(store, first=True) == 2 * len(responses.sortable_columns(store))


def test_topk002_by_hand_ties_nan_null_inf_and_no_scan(tmp_path, monkeypatch, small_k):
    """Rewards with ties, NaN and infinities, an extra field with nulls: the first rows of each sort by hand
    (NaN above every number, nulls last, ties by sample id), and the page's first block read from the kept
    rows without opening a part."""
    nan, inf = float("nan"), float("inf")
    rewards = [1.0, nan, inf, -inf, 1.0, 2.0, 1.0, 0.5, -1.0, 1.0]
    extra = [0.3, None, 0.1, None, 0.2, inf, None, -0.5, nan, 0.0]
    monkeypatch.setattr(topk, "KEEP", 9)
    run = tmp_path / "run"
    run.mkdir()
    lines = [
        json.dumps({"prompt": f"p{i}", "response": f"r{i}", "reward": r, "step": 1 + i // 4, "score": x})
        for i, (r, x) in enumerate(zip(rewards, extra, strict=True))
    ]
    (run / "a.jsonl").write_text("\n".join(lines) + "\n")  # json.dumps writes NaN and Infinity literals
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    ids = dict(zip(*store.scan(["line", "sample_id"]).collect().get_columns(), strict=True))
    by_id = sorted(ids, key=ids.get)  # lines (1-based) in sample id order

    def tied(*lines):
        return sorted(lines, key=lambda n: ids[n])

    ones, nulls = tied(1, 5, 7, 10), tied(2, 4, 7)
    want = {
        ("reward", True): [2, 3, 6, *ones, 8, 9],
        ("reward", False): [4, 9, 8, *ones, 6, 3],
        # Nulls last, in sample id order, in both orders.
        ("score", True): [9, 6, 1, 5, 3, 10, 8, *nulls[:2]],
        ("score", False): [8, 10, 3, 5, 1, 6, 9, *nulls[:2]],
    }
    lines_of = {(p, r): n for p, r, n in store.scan(["part", "row", "line"]).collect().iter_rows()}
    for (col, desc), lines_want in want.items():
        got = topk.head(store, col, desc, 9)
        assert [lines_of[k] for k in got.iter_rows()] == lines_want, (col, desc)
    assert len(by_id) == 10
    assert _assert_same(store, 9) == 2 * len(responses.sortable_columns(store))
    # The page: the first block (3 rows) from the kept rows, with no part or scalars file read.
    monkeypatch.setattr(search_order, "HEAD_ROWS", 7)
    responses.clear_caches()
    spec_cols = responses.table_columns(store)

    def no_read(*a, **k):
        raise AssertionError("the first block read the run's files")

    monkeypatch.setattr(RunStore, "read_keys", no_read)
    monkeypatch.setattr(RunStore, "scan", no_read)
    rows, count = responses.page_rows(store, ALL, "reward", True, 0, 3)
    assert count == 10
    assert rows.get_column("source_line").to_list() == [f"a.jsonl:{n}" for n in (2, 3, 6)]
    assert rows.columns == [
        "source_line",
        "sample_id",
        *spec_cols[0],
        *spec_cols[1],
        *responses.PREVIEW_COLUMNS,
        *(
            "part",
            "row",
            "ends_with_end",
        ),  # how it ended (the end column), kept at ingest, or where to read it
    ]
    assert rows.get_column("response_preview").to_list() == ["r1", "r2", "r5"]
    responses.clear_caches()


def test_topk003_a_growing_run_many_commits(tmp_path, small_k):
    """A run read in many small commits (a partial last step hidden, files read again and their parts
    dropped): each commit's kept rows give the sorted scan's, or none; the whole read keeps them all; only
    the files of the last two commits stay beside the store."""
    root = tmp_path / "root"
    run = write_demo_run(root, "demo", steps=6, per_step=16)
    cache = tmp_path / "cache"
    store = open_store(ingest_run(run, cache, PADS).store_dir)
    assert _assert_same(store) > 0
    told = 0
    for store in growing_demo_stores(run, cache, tmp_path / "more", PADS):
        told += _assert_same(store)
    assert told > 0
    first = sorted(run.glob("*.jsonl"))[0]
    lines = first.read_bytes().splitlines(keepends=True)
    first.write_bytes(b"".join(lines[1:]))  # read again from 0: its parts dropped
    store = open_store(ingest_run(run, cache, PADS).store_dir)
    assert store.visible_below is None
    assert _assert_same(store, first=True) == 2 * len(responses.sortable_columns(store))
    on_disk = {p.name for p in store.dir.glob(topk.PATTERN)}
    assert store.manifest.derived["topk"].meta["file"] in on_disk
    assert len(on_disk) <= 2


def test_topk004_a_store_without_them_sorts_the_files(tmp_path, small_k, monkeypatch):
    """A store committed before this (no manifest entry), by a writer that does not keep them (parts not
    covered) or whose file was collected reads None, and the page's head is then the sorted scan's."""
    run = write_demo_run(tmp_path / "root", "demo", steps=4, per_step=8)
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    old = RunStore(store.dir, store.manifest.without("topk"))
    assert topk.head(old, "reward", True, 7) is None
    # An older writer's commit keeps the entry it does not know and adds parts it does not cover.
    m = store.manifest
    last = max(int(p) for p, e in m.parts.items() if e["rows"])
    entry = m.derived["topk"]
    stale = DerivedEntry(entry.name, {**entry.meta, "parts": topk._ranges(set(range(last)))})
    older = RunStore(store.dir, m.with_derived("topk", stale))
    assert topk.head(store, "reward", True, 7) is not None
    assert topk.head(older, "reward", True, 7) is None
    (store.dir / store.manifest.derived["topk"].meta["file"]).unlink()
    assert topk.head(store, "reward", True, 7) is None
    assert topk.first_rows(store, pl.DataFrame({"part": [0], "row": [0]}), ["sample_id"]) is None
    monkeypatch.setattr(search_order, "HEAD_ROWS", 7)
    responses.clear_caches()
    want = search_order._sorted_keys(store, ALL, "reward", True, 10.0).head(7).collect()
    assert_frame_equal(search_order.order_keys(store, ALL, "reward", True, 0, 7), want)
    responses.clear_caches()


def test_topk005_a_column_that_appears_later(tmp_path, small_k):
    """An extra field first seen in a later commit: the rows before it are null there and were never its
    candidates, so its first rows are kept only once they are 7 non-null values (nulls come last)."""
    run = tmp_path / "run"
    run.mkdir()
    f = run / "a.jsonl"

    def add(recs):
        with f.open("a") as out:
            out.write("".join(json.dumps(r) + "\n" for r in recs))

    add({"prompt": f"p{i}", "response": f"r{i}", "reward": i % 3, "step": 1 + i // 5} for i in range(20))
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    assert "score" not in store.schema()
    add({"prompt": "q", "response": "s", "reward": 1.0, "step": 5, "score": float(i)} for i in range(3))
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    assert store.manifest.derived["topk"].meta["columns"]["score"] is False
    assert topk.head(store, "score", True, 7) is None  # 3 values, then 4 of the nulls before it came
    assert _assert_same(store) == 2 * len(responses.sortable_columns(store)) - 2
    add({"prompt": "q", "response": "s", "reward": 1.0, "step": 6, "score": -float(i)} for i in range(6))
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    # The first blocks' rows of earlier commits are the kept ones (those parts are not read again).
    assert _assert_same(store, first=True) == 2 * len(responses.sortable_columns(store))
