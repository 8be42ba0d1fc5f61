"""Run stores on object storage (``--cache-dir s3://bucket/prefix``) shared by replicas, against a real
S3-protocol server (moto's server on loopback): a store ingested from a root on the bucket is committed
there; a replica with a fresh working copy serves it without ingesting it; two replicas racing to commit
the same generation: exactly one commit wins (put-if-absent), the rows are there once."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import orjson
import pytest
import requests

from data.config import DEFAULT_PAD_TOKENS, load_settings
from data.demo import write_demo_run
from data.ingest import ingest_run
from data.store import open_store, scan_root
from data.store import shared as shared_module
from data.store.shared import COMMITS, OBJECTS, SharedStores
from tests.integration.test_gunicorn import PAGES, GunicornServer
from tests.integration.test_object_store import BUCKET, RUN, S3, _cli, _csv, _export, _local_export, _rows
from tests.integration.test_unreadable_root import _assert_clean_log, _render
from tests.waiting import wait_until

STORES = "stores"


@pytest.fixture(scope="module")
def s3():
    server = S3().start()
    server.client.create_bucket(Bucket=STORES)
    try:
        yield server
    finally:
        server.stop()


def _settings(s3: S3, root: str, cache: str, work: Path):
    env = {**s3.env, "RLBOARD_DEMO": "0", "RLBOARD_WORK_DIR": str(work)}
    return load_settings(environ=env, root=root, cache_dir=cache)


def _keys(s3: S3, prefix: str) -> list[str]:
    pages = s3.client.get_paginator("list_objects_v2").paginate(Bucket=STORES, Prefix=prefix)
    return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


def _commits(s3: S3, prefix: str) -> list[str]:
    return [k.rsplit("/", 1)[-1] for k in _keys(s3, prefix) if f"/{COMMITS}/" in k]


def _settled(s3: S3, prefix: str) -> list[str] | None:
    """The bucket's commits once the latest one shows every step (its manifest hides none), else None."""
    keys = [k for k in _keys(s3, prefix) if f"/{COMMITS}/" in k]
    if not keys:
        return None
    latest = orjson.loads(s3.client.get_object(Bucket=STORES, Key=keys[-1])["Body"].read())
    return [k.rsplit("/", 1)[-1] for k in keys] if latest["manifest"].get("visible_below") is None else None


def _ingest(settings, run_dir):
    return ingest_run(run_dir, settings.cache_dir, settings.pad_tokens, shared=settings.shared)


def test_shared001_settings(s3, tmp_path):
    """--cache-dir (or RLBOARD_CACHE_DIR) s3://… puts the stores on the bucket and their working copies in a
    folder of RLBOARD_WORK_DIR named after the URL and endpoint (a local --cache-dir stays the cache); a
    URL obstore cannot open is said as the setting's problem."""
    from data.config import SettingsError

    s = _settings(s3, str(tmp_path), f"s3://{STORES}/a/", tmp_path / "work")
    assert s.store_url == f"s3://{STORES}/a" and s.shared == SharedStores(f"s3://{STORES}/a", s.storage)
    assert s.cache_dir.parent == tmp_path / "work" and s.cache_dir.name.startswith(f"{STORES}_a-")
    other = load_settings(
        environ={**s3.env, "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "RLBOARD_WORK_DIR": str(tmp_path)},
        cache_dir=f"s3://{STORES}/a",
    )
    assert other.cache_dir != s.cache_dir  # the same name on another server: another copy
    env = {**s3.env, "RLBOARD_CACHE_DIR": f"s3://{STORES}/b"}
    assert load_settings(environ=env).store_url == f"s3://{STORES}/b"
    local = load_settings(environ=env, cache_dir=str(tmp_path / "c"))
    assert (local.store_url, local.shared, local.cache_dir) == (None, None, tmp_path / "c")
    with pytest.raises(SettingsError, match="--cache-dir='s3://x/y': cannot open s3://x/y"):
        load_settings(environ={"AWS_ACCESS_KEY_ID": "id"}, cache_dir="s3://x/y")  # no secret


def test_shared002_ingest_then_replica_mirrors(s3, demo_run, tmp_path):
    """A run on the bucket ingested into a store on the bucket: the commit object and the store's files are
    there; a replica with a fresh working copy gets the same store from it (same export, byte for byte, as a
    local ingest) and reads nothing of the run and commits nothing."""
    s3.upload(demo_run, f"h/{RUN}")
    one = _settings(s3, f"s3://{BUCKET}/h", f"s3://{STORES}/h", tmp_path / "w1")
    run_dir = scan_root(one.root).runs[RUN]
    res = _ingest(one, run_dir)
    assert (res.samples, res.steps, res.new_rows, res.lost) == (384, 12, 384, False)
    assert _commits(s3, "h/") == ["000000000001.json"]
    names = {k.split(f"/{OBJECTS}/", 1)[1].split("/", 1)[1] for k in _keys(s3, "h/") if f"/{OBJECTS}/" in k}
    local_files = {
        f.relative_to(res.store_dir).as_posix()
        for f in res.store_dir.rglob("*")
        if f.is_file() and not any(part.startswith(".") for part in f.relative_to(res.store_dir).parts)
    }
    assert names == local_files - {"manifest.json"}  # every file of the store folder, as it is named there
    assert any(n.startswith("_delta_log/") for n in names) and any(n.startswith("parts/") for n in names)
    # The text index a regex search over every step reads (data.derived.text) goes with the store.
    assert sum(n.startswith("text/") for n in names) == sum(n.startswith("parts/") for n in names)
    local = _local_export(demo_run, tmp_path / "local-cache")
    assert _csv(res.store_dir) == local
    two = _settings(s3, f"s3://{BUCKET}/h", f"s3://{STORES}/h", tmp_path / "w2")
    assert two.cache_dir != one.cache_dir
    replica = _ingest(two, run_dir)
    assert (replica.samples, replica.new_rows, replica.bytes_read, replica.generation) == (384, 0, 0, 1)
    assert _csv(replica.store_dir) == local
    assert len(list((replica.store_dir / "text").glob("*.arrow"))) == len(
        open_store(replica.store_dir).part_files()
    )
    assert _commits(s3, "h/") == ["000000000001.json"]


def test_shared003_grown_run_mirrored_incrementally(s3, demo_run, tmp_path):
    """A run that grows is committed as a new generation holding only the new files; a replica holding the
    last generation downloads only those (its other files stay as they were) and exports what the writer
    does. An object no commit names any more (a steps summary of two generations ago) is deleted one
    generation after its last commit, as the local copy's file is."""
    lines = (demo_run / "rank0.jsonl").read_bytes().splitlines(keepends=True)
    s3.put(f"i/{RUN}/rank0.jsonl", b"".join(lines[:100]))
    one = _settings(s3, f"s3://{BUCKET}/i", f"s3://{STORES}/i", tmp_path / "w1")
    two = _settings(s3, f"s3://{BUCKET}/i", f"s3://{STORES}/i", tmp_path / "w2")
    run_dir = scan_root(one.root).runs[RUN]
    assert _ingest(one, run_dir).samples == 100
    first = _ingest(two, run_dir)
    kept = {p: p.stat().st_mtime_ns for p in (first.store_dir / "parts").rglob("*") if p.is_file()}
    assert kept
    s3.put(f"i/{RUN}/rank1.jsonl", (demo_run / "rank1.jsonl").read_bytes())
    grown = _ingest(one, run_dir)
    assert (grown.samples, grown.new_rows, grown.generation) == (100 + 192, 192, 2)
    mirrored = _ingest(two, run_dir)
    assert (mirrored.new_rows, mirrored.generation) == (0, 2)
    assert {p: p.stat().st_mtime_ns for p in kept} == kept  # not downloaded again
    assert _csv(mirrored.store_dir) == _csv(grown.store_dir)
    steps1 = [k for k in _keys(s3, "i/") if k.rsplit("/", 1)[-1].startswith("steps-g000001")]
    assert len(steps1) == 1
    s3.put(f"i/{RUN}/rank0.jsonl", b"".join(lines))
    assert _ingest(one, run_dir).generation == 3  # its local steps-g000001 collected: not named by 3
    assert steps1[0] in _keys(s3, "i/")  # kept for a replica still mirroring generation 2
    extra = write_demo_run(tmp_path / "extra", RUN, steps=12, per_step=32, ranks=3, seed=1)
    s3.put(f"i/{RUN}/rank9.jsonl", (extra / "rank2.jsonl").read_bytes())
    last = _ingest(one, run_dir)
    assert (last.generation, last.samples) == (4, 384 + 120)
    assert steps1[0] not in _keys(s3, "i/")
    mirrored = _ingest(two, run_dir)
    assert (mirrored.new_rows, mirrored.generation) == (0, 4)
    assert _csv(mirrored.store_dir) == _csv(last.store_dir)


class _Racing(SharedStores):
    """A replica whose commit waits at a barrier for the other's: both commit the same generation at once."""

    barrier: threading.Barrier | None = None

    def publish(self, store_dir, manifest):
        type(self).barrier.wait(timeout=60)
        return super().publish(store_dir, manifest)


def test_shared004_two_replicas_race_one_commit_wins(s3, demo_run, tmp_path, monkeypatch):
    """Two replicas ingest the same new run at the same time and commit generation 1 together: exactly one
    commit is written, the other replica drops its work (its uploads deleted) and holds the winner's store;
    both export the run's 384 rows once, as a local ingest does. The loser leaves the run's next lines to
    the winner while it commits (mirroring them), and reads them itself once the winner has been quiet for
    LEASE_SECONDS."""
    s3.upload(demo_run, f"j/{RUN}")
    _Racing.barrier = threading.Barrier(2)
    replicas = [_settings(s3, f"s3://{BUCKET}/j", f"s3://{STORES}/j", tmp_path / f"w{i}") for i in (1, 2)]
    run_dir = scan_root(replicas[0].root).runs[RUN]
    results = [None, None]

    def ingest(i: int) -> None:
        s = replicas[i]
        results[i] = ingest_run(
            run_dir, s.cache_dir, DEFAULT_PAD_TOKENS, shared=_Racing(s.store_url, s.storage)
        )

    threads = [threading.Thread(target=ingest, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(r.lost for r in results) == [False, True]
    assert _commits(s3, "j/") == ["000000000001.json"]
    writers = {k.split(f"/{OBJECTS}/", 1)[1].split("/", 1)[0] for k in _keys(s3, "j/") if f"/{OBJECTS}/" in k}
    assert len(writers) == 1  # the loser's uploads are gone
    local = _local_export(demo_run, tmp_path / "local-cache")
    for r in results:
        assert (r.samples, r.generation) == (384, 1)
        assert _csv(r.store_dir) == local
    loser = replicas[[r.lost for r in results].index(True)]
    winner = replicas[[r.lost for r in results].index(False)]
    extra = write_demo_run(tmp_path / "extra", RUN, steps=12, per_step=32, ranks=4, seed=1)
    s3.put(f"j/{RUN}/rank8.jsonl", (extra / "rank2.jsonl").read_bytes())
    # The winner is reading the run (it committed lately): the loser leaves the new lines to it.
    later = _ingest(loser, run_dir)
    assert (later.deferred, later.new_rows, later.generation, later.samples) == (True, 0, 1, 384)
    assert _ingest(winner, run_dir).new_rows == 96
    later = _ingest(loser, run_dir)  # mirrors the winner's commit
    assert (later.deferred, later.new_rows, later.generation, later.samples) == (True, 0, 2, 480)
    # Once the winner has committed nothing for LEASE_SECONDS, the loser reads the run's new lines itself.
    monkeypatch.setattr(shared_module, "LEASE_SECONDS", 0.0)
    s3.put(f"j/{RUN}/rank9.jsonl", (extra / "rank3.jsonl").read_bytes())
    after = _ingest(loser, run_dir)
    assert (after.deferred, after.lost, after.new_rows, after.generation) == (False, False, 96, 3)
    assert _commits(s3, "j/") == [f"{g:012d}.json" for g in (1, 2, 3)]


@pytest.fixture(scope="module")
def writer_server(s3, demo_run, tmp_path_factory):
    """gunicorn (2 workers) with RLBOARD_ROOT=s3://rollouts/k and RLBOARD_CACHE_DIR=s3://stores/k."""
    s3.upload(demo_run, f"k/{RUN}")
    local = tmp_path_factory.mktemp("writer")
    env = {**s3.env, "RLBOARD_CACHE_DIR": f"s3://{STORES}/k", "RLBOARD_WORK_DIR": str(local / "work")}
    with GunicornServer(f"s3://{BUCKET}/k", local, RLBOARD_REFRESH_SECONDS="1", **env) as srv:
        yield srv


def test_shared005_replica_serves_every_page_without_ingesting(s3, writer_server, demo_run, tmp_path):
    """A gunicorn server ingests the run into the store on the bucket; a second one (a replica: a fresh
    working folder, the same RLBOARD_CACHE_DIR) serves every page and /export of it, equal to a local
    ingest's, and commits nothing (the bucket's commits stay those of the first)."""
    text = _export(writer_server, rows=384)
    local = _local_export(demo_run, tmp_path / "local-cache").decode()
    assert _rows(text) == _rows(local)
    # The writer's settled commit (its last steps shown) is on the bucket: it publishes after its local
    # commit, which the export above may already have read.
    commits = wait_until(lambda: _settled(s3, "k/"), 120, "the writer's settled commit on the bucket")
    env = {**s3.env, "RLBOARD_CACHE_DIR": f"s3://{STORES}/k", "RLBOARD_WORK_DIR": str(tmp_path / "work")}
    with GunicornServer(f"s3://{BUCKET}/k", tmp_path, RLBOARD_REFRESH_SECONDS="1", **env) as replica:
        assert _rows(_export(replica, rows=384)) == _rows(local)
        for path in PAGES:
            assert requests.get(replica.base + path, params={"run": RUN}, timeout=30).status_code == 200
            page = _render(replica, path, f"?run={RUN}")
            assert "cannot be read" not in page and "Reading run" not in page, path
        time.sleep(2)  # the thing under test: a poll or two of the replica's (RLBOARD_REFRESH_SECONDS=1)
        _assert_clean_log(replica)
    assert _commits(s3, "k/") == commits
    assert list((tmp_path / "work").iterdir())  # the replica's working copy
    _assert_clean_log(writer_server)


def test_shared006_cli_ingest_export_and_serve(s3, demo_run, tmp_path):
    """`app.py ingest --cache-dir s3://…` commits the store there; `app.py export` on another working folder
    exports it from the bucket, as a local export; `serve` with a stores' bucket that does not exist stops
    at once with a sentence naming it, exit code 2."""
    s3.upload(demo_run, f"l/{RUN}")
    env = {**s3.env, "RLBOARD_WORK_DIR": str(tmp_path / "w1")}
    p = _cli("ingest", f"s3://{BUCKET}/l", "--json", env=env, cache=f"s3://{STORES}/l")
    assert p.returncode == 0, p.stderr
    assert '"samples": 384' in p.stdout
    assert _commits(s3, "l/") == ["000000000001.json"]
    env["RLBOARD_WORK_DIR"] = str(tmp_path / "w2")
    p = _cli("export", f"s3://{BUCKET}/l", "--run", RUN, env=env, cache=f"s3://{STORES}/l")
    local = _cli("export", str(demo_run.parent), "--run", RUN, env={}, cache=tmp_path / "c2")
    assert p.returncode == 0 and local.returncode == 0, p.stderr + local.stderr
    assert p.stdout == local.stdout and len(_rows(p.stdout)[1]) == 384
    assert _commits(s3, "l/") == ["000000000001.json"]
    p = _cli("serve", "--root", str(demo_run.parent), env=env, cache="s3://no-such-bucket/stores")
    assert p.returncode == 2
    assert p.stderr.startswith(
        "error: the stores' folder s3://no-such-bucket/stores cannot be used: no such bucket or object"
    ), p.stderr
