"""The text index a regex search over every step scans (data.derived.text): written by ingest at each
commit in the store."""

from __future__ import annotations

import json

import polars as pl

from data import responses
from data.derived import text as text_index
from data.ingest import ingest_run
from data.queries import ResponseFilter
from data.search import engine as search_engine
from data.search import order as search_order
from data.search import texts as search_texts
from data.store import open_store

PADS = ("<pad>",)


def _write(run, name: str, rows: list[tuple[int, str, str]]) -> None:
    with open(run / name, "a") as f:
        for step, prompt, response in rows:
            f.write(json.dumps({"prompt": prompt, "response": response, "reward": 1.0, "step": step}) + "\n")


def _hits(store, q: str) -> list[tuple[str, str]]:
    """(prompt, response) of the responses of every step matching ``q``, sorted."""
    responses.clear_caches()
    keys = search_engine.text_hits(store, q, None, 30.0)
    got = store.read_keys(keys, ["prompt", "response"])
    return sorted(got.select("prompt", "response").iter_rows())


def _indexed(store) -> dict[str, int]:
    """Index files in the store, with their inode and mtime (a file rewritten changes them)."""
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (store.dir / "text").iterdir()}


def test_textindex001_each_commit_adds_its_own_parts(tmp_path):
    """A growing run: each ingest adds index files for its new files of parts/ only, leaves the earlier ones
    as they were, and every index file holds exactly its part file's texts."""
    run = tmp_path / "run"
    run.mkdir()
    _write(run, "rank0.jsonl", [(1, "p1", "alpha one"), (1, "p2", "beta")])
    _write(run, "rank1.jsonl", [(1, "p3", "alpha three")])
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    first = _indexed(store)
    assert sorted(first) == sorted(f"{p.parent.name}.{p.stem}.arrow" for p in store.part_files())
    assert _hits(store, "alpha") == [("p1", "alpha one"), ("p3", "alpha three")]

    _write(run, "rank0.jsonl", [(2, "p4", "ALPHA four"), (2, "p5", "alpha five")])
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    second = _indexed(store)
    assert {k: second[k] for k in first} == first and len(second) > len(first)
    assert sorted(second) == sorted(f"{p.parent.name}.{p.stem}.arrow" for p in store.part_files())
    for p in store.part_files():
        want = pl.read_parquet(p, columns=list(text_index.COLUMNS))
        want = want.with_columns(pl.col(c).cast(t) for c, t in text_index.KEY_TYPES.items())
        assert pl.read_ipc(text_index.in_store(store.dir, p)).equals(want)
    assert _hits(store, "(?i)alpha") == [
        ("p1", "alpha one"),
        ("p3", "alpha three"),
        ("p4", "ALPHA four"),
        ("p5", "alpha five"),
    ]


def test_textindex003_collected_with_its_part(tmp_path):
    """An index file whose file of parts/ is gone is removed; the others stay."""
    run = tmp_path / "run"
    run.mkdir()
    _write(run, "rank0.jsonl", [(1, "p1", "a")])
    _write(run, "rank1.jsonl", [(1, "p2", "b")])
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    parts = store.part_files()
    assert len(parts) == 2
    parts[0].unlink()
    text_index.collect_index(store.dir)
    assert [p.name for p in (store.dir / "text").iterdir()] == [text_index.in_store(store.dir, parts[1]).name]


def test_textindex004_filter_reads_the_index(tmp_path):
    """The page's all-steps filter with a pattern keeps exactly the lines whose response matches."""
    run = tmp_path / "run"
    run.mkdir()
    _write(run, "rank0.jsonl", [(s, f"p{s}", "x" * (s % 3)) for s in range(1, 30)])
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    responses.clear_caches()
    got = search_order.matching(store, ResponseFilter(step=None, q="xx"), ["line"]).collect()
    assert sorted(got.get_column("line")) == [s for s in range(1, 30) if s % 3 == 2]


def test_textindex005_refused_commit_leaves_no_index(tmp_path, monkeypatch):
    """A commit refused (another writer committed first) removes the index files it wrote with its parts,
    so a later part of the same name is never read through a stale index; earlier commits' files stay."""
    from data.ingest import writer as ingest_writer
    from data.store.table import CommitConflict

    run = tmp_path / "run"
    run.mkdir()
    _write(run, "rank0.jsonl", [(1, "p1", "alpha")])
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    first = _indexed(store)
    _write(run, "rank0.jsonl", [(2, "p2", "beta")])

    def refuse(*_a, **_k):
        raise CommitConflict("another writer committed first")

    monkeypatch.setattr(ingest_writer, "commit_table", refuse)
    assert ingest_run(run, tmp_path / "cache", PADS).lost_commit
    assert _indexed(store) == first


def test_textindex006_one_search_for_concurrent_callers(tmp_path, monkeypatch):
    """The summary and the first block asking for the same hits at once run one search; hits are kept up
    to HITS_KEPT rows in all (the oldest dropped first), and a search of more is not kept."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from data.cache import StoreKey

    run = tmp_path / "run"
    run.mkdir()
    _write(run, "rank0.jsonl", [(1, "p1", "alpha"), (1, "p2", "alpha beta"), (2, "p3", "beta")])
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    real, calls, lock = search_engine.engine()._search_texts, [], threading.Lock()

    def counted(key, pattern, step, seconds):
        with lock:
            calls.append(pattern)
        time.sleep(0.3)  # the thing under test: a slow search, long enough for the other caller to arrive
        return real(key, pattern, step, seconds)

    monkeypatch.setattr(search_engine.engine(), "_search_texts", counted)
    responses.clear_caches()
    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda _: search_engine.text_hits(store, "alpha", None, 30.0), range(2)))
    assert calls == ["alpha"] and got[0].equals(got[1]) and got[0].height == 2

    monkeypatch.setattr(search_engine, "HITS_KEPT", 3)
    responses.clear_caches()
    calls.clear()
    key = StoreKey(store)
    for q in ("alpha", "beta", "alpha", "beta", "a"):  # 2 + 2 rows > 3: alpha dropped; "a" (3 rows) kept
        search_engine.engine().hits(key, q, None, 30.0)
    assert calls == ["alpha", "beta", "alpha", "beta", "a"]
    search_engine.engine().hits(key, "a", None, 30.0)
    monkeypatch.setattr(search_engine, "HITS_KEPT", 2)
    search_engine.engine().hits(key, "a", None, 30.0)  # kept from before
    responses.clear_caches()
    search_engine.engine().hits(key, "a", None, 30.0)
    search_engine.engine().hits(key, "a", None, 30.0)  # 3 rows > 2: not kept, searched again
    assert calls == ["alpha", "beta", "alpha", "beta", "a", "a", "a"]


def test_textindex007_a_whole_index_is_looked_for_once_per_commit(tmp_path, monkeypatch):
    """The responses page warms the text index at each visit: once a commit's index was found whole,
    later visits start no look; a new commit is looked at again."""
    import threading

    from data import bounded

    run = tmp_path / "run"
    run.mkdir()
    _write(run, "a.jsonl", [(1, "p", "whales here"), (2, "q", "none")])
    looks = []
    real = search_texts.text_index_files
    monkeypatch.setattr(
        search_engine, "text_index_files", lambda store: looks.append(store.version) or real(store)
    )
    monkeypatch.setattr(bounded, "warm", lambda: None)

    def visit(store):
        search_engine.warm_text_index(store)
        for t in threading.enumerate():
            if t.name.startswith("text-index-"):
                t.join(10)

    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    for _ in range(3):
        visit(store)
    _write(run, "a.jsonl", [(3, "r", "more whales")])
    newer = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    visit(newer)
    visit(newer)
    assert looks == [store.version, newer.version]


def test_textindex008_engines_keep_their_own_state(tmp_path, monkeypatch):
    """A search engine's hits are its own: a second :class:`SearchEngine` searches again, and the process's
    engine is one object, looked up through :func:`data.search.engine.engine`."""
    from data.cache import StoreKey

    run = tmp_path / "run"
    run.mkdir()
    _write(run, "a.jsonl", [(1, "p", "whales here"), (2, "q", "none")])
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    key = StoreKey(store)
    one, two, calls = search_engine.SearchEngine(), search_engine.SearchEngine(), []
    for e in (one, two):
        real = e._search_texts
        monkeypatch.setattr(e, "_search_texts", lambda *a, real=real: calls.append(a[1]) or real(*a))
    assert one.hits(key, "whale", None, 30.0).height == 1
    assert one.hits(key, "whale", None, 30.0).height == 1  # kept by the first engine
    assert two.hits(key, "whale", None, 30.0).height == 1  # not by the second
    assert calls == ["whale", "whale"]
    assert search_engine.engine() is search_engine.engine()


def test_textindex009_workers_write_what_a_commit_would(tmp_path, monkeypatch):
    """Ingest's workers write each file of parts/'s text file from the rows they hold
    (``text.write_rows``): the commit reads no part back for them, and each holds exactly what the commit's
    read-back of that file (``text._write``) writes: the same Arrow schema and values, on the demo run
    read in several chunks, in two step blocks."""
    import pyarrow as pa

    from data.demo import write_demo_run
    from data.ingest import writer as ingest_writer

    monkeypatch.setattr(ingest_writer, "SMALL_BLOCK", 0)  # every block on a worker, none batched
    run = write_demo_run(tmp_path / "root", "demo", steps=70, per_step=4)  # two step blocks of 64
    read_back = []
    real = text_index._write
    monkeypatch.setattr(text_index, "_write", lambda src, dst: (read_back.append(src), real(src, dst)))
    store = open_store(ingest_run(run, tmp_path / "cache", PADS, chunk_bytes=64 << 10).store_dir)
    parts = store.part_files()
    assert len(parts) > 2 and len({p.parent.name for p in parts}) > 1
    assert read_back == []
    for p in parts:
        again = tmp_path / "again.arrow"
        real(p, again)
        with pa.memory_map(str(again)) as a, pa.memory_map(str(text_index.in_store(store.dir, p))) as b:
            want, got = pa.ipc.open_file(a).read_all(), pa.ipc.open_file(b).read_all()
        assert got.schema.equals(want.schema, check_metadata=True) and got.equals(want)
        assert got.num_rows == pl.read_parquet(p, columns=["row"]).height
