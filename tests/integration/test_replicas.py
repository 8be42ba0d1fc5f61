"""Replicas: two gunicorn servers (as two containers would be) on one rollout root and one cache folder.
Both serve the same run while a trainer appends to it; the store holds every line exactly once, and both
answer the same export."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import requests

from data.writer import write_rollouts
from tests.integration.test_gunicorn import GunicornServer
from tests.waiting import wait_until

RUN = "replicated"
PER_STEP = 6


def _write_step(run_dir: Path, step: int) -> None:
    n = PER_STEP
    write_rollouts(
        run_dir,
        step,
        [f"prompt {i % 3}" for i in range(n)],
        [f"response {step}-{i}" for i in range(n)],
        [step + i / 10 for i in range(n)],
        rank=0,
    )


def _export(srv: GunicornServer) -> tuple[list[dict], bool]:
    r = requests.get(f"{srv.base}/export", params={"run": RUN, "step": "all", "format": "csv"}, timeout=60)
    assert r.status_code == 200, (r.status_code, r.text[:300])
    return list(csv.DictReader(io.StringIO(r.text))), "X-RLBoard-Incomplete" in r.headers


def _wait_rows(srv: GunicornServer, want: int, timeout: float = 180.0) -> list[dict]:
    """The run's step=all export once it holds ``want`` rows and says it is complete."""
    seen = {}

    def complete() -> list[dict] | None:
        requests.get(f"{srv.base}/reward", params={"run": RUN}, timeout=60)  # a visit asks for a refresh
        rows, incomplete = _export(srv)
        seen.update(rows=len(rows), incomplete=incomplete)
        return rows if len(rows) == want and not incomplete else None

    return wait_until(
        complete, timeout, lambda: f"{srv.base}: {want} rows, complete (saw {seen})\n{srv.log_tail()}", 0.5
    )


def test_replicas001_two_servers_share_one_store(tmp_path):
    """Two servers on one root and one cache folder, a run growing under them: each serves every row exactly
    once, both exports are the same, and the cache holds one store for the run (not one per replica)."""
    root, cache = tmp_path / "root", tmp_path / "cache"
    run_dir = root / RUN
    run_dir.mkdir(parents=True)
    for step in range(3):
        _write_step(run_dir, step)
    env = {"RLBOARD_REFRESH_SECONDS": "1"}
    with (
        GunicornServer(root, cache, workers=1, threads=2, **env) as a,
        GunicornServer(root, cache, workers=1, threads=2, **env) as b,
    ):
        assert _wait_rows(a, 3 * PER_STEP) == _wait_rows(b, 3 * PER_STEP)
        for step in range(3, 6):
            _write_step(run_dir, step)
        rows_b = _wait_rows(b, 6 * PER_STEP)
        rows_a = _wait_rows(a, 6 * PER_STEP)
    assert rows_a == rows_b
    responses = [r["response"] for r in rows_a]
    assert sorted(responses) == sorted(f"response {s}-{i}" for s in range(6) for i in range(PER_STEP))
    stores = [p for p in cache.iterdir() if p.is_dir() and (p / "manifest.json").exists()]
    assert len(stores) == 1, stores
