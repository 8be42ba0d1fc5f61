"""A rollout root on object storage (``--root s3://bucket/prefix``), against a real S3-protocol server (moto's
server on loopback, spoken to over HTTP by obstore as by any S3 client): the runs are found, ingested into
the local cache with the same result as a local copy, read on when an object grows or a new one appears,
served by gunicorn on every page and /export; a missing bucket is said as a missing folder is."""

from __future__ import annotations

import csv
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from data.config import DEFAULT_PAD_TOKENS, load_settings
from data.demo import write_demo_run
from data.export import export_stream
from data.ingest import ingest_run
from data.queries import ResponseFilter
from data.store import open_store, scan_root
from tests.conftest import REPO_ROOT, free_port
from tests.integration.test_gunicorn import PAGES, GunicornServer
from tests.integration.test_unreadable_root import _assert_clean_log, _render
from tests.waiting import wait_until

RUN = "demo-ppo"
BUCKET = "rollouts"


class S3:
    """moto's S3 server on a free loopback port, and a boto3 client of it (the uploads: another client than
    the board's own)."""

    def __init__(self):
        from moto.server import ThreadedMotoServer

        self.port = free_port()
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.env = {
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{self.port}",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
        }

    def start(self) -> S3:
        import logging

        import boto3

        self.werkzeug = logging.getLogger("werkzeug")
        self.level = self.werkzeug.level
        self.werkzeug.setLevel(logging.WARNING)  # moto's server logs each request (put back by stop)
        self.server.start()
        self.client = boto3.client(
            "s3",
            endpoint_url=self.env["AWS_ENDPOINT_URL"],
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        self.client.create_bucket(Bucket=BUCKET)
        return self

    def stop(self) -> None:
        self.server.stop()
        self.werkzeug.setLevel(self.level)

    def put(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=BUCKET, Key=key, Body=data)

    def upload(self, folder: Path, prefix: str) -> None:
        for f in sorted(folder.rglob("*")):
            if f.is_file():
                self.put(f"{prefix}/{f.relative_to(folder).as_posix()}", f.read_bytes())

    def settings(self, root: str, cache: Path):
        return load_settings(environ={**self.env, "RLBOARD_DEMO": "0"}, root=root, cache_dir=str(cache))


@pytest.fixture(scope="module")
def s3():
    server = S3().start()
    try:
        yield server
    finally:
        server.stop()


def _csv(store_dir: Path) -> bytes:
    return b"".join(export_stream(open_store(store_dir), ResponseFilter(step=None), "csv"))


def _rows(csv_text: str) -> tuple[list[str], list[list[str]]]:
    """A CSV export's header and its rows, sorted (two exports in different orders compare equal)."""
    header, *rows = csv.reader(io.StringIO(csv_text))
    return header, sorted(rows)


def _local_export(run_dir: Path, cache: Path) -> bytes:
    return _csv(ingest_run(run_dir, cache, DEFAULT_PAD_TOKENS).store_dir)


def test_remote001_ingest_equals_local(s3, demo_run, tmp_path):
    """The run under s3://rollouts/a is found and ingested into the local cache; its export (every step,
    CSV) is byte for byte a local ingest's of the same files, and its store holds the same rows."""
    s3.upload(demo_run, f"a/{RUN}")
    settings = s3.settings(f"s3://{BUCKET}/a", tmp_path / "cache")
    scan = scan_root(settings.root)
    assert scan.problem is None and list(scan.runs) == [RUN]
    assert str(scan.runs[RUN]) == f"s3://{BUCKET}/a/{RUN}"
    res = ingest_run(scan.runs[RUN], settings.cache_dir, settings.pad_tokens)
    assert (res.files, res.samples, res.steps, res.bad_lines) == (2, 384, 12, 0)
    assert res.store_dir.parent == tmp_path / "cache"  # the store is local
    assert _csv(res.store_dir) == _local_export(demo_run, tmp_path / "local-cache")
    again = ingest_run(scan.runs[RUN], settings.cache_dir, settings.pad_tokens)
    assert (again.new_rows, again.bytes_read) == (0, 0)  # nothing changed: nothing read


def test_remote002_grown_and_new_objects_read_on(s3, demo_run, tmp_path):
    """An object written again longer (S3 has no append) is read on from where the last ingest stopped, a
    new object is read whole; a rewritten object whose start changed is read again from 0. After each
    change the export is byte for byte that of the same files changed the same way in a local folder."""
    local = tmp_path / "local" / RUN
    local.mkdir(parents=True)
    lines = (demo_run / "rank0.jsonl").read_bytes().splitlines(keepends=True)
    run_dir = None

    def both() -> tuple:
        nonlocal run_dir
        s3.upload(local, f"b/{RUN}")
        run_dir = run_dir or scan_root(s3.settings(f"s3://{BUCKET}/b", tmp_path).root).runs[RUN]
        remote = ingest_run(run_dir, tmp_path / "cache", DEFAULT_PAD_TOKENS)
        here = ingest_run(local, tmp_path / "local-cache", DEFAULT_PAD_TOKENS)
        assert _csv(remote.store_dir) == _csv(here.store_dir)
        assert (remote.new_rows, remote.bytes_read) == (here.new_rows, here.bytes_read)
        return remote

    (local / "rank0.jsonl").write_bytes(b"".join(lines[:100]))
    assert both().samples == 100
    (local / "rank0.jsonl").write_bytes(b"".join(lines))  # grown
    (local / "rank1.jsonl").write_bytes((demo_run / "rank1.jsonl").read_bytes())  # new
    grown = both()
    added = len(b"".join(lines[100:])) + (demo_run / "rank1.jsonl").stat().st_size
    assert (grown.samples, grown.new_rows, grown.bytes_read) == (384, 384 - 100, added)
    (local / "rank0.jsonl").write_bytes(b"".join(lines[1:]))  # rewritten: its first line gone
    rewritten = both()
    assert (rewritten.samples, rewritten.new_rows) == (383, 191)


def test_remote003_missing_bucket_or_prefix(s3, tmp_path):
    """A bucket that does not exist, or a prefix holding nothing, is a rollout folder that is not there,
    said in the words a missing local folder gets, with what to check instead of mounting."""
    for root in ("s3://no-such-bucket/runs", f"s3://{BUCKET}/nothing-here"):
        scan = scan_root(s3.settings(root, tmp_path).root)
        assert scan.runs == {} and scan.problem is not None, root
        assert scan.problem.status == "missing: no such folder"
        assert scan.problem.headline == f"The rollout folder {root} is not there: no such folder."
        assert "AWS_ENDPOINT_URL" in scan.problem.detail
        assert scan.problem.fixes()[0].command == f'aws s3 ls {root}/ --endpoint-url "$AWS_ENDPOINT_URL"'
    local = scan_root(tmp_path / "no-such-folder").problem
    assert local.headline.endswith("is not there: no such folder.")


def _cli(*args, env, cache):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("RLBOARD_", "AWS_"))}
    return subprocess.run(
        [sys.executable, "app.py", *args, "--cache-dir", str(cache)],
        cwd=REPO_ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_remote004_cli_ingest_and_export(s3, demo_run, tmp_path):
    """`app.py ingest s3://…` and `app.py export s3://… --run` read the root with the AWS_* variables; the
    export is the local one's; a missing bucket fails with the missing folder's sentence, exit code 2."""
    s3.upload(demo_run, f"c/{RUN}")
    p = _cli("ingest", f"s3://{BUCKET}/c", "--json", env=s3.env, cache=tmp_path / "c1")
    assert p.returncode == 0, p.stderr
    assert '"samples": 384' in p.stdout and '"steps": 12' in p.stdout
    p = _cli("export", f"s3://{BUCKET}/c", "--run", RUN, env=s3.env, cache=tmp_path / "c1")
    local = _cli("export", str(demo_run.parent), "--run", RUN, env={}, cache=tmp_path / "c2")
    assert p.returncode == 0 and local.returncode == 0, p.stderr + local.stderr
    assert p.stdout == local.stdout and len(_rows(p.stdout)[1]) == 384
    p = _cli("ingest", "s3://no-such-bucket/runs", env=s3.env, cache=tmp_path / "c1")
    assert p.returncode == 2
    assert "error: The rollout folder s3://no-such-bucket/runs is not there: no such folder." in p.stderr


@pytest.fixture(scope="module")
def s3_server(s3, demo_run, tmp_path_factory):
    """gunicorn (2 workers, as the image runs it) on RLBOARD_ROOT=s3://rollouts/d, polling every second."""
    s3.upload(demo_run, f"d/{RUN}")
    cache = tmp_path_factory.mktemp("s3-cache")
    with GunicornServer(f"s3://{BUCKET}/d", cache, RLBOARD_REFRESH_SECONDS="1", **s3.env) as srv:
        yield srv


def _export(srv: GunicornServer, deadline: float = 180.0, rows: int | None = None) -> str:
    """The run's export (every step, CSV), once it answers with ``rows`` rows."""
    got = []

    def export() -> str | None:
        r = requests.get(
            srv.base + "/export", params={"run": RUN, "step": "all", "format": "csv"}, timeout=60
        )
        n = len(_rows(r.text)[1]) if r.status_code == 200 else None
        got[:] = [r.status_code, n, r.text[:300]]
        return r.text if n is not None and (rows is None or n == rows) else None

    return wait_until(
        export, deadline, lambda: f"an export of {rows} rows (got {got}):\n{srv.log_tail()}", interval=0.5
    )


def test_remote005_server_serves_every_page_and_export(s3_server, demo_run, tmp_path):
    """/healthz counts the run on the bucket; every page renders it; /export (every step) equals a local
    ingest's (its rows, sorted); nothing is logged as an error."""
    srv = s3_server
    health = requests.get(srv.base + "/healthz", timeout=10).json()
    assert (health["runs"], health["root"]) == (1, "ok")
    text = _export(srv, rows=384)
    local = _local_export(demo_run, tmp_path / "local-cache").decode()
    assert _rows(text) == _rows(local)
    assert f"Rollout root: s3://{BUCKET}/d" in _render(srv, "/")
    for path in PAGES:
        assert requests.get(srv.base + path, params={"run": RUN}, timeout=30).status_code == 200, path
        page = _render(srv, path, f"?run={RUN}")
        assert "cannot be read" not in page and "is not there" not in page, path
    _assert_clean_log(srv)


def test_remote006_server_picks_up_a_new_object(s3_server, s3, demo_run, tmp_path):
    """A new rank file put on the bucket while the server runs is read at the next poll: the export grows
    to hold its rows, as a local ingest of the same files."""
    srv = s3_server
    _export(srv, rows=384)
    local = tmp_path / "local" / RUN
    local.mkdir(parents=True)
    for name in ("rank0.jsonl", "rank1.jsonl"):
        (local / name).write_bytes((demo_run / name).read_bytes())
    ingest_run(local, tmp_path / "local-cache", DEFAULT_PAD_TOKENS)  # read in two goes, as the server does
    extra = write_demo_run(tmp_path / "extra", RUN, steps=12, per_step=32, ranks=3, seed=1)
    s3.put(f"d/{RUN}/rank9.jsonl", (extra / "rank2.jsonl").read_bytes())
    (local / "rank9.jsonl").write_bytes((extra / "rank2.jsonl").read_bytes())
    text = _export(srv, rows=384 + 120)  # rank 2 of 3: 10 of each step's 32
    assert _rows(text) == _rows(_local_export(local, tmp_path / "local-cache").decode())
    _assert_clean_log(srv)


def test_remote007_settings_of_an_object_store_root(tmp_path):
    """RLBOARD_ROOT (or --root) s3://… is a root on the object store, read with the AWS_* variables (AWS_REGION
    over AWS_DEFAULT_REGION); a local root stays a Path; an object store's cache folder is the stores' URL."""
    from data.config import SettingsError
    from data.remote import RemotePath

    env = {
        "RLBOARD_ROOT": "s3://bucket/runs/",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_REGION": "us-east-2",
        "AWS_ACCESS_KEY_ID": "id",
    }
    with pytest.raises(
        SettingsError, match="RLBOARD_ROOT='s3://bucket/runs/': cannot open s3://bucket/runs: .*Secret"
    ):
        load_settings(environ=env)  # a key id without its secret
    env["AWS_SECRET_ACCESS_KEY"] = "secret"
    s = load_settings(environ=env)
    assert isinstance(s.root, RemotePath) and str(s.root) == "s3://bucket/runs"
    assert dict(s.storage) == {
        "aws_endpoint": "http://127.0.0.1:9",
        "aws_region": "us-east-2",
        "aws_access_key_id": "id",
        "aws_secret_access_key": "secret",
    }
    assert load_settings(environ=env, root=str(tmp_path)).root == tmp_path
    assert load_settings(environ=env, root=f"file://{tmp_path}").root == tmp_path
    shared = load_settings(environ=env, cache_dir="s3://bucket/cache")  # (see test_shared_store.py)
    assert shared.store_url == "s3://bucket/cache" and shared.cache_dir.name.startswith("bucket_cache-")


def test_remote008_compressed_and_parquet_objects(s3, demo_run, tmp_path):
    """A gzip, a zstd and a Parquet rollout file on the bucket are read whole (in large GETs) to the same
    store as the same files on disk."""
    import gzip

    import polars as pl
    import zstandard

    local = tmp_path / "local" / RUN
    local.mkdir(parents=True)
    rank0 = (demo_run / "rank0.jsonl").read_bytes().splitlines(keepends=True)
    (local / "rank0.jsonl.gz").write_bytes(gzip.compress(b"".join(rank0[:100])))
    (local / "rank2.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(b"".join(rank0[100:])))
    pl.read_ndjson(demo_run / "rank1.jsonl").write_parquet(local / "rank1.parquet")
    s3.upload(local, f"e/{RUN}")
    run_dir = scan_root(s3.settings(f"s3://{BUCKET}/e", tmp_path).root).runs[RUN]
    remote = ingest_run(run_dir, tmp_path / "cache", DEFAULT_PAD_TOKENS)
    here = ingest_run(local, tmp_path / "local-cache", DEFAULT_PAD_TOKENS)
    assert (remote.files, remote.samples, remote.bad_lines) == (3, 384, 0)
    assert _csv(remote.store_dir) == _csv(here.store_dir)


def test_remote009_fingerprint_of_an_object_is_the_files(s3, tmp_path):
    """A file's fingerprint (what tells a grown file from a rewritten one) read from the bucket, its ranges
    fetched together, is the one read from disk, at every length: short, within the windows, and past
    them (its samples)."""
    import numpy as np

    from data.ingest.digest import PRINT_WINDOW, _fingerprint

    data = np.random.default_rng(0).bytes(3 * PRINT_WINDOW + 12345)
    (tmp_path / "f.jsonl").write_bytes(data)
    s3.put("f/run/f.jsonl", data)
    remote = scan_root(s3.settings(f"s3://{BUCKET}/f", tmp_path).root).runs["run"] / "f.jsonl"
    for upto in (0, 1, 1000, PRINT_WINDOW, 2 * PRINT_WINDOW + 5, len(data) - 1, len(data)):
        assert _fingerprint(remote, upto) == _fingerprint(tmp_path / "f.jsonl", upto), upto
    assert _fingerprint(remote, 1000) != _fingerprint(remote, 1001)


def test_remote010_serve_command_forks_workers_that_read_the_bucket(s3, demo_run, tmp_path):
    """`app.py serve --root s3://…` checks the root before gunicorn forks its workers without leaving an
    object store client behind in the parent (obstore's runtime does not survive a fork: a worker then hung
    on its first listing); its workers serve the run; a missing bucket stops it with the sentence."""
    s3.upload(demo_run, f"g/{RUN}")
    p = _cli("serve", "--root", "s3://no-such-bucket/runs", env=s3.env, cache=tmp_path)
    assert p.returncode == 2
    assert p.stderr.startswith(
        "error: The rollout folder s3://no-such-bucket/runs is not there: no such folder."
    )
    port = free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("RLBOARD_", "AWS_"))}
    env = {**clean, **s3.env, "RLBOARD_DEMO": "0", "RLBOARD_WORKERS": "2"}
    cmd = [sys.executable, "app.py", "serve", "--root", f"s3://{BUCKET}/g", "--port", str(port)]
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*cmd, "--cache-dir", str(tmp_path / "cache")],
            cwd=REPO_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        base = f"http://127.0.0.1:{port}"

        def rows() -> int | None:
            try:
                r = requests.get(base + "/export", params={"run": RUN, "step": "all"}, timeout=60)
            except requests.RequestException:
                return None  # not listening yet
            return len(_rows(r.text)[1]) if r.status_code == 200 else None

        wait_until(
            lambda: rows() == 384,
            180,
            lambda: f"an export of 384 rows:\n{log.read_text(errors='replace')[-2000:]}",
            interval=0.5,
        )
        assert requests.get(base + "/healthz", timeout=20).json()["runs"] == 1
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def test_remote011_endpoint_down(tmp_path):
    """An endpoint nothing listens on: the root cannot be read, "connection refused by the endpoint", said
    within seconds (a few tries, not obstore's 10 within 3 minutes)."""
    env = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
    }
    root = load_settings(environ=env, root=f"s3://{BUCKET}/runs").root
    t0 = time.monotonic()
    problem = scan_root(root).problem
    assert time.monotonic() - t0 < 20
    assert problem.status == "unreadable: connection refused by the endpoint"
    assert (
        problem.headline
        == f"The rollout folder s3://{BUCKET}/runs cannot be read: connection refused by the endpoint."
    )
