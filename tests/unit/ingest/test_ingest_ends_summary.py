"""Ended and cut responses counted per part and step at ingest (data.derived.ends): by hand, equal to
the count read from the parts' token lists, and what the reward page's truncation curve reads."""

from __future__ import annotations

import json

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from data import signals
from data.config import DEFAULT_END_TOKENS, DEFAULT_PAD_TOKENS
from data.derived.ends import counted_with
from data.ingest import ingest_run
from data.store import open_store
from data.store.reader import RunStore
from tests.conftest import fixture_or_demo

PADS = DEFAULT_PAD_TOKENS
ENDS = DEFAULT_END_TOKENS


def _scanned(store) -> pl.DataFrame:
    """The curve as reading every part's token lists gives it (the counts' file unnamed)."""
    bare = RunStore(store.dir, store.manifest.without("ends"))
    assert not counted_with(bare.manifest, PADS, ENDS)
    signals._truncation.cache_clear()
    return signals.truncation_by_step(bare, PADS, ENDS)


def _counted(store, monkeypatch) -> pl.DataFrame:
    """The curve from the counts, with any read of the parts an error."""
    assert counted_with(store.manifest, PADS, ENDS)
    signals._truncation.cache_clear()
    with monkeypatch.context() as m:
        m.setattr(signals, "_ends_frames", lambda *a, **k: (_ for _ in ()).throw(AssertionError("read")))
        return signals.truncation_by_step(store, PADS, ENDS)


def test_ends001_counts_by_hand(tmp_path, monkeypatch):
    """Step 1: ended by its last non-pad token, cut, all pads (neither); step 2: by text without tokens."""
    run = tmp_path / "run"
    run.mkdir()
    recs = [
        {"prompt": "p", "response": "a.", "reward": 1.0, "step": 1, "response_tokens": ["a", "<|im_end|>"]},
        {"prompt": "p", "response": "a b", "reward": 1.0, "step": 1, "response_tokens": ["a", "b", "<pad>"]},
        {"prompt": "p", "response": "", "reward": 1.0, "step": 1, "response_tokens": ["<pad>", "<pad>"]},
        {"prompt": "p", "response": "done</s>", "reward": 1.0, "step": 2},
        {"prompt": "p", "response": "cut off", "reward": 1.0, "step": 2},
    ]
    (run / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    got = _counted(store, monkeypatch)
    assert got.select("step", "n", "ended", "truncated").rows() == [(1, 3, 1, 1), (2, 2, 1, 1)]
    assert got.get_column("y").to_list() == [1 / 3, 1 / 2]
    assert_frame_equal(got, _scanned(store))


@pytest.mark.parametrize(
    "run", ["rlloggingboard-eval-poem", "trl-ppo-small", "real-verl-gsm8k-tools", "real-nemo-gym-math", None]
)
def test_ends002_equal_to_the_parts_read(fixtures_dir, tmp_path, monkeypatch, run):
    """On real runs and the demo (one line per file: parts written together), the counted curve is the
    one read from the parts' token lists."""
    src = fixture_or_demo(fixtures_dir, tmp_path / "root", run, steps=8)
    store = open_store(ingest_run(src, tmp_path / "cache", PADS).store_dir)
    assert_frame_equal(_counted(store, monkeypatch), _scanned(store))


def test_ends003_many_small_files_and_a_hidden_step(tmp_path, monkeypatch):
    """Many one-step files (written together into shared files and packs) and a partial last step hidden
    by ``complete=False``: the counts are per part, and the hidden step is left out as the read leaves it."""
    run = tmp_path / "run"
    run.mkdir()
    for s in range(40):
        recs = [
            {"prompt": f"p{k}", "response": "x</s>" if (s + k) % 3 else "x", "reward": 1.0, "step": s}
            for k in range(3)
        ]
        (run / f"step{s:03d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    assert any("in" in e for e in store.manifest.parts.values())  # written together
    assert_frame_equal(_counted(store, monkeypatch), _scanned(store))
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for r in range(2):
        last = 5 if r else 6  # rank 0 is a step ahead: steps from 5 on may be partial
        recs = [{"prompt": "q", "response": "y" * (s % 2), "reward": 0.0, "step": s} for s in range(last + 1)]
        (ranks / f"rank{r}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in recs))
    store = open_store(ingest_run(ranks, tmp_path / "cache", PADS, complete=False).store_dir)
    assert store.visible_below == 5
    got = _counted(store, monkeypatch)
    assert got.get_column("step").to_list() == [0, 1, 2, 3, 4]
    assert_frame_equal(got, _scanned(store))


def test_ends004_counts_in_a_file_of_each_commit(tmp_path, monkeypatch):
    """The counts are in the commit's file, not in the parts' entries (equal curve at each commit); files
    of older commits are collected."""
    run = tmp_path / "run"
    run.mkdir()

    def write(steps):
        recs = [
            {"prompt": f"p{k}", "response": "x</s>" if (s + k) % 3 else "x y", "reward": 1.0, "step": s}
            for s in steps
            for k in range(4)
        ]
        with (run / "a.jsonl").open("a") as f:
            f.write("".join(json.dumps(r) + "\n" for r in recs))

    write(range(3))
    cache = tmp_path / "cache"
    store = open_store(ingest_run(run, cache, PADS).store_dir)
    assert store.manifest.derived["ends"].name.startswith("ends-g")
    assert not any("ends" in e for e in store.manifest.parts.values())
    before = _counted(store, monkeypatch)
    assert before.select("step", "n", "ended", "truncated").rows() == [
        (0, 4, 2, 2),
        (1, 4, 3, 1),
        (2, 4, 3, 1),
    ]
    write(range(3, 5))
    after = open_store(ingest_run(run, cache, PADS).store_dir)
    assert after.manifest.derived["ends"].name
    got = _counted(after, monkeypatch)
    assert_frame_equal(got.filter(pl.col("step") < 3), before)
    assert got.get_column("step").to_list() == [0, 1, 2, 3, 4]
    assert_frame_equal(got, _scanned(after))
    write(range(5, 6))
    last = open_store(ingest_run(run, cache, PADS).store_dir)
    kept = sorted(p.name for p in last.dir.glob("ends-g*.parquet"))
    assert last.manifest.derived["ends"].name in kept and len(kept) <= 2  # this commit's and the one before
