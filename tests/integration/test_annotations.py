"""Annotations through the app (issue 38): written by the pages' callbacks under the auth rules, kept over a
server restart and a store rebuild, filtered in the responses view and exported as a dataset. Expected
values are read from the fixture's JSON-lines file with the json module, not through the store."""

from __future__ import annotations

import base64
import io
import json
import shutil
import subprocess
import sys

import polars as pl
import pytest

from data import annotations as an
from data.store import sample_id
from data.store.layout import store_dir_for
from tests.conftest import REPO_ROOT

RUN = "trl-ppo-small"
STATUS = "..responses-ann-status.children...responses-ann-list.children.."


def _basic(user: str, password: str) -> dict:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def _record(fixtures_dir, name: str, line: int) -> dict:
    with open(fixtures_dir / RUN / name, encoding="utf-8") as f:
        return json.loads(f.readlines()[line - 1])


def annotate(client, sample, label="reward hack", note="", headers=None, remove=False, run=RUN):
    """POST the responses page's annotation callback as the renderer does: ``(HTTP status, status text)``."""
    body = {
        "output": STATUS,
        "outputs": [
            {"id": "responses-ann-status", "property": "children"},
            {"id": "responses-ann-list", "property": "children"},
        ],
        "inputs": [
            {"id": "responses-ann-key", "property": "data", "value": {"run": run, "sample": sample}},
            {"id": "responses-ann-save", "property": "n_clicks", "value": None if remove else 1},
            {"id": "responses-ann-remove", "property": "n_clicks", "value": 1 if remove else None},
        ],
        "state": [
            {"id": "responses-ann-label", "property": "value", "value": label},
            {"id": "responses-ann-note", "property": "value", "value": note},
        ],
        "changedPropIds": ["responses-ann-remove.n_clicks" if remove else "responses-ann-save.n_clicks"],
    }
    r = client.post("/_dash-update-component", json=body, headers=headers or {})
    if r.status_code != 200:
        return r.status_code, r.get_data(as_text=True)
    return 200, json.dumps(r.get_json()["response"]["responses-ann-status"]["children"])


@pytest.fixture
def fresh(dash_app, board_root, fixtures_dir, tmp_path):
    """A client with its own cookies on a board whose cache (stores and annotations) is this test's."""

    def configure(**kw):
        return board_root(fixtures_dir, cache_dir=tmp_path / "cache", **kw)

    configure()
    return dash_app.server.test_client(), configure, tmp_path / "cache"


S104, S130 = sample_id("rank0.jsonl", 104), sample_id("rank0.jsonl", 130)


def test_annotations101_write_and_read_back(fresh):
    """Auth off: a label is written as "anonymous", shown in the list, and the file holds it."""
    client, _, cache = fresh
    status, text = annotate(client, S104, note="too short")
    assert status == 200 and "Labelled 'reward hack'" in text and "as anonymous" in text
    got = an.read(an.file_for(cache, RUN), 1 << 20).items
    assert [(a.sample_id, a.label, a.note, a.who) for a in got] == [
        (S104, "reward hack", "too short", "anonymous")
    ]
    status, text = annotate(client, S104, remove=True)
    assert "Removed" in text and an.read(an.file_for(cache, RUN), 1 << 20).items == ()


def test_annotations102_refused_without_auth_and_with_read_token(fresh):
    """Auth on: no credentials -> 401 before any callback; the read-only token opens pages but its write is
    refused with a message; the basic-auth user writes under their name, the full token as anonymous."""
    client, configure, cache = fresh
    configure(basic_auth="alice:pw", token="full-1", read_token="read-1")
    assert annotate(client, S104)[0] == 401
    read = {"Authorization": "Bearer read-1"}
    assert client.get(f"/responses?run={RUN}", headers=read).status_code == 200
    status, text = annotate(client, S104, headers=read)
    assert status == 200 and "read-only token" in text
    assert not an.file_for(cache, RUN).exists()
    assert "as alice" in annotate(client, S104, headers=_basic("alice", "pw"))[1]
    assert "as anonymous" in annotate(client, S130, "good", headers={"Authorization": "Bearer full-1"})[1]
    who = {a.sample_id: a.who for a in an.read(an.file_for(cache, RUN), 1 << 20).items}
    assert who == {S104: "alice", S130: "anonymous"}


def test_annotations110_unknown_run_or_label_refused(fresh):
    """A run= the board does not know gets no file; a label outside the run's set is refused."""
    client, _, cache = fresh
    assert "no run of this board" in annotate(client, S104, run="../../etc")[1]
    assert "not one of this run's labels" in annotate(client, S104, "<b>x</b>")[1]
    assert not (cache / "annotations").exists() or not any((cache / "annotations").glob("*.jsonl"))


def test_annotations103_megabyte_note_refused_with_message(fresh):
    """A 1 MB note reaches the callback (the body limit is 2 MiB) and is refused with its size and the limit."""
    client, _, cache = fresh
    status, text = annotate(client, S104, note="x" * (1 << 20))
    assert status == 200 and "1,048,576 bytes, over the limit of 8,192 bytes" in text
    assert not an.file_for(cache, RUN).exists()


def test_annotations104_rate_limited_per_user(fresh):
    """RLBOARD_ANNOTATION_RATE writes a minute: the next one is refused with the setting's name."""
    client, configure, _ = fresh
    configure(annotation_rate=2)
    assert "Labelled" in annotate(client, S104)[1] and "Labelled" in annotate(client, S130)[1]
    assert "RLBOARD_ANNOTATION_RATE" in annotate(client, S104, "good")[1]


def test_annotations105_export_jsonl_and_parquet(fresh, fixtures_dir):
    """/export?annotated=1: one row per annotation, the prompt, response and reward of the fixture's line."""
    client, _, _ = fresh
    annotate(client, S104, "reward hack", "<script>alert(1)</script>")
    annotate(client, S130, "good")
    r = client.get(f"/export?run={RUN}&annotated=1&format=jsonl")
    assert r.status_code == 200, r.data[:300]
    rows = [json.loads(x) for x in r.data.decode().splitlines()]
    want = _record(fixtures_dir, "rank0.jsonl", 104)
    assert [row["sample_id"] for row in rows] == [S104, S130]
    first = rows[0]
    assert (first["prompt"], first["response"], first["reward"]) == (
        want["prompt"],
        want["response"],
        want["reward"],
    )
    assert (first["label"], first["note"], first["who"]) == (
        "reward hack",
        "<script>alert(1)</script>",
        "anonymous",
    )
    assert (first["span_from"], first["span_to"], first["line"], first["source"]) == (
        None,
        None,
        104,
        "rank0.jsonl",
    )
    p = client.get(f"/export?run={RUN}&annotated=1&format=parquet&label=good")
    df = pl.read_parquet(io.BytesIO(p.data))
    assert df.get_column("sample_id").to_list() == [S130]
    assert df.item(0, "reward") == _record(fixtures_dir, "rank0.jsonl", 130)["reward"]
    bad = client.get(f"/export?run={RUN}&annotated=1&format=csv")
    assert bad.status_code == 400 and "jsonl, parquet" in bad.get_data(as_text=True)


def test_annotations106_label_filter_in_export_and_view(fresh):
    """label= keeps exactly the responses holding the label (the responses page's filter and /export)."""
    client, _, _ = fresh
    annotate(client, S104, "repetition")
    annotate(client, S130, "repetition")
    annotate(client, S130, "good")  # the same key (response, no span): the latest label wins
    r = client.get(f"/export?run={RUN}&step=all&label=repetition&format=jsonl")
    assert r.status_code == 200, r.data[:300]
    assert [json.loads(x)["sample_id"] for x in r.data.decode().splitlines()] == [S104]
    r = client.get(f"/export?run={RUN}&step=all&label=good&format=jsonl")
    assert [json.loads(x)["sample_id"] for x in r.data.decode().splitlines()] == [S130]
    r = client.get(f"/export?run={RUN}&step=all&label=truncated&format=jsonl")
    assert r.data.decode().strip() == ""


def test_annotations107_survive_restart_and_store_rebuild(fresh, fixtures_dir, monkeypatch):
    """Annotations outlive the server (a new process reads them: the CLI's export) and the store (deleted,
    then rebuilt by that process; and a new STORE_FORMAT, which names a new store folder)."""
    client, _, cache = fresh
    annotate(client, S104, "truncated", "cut")
    from data import service

    settings = service.board().settings
    assert service.board().store(RUN, wait=60) is not None
    store = store_dir_for(cache, fixtures_dir / RUN, settings.pad_tokens)
    assert store.is_dir()
    shutil.rmtree(store)
    out = cache.parent / "annotated.jsonl"
    p = subprocess.run(
        [sys.executable, "app.py", "export", str(fixtures_dir), "--run", RUN, "--annotated", "--format", "jsonl",
         "-o", str(out), "--cache-dir", str(cache)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(r["sample_id"], r["label"], r["note"]) for r in rows] == [(S104, "truncated", "cut")]
    assert rows[0]["response"] == _record(fixtures_dir, "rank0.jsonl", 104)["response"]
    import data.store.layout as layout

    monkeypatch.setattr(layout, "STORE_FORMAT", layout.STORE_FORMAT + 1)
    assert store_dir_for(cache, fixtures_dir / RUN, settings.pad_tokens) != store
    r = client.get(f"/export?run={RUN}&annotated=1")  # the board builds the new format's store first
    assert r.status_code == 200, r.data[:300]
    assert [json.loads(x)["label"] for x in r.data.decode().splitlines()] == ["truncated"]
    assert store_dir_for(cache, fixtures_dir / RUN, settings.pad_tokens).is_dir()


def test_annotations109_page_offers_labels_filter_and_export(fresh):
    """The responses page's layout: the run's labels in the control and the filter (the URL's label chosen),
    the grid's label column, and the links to the annotated dataset."""
    from tests.conftest import router_body

    client, _, _ = fresh
    r = client.post("/_dash-update-component", json=router_body("/responses", f"?run={RUN}&label=good"))
    assert r.status_code == 200
    page = r.get_json()["response"]["_pages_content"]["children"]

    def find(node, cid):
        if isinstance(node, dict):
            if node.get("props", {}).get("id") == cid:
                return node["props"]
            node = list(node.get("props", {}).values())
        if isinstance(node, list):
            for child in node:
                if (hit := find(child, cid)) is not None:
                    return hit
        return None

    assert find(page, "responses-ann-filter")["value"] == "good"
    assert [o["value"] for o in find(page, "responses-ann-label")["options"]] == list(an.DEFAULT_LABELS)
    assert any(c.get("field") == "label" for c in find(page, "responses-grid")["columnDefs"])
    assert f"/export?run={RUN}&annotated=1&format=parquet" in json.dumps(page)


def test_annotations111_in_the_json_answers(fresh):
    """The JSON API shows annotations where it shows responses: /api/v1/responses rows carry the label
    column and honour label=; /api/v1/tokens lists the response's annotations with their span."""
    client, _, _ = fresh
    assert annotate(client, S104, note="short")[0] == 200
    assert annotate(client, S130, "good")[0] == 200
    got = client.get(f"/api/v1/responses?run={RUN}&step=all&label=reward+hack").get_json()
    assert [(r["sample_id"], r["label"]) for r in got["rows"]] == [(S104, "reward hack")]
    assert got["tables"]["responses-grid"]["total"] == 1
    every = client.get(f"/api/v1/responses?run={RUN}&step=all&sort=reward&limit=100").get_json()
    held = {r["sample_id"]: r["label"] for r in every["rows"] if r["label"]}
    assert held.items() <= {S104: "reward hack", S130: "good"}.items()
    tok = client.get(f"/api/v1/tokens?run={RUN}&sample={S104}").get_json()
    rows = tok["tables"]["tokens-annotations"]["rows"]
    assert [(r["label"], r["note"], r["first"], r["last"], r["who"]) for r in rows] == [
        ("reward hack", "short", None, None, "anonymous")
    ]
