"""A run's histogram bins: a first step with more distinct values than a discrete histogram takes settles
them without a scan of every response, and they are those of the whole run's scan."""

from __future__ import annotations

import json

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from data import curves, heatmaps, histograms
from data.demo import write_demo_run
from data.ingest import ingest_run
from data.queries import MAX_DISCRETE_VALUES
from data.run_context import steps_of
from data.store import open_store
from data.store.reader import RunStore
from tests.conftest import FIXTURE_RUNS, fixture_or_demo

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
    edges, equal to the whole scan's, told by the histogram cells with no response read; without the cells,
    with only the first step read."""
    store = open_store(ingest_run(write_demo_run(tmp_path / "r", "d", 6, 64), tmp_path / "c", PADS).store_dir)
    expected = histograms.bins_for(curves.run_steps(store), store.scan(["reward"]), ("reward",))
    assert not expected.discrete
    curves._bins.cache_clear()
    seen = _spied(monkeypatch)
    assert curves.run_bins(store, "reward") == expected
    assert seen == []
    monkeypatch.setattr(curves, "read_hist_cells", lambda store: None)  # a store committed without cells
    curves._bins.cache_clear()
    curves._cells.cache_clear()
    assert curves.run_bins(store, "reward") == expected
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


@pytest.mark.parametrize("run", [*FIXTURE_RUNS, None])
def test_bins003_step_bars_from_the_cells_read_no_response(fixtures_dir, tmp_path, monkeypatch, run):
    """On every fixture run and the demo: each step's reward, reference reward and gain bars, the run's bins
    and the heatmap are told from the histogram cells with no scan of the responses (nor the store's
    schema), and equal those counted from the responses."""
    store = open_store(
        ingest_run(fixture_or_demo(fixtures_dir, tmp_path / "r", run, 6), tmp_path / "c", PADS).store_dir
    )
    steps = list(steps_of(store))
    want = {}
    for kind, (_, cols) in histograms.HISTOGRAMS.items():
        edges = curves.run_edges(store, kind)
        for col in (kind, *(c for c in cols if c != kind)):
            every = store.scan(["step", col]).collect()  # read once; each step's bars counted from it
            for s in steps:
                want[kind, col, s] = histograms.bars(every, col, s, edges)
    hm = heatmaps.heatmap(store.scan(["step", "reward"]), "reward", curves.run_edges(store, "reward"), steps,
                        curves.run_bins(store, "reward").discrete)  # fmt: skip
    for f in (curves._bins, curves._bars, curves._heatmap, curves._cells):
        f.cache_clear()
    told = set(curves._cells(curves.StoreKey(store)).get_column("col"))
    assert "reward" in told and (run or {"ref_reward", "reward_gain"} <= told)
    seen = _spied(monkeypatch)
    monkeypatch.setattr(RunStore, "schema", lambda self: pytest.fail("read the store's schema"))
    for (kind, col, s), bars in want.items():
        if col in told:  # a column without a cell (no reference rewards): read, as before
            assert_frame_equal(curves.step_bars(store, kind, s, col), bars)
    got = curves.run_heatmap(store, "reward")
    assert seen == []
    assert got.edges == hm.edges and got.discrete == hm.discrete
    assert (got.steps == hm.steps).all() and (got.count == hm.count).all() and (got.share == hm.share).all()


def test_bins004_a_steps_cells_found_sorted_or_not(tmp_path):
    """A step's bars from the cells are the same whether its cells are found by bisection (cells sorted by
    step, as ingest writes them) or by a filter (cells in any order)."""
    store = open_store(ingest_run(write_demo_run(tmp_path / "r", "d", 6, 32), tmp_path / "c", PADS).store_dir)
    cells = curves._cells(curves.StoreKey(store))
    shuffled = cells.sample(fraction=1.0, shuffle=True, seed=3)
    edges = curves.run_edges(store, "reward")
    for s in steps_of(store):
        want = curves.cell_bars(cells, "reward", s, edges)
        assert want is not None and want.get_column("count").sum() > 0
        assert_frame_equal(curves.cell_bars(shuffled, "reward", s, edges), want)


def test_bins005_the_first_cells_values_settle_continuous_bins(tmp_path, monkeypatch):
    """Ten steps of 3 rewards each, 30 distinct in all: the first step's cells hold 3 to 4 values, the first
    cells together more than a discrete histogram takes, so the run's range edges (the whole scan's) come
    with no pass over every step's cells and no response read. Bars of few edges alone cannot tell (their
    rows may hold steps not shown yet)."""
    run = tmp_path / "run"
    run.mkdir()
    recs = [
        {"prompt": "p", "response": "r", "reward": s + k / 7, "step": s}
        for s in range(1, 11)
        for k in range(3)
    ]
    (run / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    store = open_store(ingest_run(run, tmp_path / "c", PADS).store_dir)
    cells = curves._cells(curves.StoreKey(store)).filter(pl.col("col") == "reward")
    first = cells.filter(pl.col("step") == 1)
    assert pl.concat([first["lo"], first["hi"]]).n_unique() <= 4 and cells.get_column("w").is_not_nan().all()
    assert curves.cells_distinct(first, ("reward",), MAX_DISCRETE_VALUES) is False
    expected = histograms.bins_for(curves.run_steps(store), store.scan(["reward"]), ("reward",))
    assert not expected.discrete and len(expected.edges) > MAX_DISCRETE_VALUES // 2
    curves._bins.cache_clear()
    seen = _spied(monkeypatch)
    monkeypatch.setattr(curves, "cells_distinct", lambda *a: pytest.fail("every step's cells read"))
    assert curves.run_bins(store, "reward") == expected
    assert seen == []


def test_bins006_the_cells_columns_found_once_per_commit(tmp_path, monkeypatch):
    """The columns the cells count are found once for a commit, not at each step's bars (a pass over every
    step's cells)."""
    store = open_store(ingest_run(write_demo_run(tmp_path / "r", "d", 6, 32), tmp_path / "c", PADS).store_dir)
    calls = []
    real = curves._names_in
    monkeypatch.setattr(curves, "_names_in", lambda cells: calls.append(1) or real(cells))
    for s in steps_of(store):
        assert [h.bars is not None for h in curves.histogram_panels(store, s)] == [True, True]
    assert len(calls) == 1
