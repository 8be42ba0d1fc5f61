"""The footers' facts a commit keeps beside the store (data.store.index.write_facts): a fresh reader
builds the same index from them without reading a footer, and reads the footer of a file that changed."""

from __future__ import annotations

import os

import pytest

from data.demo import write_demo_run
from data.ingest import ingest_run
from data.store import index as store_index
from data.store import open_store
from data.store.index import build_index
from data.store.reader import forget_indexes

PADS = ("<pad>", "<|endoftext|>")


def _fresh_index(store):
    forget_indexes()
    m = store.manifest
    return build_index(store.dir, m.parts, m.packs, m.derived_name("facts"))


def test_facts001_a_fresh_reader_reads_no_footer(tmp_path, monkeypatch):
    """With the kept facts, the index of a fresh process is the footers' own, and no footer is read."""
    run = write_demo_run(tmp_path / "root", "demo", steps=10, per_step=16)
    store = open_store(ingest_run(run, tmp_path / "cache", PADS, chunk_bytes=40_000).store_dir)
    name = store.manifest.derived["facts"].name
    assert (store.dir / name).exists()
    assert len(list(store.dir.glob("facts-g*.json"))) <= 2  # this commit's and the one before
    from_footers = build_index(store.dir, store.manifest.parts, store.manifest.packs, None)
    assert from_footers.segments
    with monkeypatch.context() as m:
        m.setattr(store_index, "_read_facts", lambda *a: (_ for _ in ()).throw(AssertionError("footer read")))
        kept = _fresh_index(store)
    assert kept.segments == from_footers.segments
    assert kept.sources == from_footers.sources


def test_facts002_a_changed_file_is_read_again(tmp_path, monkeypatch):
    """A file whose size or time is not the one kept has its footer read (the kept facts are not trusted)."""
    run = write_demo_run(tmp_path / "root", "demo", steps=4, per_step=16)
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    seg = store.index().segments[0]
    path = store.dir / "scalars" / seg.file
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    read = []
    real = store_index._read_facts
    monkeypatch.setattr(store_index, "_read_facts", lambda p, part: read.append(p.name) or real(p, part))
    _fresh_index(store)
    assert read == [seg.file]


def test_facts003_files_of_one_schema_share_it(tmp_path):
    """The kept facts (JSON, never a pickle) hold one copy of a schema that many files share (read back
    as one object), and the index built from them is the footers' own."""
    run = write_demo_run(tmp_path / "root", "demo", steps=12, per_step=64, ranks=5)
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    kept = store_index.facts_from_json((store.dir / store.manifest.derived["facts"].name).read_bytes())
    schemas = [facts.schema for _, _, facts in kept.values()]
    assert len(schemas) > 3
    assert len({id(s) for s in schemas}) == len(set(schemas))  # one object per distinct schema
    from_footers = build_index(store.dir, store.manifest.parts, store.manifest.packs, None)
    assert _fresh_index(store).segments == from_footers.segments


@pytest.fixture(autouse=True)
def _forget():
    yield
    forget_indexes()


def test_facts004_kept_facts_read_back_equal_infinite_bounds_too():
    """The kept facts read back equal to what was written, also where a column's bounds are infinite (a
    reward of inf: written as ``Infinity``, which the fast parser refuses and the standard one reads)."""
    import math

    import polars as pl

    from data.store.index import FileFacts, PartRange

    schema = (("reward", pl.Float64), ("step", pl.Int64))
    parts = {3: PartRange(10, 0, 4, 1, 10)}
    for lo, hi in ((-1.5, 2.25), (-math.inf, math.inf), (None, None)):
        facts = {("a.parquet", 3): (1234, 1_700_000_000_123_456_789, FileFacts(schema, 10, parts, {"reward": 0}, {"reward": (lo, hi, 2)}))}  # fmt: skip
        back = store_index.facts_from_json(store_index.facts_to_json(facts))
        assert back == facts


def test_facts005_the_workers_read_what_the_commit_keeps(tmp_path, monkeypatch):
    """Each worker reads the facts of the scalars file it wrote (its footer and bounds) into the process's
    cache: the commits read none, and what they keep is what a fresh read of every file gives."""
    import threading

    from data.ingest import writer as ingest_writer

    monkeypatch.setattr(ingest_writer, "SMALL_BLOCK", 0)  # every part on a worker, none batched
    run = write_demo_run(tmp_path / "root", "demo", steps=10, per_step=16)
    read_on: list[str] = []
    real = store_index._bounds

    def bounds(*a):
        read_on.append(threading.current_thread().name)
        return real(*a)

    monkeypatch.setattr(store_index, "_bounds", bounds)
    store = open_store(ingest_run(run, tmp_path / "cache", PADS, chunk_bytes=40_000).store_dir)
    loose = [k for k, e in store.manifest.parts.items() if e["rows"]]
    assert len(loose) > 2 and not store.manifest.packs
    assert len(read_on) == len(loose) and all(t.startswith("ingest-writer") for t in read_on), read_on
    kept = store_index._kept_facts(store.dir, store.manifest.derived_name("facts"))
    store_index._FACTS.clear()
    for (file, part), (size, mtime, facts) in kept.items():
        path = store.dir / "scalars" / file
        assert (size, mtime) == (path.stat().st_size, path.stat().st_mtime_ns)
        assert facts == store_index.file_facts(path, part, bounds=True)
    assert len(kept) == len(loose)
