"""A search over every step: its first block from the top of the reward order kept at ingest
(data.derived.text.write_top, data.responses.fast_keys), equal to the whole search's first rows on real
runs, the demo, by hand and across commits; its count in the background (data.responses.count_or_progress),
equal to the count and mean of the search itself."""

from __future__ import annotations

import json

import polars as pl
import pytest

from data import responses
from data.derived import text as text_index
from data.ingest import ingest_run, writer
from data.queries import ResponseFilter
from data.search import engine as search_engine
from data.search import order as search_order
from data.search import texts as search_texts
from data.store import open_store
from data.store.manifest import DerivedEntry
from data.store.reader import RunStore
from tests.conftest import FIXTURE_RUNS, fixture_or_demo
from tests.waiting import wait_until

PADS = ("<pad>", "<|endoftext|>")
PATTERNS = ("(?i)the", "(?i)answer|step", "\\d{3}", "zzq_none_zzq", "a")


def _without_top(store) -> RunStore:
    return RunStore(store.dir, store.manifest.without("texttop"))


def _whole(store, q: str) -> pl.DataFrame:
    """``part, row`` of every match of ``q`` in the default order, by the search over every text."""
    responses.clear_caches()
    return search_order._sorted_keys(_without_top(store), ResponseFilter(q=q), "reward", True, 30.0).collect()


def _fast(store, q: str, end: int = search_order.HEAD_ROWS):
    responses.clear_caches()
    return search_order.fast_keys(store, ResponseFilter(q=q), "reward", True, 0, end, 30.0)


def _assert_prefix(store, q: str) -> None:
    want = _whole(store, q)
    got = _fast(store, q)
    if got is None:  # fewer matches in the top than a head: a block within them still comes from it
        entry = store.manifest.derived["texttop"].meta
        assert entry["rows"] < entry["of"]
        keys, _ = search_texts._fast_head(responses.StoreKey(store), q, 30.0)
        assert keys.height < search_order.HEAD_ROWS
        got = _fast(store, q, keys.height)
    keys, count = got
    assert keys.height > 0 or want.height == 0 or count is None
    assert keys.equals(want.head(keys.height))
    if count is not None:
        assert count == want.height == keys.height or keys.height == search_order.HEAD_ROWS


@pytest.mark.parametrize("top_rows", [text_index.TOP_ROWS, 40])
@pytest.mark.parametrize(
    "run",
    ["trl-ppo-small", "real-verl-gsm8k-tools", "real-verifiers-math-python", "trl-grpo-completions", None],
)
def test_fastsearch001_first_block_is_the_whole_searchs(fixtures_dir, tmp_path, monkeypatch, run, top_rows):
    """On real runs (ties of 0/1 rewards, NaN-free and not) and the demo, with the whole run in the top or
    only its first 40 rows: the first matches read from the top equal the first rows of the search over
    every text, for frequent, rare and unmatched patterns."""
    monkeypatch.setattr(text_index, "TOP_ROWS", top_rows)
    src = fixture_or_demo(fixtures_dir, tmp_path / "root", run, steps=10)
    store = open_store(ingest_run(src, tmp_path / "cache", PADS).store_dir)
    entry = store.manifest.derived["texttop"].meta
    assert entry["rows"] == min(top_rows, entry["of"])
    for q in PATTERNS:
        _assert_prefix(store, q)


def _write(run, name: str, recs: list[tuple[int, float, str]]) -> None:
    with open(run / name, "a") as f:
        for step, reward, response in recs:
            f.write(json.dumps({"prompt": "p", "response": response, "reward": reward, "step": step}) + "\n")


def test_fastsearch002_by_hand_across_commits(tmp_path, monkeypatch):
    """A top of 3 rows over two commits: after the second it holds the run's 3 best rows (ties by sample
    id), and a search's first matches are those worked out by hand; blocks beyond what it holds wait for
    the whole search (None here)."""
    monkeypatch.setattr(text_index, "TOP_ROWS", 3)
    run = tmp_path / "run"
    run.mkdir()
    _write(run, "a.jsonl", [(1, 1.0, "cat one"), (1, 5.0, "dog"), (1, 2.0, "cat two"), (1, 4.0, "cat four")])
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    top = pl.read_ipc(store.dir / store.manifest.derived["texttop"].meta["name"])
    assert top.get_column("reward").to_list() == [5.0, 4.0, 2.0]
    _write(run, "b.jsonl", [(2, 4.5, "cat late"), (2, 9.0, "bird"), (2, 2.0, "cat tie")])
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    entry = store.manifest.derived["texttop"].meta
    assert (entry["rows"], entry["of"]) == (3, 7)
    top = pl.read_ipc(store.dir / entry["name"])
    assert top.get_column("response").to_list() == ["bird", "dog", "cat late"]
    keys, count = _fast(store, "cat", 1)
    assert count is None
    assert store.read_keys(keys, ["response"]).get_column("response").to_list() == ["cat late"]
    assert _fast(store, "cat", 2) is None  # "cat four" (4.0) is not in the top: the search reads every text
    assert search_order.fast_keys(store, ResponseFilter(q="cat"), "reward", False, 0, 1, 30.0) is None
    assert search_order.fast_keys(store, ResponseFilter(q="cat", step=1), "reward", True, 0, 1, 30.0) is None
    whole = store.read_keys(_whole(store, "cat"), ["response", "sample_id"])
    assert whole.get_column("response").to_list()[:2] == ["cat late", "cat four"]
    ties = whole.slice(2, 2)  # both at 2.0: by sample id
    assert set(ties.get_column("response")) == {"cat two", "cat tie"}
    assert ties.get_column("sample_id").is_sorted()
    assert whole.get_column("response").to_list()[4:] == ["cat one"]


def _count(store, flt):
    """The background count's result once it is done, and the progress seen meanwhile."""
    seen = []

    def done():
        got = search_order.count_or_progress(store, flt, 30.0)
        if isinstance(got, search_order.Order):
            return got
        seen.append(got)
        return None

    return wait_until(done, 120, "the background count to finish"), seen


@pytest.mark.parametrize("run", ["trl-ppo-small", None])
def test_fastsearch003_background_count_is_the_searchs(fixtures_dir, tmp_path, monkeypatch, run):
    """The count of a search over every step, run in the background (read a file at a time here, so its
    progress shows), equals the count and mean reward of the search itself; a search that fits the top
    gives the grid its count at once."""
    monkeypatch.setattr(search_engine, "CHUNK_FILES", 1)
    src = fixture_or_demo(fixtures_dir, tmp_path / "root", run, steps=10)
    store = open_store(ingest_run(src, tmp_path / "cache", PADS).store_dir)
    for q in ("(?i)the", "zzq_none_zzq"):
        flt = ResponseFilter(q=q)
        responses.clear_caches()
        got, seen = _count(store, flt)
        assert all(0 <= c.share <= 1 and c.scope == got.scope for c in seen)
        responses.clear_caches()
        assert got == search_order.ordered(store, flt)
        rows, count = responses.page_rows(store, flt, "reward", True, 0, 100, 30.0)
        assert count == got.count and rows.height == min(100, got.count)


def test_fastsearch004_rewritten_files_and_shared_part_files(tmp_path):
    """Many small files (parts written together in shared files of parts/), then one file rewritten (its
    old part dropped, its rows still in a shared file) and one added: the first matches read from the top
    still equal the search over every text, and name no row of a dropped part."""
    run = tmp_path / "run"
    run.mkdir()
    for i in range(20):  # at least SHARE_AT small files: written together
        _write(
            run, f"r{i}.jsonl", [(1 + i % 3, float(i * 7 % 5), f"cat {i} a"), (2, float(i % 4), f"dog {i}")]
        )
    ingest_run(run, tmp_path / "cache", PADS)
    (run / "r3.jsonl").write_text("")
    _write(run, "r3.jsonl", [(1, 9.0, "cat rewritten"), (3, 0.5, "bird")])
    _write(run, "r9.jsonl", [(3, 4.0, "cat new"), (3, 9.0, "dog new")])
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    assert store.shares_files()
    for q in ("cat", "dog|bird", "(?i)CAT 3"):
        want = _whole(store, q)
        keys, count = _fast(store, q)
        assert keys.equals(want) and count == want.height
        assert set(keys.get_column("part").to_list()) <= set(store.part_ids())
    got = store.read_keys(_fast(store, "cat")[0], ["response"]).get_column("response").to_list()
    assert got[0] == "cat rewritten" and "cat 3 a" not in got


def test_fastsearch005_another_workers_count_is_shown_not_run_again(tmp_path):
    """A worker that finds another worker's fresh note of the same count under way shows its progress and
    starts no search of its own; once the count is in the shared results cache, it shows the count."""
    from pathlib import Path

    from data.cache import StoreKey, results

    run = tmp_path / "run"
    run.mkdir()
    _write(run, "a.jsonl", [(1, 1.0, "cat"), (1, 2.0, "dog"), (2, 3.0, "cat again")])
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    flt = ResponseFilter(q="cat")
    responses.clear_caches()
    key = StoreKey(store)
    disk = results(Path(store.dir).parent)
    disk.set(("search-progress", *key.key, "cat"), (3, 8, -1), expire=10)  # pid -1: not this process
    got = search_order.count_or_progress(store, flt, 30.0)
    assert got == search_order.Counting(3, 8, 3)
    assert not [m for m in search_engine.engine().running_jobs() if m[0] == key]
    want = search_order.ordered(store, flt, seconds=30.0)  # what the other worker stores when done
    assert want.count == 2
    assert search_order.count_or_progress(store, flt, 30.0) == want


def _block_from_parts(store, q: str, start: int, end: int) -> pl.DataFrame:
    """The grid's block ``start:end`` of a search over every step as main read it: the rows read from the
    parts (``RunStore.read_keys``), for the keys the top file gives."""
    responses.clear_caches()
    top = store.manifest.derived["texttop"]
    entry = {k: v for k, v in top.meta.items() if k != text_index.BLOCK_KEY}
    plain = RunStore(store.dir, store.manifest.with_derived("texttop", DerivedEntry(top.name, entry)))
    return responses._block(responses.StoreKey(plain), ResponseFilter(q=q), "reward", True, start, end, 30.0)


def _no_part_reads(monkeypatch) -> None:
    def refuse(self, part, rows, columns=None):
        raise AssertionError(f"read part {part}")

    monkeypatch.setattr(RunStore, "read_rows", refuse)


@pytest.mark.parametrize("run", [*FIXTURE_RUNS, None])
def test_fastsearch006_block_from_the_top_file_reads_no_part(fixtures_dir, tmp_path, monkeypatch, run):
    """On every fixture run and the demo (for the demo, a second commit over a top file written before it
    kept the block's columns, which the old store reads from the parts): the blocks of a search over every
    step that the top file holds are read from it, not from a part, and equal the blocks read from the
    parts, every column and type, for frequent, rare and unmatched patterns."""
    monkeypatch.setattr(text_index, "TOP_ROWS", 60)  # blocks beyond the top: from the parts, as before
    if run is None:
        src = fixture_or_demo(fixtures_dir, tmp_path / "root", None, steps=6)
        with monkeypatch.context() as m:
            m.setattr(writer, "_top_block", lambda store_dir, data: None)  # an older writer
            old = open_store(ingest_run(src, tmp_path / "cache", PADS).store_dir)
        assert text_index.BLOCK_KEY not in old.manifest.derived["texttop"].meta
        keys = search_order.fast_keys(old, ResponseFilter(q="a"), "reward", True, 0, 7, 30.0)[0]
        assert keys.height == 7 and search_texts._top_rows(old, keys, ["reward"]) is None
        from data.demo import write_demo_run

        write_demo_run(tmp_path / "root", "demo", steps=12, per_step=16)  # the same run, six more steps
    else:
        src = fixture_or_demo(fixtures_dir, tmp_path / "root", run, steps=10)
    store = open_store(ingest_run(src, tmp_path / "cache", PADS).store_dir)
    entry = store.manifest.derived["texttop"].meta
    assert entry[text_index.BLOCK_KEY] and entry["rows"] == min(60, entry["of"])
    fast = 0
    for q in (*PATTERNS, "的"):
        for start, end in ((0, 100), (0, 7), (7, 20)):
            want = _block_from_parts(store, q, start, end)
            with monkeypatch.context() as m:
                if (
                    search_order.fast_keys(store, ResponseFilter(q=q), "reward", True, start, end, 30.0)
                    is None
                ):
                    continue  # beyond the matches the top holds: read from the parts, as before
                fast += 1
                _no_part_reads(m)
                responses.clear_caches()
                got = responses._block(
                    responses.StoreKey(store), ResponseFilter(q=q), "reward", True, start, end, 30.0
                )
            assert got.schema == want.schema
            assert got.equals(want), (q, start, end)
    assert fast >= 2


def test_fastsearch007_count_poll_reads_three_summary_columns(tmp_path, monkeypatch):
    """The count's scope (each poll's "of N responses") and the unfiltered view's count and mean come from
    the steps summary's n and finite reward sums alone: with the whole summary made unreadable they equal
    those worked out from the whole summary."""
    src = fixture_or_demo(tmp_path, tmp_path / "root", None, steps=4)
    store = open_store(ingest_run(src, tmp_path / "cache", PADS).store_dir)
    want = search_order.all_steps_reward(store.steps())
    assert want is not None and want.scope == 64

    def refuse(self):
        raise AssertionError("read the whole steps summary")

    monkeypatch.setattr(RunStore, "steps", refuse)
    responses.clear_caches()
    assert search_order.ordered(store, ResponseFilter()) == want
    flt = ResponseFilter(q="zzq_none_zzq")
    got, seen = _count(store, flt)
    assert got.count == 0 and got.scope == want.scope
    assert all(c.scope == want.scope for c in seen)
