"""What the fuzz tests found, each a named regression test that failed before its fix (issue 33, item 7)."""

from __future__ import annotations

import json

from data.ingest import ingest_run
from data.store import open_store

PADS = ("<pad>",)


def _good(n: int) -> bytes:
    return b"".join(
        (json.dumps({"prompt": f"p{i}", "response": "r", "reward": 1.0, "step": 1}) + "\n").encode()
        for i in range(n)
    )


def test_found001_lines_of_no_field_are_reported_not_a_crash(tmp_path):
    """Two lines ``{}`` in one block (before: Polars' path conformed them to one row, then failed with a
    ShapeError that stopped the whole run's ingest): each is reported as missing its prompt, every other
    line and file kept. Found by test_fuzz002 (verifiers' results.jsonl; every dialect but NeMo's)."""
    alone, beside = tmp_path / "alone", tmp_path / "beside"
    for run in (alone, beside):
        run.mkdir()
        (run / "results.jsonl").write_bytes(b"{}\n{}\n")
    (beside / "rank0.jsonl").write_bytes(_good(3) + b"{}\n{}\n" + _good(2))
    missing = "missing required field 'prompt'"
    for run, rows, bad in ((alone, 0, {1, 2}), (beside, 5, {1, 2, 4, 5})):
        store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
        assert store.scalars().height == rows
        issues = {(r["source"], r["line"]): r["reason"] for r in store.issues().iter_rows(named=True)}
        assert set(issues.values()) == {missing} and {line for _, line in issues} == bad, issues

