"""A run's histogram bins: a first step with more distinct values than a discrete histogram takes settles
them without a scan of every response, and they are those of the whole run's scan."""

from __future__ import annotations

import json

from data import curves
from data.demo import write_demo_run
from data.ingest import ingest_run
from data.queries import MAX_DISCRETE_VALUES
from data.store import open_store
from data.store.reader import RunStore

PADS = ("<pad>", "<|endoftext|>")


def _spied(monkeypatch) -> list:
    seen: list = []
    real = RunStore.scan

    def spy(self, columns=None, step=None, steps=None, hidden=False):
        seen.append((step, steps))
        return real(self, columns, step, steps, hidden)

    monkeypatch.setattr(RunStore, "scan", spy)
    return seen


def test_bins001_continuous_rewards_from_the_first_step(tmp_path, monkeypatch):
    """The demo's rewards (more than MAX_DISCRETE_VALUES distinct in its first step): the run's range
    edges, equal to the whole scan's, with only the first step read."""
    store = open_store(ingest_run(write_demo_run(tmp_path / "r", "d", 6, 64), tmp_path / "c", PADS).store_dir)
    expected = curves.bins_for(curves.run_steps(store), store.scan(["reward"]), ("reward",))
    assert not expected.discrete
    curves._bins.cache_clear()
    seen = _spied(monkeypatch)
    got = curves.run_bins(store, "reward")
    assert got == expected
    assert seen == [(1, None)]


def test_bins002_discrete_rewards_read_the_run(tmp_path, monkeypatch):
    """0 / 1 rewards: one bar per value, from the whole run (a step's few values say nothing of the run's)."""
    run = tmp_path / "run"
    run.mkdir()
    recs = [
        {"prompt": "p", "response": "r", "reward": float((s + k) % 2), "step": s}
        for s in range(3)
        for k in range(4)
    ]
    recs.append({"prompt": "p", "response": "r", "reward": 0.5, "step": 2})
    (run / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    store = open_store(ingest_run(run, tmp_path / "c", PADS).store_dir)
    curves._bins.cache_clear()
    got = curves.run_bins(store, "reward")
    assert got.discrete and got.edges == (0.0, 0.5, 1.0, 1.5)
    assert MAX_DISCRETE_VALUES >= 3
