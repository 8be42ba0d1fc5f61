"""A run of only bad lines on the server and the command line: its exports are empty with a header row,
never a 500 or a traceback."""

from __future__ import annotations

import json

from tests.conftest import dash_post, page_url_key, router_body
from tests.integration.test_cli import run_cli

HEADER = "sample_id,step,reward,ref_reward,reward_gain"


def _unusable(root):
    run = root / "unknown-format"
    run.mkdir(parents=True)
    (run / "rank0.jsonl").write_text('{"foo": 1}\n{"bar": [1, 2]}\nnot json\n')
    return run


def test_unusable002_exports_are_a_header_row(client, board_root, tmp_path):
    """/export of a run with no usable line answers 200: CSV a header row, JSON lines nothing, Parquet a
    file with every column and no row."""
    _unusable(tmp_path / "root")
    board_root(tmp_path / "root", cache_dir=tmp_path / "cache")
    r = client.get("/export?run=unknown-format&format=csv")
    assert r.status_code == 200
    assert r.data.decode().splitlines()[0].startswith(HEADER) and len(r.data.decode().splitlines()) == 1
    r = client.get("/export?run=unknown-format&format=jsonl")
    assert (r.status_code, r.data) == (200, b"")
    r = client.get("/export?run=unknown-format&format=parquet")
    assert r.status_code == 200 and r.data[:4] == b"PAR1"


def test_unusable003_command_line_export_and_ingest(tmp_path):
    """`app.py export` prints the header row and exits 0; `app.py ingest --json` counts 3 bad lines."""
    run = _unusable(tmp_path / "root")
    p = run_cli("export", str(tmp_path / "root"), "--run", "unknown-format", cache=tmp_path / "cache")
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert p.stdout.splitlines()[0].startswith(HEADER) and len(p.stdout.splitlines()) == 1
    p = run_cli("ingest", str(run), "--json", cache=tmp_path / "cache")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["runs"][0]["bad_lines"] == 3


def test_unusable004_some_bad_lines_are_said_on_every_page(fixtures_dir, tmp_path, board_root, client):
    """The real TRL fixture's first five lines with two made unreadable (a cut line, then not JSON): the
    store keeps three responses and every page of the run says that two lines are left out (before, only
    the Runs page did, and a page's counts read as the whole run), and Compare says it of that run only; one
    bad line is said in the singular."""
    lines = (fixtures_dir / "trl-grpo-small" / "rank0.jsonl").read_bytes().splitlines(keepends=True)[:5]
    lines[1] = lines[1][:40] + b"\n"
    lines[3] = b"not json\n"
    run = tmp_path / "root" / "partly-bad"
    run.mkdir(parents=True)
    (run / "rank0.jsonl").write_bytes(b"".join(lines))
    (tmp_path / "root" / "good").mkdir()
    (tmp_path / "root" / "good" / "rank0.jsonl").write_bytes(b"".join(lines[i] for i in (0, 2, 4)))
    b = board_root(tmp_path / "root", cache_dir=tmp_path / "cache")
    store = b.store("partly-bad", wait=60)
    assert store is not None and sum(p["rows"] for p in store.manifest.parts.values()) == 3
    said = "2 lines of the run's files could not be read and are left out of every figure"
    assert any(said in n for n in b.failure_notices("partly-bad"))
    for path in ("/reward", "/responses", "/tokens"):
        page = json.dumps(
            client.post("/_dash-update-component", json=router_body(path, "?run=partly-bad")).get_json()
        )
        assert said in page, path
    prompts = dash_post(  # the prompts page says its notices from its own callback
        client,
        "..prompts-content.children...prompts-notices.children...prompts-header.children...prompts-controls.style..",
        [{"id": page_url_key("/prompts"), "property": "search", "value": "?run=partly-bad"}],
    )
    assert said in json.dumps(prompts)
    page = json.dumps(
        client.post(
            "/_dash-update-component", json=router_body("/compare", "?run=good&run=partly-bad")
        ).get_json()
    )
    assert f"partly-bad: {said}" in page and "good: " not in page
    (run / "rank0.jsonl").write_bytes(b"".join(lines[:2]) + lines[2])
    b = board_root(tmp_path / "root", cache_dir=tmp_path / "cache2")
    assert b.store("partly-bad", wait=60) is not None
    assert any(
        n.startswith("One line of the run's files could not be read") for n in b.failure_notices("partly-bad")
    )
