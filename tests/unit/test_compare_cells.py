"""The compare page's shared bins told by the histogram cells written at ingest: the run's distinct rewards
are the scan's, on real runs, the demo and by hand, and no response is read."""

from __future__ import annotations

import json

import pytest

from data.cache import StoreKey
from data.compare import distribution
from data.ingest import ingest_run
from data.queries import MAX_DISCRETE_VALUES, distinct_values
from data.store import open_store
from data.store.reader import RunStore
from tests.conftest import fixture_or_demo

PADS = ("<pad>", "<|endoftext|>")


def _store(tmp_path, rewards: list) -> RunStore:
    run = tmp_path / "root" / "r"
    run.mkdir(parents=True)
    recs = [
        {"prompt": f"p{i % 3}", "response": "r", "reward": x, "step": 1 + i % 4}
        for i, x in enumerate(rewards)
    ]
    (run / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)


def _no_scan(*a, **k):
    raise AssertionError("the compare page's bins scanned the responses")


def test_cmpcells001_distinct_by_hand_without_a_scan(tmp_path, monkeypatch):
    """Rewards 1, 0, -0.0, NaN, inf, 1, 0.5: the distinct finite values 0, 0.5, 1 (-0.0 as 0), from the
    cells; 25 distinct values (more than the limit of 24): none."""
    few = _store(tmp_path / "few", [1, 0, -0.0, "NaN", "Infinity", 1, 0.5])
    many = _store(tmp_path / "many", [i / 7 for i in range(MAX_DISCRETE_VALUES + 1)])
    distribution._distinct.cache_clear()
    monkeypatch.setattr(RunStore, "scan", _no_scan)
    assert distribution._distinct(StoreKey(few), "reward") == (0.0, 0.5, 1.0)
    assert distribution._distinct(StoreKey(many), "reward") is None
    distribution._distinct.cache_clear()


@pytest.mark.parametrize(
    "run",
    [
        "rlloggingboard-eval-poem",
        "trl-ppo-small",
        "trl-grpo-small",
        "real-verl-gsm8k-tools",
        "real-nemo-gym-math",
        None,
    ],
)
def test_cmpcells002_equal_to_the_scan(fixtures_dir, tmp_path, run):
    """On real runs and the demo, the distinct rewards told by the cells are the scan's; a store committed
    without cells is scanned and gives the same."""
    src = fixture_or_demo(fixtures_dir, tmp_path / "root", run, steps=10)
    store = open_store(ingest_run(src, tmp_path / "cache", PADS).store_dir)
    want = distinct_values(store.scan(["reward"]), ("reward",), MAX_DISCRETE_VALUES)
    want = None if want is None else tuple(want)
    old = RunStore(store.dir, store.manifest.without("cells"))
    distribution._distinct.cache_clear()
    assert distribution._distinct(StoreKey(store), "reward") == want
    assert distribution._distinct(StoreKey(old), "reward") == want
    distribution._distinct.cache_clear()
