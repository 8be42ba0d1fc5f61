"""Annotations on an object-storage cache (``--cache-dir s3://…``, issue 38 item 2), against a real
S3-protocol server (moto's, on loopback) with the board's own obstore calls: each change one object written
only if absent, read back by another process and a fresh board (a replica), kept over a store rebuild, two
writers at once lose nothing, the bucket's objects are untrusted. Expected values are read from the
fixture's JSON-lines file with the json module, not through the store."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from data import annotations as an
from data import annotations_remote as ar
from data import service
from data.config import load_settings
from data.store import sample_id
from tests.conftest import REPO_ROOT
from tests.integration.test_annotations import RUN, _record, annotate
from tests.integration.test_object_store import S3, _cli

STORES = "annstores"
S104, S130 = sample_id("rank0.jsonl", 104), sample_id("rank0.jsonl", 130)


@pytest.fixture(scope="module")
def s3():
    server = S3().start()
    server.client.create_bucket(Bucket=STORES)
    try:
        yield server
    finally:
        server.stop()


def _settings(s3: S3, fixtures_dir, prefix: str, work, **env):
    environ = {**s3.env, "RLBOARD_DEMO": "0", "RLBOARD_WORK_DIR": str(work), **env}
    return load_settings(environ=environ, root=str(fixtures_dir), cache_dir=f"s3://{STORES}/{prefix}")


def _keys(s3: S3, prefix: str) -> list[str]:
    pages = s3.client.get_paginator("list_objects_v2").paginate(Bucket=STORES, Prefix=prefix)
    return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


def _fresh_read(settings, run: str = RUN) -> an.Annotated:
    """What a process that never looked at the bucket reads (its logs forgotten)."""
    ar._LOGS.clear()
    return an.of_run(settings, run)


@pytest.fixture
def on_bucket(s3, fixtures_dir, dash_app, tmp_path, request):
    """A board whose cache is a fresh prefix of the bucket; the original board restored afterwards."""
    prev = service.board().settings
    prefix = request.node.name[-40:]
    settings = _settings(s3, fixtures_dir, prefix, tmp_path / "work")
    service.configure(settings)
    ar._LOGS.clear()
    try:
        yield dash_app.server.test_client(), settings, prefix
    finally:
        service.configure(prev)
        ar._LOGS.clear()


def test_annotations_s3_101_kept_read_by_another_process_and_after_rebuild(
    s3, on_bucket, fixtures_dir, tmp_path
):
    """A label saved through the page is one object under <prefix>/annotations/<run file>/, written with a
    conditional create; a fresh reader and the CLI's export in another process (another working folder: a
    replica) read it back; after the store's objects and working copies are deleted, the rebuilt store's
    export still carries it; /export?annotated=1 on the board too."""
    client, settings, prefix = on_bucket
    status, text = annotate(client, S104, "reward hack", "kept on the bucket")
    assert status == 200 and "Labelled 'reward hack'" in text, text
    name = an.file_for(settings.cache_dir, RUN).name
    keys = _keys(s3, f"{prefix}/annotations/")
    assert len(keys) == 1 and keys[0].startswith(f"{prefix}/annotations/{name}/")
    assert ar.KEY.fullmatch(keys[0].rsplit("/", 1)[1])
    body = json.loads(s3.client.get_object(Bucket=STORES, Key=keys[0])["Body"].read())
    assert (body["sample_id"], body["label"], body["note"], body["who"]) == (
        S104,
        "reward hack",
        "kept on the bucket",
        "anonymous",
    )
    assert not (settings.cache_dir / "annotations" / name).exists()  # nothing kept as a local file
    got = _fresh_read(settings).items
    assert [(a.sample_id, a.label, a.note) for a in got] == [(S104, "reward hack", "kept on the bucket")]

    want = _record(fixtures_dir, "rank0.jsonl", 104)
    env = {**s3.env, "RLBOARD_WORK_DIR": str(tmp_path / "replica")}

    def cli_export() -> list[dict]:
        args = ["export", str(fixtures_dir), "--run", RUN, "--annotated", "--format", "jsonl"]
        p = _cli(*args, env=env, cache=f"s3://{STORES}/{prefix}")
        assert p.returncode == 0, p.stderr
        return [json.loads(x) for x in p.stdout.splitlines() if x.strip()]

    rows = cli_export()
    assert [(r["sample_id"], r["label"], r["note"]) for r in rows] == [
        (S104, "reward hack", "kept on the bucket")
    ]
    assert (rows[0]["prompt"], rows[0]["response"], rows[0]["reward"]) == (
        want["prompt"],
        want["response"],
        want["reward"],
    )
    # The store rebuilt: every object of the prefix but the annotations gone, and the working copies.
    stores = [k for k in _keys(s3, f"{prefix}/") if not k.startswith(f"{prefix}/annotations/")]
    assert stores  # the export committed the store on the bucket
    for k in stores:
        s3.client.delete_object(Bucket=STORES, Key=k)
    import shutil

    shutil.rmtree(tmp_path / "replica")
    rows = cli_export()
    assert [(r["sample_id"], r["label"], r["response"]) for r in rows] == [
        (S104, "reward hack", want["response"])
    ]
    r = client.get(f"/export?run={RUN}&annotated=1&format=jsonl")
    assert r.status_code == 200, r.data[:300]
    assert [json.loads(x)["sample_id"] for x in r.data.decode().splitlines()] == [S104]


def test_annotations_s3_102_megabyte_note_refused_removal_latest_wins(s3, on_bucket):
    """A 1 MB note is refused with its size and the limit, and nothing is written; a removal is an object of
    its own and the latest object of a key wins, for this process and a fresh one."""
    client, settings, prefix = on_bucket
    status, text = annotate(client, S104, note="x" * (1 << 20))
    assert status == 200 and "1,048,576 bytes, over the limit of 8,192 bytes" in text
    assert _keys(s3, f"{prefix}/annotations/") == []
    assert "Labelled" in annotate(client, S104, "repetition")[1]
    assert "Labelled" in annotate(client, S130, "good")[1]
    assert "Labelled" in annotate(client, S130, "truncated")[1]
    assert "Removed" in annotate(client, S104, remove=True)[1]
    assert len(_keys(s3, f"{prefix}/annotations/")) == 4
    for got in (an.of_run(settings, RUN), _fresh_read(settings)):
        assert [(a.sample_id, a.label) for a in got.items] == [(S130, "truncated")]
    r = client.get(f"/export?run={RUN}&step=all&label=truncated&format=jsonl")
    assert [json.loads(x)["sample_id"] for x in r.data.decode().splitlines()] == [S130]


WRITER = """
import sys
from data import annotations as an
from data.config import load_settings
settings = load_settings(root=sys.argv[1], cache_dir=sys.argv[2])
who = sys.argv[3]
for i in range(int(sys.argv[4])):
    line = an.record(f"{who}-{i}", "good", an.DEFAULT_LABELS, note=f"n{i}", who=who)
    an.save(settings, "run-x", line)
"""


def test_annotations_s3_103_two_writers_at_once_lose_nothing(s3, fixtures_dir, tmp_path):
    """Two processes (each its own working folder: two replicas) write 100 annotations each at once: the
    bucket holds 200 objects and a fresh reader reads all 200."""
    prefix = "two-writers"
    clean = {k: v for k, v in __import__("os").environ.items() if not k.startswith(("RLBOARD_", "AWS_"))}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(fixtures_dir), f"s3://{STORES}/{prefix}", f"w{i}", "100"],
            cwd=REPO_ROOT,
            env={
                **clean,
                **s3.env,
                "RLBOARD_WORK_DIR": str(tmp_path / f"w{i}"),
                "RLBOARD_ANNOTATION_RATE": "1000",
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    assert len(_keys(s3, f"{prefix}/annotations/")) == 200
    got = _fresh_read(_settings(s3, fixtures_dir, prefix, tmp_path / "reader"), "run-x")
    assert got.skipped == 0
    assert sorted(a.sample_id for a in got.items) == sorted(f"w{w}-{i}" for w in range(2) for i in range(100))
    assert {a.note for a in got.items if a.sample_id == "w1-99"} == {"n99"}


def test_annotations_s3_104_bucket_objects_untrusted_and_bounded(s3, fixtures_dir, tmp_path):
    """Objects put there by anyone: a key not of the writers' form, an object that is not a line of JSON,
    one over a line's size, and an object of a good key that arrives late with an earlier time (it is
    merged in its key's place: the later object still wins); each bad object skipped and counted. A prefix
    at the size limit takes no write, with a message naming the setting."""
    prefix = "untrusted"
    settings = _settings(s3, fixtures_dir, prefix, tmp_path / "w", RLBOARD_ANNOTATION_FILE_BYTES="2000")
    base = f"{prefix}/annotations/{an.file_for(settings.cache_dir, RUN).name}"
    line = an.record(S104, "good", an.DEFAULT_LABELS, note="later")
    an.save(settings, RUN, line)
    put = s3.client.put_object
    put(Bucket=STORES, Key=f"{base}/notes.txt", Body=b'{"sample_id": "x", "label": "good"}')
    put(Bucket=STORES, Key=f"{base}/{1:020d}-{'a' * 16}.json", Body=b"<html>not json</html>")
    put(Bucket=STORES, Key=f"{base}/{2:020d}-{'b' * 16}.json", Body=b"[" * 70000)
    early = an.record(S104, "repetition", an.DEFAULT_LABELS, note="earlier")
    put(Bucket=STORES, Key=f"{base}/{3:020d}-{'c' * 16}.json", Body=json.dumps(early).encode())
    got = an.of_run(settings.with_overrides(refresh_seconds=0.0), RUN)
    assert [(a.sample_id, a.label, a.note) for a in got.items] == [(S104, "good", "later")]
    assert got.skipped == 3
    assert (
        got.notice()
        == "3 object(s) of this run's annotations on the object store could not be read and were skipped."
    )
    # The prefix now holds ~70 kB, past the 2,000 bytes allowed: the next write is refused, nothing written.
    before = _keys(s3, f"{base}/")
    with pytest.raises(an.AnnotationError, match="RLBOARD_ANNOTATION_FILE_BYTES"):
        an.save(settings, RUN, an.record(S130, "good", an.DEFAULT_LABELS))
    assert _keys(s3, f"{base}/") == before


def test_annotations_s3_105_bucket_gone(s3, fixtures_dir, tmp_path):
    """A stores' bucket that does not exist: a write is refused with the object store's reason, and a read
    shows nothing but says why (never an error page, never an empty list said as the truth)."""
    environ = {**s3.env, "RLBOARD_DEMO": "0", "RLBOARD_WORK_DIR": str(tmp_path)}
    settings = load_settings(environ=environ, root=str(fixtures_dir), cache_dir="s3://no-such-bucket/x")
    with pytest.raises(an.AnnotationError, match="the object store refused the annotation.*no such bucket"):
        an.save(settings, RUN, an.record(S104, "good", an.DEFAULT_LABELS))
    got = _fresh_read(settings)
    assert got.items == () and "could not be read just now" in got.notice()


def test_annotations_s3_106_never_overwritten(s3, fixtures_dir, tmp_path, monkeypatch):
    """A key is written only if absent (If-None-Match: *): a writer that draws a key already taken (here
    forced: the clock and the random part fixed) tries another, and never replaces the object there."""
    settings = _settings(s3, fixtures_dir, "conditional", tmp_path / "w")
    monkeypatch.setattr(ar.time, "time_ns", lambda: 7)
    monkeypatch.setattr(ar.secrets, "token_hex", lambda n: "d" * 2 * n)
    an.save(settings, RUN, an.record(S104, "good", an.DEFAULT_LABELS, note="first"))
    with pytest.raises(an.AnnotationError, match="no free key"):
        an.save(settings, RUN, an.record(S104, "repetition", an.DEFAULT_LABELS, note="second"))
    (key,) = _keys(s3, "conditional/annotations/")
    assert json.loads(s3.client.get_object(Bucket=STORES, Key=key)["Body"].read())["note"] == "first"
    assert [(a.label, a.note) for a in _fresh_read(settings).items] == [("good", "first")]


def test_annotations_s3_107_workers_of_a_host_see_a_write_at_once(s3, fixtures_dir, tmp_path):
    """Between its listings (RLBOARD_REFRESH_SECONDS, here an hour) a process looks at the bucket again once
    another process of its host (same working folder: gunicorn's workers) wrote: a write mark's stat; a
    process of another host sees the write at its next listing."""
    prefix = "workers"
    here = _settings(s3, fixtures_dir, prefix, tmp_path / "host-a", RLBOARD_REFRESH_SECONDS="3600")
    there = _settings(s3, fixtures_dir, prefix, tmp_path / "host-b", RLBOARD_REFRESH_SECONDS="3600")
    ar._LOGS.clear()
    assert an.of_run(here, "run-x").items == () and an.of_run(there, "run-x").items == ()
    clean = {k: v for k, v in __import__("os").environ.items() if not k.startswith(("RLBOARD_", "AWS_"))}
    p = subprocess.run(
        [sys.executable, "-c", WRITER, str(fixtures_dir), f"s3://{STORES}/{prefix}", "w", "1"],
        cwd=REPO_ROOT,
        env={**clean, **s3.env, "RLBOARD_WORK_DIR": str(tmp_path / "host-a")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    # One process stands for both hosts (its log is per URL): the other host's mark has not moved.
    assert an.of_run(there, "run-x").items == ()  # its next listing is an hour away
    assert [a.sample_id for a in an.of_run(here, "run-x").items] == ["w-0"]
    ar._LOGS.clear()
    assert [a.sample_id for a in an.of_run(there, "run-x").items] == ["w-0"]  # a listing: it is there


def test_annotations_s3_108_object_not_given_is_read_again(s3, fixtures_dir, tmp_path, monkeypatch):
    """An object the server does not give at one look (an error other than "no such object") is counted as
    skipped then, and read at the next listing: never dropped for the process's life."""
    import obstore

    settings = _settings(s3, fixtures_dir, "again", tmp_path / "w", RLBOARD_REFRESH_SECONDS="0")
    an.save(settings, RUN, an.record(S104, "good", an.DEFAULT_LABELS))
    real = obstore.get

    def refused(*a, **k):
        raise RuntimeError("the server gave no answer")

    monkeypatch.setattr(obstore, "get", refused)
    got = _fresh_read(settings)
    assert (got.items, got.skipped) == ((), 1)
    monkeypatch.setattr(obstore, "get", real)
    got = an.of_run(settings, RUN)
    assert ([a.sample_id for a in got.items], got.skipped) == ([S104], 0)
