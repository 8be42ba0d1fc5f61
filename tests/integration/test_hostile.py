"""A hostile rollout root served: links that loop or lead out, FIFOs and endless settings files beside a
good run; the server keeps answering, the good run keeps every row, and each bad thing is said (issue 33)."""

from __future__ import annotations

import json
import os

from data.store.reading import understood
from tests.conftest import router_body


def _lines(step: int, n: int) -> str:
    return "".join(
        json.dumps({"prompt": f"p{i}", "response": f"r{i}", "reward": float(i), "step": step}) + "\n"
        for i in range(n)
    )


def test_hostile001_loops_fifos_and_endless_files_cost_only_themselves(tmp_path, board_root, client):
    """Before: one symlink loop in a run folder gave /healthz 500 and every page 400; a FIFO named
    rlboard.toml hung its run forever; rlboard.toml linked to /dev/zero was read without end."""
    root = tmp_path / "root"
    good, other = root / "good", root / "other"
    good.mkdir(parents=True)
    other.mkdir()
    for run in (good, other):
        (run / "rank0.jsonl").write_text(_lines(1, 4) + _lines(2, 4))
    (good / "loop").symlink_to("loop")
    (good / "rlboard.toml").symlink_to("/dev/zero")
    (good / "trainer_state.json").symlink_to("/dev/zero")
    os.mkfifo(other / "rlboard.toml")
    os.mkfifo(other / "rank1.jsonl")
    (root / "etc").symlink_to("/etc", target_is_directory=True)
    (root / "a").symlink_to("b")
    (root / "b").symlink_to("a")
    b = board_root(root)

    r = client.get("/healthz")
    assert r.status_code == 200 and r.get_json()["runs"] == 2
    for run in ("good", "other"):
        store = b.store(run, wait=60)
        assert store is not None and store.scalars().height == 8, run
    assert b.scan().outside == {"etc": "/etc"}
    assert b.scan().skipped == {
        "a": "a symlink loop",
        "b": "a symlink loop",
        "good/loop": "a symlink loop",
        "good/rlboard.toml": "a link out of good/ (to /dev/zero)",
        "good/trainer_state.json": "a link out of good/ (to /dev/zero)",
        "other/rank1.jsonl": "a FIFO",
        "other/rlboard.toml": "a FIFO",
    }
    page = json.dumps(client.post("/_dash-update-component", json=router_body("/", "")).get_json())
    assert "7 entries under" in page and "good/loop: a symlink loop" in page
    assert "other/rank1.jsonl: a FIFO" in page
    notes = " ".join(understood(b.store("other")).notes + understood(b.store("good")).notes)
    assert "rlboard.toml: not read: rlboard.toml is a FIFO" in notes, notes
    assert "rlboard.toml is a link out of good/" in notes, notes
    assert client.get("/export?run=good&step=all&format=jsonl").status_code == 200


def test_hostile002_outlying_steps_and_overflowing_rewards_cost_only_themselves(tmp_path, board_root, client):
    """One line at step 2^40 (before: the whole run showed "0 samples, 0 steps" and exported nothing) and
    rewards of 1e40 and ±1.7e308 (before: the ingest crashed on a histogram width of 10**39, a Python int
    too large for Polars, and left no store): every row is kept and shown, every page answers."""
    root = tmp_path / "root"
    run = root / "odd"
    run.mkdir(parents=True)
    lines = _lines(1, 4) + _lines(2, 4) + _lines(2**40, 1)
    odd = [{"prompt": "x", "response": "y", "reward": r, "step": 2} for r in (1e40, 1.7e308, -1.7e308)]
    (run / "rank0.jsonl").write_text(lines + "".join(json.dumps(o) + "\n" for o in odd))
    b = board_root(root)
    store = b.store("odd", wait=60)
    assert store is not None
    steps = store.steps()
    assert steps.get_column("step").to_list() == [1, 2, 2**40]
    assert steps.get_column("n").to_list() == [4, 7, 1]
    r = client.get("/export?run=odd&step=all&format=jsonl")
    assert r.status_code == 200
    assert len([ln for ln in r.get_data(as_text=True).splitlines() if '"step"' in ln]) == 12
    for path in ("/reward", "/responses", "/prompts"):
        for search in ("?run=odd", "?run=odd&step=2", f"?run=odd&step={2**40}"):
            page = client.post("/_dash-update-component", json=router_body(path, search))
            assert page.status_code == 200, (path, search)


def test_hostile003_export_of_a_run_that_failed_says_why(tmp_path, board_root, client):
    """A run whose ingest fails (its store's folder taken by a file) answers /export with 503 and why it
    failed and when it is tried again (before: "still being read", as if it would come)."""
    from data.store import store_dir_for

    root = tmp_path / "root"
    (root / "stuck").mkdir(parents=True)
    (root / "stuck" / "rank0.jsonl").write_text(_lines(1, 2))
    b = board_root(root)
    blocked = store_dir_for(b.settings.cache_dir, root / "stuck", b.settings.pad_tokens)
    blocked.parent.mkdir(parents=True, exist_ok=True)
    blocked.write_text("not a folder")
    try:
        r = client.get("/export?run=stuck&step=all&format=csv")
        assert r.status_code == 503
        text = r.get_data(as_text=True)
        assert text.startswith("Reading run stuck failed (1 time in a row): ") and "Tried again in" in text, (
            text
        )
    finally:
        blocked.unlink()
