"""Incremental ingest: every bad-input case, appends, truncation, replacement, crashes, id stability."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from data.ingest import blocks as ingest_blocks
from data.ingest import fast as ingest_fast
from data.ingest import ingest_run, part_files
from data.ingest import slow as ingest_slow
from data.ingest import writer as ingest_writer
from data.ingest.blocks import BOM
from data.store import open_store, sample_id

PADS = ("<pad>", "<|endoftext|>")


def rec(step=1, reward=1.0, **kw) -> dict:
    d = {"prompt": "p", "response": "r", "reward": reward, "step": step}
    d.update(kw)
    return d


def line(d) -> bytes:
    return (json.dumps(d) + "\n").encode()


def run_with(tmp_path: Path, content: bytes, name="rank0.jsonl") -> Path:
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    (run / name).write_bytes(content)
    return run


def ingest(run: Path, cache: Path, **kw):
    res = ingest_run(run, cache, PADS, **kw)
    return res, open_store(res.store_dir)


def issues_by_line(store) -> dict[int, tuple[str, str]]:
    return {r["line"]: (r["severity"], r["reason"]) for r in store.issues().iter_rows(named=True)}


def test_ingest001_bad_lines_are_recorded_and_good_lines_kept(tmp_path):
    """Invalid JSON, missing field, wrong types are recorded with line and reason; the rest is kept."""
    content = b"".join(
        [
            line(rec(step=1)),  # 1 good
            b'{"prompt": "p", "response": "r", "reward": 1.0, "step": 1\n',  # 2 invalid JSON
            line({"prompt": "p", "response": "r", "step": 1}),  # 3 missing reward
            line(rec(reward="high")),  # 4 string reward
            line(rec(logprobs=["a", "b"])),  # 5 list of strings as logprobs
            b"\n",  # 6 empty line: skipped, not an error
            line(rec(step=2, reward=2)),  # 7 good, integer reward
            b"[1, 2]\n",  # 8 not an object
            line(rec(step="three")),  # 9 step not a number
            line(rec(step=2.5)),  # 10 step not integral
        ]
    )
    res, store = ingest(run_with(tmp_path, content), tmp_path / "cache")
    assert res.samples == 2 and res.bad_lines == 7
    issues = issues_by_line(store)
    assert issues[2][1].startswith("invalid JSON")
    assert issues[3][1] == "missing required field 'reward'"
    assert issues[4][1] == "field 'reward' is not a number (got str)"
    assert issues[5][1] == "field 'logprobs' is not a list of numbers"
    assert 6 not in issues
    assert issues[8][1].startswith("not a JSON object")
    assert "step" in issues[9][1] and "step" in issues[10][1]
    assert all(sev == "error" for sev, _ in issues.values())
    sc = store.scalars().sort("line")
    assert sc.get_column("line").to_list() == [1, 7]
    assert sc.get_column("reward").to_list() == [1.0, 2.0]


def test_ingest002_nan_infinity_bom_crlf(tmp_path):
    """NaN / Infinity literals are floats, a UTF-8 BOM and CRLF line ends are accepted."""
    content = (
        b"\xef\xbb\xbf"
        + b'{"prompt": "p", "response": "r", "reward": NaN, "step": 1, "logprobs": [-1.0, -Infinity]}\r\n'
        + b'{"prompt": "p", "response": "r", "reward": Infinity, "step": 2, "ref_reward": -Infinity}\r\n'
        + b'{"prompt": "p", "response": "r", "reward": 0.5, "step": 3}\r\n'
    )
    res, store = ingest(run_with(tmp_path, content), tmp_path / "cache")
    assert res.samples == 3 and res.bad_lines == 0
    sc = store.scalars().sort("line")
    rewards = sc.get_column("reward").to_list()
    assert rewards[0] != rewards[0]  # NaN
    assert rewards[1] == float("inf") and rewards[2] == 0.5
    s = store.sample(sample_id("rank0.jsonl", 1))
    assert s["logprobs"][1] == float("-inf")


def test_ingest003_invalid_utf8_is_kept_with_a_note(tmp_path):
    """Invalid UTF-8 bytes are replaced; the line is kept and a data-quality note recorded."""
    content = line(rec()) + b'{"prompt": "p\xff\xfe", "response": "r", "reward": 1.0, "step": 1}\n'
    res, store = ingest(run_with(tmp_path, content), tmp_path / "cache")
    assert res.samples == 2 and res.bad_lines == 0
    assert issues_by_line(store)[2] == ("note", "invalid UTF-8 bytes replaced by U+FFFD")
    assert store.sample(sample_id("rank0.jsonl", 2))["prompt"] == "p\ufffd\ufffd"


def test_ingest004_five_megabyte_line(tmp_path):
    """A 5 MB line (long response, long token arrays) is read whole."""
    n = 250_000
    big = rec(response="x" * 2_000_000, logprobs=[-0.5] * n, ref_logprobs=[-0.25] * n)
    content = line(rec()) + line(big) + line(rec(step=2))
    assert len(line(big)) > 5_000_000
    res, store = ingest(run_with(tmp_path, content), tmp_path / "cache", chunk_bytes=1 << 20)
    assert res.samples == 3 and res.bad_lines == 0
    row = store.scalars().filter(pl.col("line") == 2).row(0, named=True)
    assert row["n_kl_tokens"] == n
    assert row["log_ratio_sum"] == pytest.approx(-0.25 * n)


def test_ingest005_unequal_token_arrays_kept_with_note(tmp_path):
    """Token arrays of unequal lengths: the line is kept, aligned, and noted (not an error)."""
    content = line(rec(response_tokens=["a", "b", "c"], logprobs=[-1.0, -1.0], ref_logprobs=[-1.0, -2.0]))
    res, store = ingest(run_with(tmp_path, content), tmp_path / "cache")
    assert res.samples == 1 and res.bad_lines == 0
    sev, reason = issues_by_line(store)[1]
    assert sev == "note" and reason.startswith("token arrays of unequal lengths")
    row = store.scalars().row(0, named=True)
    assert row["response_length"] == 3 and row["n_kl_tokens"] == 2


def test_ingest059_trailing_pad_position_is_no_note(tmp_path):
    """TRL's PPO shape, one more position ending on a pad token (its value window), is kept and not noted
    (before: a note on nearly every line of such a run); one more that is no pad, or two more, still are."""
    lines = [
        rec(response_tokens=["a", "b", "<pad>"], logprobs=[-1.0, -1.0], values=[0.1, 0.2, 0.3]),
        rec(response_tokens=["a", "b", "c"], logprobs=[-1.0, -1.0]),
        rec(response_tokens=["a", "<pad>", "<pad>"], logprobs=[-1.0]),
    ]
    res, store = ingest(run_with(tmp_path, b"".join(line(x) for x in lines)), tmp_path / "cache")
    assert res.samples == 3 and res.bad_lines == 0
    assert sorted(issues_by_line(store)) == [2, 3]
    assert store.scalars().sort("line").get_column("response_length").to_list() == [2, 3, 1]


def test_ingest006_keys_differ_between_files_and_extras_kept(tmp_path):
    """Keys present in some files only, extra scalar keys (kept), lists of numbers (kept with the token
    arrays), the fields of objects (kept as `object.field`), other non-scalar extras (ignored, named)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "a.jsonl").write_bytes(
        line(rec(ground_truth="42", ref_reward=0.5, meta={"a": 1})) + line(rec(step=2, ground_truth="7"))
    )
    (run / "b.jsonl").write_bytes(
        line(rec(group_id=3, advantages=[0.1, 0.2], words=["x"], none=[]))
        + line(rec(step=2, group_id=4, none=[]))
    )
    res, store = ingest(run, tmp_path / "cache")
    assert res.samples == 4 and res.files == 2
    sc = store.scalars().sort("source", "line")
    assert sc.get_column("ground_truth").to_list() == ["42", "7", None, None]
    assert sc.get_column("group_id").to_list() == [None, None, 3, 4]
    assert list(store.manifest.ignored_fields) == ["words"]
    assert (
        set(store.extra_columns()) == {"ground_truth", "group_id", "meta.a"}
        and "advantages" not in sc.columns
    )
    assert store.token_extras() == ["advantages"]  # not `none`, empty wherever it is
    assert list(store.sample(sample_id("b.jsonl", 1))["advantages"]) == pytest.approx([0.1, 0.2], rel=1e-7)


def test_ingest007_extra_key_changing_type_within_a_chunk(tmp_path):
    """An extra key that is an int on one line and a string on another: both lines kept."""
    content = line(rec(tag=1)) + line(rec(tag="one"))
    res, store = ingest(run_with(tmp_path, content), tmp_path / "cache")
    assert res.samples == 2 and res.bad_lines == 0


def test_ingest008_append_reads_only_new_bytes(tmp_path):
    """Appending lines and ingesting again reads only the new bytes and keeps earlier ids."""
    run = run_with(tmp_path, line(rec(step=1)) + line(rec(step=1)))
    cache = tmp_path / "cache"
    r1, _ = ingest(run, cache)
    size1 = (run / "rank0.jsonl").stat().st_size
    with open(run / "rank0.jsonl", "ab") as f:
        f.write(line(rec(step=2)))
    r2, store = ingest(run, cache)
    assert r2.bytes_read == (run / "rank0.jsonl").stat().st_size - size1
    assert r2.new_rows == 1 and r2.samples == 3 and r2.steps == 2
    r3, _ = ingest(run, cache)
    assert r3.bytes_read == 0 and r3.new_rows == 0 and r3.generation == r2.generation


def test_ingest009_incomplete_last_line_waits_then_completes(tmp_path):
    """A last line without newline that is not yet valid JSON is pending, then read once completed."""
    run = run_with(tmp_path, line(rec(step=1)) + b'{"prompt": "p", "respo')
    cache = tmp_path / "cache"
    r1, store = ingest(run, cache)
    assert r1.samples == 1 and r1.bad_lines == 0
    pending = store.issues().filter(pl.col("severity") == "pending")
    assert pending.height == 1 and pending.item(0, "line") == 2
    with open(run / "rank0.jsonl", "ab") as f:
        f.write(b'nse": "r", "reward": 1.0, "step": 2}\n')
    r2, store = ingest(run, cache)
    assert r2.samples == 2 and store.issues().height == 0
    assert sorted(store.scalars().get_column("line").to_list()) == [1, 2]


def test_ingest010_complete_last_line_without_newline_is_taken(tmp_path):
    """A last line that is complete JSON but has no newline is taken; a later newline does not shift lines."""
    run = run_with(tmp_path, line(rec(step=1)) + json.dumps(rec(step=2)).encode())
    cache = tmp_path / "cache"
    r1, _ = ingest(run, cache)
    assert r1.samples == 2
    with open(run / "rank0.jsonl", "ab") as f:
        f.write(b"\n" + line(rec(step=3)))
    r2, store = ingest(run, cache)
    assert r2.samples == 3 and r2.bad_lines == 0
    rebuilt, store2 = ingest(run, tmp_path / "cache2")
    assert sorted(store.scalars().get_column("sample_id").to_list()) == sorted(
        store2.scalars().get_column("sample_id").to_list()
    )


def test_ingest011_truncated_file_is_reread(tmp_path):
    """A file that shrank (rewritten shorter) is read again from the start; old rows are dropped."""
    run = run_with(tmp_path, line(rec(step=1)) + line(rec(step=2)) + line(rec(step=3)))
    cache = tmp_path / "cache"
    ingest(run, cache)
    (run / "rank0.jsonl").write_bytes(line(rec(step=7, reward=0.25)))
    r2, store = ingest(run, cache)
    assert r2.samples == 1
    assert store.scalars().get_column("step").to_list() == [7]


def test_ingest012_replaced_file_same_size_is_reread(tmp_path):
    """A file replaced by another of the same size (different content) is detected and re-read."""
    run = run_with(tmp_path, line(rec(step=1, reward=1.0)))
    cache = tmp_path / "cache"
    ingest(run, cache)
    new = tmp_path / "new.jsonl"
    new.write_bytes(line(rec(step=1, reward=2.0)))
    os.replace(new, run / "rank0.jsonl")
    r2, store = ingest(run, cache)
    assert store.scalars().get_column("reward").to_list() == [2.0]


def test_ingest013_removed_file_drops_its_rows(tmp_path):
    """A file that disappears from the run folder no longer counts."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "a.jsonl").write_bytes(line(rec()))
    (run / "b.jsonl").write_bytes(line(rec()))
    cache = tmp_path / "cache"
    ingest(run, cache)
    (run / "b.jsonl").unlink()
    r2, _ = ingest(run, cache)
    assert r2.samples == 1 and r2.files == 1


def _store_snapshot(store) -> tuple:
    sc = store.scalars().sort("sample_id").drop("part", "row")
    return sc.to_dicts(), store.steps().to_dicts(), store.issues().to_dicts()


def test_ingest014_crash_between_part_and_manifest_gives_the_same_store(tmp_path, monkeypatch):
    """Killing ingest after a part is written but before the manifest commit, then running again,
    gives exactly the store of an uninterrupted run."""
    lines = b"".join(line(rec(step=s, reward=s / 10)) for s in range(1, 41))
    run = run_with(tmp_path, lines)
    clean_res, clean = ingest(run, tmp_path / "clean", chunk_bytes=512)

    cache = tmp_path / "crashy"
    real_commit = ingest_writer._Writer.commit
    calls = {"n": 0}

    def crash_on_second(self):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt("simulated kill")
        return real_commit(self)

    monkeypatch.setattr(ingest_writer._Writer, "commit", crash_on_second)
    # Commit after every chunk so that the crash falls between a part and its manifest.
    monkeypatch.setattr(ingest_writer._Writer, "maybe_commit", lambda self, every_seconds=0: self.commit())
    with pytest.raises(KeyboardInterrupt):
        ingest(run, cache, chunk_bytes=512)
    monkeypatch.undo()
    res, store = ingest(run, cache, chunk_bytes=512)
    assert res.samples == clean_res.samples == 40
    assert _store_snapshot(store) == _store_snapshot(clean)


def test_ingest015_sample_ids_survive_a_cache_rebuild(tmp_path):
    """sample_id depends only on file and line: deleting the cache and rebuilding gives the same ids."""
    run = run_with(tmp_path, b"".join(line(rec(step=s)) for s in (3, 1, 2)))
    _, a = ingest(run, tmp_path / "c1")
    _, b = ingest(run, tmp_path / "c2", chunk_bytes=64)
    ids_a = dict(zip(a.scalars().get_column("line"), a.scalars().get_column("sample_id"), strict=True))
    ids_b = dict(zip(b.scalars().get_column("line"), b.scalars().get_column("sample_id"), strict=True))
    assert ids_a == ids_b == {n: sample_id("rank0.jsonl", n) for n in (1, 2, 3)}


def test_ingest016_steps_out_of_order_and_skipping(tmp_path):
    """Steps that start at 1, skip numbers and arrive out of order are summarised in numeric order."""
    run = run_with(tmp_path, b"".join(line(rec(step=s)) for s in (10, 1, 5, 10, 1)))
    res, store = ingest(run, tmp_path / "cache")
    st = store.steps()
    assert st.get_column("step").to_list() == [1, 5, 10]
    assert st.get_column("n").to_list() == [2, 1, 2]


def test_ingest017_one_response_is_one_row_group(tmp_path):
    """Row groups are small: reading one response touches one row group of its part."""
    import pyarrow.parquet as pq

    from data.store.layout import ROW_GROUP_SIZE

    run = run_with(tmp_path, b"".join(line(rec(step=s // 100, logprobs=[-1.0] * 50)) for s in range(300)))
    _, store = ingest(run, tmp_path / "cache")
    part = store.part_ids()[0]
    [path] = store.part_files_of(part)  # steps 0-2: one step block, one file
    pf = pq.ParquetFile(path)
    assert pf.metadata.num_row_groups == -(-300 // ROW_GROUP_SIZE)
    assert pf.schema_arrow.field("logprobs").type.value_type.bit_width == 32
    s = store.sample(sample_id("rank0.jsonl", 200))
    assert s["step"] == 199 // 100 and s["line"] == 200


def test_ingest018_concurrent_ingest_uses_a_lock(tmp_path):
    """A second writer that finds the lock taken returns at once with the last committed state."""
    from filelock import FileLock

    from data.store import store_dir_for

    run = run_with(tmp_path, line(rec()))
    cache = tmp_path / "cache"
    ingest(run, cache)
    with open(run / "rank0.jsonl", "ab") as f:
        f.write(line(rec(step=2)))
    lock = FileLock(str(store_dir_for(cache, run, PADS) / ".lock"))
    with lock:
        res = ingest_run(run, cache, PADS, wait=False)
    assert res.skipped_locked and res.samples == 1
    assert ingest_run(run, cache, PADS).samples == 2


def test_ingest019_aliases_and_pad_tokens_setting(tmp_path):
    """Common alternative field names are mapped; the pad list changes lengths and has its own store."""
    content = line(
        {
            "query": "q",
            "completion": "a<pad>",
            "score": 0.5,
            "global_step": 4,
            "response_tokens": ["a", "<pad>"],
        }
    )
    run = run_with(tmp_path, content)
    res, store = ingest(run, tmp_path / "cache")
    assert res.samples == 1
    row = store.scalars().row(0, named=True)
    assert row["step"] == 4 and row["reward"] == 0.5 and row["response_length"] == 1
    res2 = ingest_run(run, tmp_path / "cache", ("<eos>",))
    assert res2.store_dir != res.store_dir
    assert open_store(res2.store_dir).scalars().item(0, "response_length") == 2


def test_ingest031_verl_rollout_dump(tmp_path):
    """veRL's rollout dump (one file per step, named by step; input, output, score, step, gts and its reward
    extras) loads: input and output become prompt and response, score the reward, the rest extra columns;
    step files named 1, 2, 10 are merged by step."""
    run = tmp_path / "root" / "verl-run"
    run.mkdir(parents=True)
    for step in (1, 2, 10):
        rows = [
            {
                "input": f"user: 2+{i}?",
                "output": f"<think>..</think>{2 + i}",
                "gts": str(2 + i),
                "score": float(i % 2),
                "step": step,
                "acc": bool(i % 2),
            }
            for i in range(3)
        ]
        (run / f"{step}.jsonl").write_bytes(b"".join(line(r) for r in rows))
    res, store = ingest(run, tmp_path / "cache")
    assert (res.samples, res.steps, res.bad_lines) == (9, 3, 0)
    sc = store.scalars().sort("step", "line")
    assert sc.get_column("step").unique().sort().to_list() == [1, 2, 10]
    assert sc.get_column("reward").to_list()[:3] == [0.0, 1.0, 0.0]
    assert sc.get_column("gts").to_list()[:3] == ["2", "3", "4"] and sc.get_column("acc").to_list()[1] is True
    row = store.sample(sc.item(1, "sample_id"))
    assert row["prompt"] == "user: 2+1?" and row["response"] == "<think>..</think>3"


def test_ingest020_incomplete_commit_hides_the_last_step_of_each_file(tmp_path):
    """complete=False (files may end mid-step): steps from the smallest of the files' last steps on are
    hidden; a later complete ingest shows them without re-reading anything."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "rank0.jsonl").write_bytes(b"".join(line(rec(step=s)) for s in (1, 2, 3)))
    (run / "rank1.jsonl").write_bytes(b"".join(line(rec(step=s)) for s in (1, 2)))  # rank 1 is behind
    res = ingest_run(run, tmp_path / "cache", PADS, complete=False)
    store = open_store(res.store_dir)
    assert store.visible_below == 2
    assert store.steps().get_column("step").to_list() == [1]
    assert store.scalars().height == 2 and store.all_scalars().height == 5
    assert store.lookup(sample_id("rank0.jsonl", 2)) is None  # a hidden response is not reachable
    res2 = ingest_run(run, tmp_path / "cache", PADS)
    assert res2.bytes_read == 0
    store = open_store(res2.store_dir)
    assert store.visible_below is None and store.steps().get_column("step").to_list() == [1, 2, 3]


def test_ingest021_long_read_commits_only_whole_steps_while_reading(tmp_path, monkeypatch):
    """Rank files are read a chunk each in turn; every commit made during the read shows only steps that
    every file has already passed, so no reader ever sees a step with some ranks missing."""
    run = tmp_path / "run"
    run.mkdir()
    for r in range(2):
        (run / f"rank{r}.jsonl").write_bytes(
            b"".join(line(rec(step=s, rank=r)) for s in range(1, 31) for _ in range(2))
        )
    seen = []
    real_commit = ingest_writer._Writer.commit

    def spy(self, complete=True):
        real_commit(self, complete)
        st = open_store(self.dir).steps()
        seen.append((complete, st.get_column("n").to_list()))

    monkeypatch.setattr(ingest_writer._Writer, "commit", spy)
    monkeypatch.setattr(ingest_writer._Writer, "maybe_commit", lambda self: self.commit(complete=False))
    ingest_run(run, tmp_path / "cache", PADS, chunk_bytes=400)
    partial = [n for complete, n in seen if not complete]
    assert len(partial) > 5 and any(partial)
    assert all(c == 4 for n in partial for c in n), partial  # 2 responses x 2 ranks in every shown step
    assert seen[-1] == (True, [4] * 30)


def test_ingest022_incomplete_call_that_reads_nothing_changes_nothing(tmp_path):
    """An incomplete call (files still changing) that finds nothing new keeps what is shown and the
    version: it does not hide a step another call already showed whole."""
    run = run_with(tmp_path, b"".join(line(rec(step=s)) for s in (1, 2)))
    res = ingest_run(run, tmp_path / "cache", PADS)
    again = ingest_run(run, tmp_path / "cache", PADS, complete=False)
    assert again.generation == res.generation
    assert open_store(again.store_dir).steps().get_column("step").to_list() == [1, 2]


def _commit_every_chunk(monkeypatch, batch_parts: int = 0):
    """Make every chunk a commit point (the real maybe_commit, with no spacing between commits). Small
    blocks go to the workers one by one, or (``batch_parts``) up to that many at a time."""
    if batch_parts:
        monkeypatch.setattr(ingest_writer, "BATCH_PARTS", batch_parts)
    else:
        monkeypatch.setattr(ingest_writer, "SMALL_BLOCK", 0)
    real = ingest_writer._Writer.maybe_commit

    def eager(self):
        self.commit_every, self.last_commit_cost = 0.0, 0.0
        real(self)

    monkeypatch.setattr(ingest_writer._Writer, "maybe_commit", eager)


def _two_rank_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    for r in range(2):
        (run / f"rank{r}.jsonl").write_bytes(
            b"".join(line(rec(step=s, rank=r, reward=s / 10)) for s in range(1, 31) for _ in range(2))
        )
    return run


def test_ingest023_commit_points_are_consistent_while_parts_are_in_flight(tmp_path, monkeypatch):
    """Mid-read commits are made when the part of their commit point is applied, while later parts are
    still being built: each committed manifest counts, per file, exactly the rows of the lines it says
    were read, and shows only whole steps."""
    run = _two_rank_run(tmp_path)
    _commit_every_chunk(monkeypatch)
    real_commit = ingest_writer._Writer._commit
    seen = []

    def spy(self, data, complete, **kw):
        real_commit(self, data, complete, **kw)
        store = open_store(self.dir)
        if kw.get("aggregates") is False:  # a mid-read commit: the prompt aggregates wait for the last
            assert store.manifest.derived_name("prompts") is None
        sc = store.all_scalars()
        for rel, entry in store.manifest.files.items():
            text = (run / rel).read_bytes()[: entry["offset"]]
            rows = sc.filter(pl.col("source") == rel).height if sc.height else 0
            assert rows == entry["lines"] == text.count(b"\n"), (rel, entry)
            assert set(entry["parts"]) <= {int(k) for k in store.manifest.parts}
        seen.append((complete, store.steps().get_column("n").to_list(), len(self._pending)))

    monkeypatch.setattr(ingest_writer._Writer, "_commit", spy)
    ingest_run(run, tmp_path / "cache", PADS, chunk_bytes=400)
    partial = [n for complete, n, _ in seen if not complete]
    assert len(partial) > 5 and any(partial)
    assert all(c == 4 for n in partial for c in n), partial
    assert any(in_flight for complete, _, in_flight in seen if not complete)  # made without waiting
    assert seen[-1][:2] == (True, [4] * 30)


@pytest.mark.parametrize("crash_at", [2, 5, 9])
def test_ingest024_crash_after_a_commit_point_gives_the_same_store(tmp_path, monkeypatch, crash_at):
    """Killing ingest at a mid-read commit (parts of later chunks already written, not yet committed),
    then running again, gives exactly the store of an uninterrupted run."""
    run = _two_rank_run(tmp_path)
    clean_res, clean = ingest(run, tmp_path / "clean", chunk_bytes=400)
    _commit_every_chunk(monkeypatch)
    real_commit = ingest_writer._Writer._commit
    calls = {"n": 0}

    def crash(self, data, complete, **kw):
        calls["n"] += 1
        if calls["n"] == crash_at:
            raise KeyboardInterrupt("simulated kill")
        real_commit(self, data, complete, **kw)

    monkeypatch.setattr(ingest_writer._Writer, "_commit", crash)
    with pytest.raises(KeyboardInterrupt):
        ingest(run, tmp_path / "crashy", chunk_bytes=400)
    monkeypatch.undo()
    res, store = ingest(run, tmp_path / "crashy", chunk_bytes=400)
    assert res.samples == clean_res.samples == 120
    assert _store_snapshot(store) == _store_snapshot(clean)


@pytest.mark.parametrize("batch_parts", [0, 3])
def test_ingest025_failed_part_commits_nothing_past_it(tmp_path, monkeypatch, batch_parts):
    """When building a part fails, no later commit point is committed (it would skip the failed chunk's
    lines); the next run gives the store of an uninterrupted run. Also when small blocks are built
    several at a time (``batch_parts``)."""
    run = _two_rank_run(tmp_path)
    clean_res, clean = ingest(run, tmp_path / "clean", chunk_bytes=400)
    _commit_every_chunk(monkeypatch, batch_parts)
    real_write = ingest_writer._Writer._write_files

    def fail_once(self, pid, *args):
        if pid == 6:
            raise OSError("disk full")
        return real_write(self, pid, *args)

    monkeypatch.setattr(ingest_writer._Writer, "_write_files", fail_once)
    with pytest.raises(OSError):
        ingest(run, tmp_path / "failed", chunk_bytes=400)
    store = open_store(next((tmp_path / "failed").iterdir()))
    for rel, entry in store.manifest.files.items():
        rows = store.all_scalars().filter(pl.col("source") == rel).height
        assert rows == entry["lines"], (rel, entry)
    monkeypatch.undo()
    res, store = ingest(run, tmp_path / "failed", chunk_bytes=400)
    assert _store_snapshot(store) == _store_snapshot(clean)


@pytest.mark.parametrize("peek", [4, 64, 1 << 16])
def test_ingest026_blocks_hold_as_many_complete_lines_as_fit(tmp_path, monkeypatch, peek):
    """Each block is the complete lines that fit in the chunk size, whether the last newline is found in
    the peeked end of the range or only by reading on; a line longer than the chunk size comes with the
    lines that end in the same read. A last line without its newline is left out."""
    import random

    monkeypatch.setattr(ingest_blocks, "PEEK_BYTES", peek)
    rng = random.Random(7)
    lines = [b"x" * rng.choice([0, 1, 5, 40, 300, 2000]) + b"\n" for _ in range(300)]
    path = tmp_path / "f.jsonl"
    path.write_bytes(b"".join(lines) + b"partial")
    size = path.stat().st_size
    for chunk in (16, 100, 1000, 1 << 16):
        blocks, start = [], 0
        with open(path, "rb") as f:
            while (got := ingest_blocks._next_block(f, start, size, chunk)) is not None:
                assert got[0] == start + len(got[1])
                blocks.append(got[1])
                start = got[0]
        assert b"".join(blocks) == b"".join(lines)
        i = 0
        for block in blocks:
            j, n = i, 0
            while n < len(block):
                n, j = n + len(lines[j]), j + 1
            assert block == b"".join(lines[i:j]), (chunk, i)  # whole lines
            if len(block) <= chunk:  # as many as fit
                assert j == len(lines) or len(block) + len(lines[j]) > chunk, (chunk, i)
            else:  # a longer line, and what the reads past it held
                assert len(lines[i]) > chunk and len(block) < len(lines[i]) + chunk, (chunk, i)
            i = j


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (rec(prompt=5), "field 'prompt' is not a string (got int)"),
        (rec(response=True), "field 'response' is not a string (got bool)"),
        (rec(ref_response=[1, 2]), "field 'ref_response' is not a string or chat messages (got list)"),
        (rec(prompt=[{"x": 1}]), "field 'prompt' is not a string or chat messages (got list)"),
        (rec(prompt={"role": "user"}), "field 'prompt' is not a string (got dict)"),
        (rec(response_tokens=["a", 7]), "field 'response_tokens' is not a list of strings"),
    ],
)
@pytest.mark.parametrize(
    "text", ["q", 'say "hi"', "C:\\dir\\"], ids=["plain", "escaped-quotes", "backslash-end"]
)
def test_ingest027_non_strings_where_text_is_expected_past_the_first_rows(tmp_path, bad, reason, text):
    """A number, bool or list where the first rows had a string (which Polars would silently turn
    into text, far past the rows it infers its schema from) makes that line unusable; the rest is kept.
    Also when the good lines' texts hold escaped quotes, or end in a backslash (\\\\" in the JSON)."""
    good = line(rec(ref_response=text, response_tokens=["a", text], logprobs=[-0.5, -1.0]))
    content = good * 150 + line(bad) + good * 3
    res, store = ingest(run_with(tmp_path, content), tmp_path / "cache")
    assert {ln: r for ln, (_, r) in issues_by_line(store).items()} == {151: reason}
    assert res.samples == 153
    assert store.scalars().filter(pl.col("line") > 150).get_column("line").to_list() == [152, 153, 154]


def test_ingest028_escaped_quotes_and_backslashes_stay_on_the_fast_path(tmp_path, monkeypatch):
    """Texts and token strings with escaped quotes, backslashes before quotes, a trailing backslash,
    `":` and \\u escapes inside them are counted right: the chunk is read in one Polars call, not line
    by line."""
    # json.dumps escapes non-ASCII as \uXXXX, as most trainers write it
    texts = ['say "hi"', "C:\\dir\\", 'a\\"b', '{"k": "v"}', '"', "\\", 'x": 1', "héllo ✓ 数学"]
    content = b"".join(
        line(rec(prompt=t, response=texts[(i + 1) % len(texts)], response_tokens=[t, "b", '"']))
        for i, t in enumerate(texts * 20)
    )

    def no_slow_path(*a, **kw):
        raise AssertionError("the chunk went to the line-by-line path")

    monkeypatch.setattr(ingest_blocks, "_slow_path", no_slow_path)
    res, store = ingest(run_with(tmp_path, content), tmp_path / "cache")
    assert res.samples == len(texts) * 20 and res.bad_lines == 0
    row = store.sample(sample_id("rank0.jsonl", 3))
    assert row["prompt"] == texts[2] and row["response_tokens"] == [texts[2], "b", '"']


def test_ingest029_null_token_strings_are_kept_on_both_paths(tmp_path):
    """A null among the token strings is kept as a null token, whether the chunk is read in one Polars call
    or line by line (here because of a bad line in the same chunk)."""
    tokens = ["a", None, "b"]
    fast = line(rec(response_tokens=tokens)) * 2
    slow = fast + line(rec(reward="bad"))
    for name, content in (("fast", fast), ("slow", slow)):
        (tmp_path / name).mkdir()
        res, store = ingest(run_with(tmp_path / name, content), tmp_path / name / "cache")
        assert res.samples == 2
        assert store.sample(sample_id("rank0.jsonl", 1))["response_tokens"] == tokens


@pytest.mark.parametrize("slice_bytes", [1, 2, 3, 7, 64, 1 << 20])
def test_ingest030_marks_counted_across_slices(monkeypatch, slice_bytes):
    """The one-pass count of quotes, `":`, `\\"` and `\\\\"` equals bytes.count, and the lone surrogate escapes
    are found, wherever the slices cut."""
    import random

    rng = random.Random(slice_bytes)
    marks = [b'"', b":", b"\\", b"a", b'":', b'\\"', b'\\\\"', b"[", b",", b" ", b"{"]
    pairs = [b"\\ud83d\\ude00"] * 8 + [b"\\u00e9", b"\\uD800\\uDFFF"]
    data = b"".join(rng.choice(marks + pairs) for _ in range(3000)) + b"}\n"
    # Once in two, no lone surrogate: then one in a random place.
    lone = rng.random() < 0.5
    if lone:
        at = rng.randrange(len(data) - 2)
        data = data[:at] + rng.choice([b"\\ud83d", b"\\uDC00", b"\\udbff"]) + data[at:]
    monkeypatch.setattr(ingest_fast, "SCAN_SLICE", slice_bytes)
    # A `":` is a key's end unless its quote follows [ , : { (after at most one space).
    opening = sum(
        1
        for i in range(len(data) - 1)
        if data[i : i + 2] == b'":'
        and i >= 1
        and (data[i - 1 : i] in (b"[", b",", b":", b"{") or (data[i - 2 : i] in (b"[ ", b", ", b": ", b"{ ")))
    )
    expected = ingest_fast._Marks(
        quotes=data.count(b'"'),
        keys=data.count(b'":') - opening,
        escaped=sum(1 for i in range(len(data) - 1) if data[i : i + 2] == b'\\"'),
        doubled=sum(1 for i in range(len(data) - 2) if data[i : i + 3] == b'\\\\"'),
        lone_surrogates=lone,
    )
    assert ingest_fast._marks(data) == expected


def test_ingest032_every_sample_id_finds_its_own_row(tmp_path):
    """Across files and parts, each sample id leads to the row of its file and line (the token page's read);
    an id of no response, of another run's file, or not a string finds nothing."""
    run = run_with(tmp_path, b"".join(line(rec(step=s, prompt=f"a{s}")) for s in range(40)))
    (run / "rank1.jsonl").write_bytes(b"".join(line(rec(step=s, prompt=f"b{s}")) for s in range(40)))
    _, store = ingest(run, tmp_path / "cache", chunk_bytes=600)  # a few lines a part
    assert len(store.part_ids()) > 8
    for name, letter in (("rank0.jsonl", "a"), ("rank1.jsonl", "b")):
        for ln in (1, 2, 17, 40):
            row = store.sample(sample_id(name, ln))
            assert (row["source"], row["line"], row["prompt"]) == (name, ln, f"{letter}{ln - 1}")
    assert store.lookup(sample_id("rank0.jsonl", 41)) is None
    assert store.lookup(sample_id("rank2.jsonl", 1)) is None
    assert store.lookup(None) is None and store.lookup(["x"]) is None


def test_ingest033_scans_follow_a_live_run_in_file_order(tmp_path):
    """Each append adds parts; a reader's scan of each new committed state holds every response in file
    order, and a step's scan opens only the part that holds it."""
    run = run_with(tmp_path, line(rec(step=0)))
    cache = tmp_path / "cache"
    _, store = ingest(run, cache)
    assert store.scalars().height == 1
    for step in range(1, 6):
        with open(run / "rank0.jsonl", "ab") as f:
            f.write(b"".join(line(rec(step=step, reward=float(step))) for _ in range(3)))
        _, store = ingest(run, cache)
        sc = store.scalars()
        assert [s.parts for s in store.index().select(step, step)] == [(store.part_ids()[-1],)]
    assert sc.get_column("line").to_list() == list(range(1, 17))
    assert sc.get_column("reward").to_list() == [1.0] + [float(s) for s in range(1, 6) for _ in range(3)]


def _fresh_scalars(store):
    """The store's scalars as a process that has not read it before sees them."""
    from data.store import reader as store_mod

    store_mod.forget_indexes()
    return store.scalars()


def _grow_live(tmp_path, monkeypatch, pack_at=4, pack_rows=3, steps=14):
    """A run appended to step by step, one ingest a step, with small packs; a big step now and then stays
    out of the packs. Returns (run, cache, store)."""
    monkeypatch.setattr(part_files, "PACK_AT", pack_at)
    monkeypatch.setattr(part_files, "PACK_ROWS", pack_rows)
    run = run_with(tmp_path, b"")
    cache = tmp_path / "cache"
    for s in range(steps):
        n = 5 if s % 5 == 2 else 2  # steps 2, 7, 12: a part of 5 rows, too big for a pack
        lines = [line(rec(step=s, reward=s + k / 10, prompt=f"q{s}-{k}")) for k in range(n)]
        if s == 4:
            lines.append(b"{not json\n")
        with open(run / "rank0.jsonl", "ab") as f:
            f.write(b"".join(lines))
        _, store = ingest(run, cache)
        store.scalars()  # a reader that follows the run: its index grows part by part
    return run, cache, store


def test_ingest034_packs_hold_small_parts_and_change_nothing_read(tmp_path, monkeypatch):
    """A live run's small parts are packed: the scalars (as a following reader and a new process read them),
    every response, the issues and the steps equal those of the same file ingested at once."""
    run, cache, store = _grow_live(tmp_path, monkeypatch)
    packs = store.packs()
    assert len(packs) == 2 and all(len(p["parts"]) == 4 for p in packs)
    assert {7, 12} - {s for p in packs for s in p["parts"]}  # big parts stay loose, between packed ones
    for sub in ("scalars", "issues"):
        assert sorted(p.name for p in (store.dir / sub).glob("k*.parquet")) == sorted(
            p["name"] for p in packs
        )

    _, whole = ingest(run, tmp_path / "cache_whole")
    assert not whole.packs()
    cols = ["sample_id", "source", "line", "step", "reward", "response_length", "prompt_key"]
    want = whole.scalars().select(cols)
    assert store.scalars().select(cols).equals(want)  # its index built part by part
    assert _fresh_scalars(store).select(cols).equals(want)  # read from packs and loose parts
    assert store.issues().equals(whole.issues()) and store.issues().height == 1
    assert store.steps().drop_nans().equals(whole.steps().drop_nans())
    for sid in want.get_column("sample_id").to_list():
        assert store.sample(sid)["prompt"] == whole.sample(sid)["prompt"]


def test_ingest035_packs_lose_the_parts_of_a_file_read_again(tmp_path, monkeypatch):
    """A file replaced after packing is read again: its old rows leave the packs (and a pack left with no
    part is deleted), the new rows are read, and other files are untouched."""
    run, cache, store = _grow_live(tmp_path, monkeypatch)
    (run / "rank1.jsonl").write_bytes(line(rec(step=0, prompt="other")))
    _, store = ingest(run, cache)
    old_packs = [p["name"] for p in store.packs()]
    (run / "rank0.jsonl").write_bytes(line(rec(step=0, prompt="new")) + line(rec(step=1, prompt="new")))
    _, store = ingest(run, cache)
    parts = store.manifest.parts
    kept = store.packs()  # only rank1's part is left in a pack
    assert [[parts[str(i)]["file"] for i in p["parts"]] for p in kept] == [["rank1.jsonl"]]
    for sub in ("scalars", "issues"):
        on_disk = {p.name for p in (store.dir / sub).glob("k*.parquet")}
        assert on_disk == {kept[0]["name"]} and kept[0]["name"] in old_packs
    sc = _fresh_scalars(store)
    assert sc.filter(pl.col("source") == "rank0.jsonl").get_column("line").to_list() == [1, 2]
    assert store.sample(sample_id("rank0.jsonl", 1))["prompt"] == "new"
    assert sc.sort("source", "line").select("source", "line").rows() == [
        ("rank0.jsonl", 1),
        ("rank0.jsonl", 2),
        ("rank1.jsonl", 1),
    ]
    assert store.issues().height == 0


def test_ingest036_issue_files_read_with_their_part(tmp_path):
    """Issue files read for a pack carry their part; files with different columns are read one by one."""
    from data.ingest.parts import _issues_with_part
    from data.store.layout import ISSUE_SCHEMA

    def issue(path, n, **extra):
        rows = [
            {"source": "a", "line": k, "severity": "note", "reason": "r", "detail": "", **extra}
            for k in range(n)
        ]
        pl.DataFrame(rows, schema={**ISSUE_SCHEMA, **{k: pl.Int64 for k in extra}}).write_parquet(path)
        return path

    same = [
        issue(tmp_path / "p1.parquet", 2),
        issue(tmp_path / "p2.parquet", 0),
        issue(tmp_path / "p3.parquet", 1),
    ]
    got = _issues_with_part(same, [1, 2, 3])
    assert got.select("part", "line").rows() == [(1, 0), (1, 1), (3, 0)]
    mixed = [same[0], issue(tmp_path / "p4.parquet", 1, extra=7)]
    assert _issues_with_part(mixed, [1, 4]).select("part", "line").rows() == [(1, 0), (1, 1), (4, 0)]
    assert _issues_with_part([], []).columns == [*ISSUE_SCHEMA, "part"]


def _no_slow_path(monkeypatch):
    def no_slow_path(*a, **kw):
        raise AssertionError("the chunk went to the line-by-line path")

    monkeypatch.setattr(ingest_blocks, "_slow_path", no_slow_path)


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (rec(prompt=5), "field 'prompt' is not a string (got int)"),
        (rec(response=["a", "b"]), "field 'response' is not a string or chat messages (got list)"),
        (rec(prompt=[{"role": "user", "content": "hi"}]), None),  # chat messages: rendered, kept
    ],
)
def test_ingest037_objects_in_lines_do_not_hide_a_wrong_type(tmp_path, bad, reason):
    """Lines holding objects (here a `meta` extra) and tokens that start with a colon: a number, list or
    messages past the rows Polars infers types from, where a text is expected, are not taken as the text
    Polars makes of them. (Before, their keys were not counted, and such a chunk was read unchecked.)"""
    extra = {"meta": {"src": "gsm8k", "tags": ["a", ":b"]}, "response_tokens": [":", "::", "x"]}
    good = line(rec(**extra))
    content = good * 150 + line({**bad, **extra}) + good * 3
    res, store = ingest(run_with(tmp_path, content), tmp_path / "cache")
    if reason is None:
        assert res.bad_lines == 0 and res.samples == 154
        assert store.sample(sample_id("rank0.jsonl", 151))["prompt"] == "hi"
    else:
        assert {ln: r for ln, (_, r) in issues_by_line(store).items()} == {151: reason}
        assert res.samples == 153
    assert store.sample(sample_id("rank0.jsonl", 152))["response_tokens"] == [":", "::", "x"]


def test_ingest038_colon_tokens_and_objects_stay_on_the_fast_path(tmp_path, monkeypatch):
    """Strings that start with a colon (`":` that is no key's end, also after a space) and objects nested in
    lines are counted: the chunk is read in one Polars call, and a key that first appears past the rows
    Polars infers from is still read (full inference), not dropped."""
    _no_slow_path(monkeypatch)
    rows = [
        rec(response_tokens=[":", " :", "a"], prompt=":x", meta={"k": ":v", "n": None}, msgs=[{"a": ":"}])
        for _ in range(150)
    ]
    rows.append(rec(response_tokens=[":"], late="here"))
    content = b"".join((json.dumps(r, separators=(", ", ": ")) + "\n").encode() for r in rows)
    res, store = ingest(run_with(tmp_path, content), tmp_path / "cache")
    assert res.samples == 151 and res.bad_lines == 0
    assert store.scalars().sort("line").get_column("late").to_list() == [None] * 150 + ["here"]
    assert store.sample(sample_id("rank0.jsonl", 1))["prompt"] == ":x"


def test_ingest039_wrong_types_under_other_trainers_names(tmp_path):
    """A field under another trainer's name (veRL's `score`, `input`, `output`) with a wrong type in every
    line of a chunk is recorded line by line (before, the cast failed and the ingest stopped)."""
    content = b"".join(line({"input": f"q{i}", "output": "a", "score": "high", "step": 1}) for i in range(3))
    content += line({"input": "q", "output": ["x", "y"], "score": 1, "step": 1})
    res, store = ingest(run_with(tmp_path, content), tmp_path / "cache")
    assert res.samples == 0
    assert {ln: r for ln, (_, r) in issues_by_line(store).items()} == {
        1: "field 'reward' is not a number (got str)",
        2: "field 'reward' is not a number (got str)",
        3: "field 'reward' is not a number (got str)",
        4: "field 'response' is not a string or chat messages (got list)",
    }


CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
PARTS = [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, {"type": "image_url"}]}]


@pytest.mark.parametrize("path", ["fast", "slow"])
def test_ingest040_chat_messages_and_true_false_rewards(tmp_path, monkeypatch, path):
    """Prompts and responses logged as chat messages (TRL's conversational format) are read as text, the
    same on both paths; a verifier's true / false reward is 1 / 0. The slow path is taken where a bad line
    shares the chunk, or where contents are texts in some messages and lists of parts in others."""
    if path == "fast":
        _no_slow_path(monkeypatch)
    rows = [
        {
            "prompt": CHAT,
            "completion": [{"role": "assistant", "content": "4"}],
            "reward": True,
            "step": 1,
            "__prompt_lead": "a field of the file",
        },
        {
            "prompt": CHAT[1:],
            "completion": [{"role": "assistant", "content": "5"}],
            "reward": False,
            "step": 1,
        },
        {"prompt": CHAT, "completion": [{"role": "assistant", "content": None}], "reward": True, "step": 2},
    ]
    prompts = ["system: Be brief.\n\nuser: 2+2?", "2+2?", "system: Be brief.\n\nuser: 2+2?"]
    responses = ["4", "5", ""]
    if path == "slow":
        rows += [{"prompt": PARTS, "response": "A cat.", "reward": 0, "step": 2}, rec(reward="bad")]
        prompts.append("What is this?\n[image_url]")
        responses.append("A cat.")
    res, store = ingest(run_with(tmp_path, b"".join(line(r) for r in rows)), tmp_path / "cache")
    assert res.samples == len(prompts)
    got = [store.sample(sample_id("rank0.jsonl", i + 1)) for i in range(len(prompts))]
    assert [g["prompt"] for g in got] == prompts
    assert [g["response"] for g in got] == responses
    assert store.scalars().sort("line").get_column("reward").to_list() == [1.0, 0.0, 1.0, 0.0][: len(prompts)]
    assert store.scalars().get_column("prompt_key").n_unique() == len(set(prompts))
    # Previews lead with the question, not with a system message every prompt shares.
    previews = ["2+2?", "2+2?", "2+2?", "What is this? [image_url]"][: len(prompts)]
    scalars = store.scalars().sort("line")
    assert scalars.get_column("prompt_preview").to_list() == previews
    assert scalars.get_column("extra___prompt_lead").to_list()[:2] == ["a field of the file", None]


def test_ingest041_messages_text_by_hand():
    """The text of chat messages, case by case."""
    from data.schema.chat import messages_lead, messages_text

    assert messages_text([{"role": "user", "content": "hi"}]) == "hi"
    assert messages_text([{"content": "a"}, {"content": "b"}]) == "a\n\nb"
    assert (
        messages_text([{"role": "user", "content": "a"}, {"role": "assistant"}]) == "user: a\n\nassistant: "
    )
    assert messages_text([{"role": "user", "content": ["x", {"text": "y"}, {"type": "audio"}, 3]}]) == (
        "x\ny\n[audio]\n[part]"
    )
    # Tool calls (OpenAI's format) after the content; arguments given as an object are written as JSON.
    call = {"function": {"name": "f", "arguments": {"a": [1]}}}
    calls = [
        {"role": "assistant", "content": "Let me see.", "tool_calls": [call, {"function": {"name": "g"}}]}
    ]
    assert messages_text(calls) == 'Let me see.\n[call f({"a": [1]})]\n[call g()]'
    assert messages_text([{"role": "assistant", "tool_calls": [{"id": "no function"}]}]) == ""
    # No message at all is an empty text (verifiers 0.1.5's "completion": []), not something else.
    assert (messages_text([]), messages_lead([])) == ("", None)
    for not_messages in (["a"], [{"x": 1}], [{"role": 1, "content": "a"}], [{"content": 5}], "a", None):
        assert messages_text(not_messages) is None, not_messages
        assert messages_lead(not_messages) is None, not_messages
    # The preview's source: the last user message of several, else the last message; none for one.
    assert messages_lead([{"role": "user", "content": "hi"}]) is None
    chat = [{"role": "system", "content": "s"}, {"role": "user", "content": "q1"}, {"role": "assistant"}]
    assert messages_lead(chat) == "q1"
    assert messages_lead([*chat, {"role": "user", "content": ["q2", {"type": "image"}]}]) == "q2\n[image]"
    assert messages_lead([{"role": "system", "content": "s"}, {"role": "assistant", "content": None}]) == ""


def test_ingest042_a_new_store_format_removes_the_old_store_of_the_run(tmp_path):
    """A store made by an older format of the same run and pad tokens is deleted, with its text index, when
    the new one is made; other runs' stores, other pad tokens' and a locked old store stay."""
    from filelock import FileLock

    from data.store import STORE_FORMAT

    run = run_with(tmp_path, line(rec()))
    other = tmp_path / "other"
    other.mkdir()
    cache = tmp_path / "cache"

    def old_store(name, run_path, pads=PADS, fmt=STORE_FORMAT - 1):
        d = cache / name
        (d / "parts").mkdir(parents=True)
        (d / "parts" / "p1.parquet").write_bytes(b"x")
        manifest = {"format": fmt, "run": "run", "run_path": str(run_path), "pad_tokens": list(pads)}
        (d / "manifest.json").write_text(json.dumps(manifest))
        return d

    stale = old_store("run-old", run.resolve())
    stale_index = cache / "run-old.text-index"
    stale_index.mkdir()
    (stale_index / "p000001-1-1.arrow").write_bytes(b"x")
    locked = old_store("run-old-locked", run.resolve())
    kept = [
        old_store("other-old", other.resolve()),
        old_store("run-other-pads", run.resolve(), pads=("<pad>",)),
        old_store("run-newer", run.resolve(), fmt=STORE_FORMAT + 1),
        locked,
    ]
    (cache / "not-a-store").mkdir()
    with FileLock(str(locked / ".lock")):
        res, store = ingest(run, cache)
    assert res.samples == 1
    assert store.manifest.rebuilt_from == STORE_FORMAT - 1  # said on the runs page
    assert not stale.exists() and not stale_index.exists()
    assert all(d.exists() for d in kept)
    assert (cache / "not-a-store").exists() and res.store_dir.exists()
    # An existing store is not a reason to look again.
    stale2 = old_store("run-old-2", run.resolve())
    ingest(run, cache)
    assert stale2.exists()


def test_ingest043_a_field_named_two_ways_in_one_file(tmp_path):
    """Lines that name the prompt `input` (veRL) among lines that name it `prompt` are read as they are read
    line by line: the other name stands for the prompt where a line has none, and stays an extra column
    where it has one. (Before, the chunk's `input` column stayed an extra, and those lines were reported
    as missing their prompt.)"""
    rows = [
        {"input": "q1", "response": "a", "reward": 1, "step": 1},
        {"prompt": "q2", "input": "raw q2", "response": "b", "reward": 2, "step": 1},
        {"input": "q3", "response": "c", "reward": 3, "step": 2},
    ]
    res, store = ingest(run_with(tmp_path, b"".join(line(r) for r in rows)), tmp_path / "cache")
    assert res.samples == 3 and res.bad_lines == 0
    assert [store.sample(sample_id("rank0.jsonl", i))["prompt"] for i in (1, 2, 3)] == ["q1", "q2", "q3"]
    assert store.scalars().sort("line").get_column("input").to_list() == [None, "raw q2", None]


@pytest.mark.parametrize("path", ["fast", "slow"])
def test_ingest044_types_that_change_after_the_first_rows(tmp_path, monkeypatch, path):
    """A verifier's integer rewards, then 0.5; `ref_reward` null, then numbers; integer token rewards, then
    fractions, all past the rows Polars infers the schema from. The chunk is read whole (before, it went
    line by line, several times slower), with the same values as the line-by-line path gives."""
    if path == "fast":
        _no_slow_path(monkeypatch)
    rows = [
        rec(reward=i % 2, ref_reward=None, logprobs=[-1, -0.5], token_rewards=[0, i % 2], step=1 + i // 50)
        for i in range(150)
    ]
    rows.append(rec(reward=0.5, ref_reward=0.25, logprobs=[-0.25, -2], token_rewards=[0, 0.5], step=4))
    if path == "slow":
        rows.append(rec(reward="bad"))
    res, store = ingest(run_with(tmp_path, b"".join(line(r) for r in rows)), tmp_path / "cache")
    assert res.samples == 151 and res.bad_lines == (path == "slow")
    scalars = store.scalars().sort("line")
    assert scalars.get_column("reward").to_list() == [i % 2 for i in range(150)] + [0.5]
    assert scalars.get_column("ref_reward").to_list() == [None] * 150 + [0.25]
    assert scalars.get_column("reward_gain").to_list() == [None] * 150 + [0.25]
    assert scalars.get_column("token_reward_sum").to_list() == [i % 2 for i in range(150)] + [0.5]
    last = store.sample(sample_id("rank0.jsonl", 151))
    assert list(last["token_rewards"]) == [0, 0.5] and list(last["logprobs"]) == [-0.25, -2]


def test_ingest045_nan_and_infinity_lines_alone_go_line_by_line(tmp_path, monkeypatch):
    """Lines with NaN / Infinity literals (which Polars does not read) are parsed one by one, and the other
    lines of their chunk in one Polars call: before, every line of the chunk was parsed and checked one by
    one, about twice the time of the chunk."""
    parsed = []
    real = ingest_slow._parse_line

    def spy(raw):
        parsed.append(raw)
        return real(raw)

    monkeypatch.setattr(ingest_slow, "_parse_line", spy)
    rows = [line(rec(step=1 + i // 10, logprobs=[-1.0, -0.5], extra=i)) for i in range(40)]
    rows[7] = b'{"prompt": "p", "response": "r", "reward": 1.0, "step": 1, "logprobs": [-Infinity, -0.5]}\n'
    rows[30] = b'{"prompt": "p", "response": "r", "reward": NaN, "step": 4, "logprobs": [-1.0, -0.5]}\n'
    res, store = ingest(run_with(tmp_path, b"".join(rows)), tmp_path / "cache")
    assert res.samples == 40 and res.bad_lines == 0
    assert sorted(parsed) == sorted([rows[7].rstrip(), rows[30].rstrip()])
    scalars = store.scalars().sort("line")
    assert scalars.get_column("extra").to_list() == [None if i in (7, 30) else i for i in range(40)]
    reward = scalars.get_column("reward").to_list()
    assert reward[30] != reward[30] and reward[:30] == [1.0] * 30 and reward[31:] == [1.0] * 9
    assert list(store.sample(sample_id("rank0.jsonl", 8))["logprobs"]) == [float("-inf"), -0.5]
    assert scalars.get_column("step").to_list() == [1 + i // 10 for i in range(40)]


def test_ingest046_a_failed_chunk_is_not_read_whole_twice(tmp_path, monkeypatch):
    """A chunk that failed to go to Polars whole goes line by line at once (before, the same lines were
    read whole a second time first); a chunk with blank lines is still read whole once they are left out."""
    calls = []
    real = ingest_blocks._fast_path

    def spy(lines, line_nos, data=None, step=None, *rest, **kw):
        calls.append(len(line_nos))
        return real(lines, line_nos, data, step, *rest, **kw)

    for mod in (ingest_blocks, ingest_slow):  # the fast path is tried from both
        monkeypatch.setattr(mod, "_fast_path", spy)
    good = [line(rec(step=1 + i // 5)) for i in range(20)]
    res, _ = ingest(
        run_with(tmp_path, b"".join(good[:10]) + b"{not json\n" + b"".join(good[10:])), tmp_path / "a"
    )
    assert res.samples == 20 and res.bad_lines == 1
    assert calls == [21, 20]  # the block, then its good lines together
    calls.clear()
    monkeypatch.setattr(ingest_blocks, "_slow_path", lambda *a: pytest.fail("line by line"))
    blank = tmp_path / "blank"
    blank.mkdir()
    res, _ = ingest(run_with(blank, b"".join(good[:10]) + b"\n  \n" + b"".join(good[10:])), tmp_path / "b")
    assert res.samples == 20 and calls == [22, 20]  # the block, then its lines without the blank ones


def test_ingest047_token_arrays_checked_line_by_line():
    """The line-by-line check of token arrays, case by case: integers become floats, a null item stays, a
    bool or a string is not a number, and a number is not a token."""
    from data.schema import BadLine, validate_record

    got, _ = validate_record(rec(logprobs=[1, -2.5, None], values=[0.5], response_tokens=["a", None]))
    assert got["logprobs"] == [1.0, -2.5, None] and type(got["logprobs"][0]) is float
    assert got["values"] == [0.5] and got["response_tokens"] == ["a", None]
    for bad in ([True, 0.5], ["0.5"], [[0.5]], {"a": 1}, 0.5):
        with pytest.raises(BadLine, match="'logprobs' is not a list of numbers"):
            validate_record(rec(logprobs=bad))
    for bad in (["a", 1], ["a", ["b"]], "ab"):
        with pytest.raises(BadLine, match="'response_tokens' is not a list of strings"):
            validate_record(rec(response_tokens=bad))


@pytest.mark.parametrize("path", ["fast", "slow"])
def test_ingest048_integers_past_64_bits(tmp_path, monkeypatch, path):
    """An extra integer past 64 bits (a seed, a hash) is kept as its digits (before, the ingest stopped with
    an Arrow error), and so is the rest of its column in that chunk; a step past 64 bits (or 1e20) is a bad
    line (before, the line was kept with no step)."""
    rows = [rec(seed=i) for i in range(3)] + [rec(seed=2**70), rec(seed=-(2**64), step=2)]
    rows += [rec(step=2**70), rec(step=1e20)]
    if path == "fast":
        _no_slow_path(monkeypatch)
    else:
        rows.append(rec(reward="bad"))
    res, store = ingest(run_with(tmp_path, b"".join(line(r) for r in rows)), tmp_path / "cache")
    assert res.samples == 5 and res.bad_lines == 2 + (path == "slow")
    seeds = store.scalars().sort("line").get_column("seed").to_list()
    assert seeds == ["0", "1", "2", str(2**70), str(-(2**64))]
    assert issues_by_line(store)[6] == ("error", "field 'step' is out of range (not a 64-bit integer)")
    assert issues_by_line(store)[7] == ("error", "field 'step' is out of range (not a 64-bit integer)")


def test_ingest049_lone_surrogate_escapes(tmp_path):
    """A text cut inside a UTF-16 pair (`"\\ud83d"` alone, as JavaScript writes it) has the lone surrogate
    replaced by U+FFFD with a note, in a text or a token; a valid pair (an emoji under `ensure_ascii`) is
    read as its character. Before, a lone low surrogate in a token stopped the ingest, and a lone high one
    became a NUL character."""
    rows = [line(rec(response="ok \U0001f600", response_tokens=["a"], logprobs=[-1.0])) for _ in range(3)]
    rows[1] = line(rec(response="cut \ud83d!", response_tokens=["\udc80", "b"], logprobs=[-1.0, -2.0]))
    rows.append(line(rec(prompt="\udfff", step=2)))
    assert b"\\ud83d!" in rows[1] and b"\\ud83d\\ude00" in rows[0]  # json.dumps escapes all of them
    res, store = ingest(run_with(tmp_path, b"".join(rows)), tmp_path / "cache")
    assert res.samples == 4 and res.bad_lines == 0
    note = ("note", "lone surrogate escapes replaced by U+FFFD")
    assert issues_by_line(store) == {2: note, 4: note}
    got = [store.sample(sample_id("rank0.jsonl", i)) for i in (1, 2, 4)]
    assert got[0]["response"] == "ok \U0001f600"
    assert got[1]["response"] == "cut \ufffd!" and list(got[1]["response_tokens"]) == ["\ufffd", "b"]
    assert got[2]["prompt"] == "\ufffd"


@pytest.mark.parametrize("batch", [2000, 2])
def test_ingest050_fields_named_like_working_columns(tmp_path, monkeypatch, batch):
    """A field of the file named like a working column of ingest or export (`__reason`, `__response_clean`,
    `__rank`) is kept as `extra_<name>` and exported, also when the export spills to disk (batch 2).
    Before, the first sent every chunk line by line, the second was lost, and the third stopped a large
    export."""
    from data import export
    from data.queries import ResponseFilter

    _no_slow_path(monkeypatch)
    monkeypatch.setattr(export, "BATCH", batch)
    monkeypatch.setattr(export, "SPILL_ROWS", 3)
    names = ("__reason", "__response_clean", "__rank")
    rows = [rec(step=1 + i // 3, response=f"r{i}", **{n: f"{n}{i}" for n in names}) for i in range(7)]
    res, store = ingest(run_with(tmp_path, b"".join(line(r) for r in rows)), tmp_path / "cache")
    assert res.samples == 7
    scalars = store.scalars().sort("line")
    for n in names:
        assert scalars.get_column(f"extra_{n}").to_list() == [f"{n}{i}" for i in range(7)]
    out = pl.concat(list(export.export_batches(store, ResponseFilter(), sort="step")))
    assert out.get_column("response").to_list() == [f"r{i}" for i in range(7)]
    for n in names:
        assert out.get_column(f"extra_{n}").to_list() == [f"{n}{i}" for i in range(7)]


def _small_files_run(tmp_path: Path) -> Path:
    """One file a step (veRL's rollout_data_dir), some with what sends a block its own way: a BOM, CRLF line
    ends, a bad line, an extra field of another type, token arrays."""
    run = tmp_path / "steps"
    run.mkdir()
    for s in range(1, 13):
        rows = [line(rec(step=s, prompt=f"q{i}", reward=s + i / 10, acc=i % 2 == 0)) for i in range(4)]
        if s == 3:
            rows[0] = BOM + rows[0]
        if s == 5:
            rows = [r.replace(b"\n", b"\r\n") for r in rows]
        if s == 7:
            rows[2] = b"{not json\n"
        if s == 8:
            rows = [
                line(rec(step=s, prompt="q", acc="yes", logprobs=[-1.0, -0.5], response_tokens=["a", "b"]))
            ]
        (run / f"{s:04d}.jsonl").write_bytes(b"".join(rows))
    return run


def test_ingest051_small_files_built_together_give_the_same_store(tmp_path, monkeypatch):
    """Small blocks (here, one file a step) parsed and built together, then written as one part each, give
    the store of the same files read one block at a time: the same rows, ids, steps and issues, each part
    naming its own file."""
    run = _small_files_run(tmp_path)
    calls, alone_files = [], []
    real = part_files.parse_blocks
    monkeypatch.setattr(
        part_files, "parse_blocks", lambda blocks, *a: calls.append(len(blocks)) or real(blocks, *a)
    )
    real_part = ingest_writer._Writer._build

    def spy(self, pid, rel, chunk):
        alone_files.append(rel)
        return real_part(self, pid, rel, chunk)

    monkeypatch.setattr(ingest_writer._Writer, "_build", spy)
    res, together = ingest(run, tmp_path / "together")
    # The 11 files without CR line ends are tried together, then in halves: those with the bad line (7) and
    # the field of another type (8) go alone, and so does 9, left alone by the halving.
    assert calls == [11, 5, 6, 3, 2, 3]
    assert sorted(alone_files) == ["0005.jsonl", "0007.jsonl", "0008.jsonl", "0009.jsonl"]
    monkeypatch.setattr(ingest_writer, "SMALL_BLOCK", 0)
    res1, alone = ingest(run, tmp_path / "alone")
    assert _store_snapshot(together) == _store_snapshot(alone)
    assert res.samples == res1.samples == 44 and res.bad_lines == 1
    # Without the bad line and the field of another type, the batch is built at once; each part holds
    # the rows of its own file.
    (run / "0007.jsonl").write_bytes(line(rec(step=7, prompt="q0", reward=7.0)))
    tokens = {"logprobs": [-1.0, -0.5], "response_tokens": ["a", "b"]}
    (run / "0008.jsonl").write_bytes(line(rec(step=8, prompt="q", acc=False, **tokens)))
    monkeypatch.undo()
    alone_files.clear()
    monkeypatch.setattr(ingest_writer._Writer, "_build", spy)
    res, together = ingest(run, tmp_path / "together2")
    assert alone_files == ["0005.jsonl"]  # the CRLF one; the others in one batch
    monkeypatch.undo()
    monkeypatch.setattr(ingest_writer, "SMALL_BLOCK", 0)
    res1, alone = ingest(run, tmp_path / "alone2")
    assert _store_snapshot(together) == _store_snapshot(alone)
    for pid, entry in together.manifest.parts.items():
        rows = together.scalars().filter(pl.col("part") == int(pid))
        assert rows.get_column("source").unique().to_list() == [entry["file"]]
        assert rows.get_column("row").sort().to_list() == list(range(entry["rows"]))
    sid = sample_id("0008.jsonl", 1)
    assert together.sample(sid)["step"] == 8 and list(together.sample(sid)["logprobs"]) == [-1.0, -0.5]


def test_ingest052_crash_with_small_blocks_in_flight_gives_the_same_store(tmp_path, monkeypatch):
    """Killing ingest at a commit made while batches of small blocks are being built, then running again,
    gives the store of an uninterrupted run; every commit counts the rows of the lines it says were read."""
    run = _two_rank_run(tmp_path)
    clean_res, clean = ingest(run, tmp_path / "clean", chunk_bytes=400)
    _commit_every_chunk(monkeypatch, batch_parts=3)
    real_commit = ingest_writer._Writer._commit
    calls = {"n": 0}

    def crash(self, data, complete, **kw):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt("simulated kill")
        real_commit(self, data, complete, **kw)
        store = open_store(self.dir)
        sc = store.all_scalars()
        for rel, entry in store.manifest.files.items():
            rows = sc.filter(pl.col("source") == rel).height if sc.height else 0
            assert rows == entry["lines"] == (run / rel).read_bytes()[: entry["offset"]].count(b"\n")

    monkeypatch.setattr(ingest_writer._Writer, "_commit", crash)
    with pytest.raises(KeyboardInterrupt):
        ingest_run(run, tmp_path / "crashy", PADS, chunk_bytes=400)
    monkeypatch.undo()
    res, store = ingest(run, tmp_path / "crashy", chunk_bytes=400)
    assert _store_snapshot(store) == _store_snapshot(clean)


@pytest.mark.parametrize("path", ["fast", "slow"])
def test_ingest053_per_token_fields_of_the_trainer(fixtures_dir, tmp_path, monkeypatch, path):
    """TRL's PPO writes `advantages` and `returns` per token: they are kept in the parts as float32, as the
    file has them (first line of the fixture, by hand), named in the manifest, and left out of the scalars,
    on both paths. A field that is a list in some lines and a value in others keeps the values."""
    src = fixtures_dir / "trl-ppo-small" / "rank0.jsonl"
    rows = [json.loads(x) for x in src.read_text().splitlines()[:20]]
    if path == "fast":
        _no_slow_path(monkeypatch)
    else:
        rows[5]["reward"] = "bad"  # sends the chunk line by line
        rows[6]["mixed"], rows[7]["mixed"] = [1, 2], 3
    res, store = ingest(run_with(tmp_path, b"".join(line(r) for r in rows)), tmp_path / "cache")
    assert store.token_extras() == ["advantages", "returns"]
    assert "advantages" not in list(store.manifest.ignored_fields)
    assert not {"advantages", "returns"} & set(store.scalars().columns)
    got = store.sample(sample_id("rank0.jsonl", 1))
    first = rows[0]
    assert len(first["advantages"]) == 8 and len(first["returns"]) == 9
    assert list(got["advantages"]) == [float(np.float32(x)) for x in first["advantages"]]
    assert list(got["returns"]) == [float(np.float32(x)) for x in first["returns"]]
    assert got["advantages"][0] == pytest.approx(-0.6926082372665405, rel=1e-7)
    if path == "slow":
        assert res.bad_lines == 1
        assert store.scalars().sort("line").get_column("mixed").to_list()[5:7] == [None, 3]


@pytest.mark.parametrize("path", ["fast", "slow"])
def test_ingest054_fields_of_objects_are_columns(tmp_path, monkeypatch, path):
    """A GRPO run's reward per function logged as an object, and a `meta` object with nested fields: each
    field is an extra column `object.field` (objects in objects too), the same on both paths; a list of
    strings in an object is ignored and named. Before, the objects were ignored whole."""
    rows = [
        rec(
            rewards={"accuracy": i % 2, "format": 0.5},
            meta={"source": "gsm8k", "tags": ["x"], "deep": {"n": i}},
        )
        for i in range(4)
    ]
    rows[2]["meta"] = None
    rows[3]["rewards"] = {"accuracy": 1}
    if path == "fast":
        _no_slow_path(monkeypatch)
    else:
        rows.append(rec(reward="bad"))
    res, store = ingest(run_with(tmp_path, b"".join(line(r) for r in rows)), tmp_path / "cache")
    sc = store.scalars().sort("line")
    assert sc.get_column("rewards.accuracy").to_list() == [0, 1, 0, 1]
    assert sc.get_column("rewards.format").to_list() == [0.5, 0.5, 0.5, None]
    assert sc.get_column("meta.source").to_list() == ["gsm8k", "gsm8k", None, "gsm8k"]
    assert sc.get_column("meta.deep.n").to_list() == [0, 1, None, 3]
    assert list(store.manifest.ignored_fields) == ["meta.tags"]
    assert {"rewards.accuracy", "rewards.format", "meta.source", "meta.deep.n"} <= set(store.extra_columns())


@pytest.mark.parametrize("path", ["fast", "slow"])
def test_ingest055_a_whole_conversation_under_messages(tmp_path, monkeypatch, path):
    """A line that logs the whole conversation under `messages` (OpenAI's chat format, an agent's
    trajectory) is split where the assistant first speaks: the messages before are the prompt (previewed
    by the question), that one and all after the response (tool results and later turns); without an
    assistant message after the prompt, the line has no prompt. Lines with prompt and response beside them
    go line by line. Before, every such line was missing its prompt."""
    system, user = {"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}
    call = {"role": "assistant", "content": None}
    call["tool_calls"] = [
        {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": '{"x": "2+2"}'}}
    ]
    tool = {"role": "tool", "content": "4"}
    rows = [
        {"messages": [system, user, {"role": "assistant", "content": "4"}], "reward": 1, "step": 1},
        {
            "messages": [user, call, tool, {"role": "assistant", "content": "It is 4."}],
            "reward": 1,
            "step": 1,
        },
        {"messages": [user], "reward": 0, "step": 1},
    ]
    if path == "fast":
        _no_slow_path(monkeypatch)
    else:
        rows.append(rec(prompt="p", response="r", step=2))
    res, store = ingest(run_with(tmp_path, b"".join(line(r) for r in rows)), tmp_path / "cache")
    assert res.samples == 2 + (path == "slow") and res.bad_lines == 1
    assert issues_by_line(store)[3] == ("error", "missing required field 'prompt'")
    first, second = (store.sample(sample_id("rank0.jsonl", i)) for i in (1, 2))
    assert (first["prompt"], first["response"]) == ("system: Be brief.\n\nuser: 2+2?", "4")
    assert second["prompt"] == "2+2?"
    assert second["response"] == 'assistant: [call calc({"x": "2+2"})]\n\ntool: 4\n\nassistant: It is 4.'
    previews = store.scalars().sort("line").get_column("prompt_preview").to_list()
    assert previews[:2] == ["2+2?", "2+2?"]
    assert "messages" not in list(store.manifest.ignored_fields)
    if path == "slow":
        assert store.sample(sample_id("rank0.jsonl", 4))["prompt"] == "p"


@pytest.mark.parametrize("path", ["together", "one_by_one", "slow"])
def test_ingest056_step_from_the_file_name(tmp_path, monkeypatch, path):
    """Lines without a step (absent or null) in a file whose name gives one (`step_3.jsonl`, NeMo-RL's
    `train_data_step12.jsonl`, veRL's `120.jsonl`) take that step; a line's own step wins; a file whose
    name gives none (`rank0.jsonl`) still has the line "missing required field 'step'". The same whether
    the small files are parsed together, one by one, or line by line. Before, every such line was bad."""

    def no_step(reward, **kw):
        d = rec(reward=reward, **kw)
        del d["step"]
        return d

    run = tmp_path / "run"
    run.mkdir()
    files = {
        "step_3.jsonl": [no_step(1.0), no_step(2.0)],
        "train_data_step12.jsonl": [no_step(3.0), rec(step=None, reward=4.0), rec(step=7, reward=5.0)],
        "120.jsonl": [no_step(6.0)],
        "rank0.jsonl": [rec(step=1, reward=7.0), no_step(8.0)],
    }
    if path == "slow":
        files["step_3.jsonl"].append(rec(reward="bad"))
    elif path == "one_by_one":
        _commit_every_chunk(monkeypatch)
    for name, rows in files.items():
        (run / name).write_bytes(b"".join(line(r) for r in rows))
    if path != "slow":
        _no_slow_path(monkeypatch)
    res, store = ingest(run, tmp_path / "cache")
    got = {
        (r["source"], r["line"]): (r["step"], r["reward"])
        for r in store.scalars().select("source", "line", "step", "reward").iter_rows(named=True)
    }
    assert got == {
        ("step_3.jsonl", 1): (3, 1.0),
        ("step_3.jsonl", 2): (3, 2.0),
        ("train_data_step12.jsonl", 1): (12, 3.0),
        ("train_data_step12.jsonl", 2): (12, 4.0),
        ("train_data_step12.jsonl", 3): (7, 5.0),
        ("120.jsonl", 1): (120, 6.0),
        ("rank0.jsonl", 1): (1, 7.0),
    }
    bad = {(r["source"], r["line"]): r["reason"] for r in store.issues().iter_rows(named=True)}
    assert bad[("rank0.jsonl", 2)] == "missing required field 'step'"
    assert len(bad) == 1 + (path == "slow")


def test_ingest057_step_from_name_rule():
    """Which names give a step: "step" and a number not after a letter (the last when there are two), or a
    name that is a number; one out of the 64-bit range gives none."""
    from data.schema import step_from_name, validate_record

    given = {
        "120.jsonl": 120,
        "step_120.jsonl": 120,
        "global_step-5.jsonl": 5,
        "val_data_step4.jsonl": 4,
        "step=7.jsonl": 7,
        "STEP_9.jsonl": 9,
        "rollouts_step_3_rank1.jsonl": 3,
        "step_1_step_2.jsonl": 2,
        "rank0.jsonl": None,
        "substep3.jsonl": None,
        "data.jsonl": None,
        "steps_10.jsonl": None,
        "99999999999999999999.jsonl": None,
    }
    assert {name: step_from_name(name) for name in given} == given
    assert validate_record({"prompt": "p", "response": "r", "reward": 1}, 4)[0]["step"] == 4
    assert validate_record({"prompt": "p", "response": "r", "reward": 1, "step": 2}, 4)[0]["step"] == 2


@pytest.mark.parametrize("path", ["fast", "slow"])
def test_ingest058_array_names_of_verl_openrlhf_and_trl(tmp_path, monkeypatch, path):
    """A line logged from a veRL batch (old_log_probs, ref_log_prob, token_level_rewards, global_steps), from
    OpenRLHF's experience (action_log_probs, base_action_log_probs) or from a TRL reward function's
    arguments (prompts, completions, rewards) gives the known fields, and their metrics, on both paths.
    Log-ratio by hand: (-1 - -1.5) + (-2 - -1) = -0.5; k3 KL: e^-0.5 + 0.5 - 1 + e^1 - 1 - 1."""
    verl = {
        "prompt": "p",
        "response": "a b",
        "score": 1.0,
        "global_steps": 3,
        "old_log_probs": [-1.0, -2.0],
        "ref_log_prob": [-1.5, -1.0],
        "token_level_rewards": [0.0, 1.0],
        "response_tokens": ["a", "b"],
    }
    openrlhf = {
        "prompt": "p",
        "response": "a b",
        "reward": 1.0,
        "step": 3,
        "action_log_probs": [-1.0, -2.0],
        "base_action_log_probs": [-1.5, -1.0],
    }
    trl = {"prompts": "p", "completions": "a b", "rewards": 2.0, "step": 4}
    rows = [verl, openrlhf, trl]
    if path == "fast":
        _no_slow_path(monkeypatch)
        files = {f"{n}.jsonl": line(r) for n, r in zip("abc", rows, strict=True)}
    else:
        files = {f"{n}.jsonl": line(r) + line(rec(reward="bad")) for n, r in zip("abc", rows, strict=True)}
    run = tmp_path / "run"
    run.mkdir()
    for name, content in files.items():
        (run / name).write_bytes(content)
    res, store = ingest(run, tmp_path / "cache")
    assert res.samples == 3
    sc = {r["source"]: r for r in store.scalars().iter_rows(named=True)}
    kl = np.exp(-0.5) + 0.5 - 1 + np.exp(1.0) - 1 - 1
    for name in ("a.jsonl", "b.jsonl"):
        assert sc[name]["step"] == 3 and sc[name]["reward"] == 1.0
        assert sc[name]["log_ratio_sum"] == pytest.approx(-0.5)
        assert sc[name]["kl_sum"] == pytest.approx(kl, rel=1e-6)
    assert sc["a.jsonl"]["token_reward_sum"] == pytest.approx(1.0)
    assert (sc["c.jsonl"]["step"], sc["c.jsonl"]["reward"]) == (4, 2.0)
    assert store.sample(sample_id("c.jsonl", 1))["response"] == "a b"
