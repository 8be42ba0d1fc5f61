"""Keys of a rollout root on object storage that obstore cannot name (an empty ``//``, ``.`` or ``..``
segment) and directory markers (a key ending in ``/``), against a real S3-protocol server (moto's server on
loopback): each is skipped and reported on the runs page's "entries not read" box, never fatal, never said
as a credentials problem, and every good file is still read (issue 33, row 11)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import orjson
import pytest

from data.ingest import ingest_run
from data.remote_keys import Lister
from data.store import open_store, scan_root
from data.store.runs import run_file_stats
from tests.integration.test_object_store import BUCKET, S3


@pytest.fixture(scope="module")
def s3():
    server = S3().start()
    try:
        yield server
    finally:
        server.stop()


def _lines(n: int, step: int = 1) -> bytes:
    return b"".join(
        orjson.dumps({"prompt": f"p{i}", "response": f"r{i}", "reward": i / 10, "step": step + i}) + b"\n"
        for i in range(n)
    )


def test_bucketkeys001_bad_keys_skipped_good_files_read(s3, tmp_path):
    """A root holding keys with ``//``, ``.`` and ``..`` segments (in a run folder and at the top of the
    root) and a marker ``rank0.jsonl/`` beside the real ``rank0.jsonl``: the root is readable, every run is
    found, each bad key is in ``RootScan.skipped`` with its reason (none blames the credentials), the marker
    does not shadow the file, and each run holds exactly its good files' rows. A marker alone
    (``rank2.jsonl/``, listed by the client as ``rank2.jsonl``) is a file not read, said as a marker."""
    good = {"good/rank0.jsonl": _lines(3), "good/rank1.jsonl": _lines(2, 10), "other/r.jsonl": _lines(4)}
    good["marked/rank0.jsonl"] = _lines(5)
    good["demo/rank0.jsonl"] = _lines(2)  # between the bad keys at the top and those in good/
    bad = {
        "good/a//b.jsonl": "an empty segment (//)",
        "good/./c.jsonl": "a '.' segment",
        "good/../d.jsonl": "a '..' segment",
        "/x.jsonl": "an empty segment (//)",  # s3://rollouts/bk1//x.jsonl
        "../y.jsonl": "a '..' segment",  # s3://rollouts/bk1/../y.jsonl
    }
    for rel, data in good.items():
        s3.put(f"bk1/{rel}", data)
    for rel in bad:
        s3.put(f"bk1/{rel}", _lines(1, 99))
    s3.put("bk1/marked/rank0.jsonl/", b"")  # what a console's "create folder" writes, named as the file
    s3.put("bk1/good/rank2.jsonl/", _lines(2))  # a marker alone, with a body: listed as rank2.jsonl
    settings = s3.settings(f"s3://{BUCKET}/bk1", tmp_path / "cache")
    scan = scan_root(settings.root)
    assert scan.problem is None and scan.status == "ok" and not scan.unreadable
    assert set(scan.runs) == {"good", "other", "marked", "demo"}
    for rel, what in bad.items():
        assert scan.skipped[rel] == f"a key with {what}, which the object store's client cannot name"
    assert (
        scan.skipped["marked/rank0.jsonl/"]
        == "a directory marker (a key ending in /) beside the file of that name"
    )
    assert not any("permission" in why or "credential" in why for why in scan.skipped.values())
    for run, rows in {"good": 5, "other": 4, "marked": 5, "demo": 2}.items():
        res = ingest_run(scan.runs[run], settings.cache_dir, settings.pad_tokens)
        assert (res.samples, res.bad_lines, res.files) == (rows, 0, 2 if run == "good" else 1), run
        unread = open_store(res.store_dir).manifest.unreadable
        assert unread == (
            {"rank2.jsonl": "a directory marker (a key ending in /), not a file"} if run == "good" else {}
        )


def test_bucketkeys002_listing_goes_on_past_a_lost_page(s3):
    """A bad key in the second page of a listing (1,000 keys a page; obstore refuses the page): on S3 the
    prefix is listed again by its raw keys, and every one of the 1,101 good keys is listed once and the bad
    one reported. Without raw keys (``gs://``, ``az://``), the page's keys before it (files and a folder)
    are listed folder by folder and those after it by a listing that starts past it: the same keys, and the
    bad key's own folder said to be possibly missing files."""
    names = [f"many/f{i:04d}.jsonl" for i in range(1100)] + ["many/f1020/a.jsonl"]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: s3.put(f"bk2/{k}", b"{}\n"), names))
    s3.put("bk2/many/f1050/../x.jsonl", b"{}\n")
    settings = s3.settings(f"s3://{BUCKET}/bk2", "/nonexistent-cache")
    bad = {"f1050/../x.jsonl": "a key with a '..' segment, which the object store's client cannot name"}
    skipped: list[tuple[str, str]] = []
    listed = run_file_stats(settings.root / "many", skipped=skipped)
    assert [rel for rel, _ in listed] == sorted(n.removeprefix("many/") for n in names)
    assert dict(skipped) == bad
    assert dict(listed)["f0001.jsonl"].st_size == 3 and dict(listed)["f0001.jsonl"].st_mtime_ns > 0

    lister = Lister(settings.root._root.store)  # no raw keys: obstore alone
    assert sorted(o["path"] for o in lister.all("many")) == sorted(names)  # each once
    assert dict(lister.skipped) == {
        "many/f1050/../x.jsonl": bad["f1050/../x.jsonl"],
        "many/f1050/": "files here may be missed: they sort just before a key the object store's client "
        "cannot name, and this folder's listing holds such a key",
    }


def test_bucketkeys003_served_root_says_what_it_skipped(s3, tmp_path, client):
    """Served: /healthz answers 200 with the good runs, the runs page lists each bad key with its reason in
    "entries not read" and says nothing of the credentials, and the good run is exported whole."""
    from data import service
    from tests.conftest import router_body

    s3.put("bk3/good/rank0.jsonl", _lines(3))
    s3.put("bk3/good/../d.jsonl", _lines(1, 99))
    s3.put("bk3/good//e.jsonl", _lines(1, 99))
    prev = service.board().settings
    board = service.configure(s3.settings(f"s3://{BUCKET}/bk3", tmp_path / "cache"))
    try:
        r = client.get("/healthz")
        assert r.status_code == 200 and r.get_json()["runs"] == 1, r.get_json()
        store = board.store("good", wait=60)
        assert store is not None and store.scalars().height == 3
        page = json.dumps(client.post("/_dash-update-component", json=router_body("/", "")).get_json())
        assert (
            "good/../d.jsonl: a key with a '..' segment, which the object store's client cannot name" in page
        )
        assert "good//e.jsonl: a key with an empty segment (//)" in page
        assert "AWS_ACCESS_KEY_ID" not in page and "cannot be read" not in page
        export = client.get("/export?run=good&step=all&format=jsonl")
        assert export.status_code == 200 and len(export.get_data().splitlines()) == 3
    finally:
        service.configure(prev)
