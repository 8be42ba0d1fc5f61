"""The steps' histogram cells made at ingest (data.derived.cells): the reward page's heatmap and bins
summed from them are the ones read from every response, by hand and on real runs."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from data import curves, heatmaps, histograms
from data.cache import StoreKey
from data.config import DEFAULT_PAD_TOKENS
from data.derived.cells import read_hist_cells
from data.ingest import ingest_run
from data.queries import MAX_DISCRETE_VALUES
from data.run_context import steps_of
from data.store import open_store
from tests.conftest import fixture_or_demo

PADS = DEFAULT_PAD_TOKENS


def _clear():
    for f in (curves._steps, curves._bins, curves._heatmap):
        f.cache_clear()


def _from_cells(store, kind: str, monkeypatch) -> heatmaps.Heatmap:
    """The heatmap and bins as the page has them, with any read of responses but one step's an error (the
    first step tells a continuous reward, see data.curves._bins)."""
    _clear()
    real = type(store).scan

    def scan(self, columns=None, step=None, **kw):
        assert step is not None and not kw, "read beyond one step"
        return real(self, columns, step=step)

    with monkeypatch.context() as m:
        m.setattr(type(store), "scan", scan)
        return curves.run_heatmap(store, kind)


def _scanned(store, kind: str) -> heatmaps.Heatmap:
    """The heatmap on bins and counts read from every response."""
    columns = histograms.HISTOGRAMS[kind][1]
    steps = store.steps().sort("step")
    b = histograms.bins_for(steps, store.scan(columns), columns)
    return heatmaps.heatmap(
        store.scan(["step", kind]), kind, list(b.edges), list(steps_of(store)), b.discrete
    )


def _same(a: heatmaps.Heatmap, b: heatmaps.Heatmap) -> None:
    assert a.edges == b.edges and a.discrete == b.discrete
    np.testing.assert_array_equal(a.steps, b.steps)
    np.testing.assert_array_equal(a.count, b.count)
    assert a.count.dtype == b.count.dtype
    np.testing.assert_array_equal(a.share, b.share)


def _write(run, recs, name="a.jsonl", mode="w"):
    run.mkdir(parents=True, exist_ok=True)
    with open(run / name, mode) as f:
        f.write("".join(json.dumps(r) + "\n" for r in recs))


def test_cells001_heatmap_by_hand(tmp_path, monkeypatch):
    """Rewards 0..3 (bars 0.2 wide centred on multiples of 0.2: edges -0.1 .. 3.1), a NaN and an infinity
    left out, -0.0 with 0.0; a value on a bar's edge (0.1, 0.5, 2.5) is in the bar above it."""
    # Many distinct values (at the first step: a continuous reward), so that the cells are bars.
    many = [0.5 + i / 1000 for i in range(30)]
    rewards = {1: [0.0, -0.0, 3.0, float("nan"), *many], 2: [1.0, 1.0, 0.1, float("inf"), 2.5]}
    recs = [
        {"prompt": f"p{i}", "response": "r", "reward": r, "step": s}
        for s, rs in rewards.items()
        for i, r in enumerate(rs)
    ]
    _write(tmp_path / "run", recs)
    store = open_store(ingest_run(tmp_path / "run", tmp_path / "cache", PADS).store_dir)
    hm = _from_cells(store, "reward", monkeypatch)
    assert hm.edges[0] == -0.1 and hm.edges[-1] == 3.1 and len(hm.edges) == 17
    count = {int(s): {} for s in hm.steps}
    for b, i in zip(*np.nonzero(hm.count), strict=True):
        count[int(hm.steps[i])][int(b)] = int(hm.count[b, i])
    # bar k = [-0.1 + 0.2 k, ...): 0 -> 0, 0.1 -> 1, 0.5..0.529 -> 3, 1 -> 5, 2.5 -> 13, 3 -> 15
    assert count == {1: {0: 2, 3: 30, 15: 1}, 2: {1: 1, 5: 2, 13: 1}}
    assert hm.share[5, 1] == np.float32(2 / 4)
    _same(hm, _scanned(store, "reward"))


def test_cells002_discrete_bins_by_hand(tmp_path, monkeypatch):
    """A verifier's 0 / 1 rewards (and a 0.5 from step 3 on): one bar per value, told from the cells."""
    recs = [
        {"prompt": "p", "response": "r", "reward": float(i % 2), "ref_reward": 0.0, "step": s}
        for s in (1, 2)
        for i in range(5)
    ]
    recs.append({"prompt": "p", "response": "r", "reward": 0.5, "step": 3})
    _write(tmp_path / "run", recs)
    store = open_store(ingest_run(tmp_path / "run", tmp_path / "cache", PADS).store_dir)
    hm = _from_cells(store, "reward", monkeypatch)
    assert hm.discrete and hm.edges == [0.0, 0.5, 1.0, 1.5]
    assert hm.count.tolist() == [[3, 3, 0], [0, 0, 1], [2, 2, 0]]
    _same(hm, _scanned(store, "reward"))


@pytest.mark.parametrize(
    "run",
    [
        "rlloggingboard-eval-poem",
        "trl-ppo-small",
        "trl-grpo-small",
        "real-verl-gsm8k-tools",
        "real-nemo-gym-math",
        "real-verifiers-math-python",
        None,
    ],
)
def test_cells003_equal_to_the_responses_read(fixtures_dir, tmp_path, monkeypatch, run):
    """On real runs and the demo, the heatmaps (reward, reward gain) summed from the cells are the ones
    read from every response."""
    src = fixture_or_demo(fixtures_dir, tmp_path / "root", run, steps=8)
    store = open_store(ingest_run(src, tmp_path / "cache", PADS).store_dir)
    assert read_hist_cells(store) is not None
    for kind in histograms.HISTOGRAMS:
        _same(_from_cells(store, kind, monkeypatch), _scanned(store, kind))


def test_cells004_a_growing_range(tmp_path, monkeypatch):
    """Steps appended with a wider range (the run's bar width moves: every step's cells made again) give
    the heatmap read from every response, at each commit."""
    run = tmp_path / "run"
    rng = np.random.default_rng(0)

    def recs(steps, scale):
        return [
            {
                "prompt": f"p{i}",
                "response": "r",
                "reward": float(np.round(v, 4)),
                "ref_reward": 0.1,
                "step": s,
            }
            for s in steps
            for i, v in enumerate(rng.normal(0, scale, 40))
        ]

    _write(run, recs(range(3), 0.1))
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    first = _from_cells(store, "reward", monkeypatch)
    _same(first, _scanned(store, "reward"))
    _write(run, recs(range(3, 6), 3.0), mode="a")
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    grown = _from_cells(store, "reward", monkeypatch)
    assert grown.edges[1] - grown.edges[0] > first.edges[1] - first.edges[0]
    _same(grown, _scanned(store, "reward"))
    _write(run, recs(range(6, 7), 3.0), mode="a")
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    assert read_hist_cells(store).filter(pl.col("step") < 6).height
    _same(_from_cells(store, "reward", monkeypatch), _scanned(store, "reward"))


def test_cells005_a_cell_across_an_edge_reads_its_step(tmp_path, monkeypatch):
    """A cell whose values straddle a bar's edge (made with another width) is not summed: its step alone is
    read from the responses, and the heatmap is the scan's."""
    recs = [
        {"prompt": f"p{i}", "response": "r", "reward": i / 10, "step": s} for s in (1, 2) for i in range(30)
    ]
    _write(tmp_path / "run", recs)
    store = open_store(ingest_run(tmp_path / "run", tmp_path / "cache", PADS).store_dir)
    cells = read_hist_cells(store)
    # Step 2's reward cells as one cell: across every edge.
    one = cells.filter((pl.col("step") == 2) & (pl.col("col") == "reward"))
    merged = one.select(
        pl.col("step").first(), pl.col("col").first(), pl.col("lo").min(), pl.col("hi").max(),
        pl.col("n").sum(), pl.col("w").first(),
    )  # fmt: skip
    rest = cells.filter(~((pl.col("step") == 2) & (pl.col("col") == "reward")))
    pl.concat([rest, merged]).write_parquet(store.dir / store.manifest.derived["cells"].name)
    counts, split = heatmaps.cell_histograms(
        pl.concat([rest, merged]), "reward", curves.run_edges(store, "reward"), [1, 2]
    )
    assert split == [2] and counts[:, 0].sum() == 30 and counts[:, 1].sum() == 0
    read = []
    real_scan = type(store).scan

    def scan(self, *a, **k):
        read.append(k.get("steps") or k.get("step"))
        return real_scan(self, *a, **k)

    _clear()
    monkeypatch.setattr(type(store), "scan", scan)
    got = curves._heatmap(StoreKey(store), "reward")
    assert (2, 2) in read
    monkeypatch.undo()
    _same(got, _scanned(store, "reward"))
    assert MAX_DISCRETE_VALUES < 30


def test_cells006_aggregates_written_lz4(tmp_path, monkeypatch):
    """A commit writes the steps summary, the cells and the ends counts with LZ4 (read in about half zstd's
    time); the heatmap read from the cells is the responses' own."""
    import pyarrow.parquet as pq

    recs = [
        {"prompt": f"p{i}", "response": "r" * i, "reward": i / 10, "step": s}
        for s in (1, 2)
        for i in range(30)
    ]
    _write(tmp_path / "run", recs)
    store = open_store(ingest_run(tmp_path / "run", tmp_path / "cache", PADS).store_dir)
    names = [store.manifest.derived[k].name for k in ("steps", "cells", "ends")]
    for name in names:
        meta = pq.ParquetFile(store.dir / name).metadata
        assert {meta.row_group(0).column(i).compression for i in range(meta.num_columns)} == {"LZ4"}, name
    _same(_from_cells(store, "reward", monkeypatch), _scanned(store, "reward"))
