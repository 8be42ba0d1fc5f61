"""The stores' bucket (``--cache-dir s3://…``) deleted and re-created while replicas use it, against a real
S3-protocol server (moto's server on loopback): a replica whose commits the bucket no longer holds rebuilds
or mirrors again and says so, and a fresh replica then loads the store with every row (issue 33, row 10:
it failed with a ``FileNotFoundError`` traceback)."""

from __future__ import annotations

import logging
from pathlib import Path

import orjson
import pytest

from data.config import load_settings
from data.ingest import ingest_run
from data.store import open_store, scan_root
from data.store import shared as shared_module
from tests.integration.test_object_store import S3

STORES = "stores-recreated"  # a bucket of its own: this module deletes it (moto keeps one state per process)


@pytest.fixture(scope="module")
def s3():
    server = S3().start()
    server.client.create_bucket(Bucket=STORES)
    try:
        yield server
    finally:
        server.stop()


def _recreate(s3: S3) -> None:
    """Delete the stores' bucket with everything in it, and create it again, empty."""
    pages = s3.client.get_paginator("list_objects_v2").paginate(Bucket=STORES)
    for page in pages:
        for o in page.get("Contents", []):
            s3.client.delete_object(Bucket=STORES, Key=o["Key"])
    s3.client.delete_bucket(Bucket=STORES)
    s3.client.create_bucket(Bucket=STORES)


def _lines(first: int, n: int) -> bytes:
    return b"".join(
        orjson.dumps({"prompt": f"p{i}", "response": f"r{i}", "reward": i / 10, "step": i}) + b"\n"
        for i in range(first, first + n)
    )


def _run(tmp_path: Path) -> Path:
    run = tmp_path / "root" / "r"
    run.mkdir(parents=True)
    (run / "rank0.jsonl").write_bytes(_lines(1, 6))
    return run


def _replica(s3: S3, root: Path, prefix: str, work: Path):
    env = {**s3.env, "RLBOARD_DEMO": "0", "RLBOARD_WORK_DIR": str(work)}
    settings = load_settings(environ=env, root=str(root), cache_dir=f"s3://{STORES}/{prefix}")
    run_dir = scan_root(settings.root).runs["r"]
    return lambda: ingest_run(run_dir, settings.cache_dir, settings.pad_tokens, shared=settings.shared)


def test_recreated001_bucket_recreated_under_a_running_replica(s3, tmp_path):
    """A replica ingests a run; the bucket is deleted and re-created empty; the run grows and the replica
    reads on: it finds its commit gone, rebuilds the store from the rollout files (every row) and says so on
    the runs page (the manifest's notes); a fresh replica then mirrors it with every row."""
    run = _run(tmp_path)
    one = _replica(s3, run.parent, "a", tmp_path / "w1")
    assert one().samples == 6
    _recreate(s3)
    with open(run / "rank0.jsonl", "ab") as f:
        f.write(_lines(7, 4))
    res = one()
    assert (res.samples, res.steps, res.lost) == (10, 10, False)
    fresh = _replica(s3, run.parent, "a", tmp_path / "w2")()
    assert (fresh.samples, fresh.steps, fresh.new_rows, fresh.bytes_read) == (10, 10, 0, 0)
    notes = open_store(res.store_dir).manifest.problems
    assert any(
        n.startswith("Store rebuilt from the rollout files: generation 1, which this copy held, is gone")
        for n in notes
    ), notes
    assert open_store(fresh.store_dir).manifest.problems == notes  # the note goes with the store


def test_recreated002_copy_of_an_older_bucket_mirrors_again(s3, tmp_path, monkeypatch, caplog):
    """The bucket is re-created and another replica commits generation 1 there; a replica restarted with a
    local copy of the old bucket's generation 1 (its record says it holds that generation) finds another
    commit in its place, drops its copy and mirrors the bucket's before it reads on; a fresh replica then
    loads the store the restarted one committed next, with every row."""
    run = _run(tmp_path)
    one = _replica(s3, run.parent, "b", tmp_path / "w1")
    assert one().samples == 6
    _recreate(s3)
    two = _replica(s3, run.parent, "b", tmp_path / "w2")
    assert two().samples == 6
    with caplog.at_level(logging.WARNING, logger="data.store.shared"):
        assert two().generation == 1  # its own commit, as the bucket lists it: kept, nothing said
    assert not caplog.records
    with open(run / "rank0.jsonl", "ab") as f:
        f.write(_lines(7, 4))
    monkeypatch.setattr(shared_module, "_SEEN", {})  # one restarted: it has seen nobody commit
    with caplog.at_level(logging.WARNING, logger="data.store.shared"):
        res = one()
    assert (res.samples, res.new_rows, res.generation, res.lost) == (10, 4, 2, False)
    assert "generation 1, which this copy held, is another commit" in caplog.text
    fresh = _replica(s3, run.parent, "b", tmp_path / "w3")()
    assert (fresh.samples, fresh.steps, fresh.generation, fresh.bytes_read) == (10, 10, 2, 0)


def test_recreated003_commit_naming_missing_objects_passed_over(s3, tmp_path):
    """The bucket's last commit names objects it does not hold (what a replica of an older version left,
    committing on into a re-created bucket): a fresh replica does not fail on it; it rebuilds the store
    from the rollout files above that generation, says so, and the next fresh replica mirrors that."""
    run = _run(tmp_path)
    one = _replica(s3, run.parent, "c", tmp_path / "w1")
    assert one().generation == 1
    pages = s3.client.get_paginator("list_objects_v2").paginate(Bucket=STORES, Prefix="c/")
    for page in pages:
        for o in page.get("Contents", []):
            if "/_objects/" in o["Key"]:
                s3.client.delete_object(Bucket=STORES, Key=o["Key"])
    res = _replica(s3, run.parent, "c", tmp_path / "w2")()
    assert (res.samples, res.generation) == (6, 2)
    notes = open_store(res.store_dir).manifest.problems
    assert any("the bucket's last commit (generation 1) names objects it does not hold" in n for n in notes)
    fresh = _replica(s3, run.parent, "c", tmp_path / "w3")()
    assert (fresh.samples, fresh.generation, fresh.bytes_read) == (6, 2, 0)


def test_recreated004_stores_bucket_key_the_client_cannot_name(s3, tmp_path):
    """A key with a ``..`` segment among a store's commits on the bucket: replicas still list the commits
    past it, and a fresh one mirrors the store (on main: 'object store error: … invalid path')."""
    run = _run(tmp_path)
    one = _replica(s3, run.parent, "d", tmp_path / "w1")
    store = one().store_dir.name
    s3.client.put_object(Bucket=STORES, Key=f"d/{store}/_commits/../x.json", Body=b"{}")
    s3.client.put_object(Bucket=STORES, Key=f"d/{store}/_commits//y.json", Body=b"{}")
    assert one().generation == 1
    fresh = _replica(s3, run.parent, "d", tmp_path / "w2")()
    assert (fresh.samples, fresh.generation, fresh.bytes_read) == (6, 1, 0)
