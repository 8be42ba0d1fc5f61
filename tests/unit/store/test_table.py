"""The store as a Delta Lake table: DuckDB (and Polars) read a run's store by the files its log lists, and two
processes ingesting one run into one store commit its rows exactly once."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import duckdb
import polars as pl
import pytest
from deltalake import DeltaTable

from data.config import DEFAULT_PAD_TOKENS
from data.demo import write_demo_run
from data.ingest import ingest_run
from data.store import open_store
from data.store.layout import STEP_BLOCK
from data.store.manifest import Manifest
from data.store.table import CommitConflict
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[3]


def by_hand(run: Path) -> dict[int, tuple[int, float]]:
    """Per step, the count and mean reward of the source lines, read as plain JSON (no code of the app)."""
    rewards: dict[int, list[float]] = defaultdict(list)
    for path in sorted(run.glob("*.jsonl")):
        for text in path.read_text().splitlines():
            rec = json.loads(text)
            rewards[int(rec["step"])].append(float(rec["reward"]))
    return {s: (len(r), math.fsum(r) / len(r)) for s, r in rewards.items()}


def duckdb_steps(store_dir: Path) -> dict[int, tuple[int, float]]:
    """Per step, the count and mean reward DuckDB reads from the files the table's log lists."""
    files = DeltaTable(str(store_dir)).file_uris()
    rows = duckdb.sql(
        "SELECT step, count(*), avg(reward) FROM read_parquet($files, hive_partitioning = true, "
        "union_by_name = true) GROUP BY step",
        params={"files": files},
    ).fetchall()
    return {s: (n, r) for s, n, r in rows}


def assert_same(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for s, (n, r) in want.items():
        assert got[s][0] == n and got[s][1] == pytest.approx(r, rel=1e-12, abs=1e-12), s


def test_table001_duckdb_reads_the_demo_store(tmp_path):
    """DuckDB reads the demo run's store (the files the Delta log lists, partitioned by step block): per-step
    counts and mean rewards equal those computed by hand from the source files, and Polars' scan_delta
    reads the same table."""
    run = write_demo_run(tmp_path / "root", steps=150, per_step=16)  # steps of 3 blocks
    store_dir = ingest_run(run, tmp_path / "cache", DEFAULT_PAD_TOKENS).store_dir
    want = by_hand(run)
    assert_same(duckdb_steps(store_dir), want)
    files = DeltaTable(str(store_dir)).file_uris()
    assert files and all("/parts/step_block=" in f for f in files)
    blocks = duckdb.sql(
        "SELECT DISTINCT step_block, step // $b FROM read_parquet($files, hive_partitioning = true)",
        params={"files": files, "b": STEP_BLOCK},
    ).fetchall()
    assert sorted(blocks) == [(0, 0), (1, 1), (2, 2)]  # each row in the partition of its step
    polars = pl.scan_delta(str(store_dir)).group_by("step").agg(pl.len(), pl.col("reward").mean()).collect()
    assert_same({s: (n, r) for s, n, r in polars.iter_rows()}, want)


def test_table002_duckdb_reads_a_real_run_store(tmp_path, fixtures_dir):
    """DuckDB reads the store of TRL's PPO run (a real fixture): per-step counts and mean rewards equal those
    computed by hand from its rank files."""
    run = tmp_path / "trl-ppo-small"
    run.mkdir()
    for p in (fixtures_dir / "trl-ppo-small").glob("*.jsonl"):
        (run / p.name).write_bytes(p.read_bytes())
    result = ingest_run(run, tmp_path / "cache", DEFAULT_PAD_TOKENS)
    assert result.bad_lines == 0
    assert_same(duckdb_steps(result.store_dir), by_hand(run))


INGEST = """
import sys
from pathlib import Path
from data.config import DEFAULT_PAD_TOKENS
from data.ingest import ingest_run
from tests.waiting import wait_until
go, ready = Path(sys.argv[3]), Path(sys.argv[4])
ready.touch()
wait_until(go.exists, 300, "the go file", interval=0.005)
r = ingest_run(Path(sys.argv[1]), Path(sys.argv[2]), DEFAULT_PAD_TOKENS, local_lock=False)
print(int(r.lost_commit), r.new_rows, r.samples)
"""


def test_table003_two_processes_commit_a_run_once(tmp_path):
    """Two processes ingest one run into one store at once without the file lock (two hosts sharing a
    store): the table's commit protocol lets one commit, the other's commit is refused and its files are
    deleted; the store holds every source line exactly once. A later ingest by the loser finds nothing new."""
    run = write_demo_run(tmp_path / "root")
    cache = tmp_path / "cache"
    go = tmp_path / "go"
    ready = [tmp_path / f"ready{k}" for k in range(2)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", INGEST, str(run), str(cache), str(go), str(ready[k])],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        for k in range(2)
    ]
    # Both started (their imports take seconds on a loaded machine) and waiting: then they race.
    wait_until(lambda: all(r.exists() for r in ready), 300, "both ingest processes to start")
    go.touch()
    outs = [p.communicate(timeout=300)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    lost = sorted(int(o[0]) for o in outs)
    assert lost == [0, 1], outs  # exactly one commit was refused
    want = by_hand(run)
    total = sum(n for n, _ in want.values())
    assert all(int(o[2]) == total for o in outs), (outs, total)  # both report the committed state
    store = open_store(ingest_run(run, cache, DEFAULT_PAD_TOKENS).store_dir)
    assert store.generation == 1  # nothing new: no further commit
    files = DeltaTable(str(store.dir)).file_uris()
    keys = duckdb.sql(
        "SELECT count(*), count(DISTINCT (source, line)) FROM read_parquet($files, union_by_name = true)",
        params={"files": files},
    ).fetchall()
    assert keys == [(total, total)]
    assert_same(duckdb_steps(store.dir), want)
    on_disk = {str(p) for p in (store.dir / "parts").glob("*/*.parquet")}
    assert on_disk == set(files)  # the loser's files are gone
    assert store.scan(["sample_id"]).collect().height == total


def test_table004_manifest_file_is_compact_json(tmp_path):
    """``manifest.json`` and the manifest file the last commit names hold the same compact JSON (no
    indentation: every check of a run parses it): same bytes, one line, equal to the data once loaded."""
    run = write_demo_run(tmp_path / "root", steps=20, per_step=8)
    store_dir = ingest_run(run, tmp_path / "cache", DEFAULT_PAD_TOKENS).store_dir
    raw = (store_dir / "manifest.json").read_bytes()
    named = (
        store_dir / "manifests" / DeltaTable(str(store_dir)).history(1)[0]["rlboard.manifest"]
    ).read_bytes()
    for b in (raw, named):
        assert b"\n" not in b and b'": ' not in b
    data = json.loads(raw)
    assert Manifest.from_dict(data) == open_store(store_dir).manifest
    # The same state; manifest.json also names the table's version that holds it.
    assert data.pop("table_version") == DeltaTable(str(store_dir)).version()
    assert data == json.loads(named)


def grow(run: Path, src: Path, cut: int) -> None:
    """``run``'s files as ``src``'s without their last ``cut`` lines."""
    for f in sorted(src.glob("*.jsonl")):
        lines = f.read_bytes().splitlines(keepends=True)
        (run / f.name).write_bytes(b"".join(lines[: len(lines) - cut]))


def test_table005_a_check_that_finds_nothing_opens_no_table(tmp_path, monkeypatch):
    """A check of a run whose files did not change opens no Delta table while manifest.json names the log's
    last version; a change then commits on that version. A manifest.json a later commit overtook (a writer that
    died before its copy) is still put right from the log, and a commit on a version no longer the last is
    refused."""
    from data.store.table import TableAt, commit_table, table_files

    src = write_demo_run(tmp_path / "src", "demo", steps=12, per_step=8)
    run = tmp_path / "root" / "demo"
    run.mkdir(parents=True)
    grow(run, src, 20)
    cache = tmp_path / "cache"
    first = ingest_run(run, cache, DEFAULT_PAD_TOKENS)
    store_dir = first.store_dir
    v0 = DeltaTable(str(store_dir)).version()
    old_bytes = (store_dir / "manifest.json").read_bytes()
    assert json.loads(old_bytes)["table_version"] == v0

    def refuse(*a, **k):
        raise AssertionError("the table was opened")

    with monkeypatch.context() as m:
        m.setattr("data.store.table.DeltaTable", refuse)
        again = ingest_run(run, cache, DEFAULT_PAD_TOKENS)
    assert (again.generation, again.samples, again.steps) == (first.generation, first.samples, first.steps)
    assert (store_dir / "manifest.json").read_bytes() == old_bytes

    grow(run, src, 0)  # the rest of the lines: committed on the version manifest.json named
    grown = ingest_run(run, cache, DEFAULT_PAD_TOKENS)
    assert grown.generation == first.generation + 1 and grown.samples == 12 * 8
    table = DeltaTable(str(store_dir))
    assert (
        table.version() == v0 + 1 == json.loads((store_dir / "manifest.json").read_bytes())["table_version"]
    )
    assert_same(duckdb_steps(store_dir), by_hand(run))

    # manifest.json as before the last commit: the log has a later one, so it is read and the copy put right.
    (store_dir / "manifest.json").write_bytes(old_bytes)
    fixed = ingest_run(run, cache, DEFAULT_PAD_TOKENS)
    assert (fixed.generation, fixed.samples) == (grown.generation, 12 * 8)
    assert json.loads((store_dir / "manifest.json").read_bytes())["table_version"] == v0 + 1

    # A writer that read version v0 cannot commit over v0 + 1.
    data = json.loads(old_bytes)
    with pytest.raises(CommitConflict):
        commit_table(
            store_dir, TableAt(store_dir, v0), table_files(data), {}, {}, data["generation"] + 1, "x.json"
        )
    assert DeltaTable(str(store_dir)).version() == v0 + 1
