"""The prompt-keyed index written at each commit (data.ingest.prompt_index): one prompt's history read from
it is the scan's, row for row and bit for bit, on real runs, the demo, a growing run and by hand; the page
then reads no response of the run; a store committed without it is scanned."""

from __future__ import annotations

import json

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from data import prompts
from data.demo import write_demo_run
from data.ingest import ingest_run, prompt_index
from data.ingest.prompt_index import INDEX_KEY
from data.store import open_store
from data.store.manifest import Manifest
from data.store.reader import RunStore
from tests.conftest import FIXTURE_RUNS, fixture_or_demo, growing_demo_stores

PADS = ("<pad>", "<|endoftext|>")


def _without_index(store) -> RunStore:
    return RunStore(store.dir, Manifest({k: v for k, v in store.manifest.data.items() if k != INDEX_KEY}))


def _assert_same(store, most: int = 40) -> None:
    """Each prompt's history (up to ``most`` prompts) read through the index equals the scan's."""
    keys = prompts.prompt_table(store).get_column("prompt_key").to_list()
    assert keys
    old = _without_index(store)
    for key in keys[:most]:
        cols = [c for c in prompts.HISTORY_COLUMNS if c in store.schema()]
        assert prompt_index.read(store, key, cols) is not None
        prompts._history.cache_clear()
        got = prompts.history(store, key)
        prompts._history.cache_clear()
        want = prompts.history(old, key)
        assert got.height == want.height > 0
        assert_frame_equal(got, want)


@pytest.mark.parametrize(
    "run",
    [*FIXTURE_RUNS, None],
)
def test_pidx001_history_from_the_index_is_the_scan(fixtures_dir, tmp_path, run):
    """On real runs (groups, advantages, references, packs) and the demo, each prompt's history read from
    the index equals the one read by scanning the run."""
    src = fixture_or_demo(fixtures_dir, tmp_path / "root", run, steps=10)
    store = open_store(ingest_run(src, tmp_path / "cache", PADS).store_dir)
    assert store.manifest.data[INDEX_KEY]["files"]
    _assert_same(store)


def test_pidx002_by_hand_and_no_scan(tmp_path, monkeypatch):
    """Prompt alpha at steps 1, 1 and 3: its three responses, rewards and steps by hand, read without any
    scan of the responses; beta is not among them; an unknown key gives no row."""
    run = tmp_path / "run"
    run.mkdir()
    recs = [
        {"prompt": "alpha", "response": "a", "reward": 1.0, "step": 1},
        {"prompt": "beta", "response": "b", "reward": 9.0, "step": 1},
        {"prompt": "alpha", "response": "c", "reward": 3.0, "step": 1},
        {"prompt": "beta", "response": "d", "reward": 8.0, "step": 2},
        {"prompt": "alpha", "response": "e", "reward": 5.0, "step": 3},
    ]
    (run / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    table = prompts.prompt_table(store)
    key = table.filter(pl.col("prompt_preview") == "alpha").item(0, "prompt_key")

    def no_scan(*a, **k):
        raise AssertionError("one prompt's history scanned the responses")

    prompts._history.cache_clear()
    monkeypatch.setattr(RunStore, "scan", no_scan)
    rows = prompts.history(store, key)
    # Within a step, highest reward first.
    assert rows.select("step", "reward").rows() == [(1, 3.0), (1, 1.0), (3, 5.0)]
    assert rows.get_column("line").to_list() == [3, 1, 5]
    assert prompts.history(store, "no such key").height == 0
    prompts._history.cache_clear()


def test_pidx003_a_growing_run_many_commits(tmp_path, monkeypatch):
    """A run read in many small commits (a file re-read, a partial last step hidden), with files of a few
    rows merged as a binary counter: each commit's index gives the scan's history, the files stay few, and
    only the files the last two commits name stay beside the store."""
    monkeypatch.setattr(prompt_index, "FILE_ROWS", 96)
    root = tmp_path / "root"
    run = write_demo_run(root, "demo", steps=6, per_step=16)
    cache = tmp_path / "cache"
    store = open_store(ingest_run(run, cache, PADS).store_dir)
    _assert_same(store, most=8)
    # Another demo run in its place (every file read again, the first parts dropped), then growing a few
    # lines at a time: commits of a few rows, merged.
    merged = 0
    for store in growing_demo_stores(run, cache, tmp_path / "more", PADS):
        merged += sum(f["name"].split("-")[2] != "1" for f in store.manifest.data[INDEX_KEY]["files"])
        _assert_same(store, most=8)
    assert merged
    # One file rewritten (read again, its parts dropped) while the others' parts stay in the same files.
    first = sorted(run.glob("*.jsonl"))[0]
    lines = first.read_bytes().splitlines(keepends=True)
    first.write_bytes(b"".join(lines[1:]))
    store = open_store(ingest_run(run, cache, PADS, complete=False).store_dir)
    _assert_same(store, most=8)
    # The first run's parts were all dropped: no file holds only theirs any more.
    assert all(f["name"].split("-")[1] != "g000001" for f in store.manifest.data[INDEX_KEY]["files"])
    entry = store.manifest.data[INDEX_KEY]
    assert entry["upto"] == store.manifest.data["next_part"]
    # A file closes once it holds FILE_ROWS rows: at most that plus one part's rows less one.
    largest = max(e["rows"] for e in store.manifest.data["parts"].values())
    assert all(f["rows"] < 96 + largest for f in entry["files"])
    assert len(entry["files"]) <= sum(f["rows"] for f in entry["files"]) // 96 + 8
    named = {f["name"] for f in entry["files"]}
    on_disk = {p.name for p in store.dir.glob(prompt_index.PATTERN)}
    assert named <= on_disk
    assert len(on_disk) <= 2 * len(named) + 4


def test_pidx004_a_store_without_the_index_is_scanned(tmp_path):
    """A store committed before the index (no manifest entry, or one whose file was collected) reads None
    from the index and gives the scan's history."""
    run = write_demo_run(tmp_path / "root", "demo", steps=4, per_step=8)
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    key = prompts.prompt_table(store).item(0, "prompt_key")
    old = _without_index(store)
    assert prompt_index.read(old, key, ["step"]) is None
    prompts._history.cache_clear()
    assert prompts.history(old, key).height > 0
    for f in store.manifest.data[INDEX_KEY]["files"]:
        (store.dir / f["name"]).unlink()
    assert prompt_index.read(store, key, ["step"]) is None
    prompts._history.cache_clear()
    assert_frame_equal(prompts.history(store, key), prompts.history(old, key))
    prompts._history.cache_clear()
