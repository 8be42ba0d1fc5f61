"""miles' per-token Parquet (``dashboard_columns/rollout_{id}.parquet``) joined to its trajectory lines by
sample_index, each built exactly as its writer builds it, and read back field by field against the files read
here with json and Polars.

Source read: radixark/miles at 31f1ca961a94cb860cec3b2dea34ec332bfa8f76:
- miles/ray/rollout/debug_data.py:36-72 ``save_dashboard_columns``: one row per sample, schema sample_index
  Int32, response_length Int32, total_length Int32 (= len(sample.tokens)), tokens List(Int32) (prompt and
  response), loss_mask List(Int8), rollout_log_probs List(Float32); written with row_group_size=8;
- debug_data.py:103-113 ``save_debug_rollout_data``: the trajectory file first (12-30 ``trajectory_rows``, only
  samples with metadata["messages"]), then the Parquet at ``dashboard_columns/rollout_{stem}.parquet`` in the
  folder above ``rollout_data/`` (stem ``eval_{id}`` for an evaluation);
- miles/utils/types.py:36-46 ``Sample.tokens``, ``response_length``, ``loss_mask`` (over the response),
  ``rollout_log_probs``;
- miles/dashboard/dump_reader.py:548-599 ``DumpReader.tokens``: the response is ``tokens[prompt_len:]`` with
  ``prompt_len = total_length - response_length``; lp_diff / imp_ratio need the trainer's log_probs, which
  only train_data/{id}_{rank}.pt (a torch pickle) holds.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import polars as pl

from data.ingest import ingest_run
from data.store import open_store, sample_id
from data.store.reading import understood

PADS = ("<pad>",)
SCHEMA = {
    "sample_index": pl.Int32,
    "response_length": pl.Int32,
    "total_length": pl.Int32,
    "tokens": pl.List(pl.Int32),
    "loss_mask": pl.List(pl.Int8),
    "rollout_log_probs": pl.List(pl.Float32),
}


def _line(index: int, reward: float, answer: str) -> dict:
    prompt = [{"role": "user", "content": "2+2?"}]
    messages = [*prompt, {"role": "assistant", "content": "<tool_call>2+2</tool_call>"}]
    messages += [{"role": "tool", "content": "4", "tool_call_id": "c", "name": "calc"}]
    messages += [{"role": "assistant", "content": answer}]
    return {"sample_index": index, "group_index": 0, "status": "completed", "reward": reward, "prompt": prompt,
            "messages": messages}  # fmt: skip


def _sample(index: int, prompt: list[int], response: list[int], mask: list[int], lps: list[float]) -> dict:
    return {"sample_index": index, "response_length": len(response), "total_length": len(prompt) + len(response),
            "tokens": prompt + response, "loss_mask": mask, "rollout_log_probs": lps}  # fmt: skip


def _dump(run: Path, stem: str, lines: list[dict], samples: list[dict]) -> None:
    traj = run / "trajectory" / f"{stem}.jsonl"
    traj.parent.mkdir(parents=True, exist_ok=True)
    traj.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in lines))
    cols = run / "dashboard_columns" / f"rollout_{stem}.parquet"
    cols.parent.mkdir(parents=True, exist_ok=True)
    pl.DataFrame(samples, schema=SCHEMA).write_parquet(cols, row_group_size=8)


def _rows(store) -> dict:
    return {r["sample_id"]: r for r in store.scan_parts().collect().iter_rows(named=True)}


def test_miles_join001_parquet_fields_on_each_line(tmp_path):
    """Each trajectory line takes its sample's response ids (the last response_length of tokens, as the
    dashboard's DumpReader.tokens cuts them), loss mask (0 on the tool's result) and rollout log-probs from the
    Parquet row of its sample_index, compared field by field with the Parquet read here; a Parquet row with no
    line (a single-turn sample) and a line with no row are said on the runs page, never silently lost."""
    run = tmp_path / "dump"
    samples = [
        _sample(7, [1, 2], [10, 11, 12, 13], [1, 0, 0, 1], [-0.5, 0.0, 0.0, -0.25]),
        _sample(8, [1, 2, 3], [20, 21], [1, 1], [-1.0, -2.0]),
        _sample(9, [1], [30], [1], [-3.0]),  # no trajectory line: its text is only in rollout_data/3.pt
    ]
    _dump(run, "3", [_line(8, 1.0, "4"), _line(7, 0.0, "5"), _line(6, 0.5, "6")], samples)
    res = ingest_run(run, tmp_path / "c", PADS)
    store = open_store(res.store_dir)
    assert (res.samples, res.bad_lines) == (3, 0)
    rows = _rows(store)
    parquet = {
        r["sample_index"]: r for r in pl.read_parquet(run / "dashboard_columns/rollout_3.parquet").to_dicts()
    }
    for ln, want in enumerate(json.loads(x) for x in (run / "trajectory/3.jsonl").read_text().splitlines()):
        got = rows[sample_id("trajectory/3.jsonl", ln + 1)]
        sample = parquet.get(want["sample_index"])
        if sample is None:  # line 3: sample 6 has no Parquet row
            assert got["response_tokens"] is None and got["loss_mask"] is None
            continue
        cut = sample["total_length"] - sample["response_length"]
        assert got["response_tokens"] == [str(t) for t in sample["tokens"][cut:]]
        assert got["loss_mask"] == [float(m) for m in sample["loss_mask"]]
        assert got["rollout_log_probs"] == [float(v) for v in sample["rollout_log_probs"]]
        assert got["reward"] == want["reward"]
    assert rows[sample_id("trajectory/3.jsonl", 1)]["response_tokens"] == ["20", "21"]  # by hand: sample 8
    assert rows[sample_id("trajectory/3.jsonl", 2)]["loss_mask"] == [1.0, 0.0, 0.0, 1.0]  # by hand: sample 7
    issues = store.issues()
    note = issues.filter(pl.col("line") == 3).get_column("reason").to_list()
    assert any("no row of sample_index 6 in dashboard_columns/rollout_3.parquet" in n for n in note)
    said = " ".join(store.manifest.problems)
    assert "Joined 2 of 3 lines' keys in 1 files to their companions" in said
    assert "dashboard_columns/rollout_3.parquet: 1 of 3" in said
    assert "torch pickle" in said
    assert understood(store) is not None


def test_miles_join002_parquet_after_the_trajectory(tmp_path):
    """A live read that finds the trajectory file before its Parquet (miles writes the Parquet right after)
    reads the lines without per-token fields and says so; once the Parquet is there, the file is read again
    from its start and its lines joined."""
    run = tmp_path / "dump"
    _dump(run, "1", [_line(0, 1.0, "4")], [_sample(0, [5], [6, 7], [1, 1], [-0.1, -0.2])])
    parquet = run / "dashboard_columns" / "rollout_1.parquet"
    held = parquet.read_bytes()
    parquet.unlink()
    res = ingest_run(run, tmp_path / "c", PADS)
    store = open_store(res.store_dir)
    assert _rows(store)[sample_id("trajectory/1.jsonl", 1)]["response_tokens"] is None
    assert "trajectory/1.jsonl (dashboard_columns/rollout_1.parquet: absent)" in " ".join(
        store.manifest.problems
    )
    parquet.write_bytes(held)
    os.utime(parquet, ns=(1, 1))
    res = ingest_run(run, tmp_path / "c", PADS)
    store = open_store(res.store_dir)
    assert res.samples == 1
    assert _rows(store)[sample_id("trajectory/1.jsonl", 1)]["response_tokens"] == ["6", "7"]
    assert "absent" not in " ".join(store.manifest.problems)
