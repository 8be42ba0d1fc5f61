"""Lazy reads of a store on real Parquet files: scans, the index of files, sample lookup, row reads and the
non-null columns, each against a definitional implementation that reads every file whole; and a run that a
writer keeps extending (small parts packed, files collected) while readers query it."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import polars as pl
import pytest

from data.ingest import ingest_run, old_files, part_files
from data.store import open_store, sample_id
from data.store.layout import entry_name

PADS = ("<pad>", "<|endoftext|>")


def rec(step: int, k: int, rank: int) -> dict:
    d = {
        "prompt": f"q{(step * 3 + k) % 5}",
        "response": f"answer {step}-{k}-{rank}",
        "reward": float((step * 7 + k * 3 + rank) % 11) / 4,
        "step": step,
    }
    if step >= 4:
        d["group_id"] = k % 2  # an extra column that later parts have
    if step >= 2:
        d["mixed"] = k if step < 6 else f"v{k}"  # an extra column whose type changes: integer, then text
    if (step, k) == (3, 1):
        d["ref_reward"] = 0.5
    return d


def lines(step: int, rank: int, per: int = 3) -> bytes:
    return b"".join((json.dumps(rec(step, k, rank)) + "\n").encode() for k in range(per))


def grown_store(tmp_path: Path, monkeypatch, steps: int = 12, complete: bool = True):
    """Two rank files appended to a step at a time, one ingest a step, small parts packed four at a time;
    a bad line in rank 1. With ``complete=False`` the last ingest hides the last step."""
    monkeypatch.setattr(part_files, "PACK_AT", 4)
    monkeypatch.setattr(part_files, "PACK_ROWS", 3)
    run = tmp_path / "run"
    run.mkdir()
    cache = tmp_path / "cache"
    res = None
    for s in range(steps):
        for rank in (0, 1):
            extra = b"{broken\n" if (s, rank) == (5, 1) else b""
            with open(run / f"rank{rank}.jsonl", "ab") as f:
                f.write(lines(s, rank, per=5 if s == 7 else 3) + extra)  # step 7: parts too big to pack
        last = s == steps - 1
        res = ingest_run(run, cache, PADS, complete=complete or not last)
    return run, cache, open_store(res.store_dir)


def definitional_scalars(store, hidden: bool = False) -> pl.DataFrame:
    """Every part's rows read whole from its file (its own or its pack's), in part and row order."""
    m = store.manifest
    packs = {p: pack["name"] for pack in m.packs for p in pack["parts"]}
    frames = []
    for pid in sorted(int(k) for k in m.parts):
        if pid in packs:
            df = pl.read_parquet(store.dir / "scalars" / packs[pid]).filter(pl.col("part") == pid)
        elif m.parts[str(pid)]["rows"]:
            df = pl.read_parquet(store.dir / "scalars" / entry_name(pid, m.parts[str(pid)]))
        else:
            continue
        frames.append(df)
    df = pl.concat(frames, how="diagonal_relaxed")
    below = m.visible_below
    return df if hidden or below is None else df.filter(pl.col("step") < below)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    # Built once for the tests that only read it (twelve ingests).
    with pytest.MonkeyPatch.context() as mp:
        return grown_store(tmp_path_factory.mktemp("grown"), mp)[2]


def test_scan001_scan_is_every_file_read_whole(store):
    """The lazy scan holds exactly the rows, columns, types and order of every file read whole, packs and
    loose parts alike; an extra column whose type changed takes the supertype (text)."""
    assert store.packs() and len(store.packs()) >= 3
    want = definitional_scalars(store)
    got = store.scan().collect()
    assert got.equals(want) and got.height == 2 * (11 * 3 + 5)
    assert got.schema["mixed"] == pl.String and got.schema == store.schema()
    assert got.get_column("part").to_list() == sorted(got.get_column("part").to_list())


def test_scan002_steps_and_columns(store):
    """One step, a range of steps and a choice of columns give the definitional rows, in file order."""
    whole = definitional_scalars(store)
    for step in (0, 4, 7, 11):
        want = whole.filter(pl.col("step") == step).select("sample_id", "reward", "mixed")
        assert store.scan(["sample_id", "reward", "mixed"], step=step).collect().equals(want)
    want = whole.filter(pl.col("step").is_between(3, 8)).select("step", "group_id")
    assert store.scan(["step", "group_id", "not-a-column"], steps=(3, 8)).collect().equals(want)
    assert store.scan(["step"], step=99).collect().height == 0


def test_scan003_a_step_opens_only_the_files_holding_it(store):
    """The index names, for a step, exactly the parts with a row of it (from the files' statistics)."""
    whole = definitional_scalars(store)
    for step in range(12):
        want = sorted(set(whole.filter(pl.col("step") == step).get_column("part").to_list()))
        got = sorted(p for seg in store.index().select(step, step) for p in seg.parts)
        assert got == want, step


def test_scan004_lookup_by_sample_id(store):
    """Every sample id leads to its (part, row), as a search of every row finds it; unknown, malformed and
    not-a-string ids give None."""
    whole = definitional_scalars(store)
    for sid, part, row in whole.select("sample_id", "part", "row").iter_rows():
        assert store.lookup(sid) == (part, row)
    assert store.lookup(sample_id("rank0.jsonl", 10_000)) is None
    assert store.lookup(sample_id("rank9.jsonl", 1)) is None
    for bad in (
        None,
        ["x"],
        "",
        "zz-1",
        sample_id("rank0.jsonl", 1) + "x",
        "0" + sample_id("rank0.jsonl", 1),
    ):
        assert store.lookup(bad) is None
    # Rank 1's line 19 is the bad line: no response there.
    assert store.lookup(sample_id("rank1.jsonl", 19)) is None


def test_scan005_read_keys_and_non_null_columns(store):
    """Rows read by key from the parts' row groups equal the scalars, in the keys' order with the scan's
    types; the columns with a value are those of the definitional frame."""
    whole = definitional_scalars(store)
    keys = whole.select("part", "row").sample(n=25, seed=4, shuffle=True)
    cols = ["sample_id", "step", "reward", "mixed", "group_id", "ref_reward"]
    want = keys.join(whole, on=["part", "row"], how="left", maintain_order="left").select(cols)
    assert store.read_keys(keys, cols).equals(want)
    assert store.read_keys(keys.head(0), cols).schema == want.schema
    present = {c for c in whole.columns if whole.get_column(c).null_count() < whole.height}
    assert store.non_null_columns() == present
    assert store.has_column("ref_reward") and not store.has_column("nothing")


def test_scan006_hidden_last_step(tmp_path, monkeypatch):
    """A last step still being written is hidden from scans, lookups and the non-null columns, and only
    there; ``hidden=True`` shows it."""
    _, _, store = grown_store(tmp_path, monkeypatch, steps=9, complete=False)
    below = store.visible_below
    assert below == 8
    assert store.scan().collect().equals(definitional_scalars(store))
    assert store.scan(hidden=True).collect().equals(definitional_scalars(store, hidden=True))
    hidden = definitional_scalars(store, hidden=True).filter(pl.col("step") >= below)
    assert hidden.height and all(store.lookup(s) is None for s in hidden.get_column("sample_id"))
    assert store.scan(step=8).collect().height == 0


def test_scan007_a_run_read_while_it_is_written(tmp_path, monkeypatch):
    """A writer appends and ingests step after step (small parts packed, their own files collected) while
    readers open the store and run the pages' queries: no query fails, and each committed state reads
    consistently (as many scalars as its steps summary counts, every step's rows, lookups)."""
    from data import curves, responses
    from data.queries import ResponseFilter

    monkeypatch.setattr(part_files, "PACK_AT", 4)
    monkeypatch.setattr(part_files, "PACK_ROWS", 3)
    run = tmp_path / "run"
    run.mkdir()
    cache = tmp_path / "cache"
    for rank in (0, 1):
        (run / f"rank{rank}.jsonl").write_bytes(lines(0, rank))
    store_dir = ingest_run(run, cache, PADS).store_dir
    stop = threading.Event()
    errors: list[str] = []
    seen: set[int] = set()

    def write() -> None:
        try:
            for s in range(1, 16):
                for rank in (0, 1):
                    with open(run / f"rank{rank}.jsonl", "ab") as f:
                        f.write(lines(s, rank))
                ingest_run(run, cache, PADS)
        except Exception as e:  # noqa: BLE001 - reported by the test
            errors.append(f"writer: {type(e).__name__}: {e}")
        finally:
            stop.set()

    def read() -> None:
        while not stop.is_set():
            try:
                store = open_store(store_dir)
                steps = store.steps()
                n = int(steps.get_column("n").sum())
                last = int(steps.get_column("step").max())
                df = store.retrying(lambda st: st.scan(["sample_id", "step"]).collect())
                assert df.height >= n  # a later state may have more, never fewer
                rows, count = responses.page_rows(store, ResponseFilter(step=last), "reward", True, 0, 100)
                assert count == 6 and rows.height == 6
                assert store.lookup(rows.item(0, "sample_id")) is not None
                bars = curves.step_bars(store, "reward", last)
                assert int(bars.get_column("count").sum()) == 6
                seen.add(store.generation)
            except Exception as e:  # noqa: BLE001 - reported by the test
                errors.append(f"reader: {type(e).__name__}: {e}")
                stop.set()

    threads = [threading.Thread(target=write)] + [threading.Thread(target=read) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert errors == []
    final = open_store(store_dir)
    assert final.packs() and len(seen) > 3
    assert final.scan().collect().equals(definitional_scalars(final))


def test_scan008_a_state_whose_files_a_commit_collected(tmp_path, monkeypatch):
    """A reader holding a committed state whose loose part files the next commit packed and deleted (parts
    more than KEEP_BEHIND behind the newest) still answers every query, from the state committed now."""
    from data import curves, prompts, responses, tokens
    from data.queries import ResponseFilter

    monkeypatch.setattr(old_files, "KEEP_BEHIND", 8)  # as with 64, in 6 commits rather than 35
    monkeypatch.setattr(part_files, "PACK_AT", 12)
    monkeypatch.setattr(part_files, "PACK_ROWS", 3)
    run = tmp_path / "run"
    run.mkdir()
    cache = tmp_path / "cache"
    for s in range(5):  # 10 small parts, not packed yet
        for rank in (0, 1):
            with open(run / f"rank{rank}.jsonl", "ab") as f:
                f.write(lines(s, rank))
        store_dir = ingest_run(run, cache, PADS).store_dir
    old = open_store(store_dir)
    assert not old.packs()
    first = old.scan(["sample_id"], step=0).collect().item(0, "sample_id")
    for rank in (0, 1):
        with open(run / f"rank{rank}.jsonl", "ab") as f:
            f.write(lines(5, rank))
    ingest_run(run, cache, PADS)
    new = open_store(store_dir)
    assert new.packs() and not (store_dir / "scalars" / entry_name(1, old.manifest.parts["1"])).exists()
    assert old.scan().collect().equals(definitional_scalars(new))
    assert old.lookup(first) == new.lookup(first) is not None
    rows, count = responses.page_rows(old, ResponseFilter(step=0), "reward", True, 0, 10)
    assert count == 6 and rows.get_column("sample_id").to_list()[0] is not None
    assert int(curves.step_bars(old, "reward", 0).get_column("count").sum()) == 6
    assert prompts.prompt_table(old).height == 5
    assert tokens.token_view(old, first, PADS) is not None


def test_scan009_read_keys_reads_each_file_once(tmp_path, monkeypatch):
    """A run of many one-step files (written together, several parts to one file of parts/): the rows of
    keys over every part are read opening each file once (9,990 rows of 10,000 files were a read per
    part), and equal the rows read part by part, in the keys' order."""
    from data.store import rows as row_reads

    run = tmp_path / "run"
    run.mkdir()
    for step in range(1, 61):
        (run / f"{step}.jsonl").write_bytes(lines(step, 0, per=2))
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    assert store.shares_files()
    whole = store.scan(["part", "row", "sample_id"]).collect()
    keys = whole.select("part", "row").sample(fraction=1.0, seed=9, shuffle=True)
    cols = ["sample_id", "step", "reward", "prompt", "response", "mixed"]
    by_part = pl.concat(
        [store.read_rows(int(p), [int(r)], cols) for p, r in keys.iter_rows()], how="diagonal_relaxed"
    ).select(cols)
    opened: list[Path] = []
    real = row_reads._read_file_rows
    monkeypatch.setattr(row_reads, "_read_file_rows", lambda path, *a: opened.append(path) or real(path, *a))
    got = store.read_keys(keys, cols)
    assert len(opened) == len(set(opened)) == len(store.part_files()) < keys.height / 4
    assert got.select(cols).equals(by_part.cast(got.schema))
    assert (
        got.get_column("sample_id").to_list()
        == keys.join(whole, on=["part", "row"], how="left", maintain_order="left")
        .get_column("sample_id")
        .to_list()
    )
