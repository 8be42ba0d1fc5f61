"""A run of only bad lines on the server and the command line: its exports are empty with a header row,
never a 500 or a traceback."""

from __future__ import annotations

import json

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
