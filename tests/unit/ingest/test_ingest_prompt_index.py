"""The prompt-keyed index written at each commit (data.derived.pidx): one prompt's history read from
it is the scan's, row for row and bit for bit, on real runs, the demo, a growing run and by hand; the page
then reads no response of the run; a store committed without it is scanned."""

from __future__ import annotations

import json
import math

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from data import prompts
from data.demo import write_demo_run
from data.derived import pidx as prompt_index
from data.ingest import ingest_run
from data.prompts import detail as prompt_detail
from data.store import open_store
from data.store.reader import RunStore
from tests.conftest import FIXTURE_RUNS, fixture_or_demo, growing_demo_stores

PADS = ("<pad>", "<|endoftext|>")


def _without_index(store) -> RunStore:
    return RunStore(store.dir, store.manifest.without("pidx"))


def _assert_same(store, most: int = 40) -> None:
    """Each prompt's history (up to ``most`` prompts) read through the index equals the scan's."""
    keys = prompts.prompt_table(store).get_column("prompt_key").to_list()
    assert keys
    old = _without_index(store)
    for key in keys[:most]:
        cols = [c for c in prompts.HISTORY_COLUMNS if c in store.schema()]
        assert prompt_index.read(store, key, cols) is not None
        prompt_detail._history.cache_clear()
        got = prompts.history(store, key)
        prompt_detail._history.cache_clear()
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
    assert store.manifest.derived["pidx"].meta["files"]
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

    prompt_detail._history.cache_clear()
    monkeypatch.setattr(RunStore, "scan", no_scan)
    rows = prompts.history(store, key)
    # Within a step, highest reward first.
    assert rows.select("step", "reward").rows() == [(1, 3.0), (1, 1.0), (3, 5.0)]
    assert rows.get_column("line").to_list() == [3, 1, 5]
    assert prompts.history(store, "no such key").height == 0
    prompt_detail._history.cache_clear()


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
        merged += sum(f["name"].split("-")[2] != "1" for f in store.manifest.derived["pidx"].meta["files"])
        _assert_same(store, most=8)
    assert merged
    # One file rewritten (read again, its parts dropped) while the others' parts stay in the same files.
    first = sorted(run.glob("*.jsonl"))[0]
    lines = first.read_bytes().splitlines(keepends=True)
    first.write_bytes(b"".join(lines[1:]))
    store = open_store(ingest_run(run, cache, PADS, complete=False).store_dir)
    _assert_same(store, most=8)
    # The first run's parts were all dropped: no file holds only theirs any more.
    assert all(f["name"].split("-")[1] != "g000001" for f in store.manifest.derived["pidx"].meta["files"])
    entry = store.manifest.derived["pidx"].meta
    assert entry["upto"] == store.manifest.next_part
    # The files stay as the merges leave them: of two small ones side by side (fewer than half FILE_ROWS
    # rows), the newer holds less than half the older's rows; fewer than FAN full ones of a tier.
    sizes = [f["rows"] for f in entry["files"]]
    half = prompt_index.FILE_ROWS / 2
    assert all(2 * b < a for a, b in zip(sizes, sizes[1:], strict=False) if max(a, b) < half), sizes
    tiers = [prompt_index._tier(n) for n in sizes if n >= half]
    assert all(tiers.count(t) < prompt_index.FAN for t in tiers), sizes
    assert len(sizes) <= 2 * prompt_index.FAN * (max(tiers, default=0) + 1) + math.log2(half) + 1
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
    prompt_detail._history.cache_clear()
    assert prompts.history(old, key).height > 0
    for f in store.manifest.derived["pidx"].meta["files"]:
        (store.dir / f["name"]).unlink()
    assert prompt_index.read(store, key, ["step"]) is None
    prompt_detail._history.cache_clear()
    assert_frame_equal(prompts.history(store, key), prompts.history(old, key))
    prompt_detail._history.cache_clear()


def test_pidx005_one_arrow_read_per_file_no_parquet(tmp_path, monkeypatch):
    """A store written now: each prompt's history reads each index file once, one or two batches of it
    (its rows are fewer than a batch), and never through Parquet (the footer of every file, ~3 ms each);
    the same read one file after the other and several at a time."""
    run = write_demo_run(tmp_path / "root", "demo", steps=6, per_step=16)
    monkeypatch.setattr(prompt_index, "FILE_ROWS", 40)
    monkeypatch.setattr(prompt_index, "BATCH", 8)
    monkeypatch.setattr(prompt_index, "_merge_groups", lambda files: [])  # several files to read
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    files = store.manifest.derived["pidx"].meta["files"]
    assert len(files) >= 2 and all(f["name"].endswith(".arrow") for f in files)
    keys = prompts.prompt_table(store).get_column("prompt_key").to_list()
    want = {k: prompts.history(_without_index(store), k) for k in keys}
    opened, batches = [], []
    real_open = prompt_index.ipc.open_file

    class Counting:
        def __init__(self, src):
            self.reader = real_open(src)
            opened.append(1)

        def __getattr__(self, name):
            return getattr(self.reader, name)

        def get_batch(self, i):
            batches.append(i)
            return self.reader.get_batch(i)

    def no_parquet(*a, **k):
        raise AssertionError("the prompt index was read through Parquet")

    monkeypatch.setattr(prompt_index.ipc, "open_file", Counting)
    monkeypatch.setattr(prompt_index.pl, "scan_parquet", no_parquet)
    monkeypatch.setattr(prompt_index.pl, "read_parquet", no_parquet)
    monkeypatch.setattr(RunStore, "scan", no_parquet)
    # One file after the other, and (more files than READ_ALONE) several at a time on threads: the same.
    for alone in (len(files), 0):
        monkeypatch.setattr(prompt_index, "READ_ALONE", alone)
        for key in keys:
            opened.clear(), batches.clear()
            prompt_detail._history.cache_clear()
            got = prompts.history(store, key)
            assert_frame_equal(got, want[key])
            assert len(opened) == len(files)
            # Each prompt has at most 6 responses here (one per step): in one batch of 8 or across two.
            assert len(batches) <= 2 * len(files)
    prompt_detail._history.cache_clear()


def test_pidx006_batches_by_hand(tmp_path, monkeypatch):
    """Batches of 2 rows of keys a a | a b | c c | null null: each key's rows exactly, across batches, and
    none for keys before, between or after them; the first keys list no batch that starts with null."""
    monkeypatch.setattr(prompt_index, "BATCH", 2)
    rows = pl.DataFrame(
        {
            "prompt_key": ["c", None, "a", "b", "a", "c", None, "a"],
            "part": [1, 1, 1, 1, 2, 2, 2, 2],
            "row": [0, 1, 2, 3, 0, 1, 2, 3],
            "reward": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0],
        }
    )
    with pytest.raises(ValueError):  # the writer is given its rows sorted
        prompt_index._write(tmp_path, "pidx-g000001-1-t.arrow", rows)
    prompt_index._write(tmp_path, "pidx-g000001-1-t.arrow", rows.sort(prompt_index.ORDER, nulls_last=True))
    path = tmp_path / "pidx-g000001-1-t.arrow"
    # Or given its rows as read and their order (what a commit does): the same batches, values and first
    # keys (not the same bytes: a gathered column may carry an all-valid bitmap); a wrong order is refused
    # as unsorted rows are.
    monkeypatch.setattr(prompt_index, "BLOCK", 3)  # several blocks, gathered each from the rows as read
    order = rows.select(pl.arg_sort_by(list(prompt_index.ORDER), nulls_last=True)).to_series()
    prompt_index._write(tmp_path, "pidx-g000001-2-t.arrow", rows, order)
    prompt_index._write(tmp_path, "pidx-g000001-3-t.arrow", rows.sort(prompt_index.ORDER, nulls_last=True))
    given, sorted_ = (prompt_index.ipc.open_file(str(tmp_path / f"pidx-g000001-{k}-t.arrow")) for k in (2, 3))
    assert given.schema.equals(sorted_.schema, check_metadata=True)
    assert given.num_record_batches == sorted_.num_record_batches == 4
    for i in range(4):
        assert given.get_batch(i).equals(sorted_.get_batch(i))
    with pytest.raises(ValueError):
        prompt_index._write(tmp_path, "pidx-g000001-4-t.arrow", rows, order.reverse())
    meta = prompt_index.ipc.open_file(str(path)).schema.metadata[prompt_index.FIRST_KEYS]
    assert json.loads(meta) == ["a", "a", "c"]
    cols = ["part", "row", "reward"]
    for key, want in (
        ("a", [(1, 2, 3.0), (2, 0, 5.0), (2, 3, 8.0)]),
        ("b", [(1, 3, 4.0)]),
        ("c", [(1, 0, 1.0), (2, 1, 6.0)]),
        ("0", []),
        ("ab", []),
        ("bz", []),
        ("d", []),
    ):
        got = prompt_index._from_arrow([prompt_index._read_key(path, key, cols)])[0]
        assert got.columns == cols
        assert got.rows() == want, key


def test_pidx008_files_merged_a_window_of_keys_at_a_time(tmp_path, monkeypatch):
    """Three index files (batches of 4 rows, windows of 2 batches; null keys, keys across batches, a column
    one file lacks, parts dropped) merged a window at a time: the rows, their order, the first keys and each
    key's rows are those of the files merged whole; several windows were read."""
    import random

    monkeypatch.setattr(prompt_index, "BATCH", 4)
    monkeypatch.setattr(prompt_index, "MERGE_WINDOW", 2)
    rng = random.Random(7)
    frames, paths = [], []
    for i, n in enumerate((37, 22, 9)):
        df = pl.DataFrame(
            {
                "prompt_key": [rng.choice("abcdefg") if rng.random() > 0.1 else None for _ in range(n)],
                "part": [10 * i + rng.randint(0, 3) for _ in range(n)],
                "row": list(range(n)),
                "reward": [rng.random() for _ in range(n)],
            },
            schema={"prompt_key": pl.String, "part": pl.Int64, "row": pl.Int64, "reward": pl.Float64},
        )
        if i == 1:
            df = df.with_columns(pl.lit(1, pl.Int64).alias("group_id"))
        df = df.sort(prompt_index.ORDER, nulls_last=True)
        paths.append(tmp_path / f"pidx-g000001-{i + 1}-t.arrow")
        prompt_index._write(tmp_path, paths[-1].name, df)
        frames.append(df)
    live = {0, 1, 3, 10, 11, 12, 20, 22, 23}
    windows = []
    real_rows = prompt_index._Source.rows

    def rows(self, lo, hi, nulls, columns):
        windows.append((lo, hi, nulls))
        return real_rows(self, lo, hi, nulls, columns)

    monkeypatch.setattr(prompt_index._Source, "rows", rows)
    n = prompt_index._merge(tmp_path, "pidx-g000002-1-t.arrow", paths, live)
    want = (
        pl.concat(frames, how="diagonal_relaxed")
        .filter(pl.col("part").is_in(sorted(live)))
        .sort(prompt_index.ORDER, nulls_last=True)
    )
    merged = tmp_path / "pidx-g000002-1-t.arrow"
    got = prompt_index._read_whole(merged)
    assert n == want.height == got.height and want.get_column("prompt_key").null_count()
    assert_frame_equal(got, want)
    meta = prompt_index.ipc.open_file(str(merged)).schema.metadata[prompt_index.FIRST_KEYS]
    assert json.loads(meta) == want.get_column("prompt_key").gather_every(4).drop_nulls().to_list()
    assert len(set(windows)) > 3
    for key in "abcdefgz":
        rows_of = prompt_index._from_arrow([prompt_index._read_key(merged, key, ["part", "row", "reward"])])[
            0
        ]
        assert (
            rows_of.rows() == want.filter(pl.col("prompt_key") == key).select("part", "row", "reward").rows()
        )


def test_pidx009_merge_groups_by_hand(monkeypatch):
    """The runs of files a commit merges: small files (fewer than FILE_ROWS rows) as a binary counter taking
    them one by one, none where each holds less than half the one before (a commit's nine 200-row files
    after a 667-row one, all small, and a small last one, leave three files, not eleven); full files (at
    least half FILE_ROWS) FAN at a time, those of one tier, with the small ones between them; a big read's
    full files not merged."""

    def files(*sizes):
        return [{"name": f"pidx-g000001-{i}-t.arrow", "rows": n} for i, n in enumerate(sizes)]

    monkeypatch.setattr(prompt_index, "FILE_ROWS", 10_000)
    assert prompt_index._merge_groups(files(800, 300, 100, 40)) == []
    assert prompt_index._merge_groups(files(400, 400)) == [(0, 1)]
    # 667 200 200 -> 1067; 200 200 200 -> 600 -> 1667 (files 0-5); 200 200 200 -> 600 (6-8); 89 alone.
    assert prompt_index._merge_groups(files(667, *[200] * 9, 89)) == [(0, 5), (6, 8)]
    assert prompt_index._merge_groups(files(1000, 90, 200, 20)) == [(1, 2)]
    # Full files (at least 50 rows here): FAN = 4, tier 0 below 4 * 50 rows.
    monkeypatch.setattr(prompt_index, "FILE_ROWS", 100)
    monkeypatch.setattr(prompt_index, "FAN", 4)
    assert prompt_index._merge_groups(files(100, 100, 100)) == []  # a big read's files stay
    assert prompt_index._merge_groups(files(30, 60)) == []  # a read's first commit, and its last
    assert prompt_index._merge_groups(files(100, 150, 50, 100)) == [(0, 3)]
    # A small file is not merged into a full one, nor a full one into a small: 30 + 20 make a full one.
    assert prompt_index._merge_groups(files(20, 100, 30, 20)) == [(2, 3)]
    # A commit that ended with a small file (30) between full ones: merged with them once they are four;
    # the small file written after them (20) stays.
    assert prompt_index._merge_groups(files(100, 30, 100, 100, 100, 20)) == [(0, 4)]
    # Sixteen make four of tier 1 (400 rows each), which make one of tier 2.
    assert prompt_index._merge_groups(files(*[100] * 16)) == [(0, 15)]
    # Tiers apart: the four of tier 0 after one of tier 1 are merged, the two of tier 1 not.
    assert prompt_index._merge_groups(files(400, 100, 100, 100, 100, 10)) == [(1, 4)]
    assert prompt_index._tier(199) == 0 and prompt_index._tier(200) == 1 and prompt_index._tier(800) == 2
