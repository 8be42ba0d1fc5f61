"""miles' ``--dump-details`` trajectory sidecar, built as its writer builds it and read back line by line
against the file, read here with json and split by the test's own rule.

Source read: radixark/miles at 31f1ca961a94cb860cec3b2dea34ec332bfa8f76:
- miles/utils/arguments.py:3183-3187: ``--dump-details DIR`` sets ``DIR/rollout_data/{rollout_id}.pt``,
  ``DIR/train_data/{rollout_id}_{rank}.pt`` and ``DIR/trajectory/{rollout_id}.jsonl``;
- miles/ray/rollout/debug_data.py:12-30 ``trajectory_rows`` (sample_index, group_index, status, reward or
  None where not a number, prompt, messages), 76-89 ``save_debug_trajectory_data`` (``eval_`` before an
  evaluation's id; ``json.dumps(row, separators=(",", ":"))`` a line), 36-71 ``save_dashboard_columns``
  (the per-token Parquet mirror: sample_index, response_length, total_length, tokens, loss_mask,
  rollout_log_probs; no reward, no text);
- miles/rollout/generate_hub/multi_turn.py:42-87: the conversation is the prompt's messages, then each
  ``{"role": "assistant", "content": output["text"]}`` and the tool messages;
- miles/rollout/generate_utils/tool_call_utils.py:55: ``{"role": "tool", "tool_call_id", "content", "name"}``;
- miles/utils/types.py:57-65 ``Sample.Status`` values.
"""

from __future__ import annotations

import json
from pathlib import Path

from data.ingest import ingest_run
from data.schema.dialects import detect
from data.store import open_store, sample_id

PADS = ("<pad>",)


def _row(index, group, reward, question, turns, status="completed") -> dict:
    prompt = [{"role": "system", "content": "Use the calculator."}, {"role": "user", "content": question}]
    messages = list(prompt)
    for role, text in turns:
        msg = {"role": role, "content": text}
        if role == "tool":
            msg |= {"tool_call_id": f"call_{index}", "name": "calc"}
        messages.append(msg)
    row = {"sample_index": index, "group_index": group, "status": status, "reward": reward}
    return row | {"prompt": prompt, "messages": messages}


def _write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row, separators=(",", ":")) + "\n" for row in rows))


def test_miles001_trajectory_sidecar_rows(tmp_path):
    """Two rollouts' sidecars and an evaluation's: each line a response of step {rollout_id}; its prompt the
    prompt's messages, its response the conversation after them (the tool result marked, the model's turns
    counted), its reward and group as written; a null reward is a bad line that says why; the evaluation a
    run of its own, at step 0 (its name eval_{id} gives none the board reads)."""
    run = tmp_path / "dump"
    turns = [("assistant", "<tool_call>2+2</tool_call>"), ("tool", "4"), ("assistant", "It is 4.")]
    step3 = [
        _row(0, 0, 1.0, "2+2?", turns),
        _row(1, 0, 0.0, "2+2?", [("assistant", "5")]),
        _row(2, 1, None, "3+3?", [("assistant", "6")]),
        _row(3, 1, 0.5, "3+3?", [], status="aborted"),
    ]
    _write(run / "trajectory" / "3.jsonl", step3)
    _write(run / "trajectory" / "4.jsonl", [_row(0, 0, 1.0, "5+5?", [("assistant", "10")])])
    _write(run / "trajectory" / "eval_4.jsonl", [_row(0, 0, 1.0, "7+7?", [("assistant", "14")])])
    res = ingest_run(run, tmp_path / "c", PADS)
    store = open_store(res.store_dir)
    assert store.manifest.files["trajectory/3.jsonl"]["dialect"] == "miles"
    assert (res.samples, res.bad_lines, res.steps) == (4, 1, 2)
    rows = {r["sample_id"]: r for r in store.scan_parts().collect().iter_rows(named=True)}
    for ln, want in enumerate(
        json.loads(x) for x in (run / "trajectory" / "3.jsonl").read_text().splitlines()
    ):
        if want["reward"] is None:
            assert sample_id("trajectory/3.jsonl", ln + 1) not in rows
            continue
        got = rows[sample_id("trajectory/3.jsonl", ln + 1)]
        rest = want["messages"][len(want["prompt"]) :]
        assert (got["step"], got["reward"], got["group_id"]) == (3, want["reward"], want["group_index"])
        assert got["prompt"] == "\n\n".join(f"{m['role']}: {m['content']}" for m in want["prompt"])
        if len(rest) > 1:
            assert got["response"] == "\n\n".join(f"{m['role']}: {m['content']}" for m in rest)
            own = "\n\n".join(m["content"] for m in rest if m["role"] == "assistant")
            assert got["response_chars"] == len(own)
        else:
            assert got["response"] == (rest[0]["content"] if rest else "")
        assert (got["status"], got["sample_index"]) == (want["status"], want["sample_index"])
    issues = [
        (r["line"], r["reason"]) for r in store.issues().iter_rows(named=True) if r["severity"] == "error"
    ]
    assert issues == [
        (3, "field 'reward' is null: miles writes null where the sample's reward is not a number")
    ]
    val = ingest_run(run, tmp_path / "c", PADS, split="validation")
    assert (val.samples, val.bad_lines) == (1, 0)
    entry = open_store(val.store_dir).manifest.files["trajectory/eval_4.jsonl"]
    assert (entry["step"], entry["step_from"]) == (0, "none")  # said on the runs page


def test_miles002_recognised_by_the_sidecar_fields():
    """The sidecar's fields are miles' (sure); the per-token mirror's are not claimed."""
    fields = frozenset({"sample_index", "group_index", "status", "reward", "prompt", "messages"})
    m = detect("trajectory/12.jsonl", fields)
    assert (m.dialect.name, m.how) == ("miles", "sure")
    mirror = frozenset(
        {"sample_index", "response_length", "total_length", "tokens", "loss_mask", "rollout_log_probs"}
    )
    assert detect("dashboard_columns/rollout_12.parquet", mirror).dialect.name != "miles"


def test_miles003_dashboard_files_are_not_rollouts(tmp_path):
    """Beside the trajectories, --dump-details writes the per-token mirror of each rollout
    (miles/dashboard/dump_reader.py:501: dashboard_columns/rollout_{stem}.parquet, written by
    debug_data.py:36-71 with tokens, loss_mask, rollout_log_probs; no reward, no text) and, with
    --use-miles-dashboard, the dashboard's telemetry (miles/dashboard/store.py:17-20: dashboard/{stream}/
    {YYYYMMDD_HH}.jsonl, a v1 flat dashboard/{stream}.jsonl; dump_reader.py:406: dashboard/cache/*.parquet).
    They are set aside with what they are, not read as bad lines; the trajectories are read as before
    (before: every line of each was a bad line, the runs page listing 'prompt' as not read)."""
    import polars as pl

    from data.store.runs import run_file_stats

    run = tmp_path / "dump"
    _write(run / "trajectory" / "3.jsonl", [_row(0, 0, 1.0, "2+2?", [("assistant", "4")])])
    (run / "dashboard_columns").mkdir()
    pl.DataFrame(
        {
            "sample_index": [0],
            "tokens": [[1, 2, 3]],
            "loss_mask": [[0, 1, 1]],
            "rollout_log_probs": [[-0.1, -0.2]],
        }
    ).write_parquet(run / "dashboard_columns" / "rollout_3.parquet")
    _write(run / "dashboard" / "rollout" / "20261129_08.jsonl", [{"ts": 1.0, "step": 3, "value": 0.5}])
    _write(run / "dashboard" / "metrics.jsonl", [{"ts": 1.0, "step": 3, "reward": 0.5}])
    aside: list[tuple[str, str]] = []
    assert [rel for rel, _ in run_file_stats(run, aside=aside)] == ["trajectory/3.jsonl"]
    assert dict(aside) == {
        "dashboard/metrics.jsonl": "miles' dashboard telemetry (--use-miles-dashboard)",
        "dashboard/rollout/20261129_08.jsonl": "miles' dashboard telemetry (--use-miles-dashboard)",
        "dashboard_columns/rollout_3.parquet": "miles' per-token mirror of a rollout (tokens, loss mask, "
        "rollout log-probs): joined to trajectory/{id}.jsonl's lines by sample_index where that file exists; "
        "no reward, no text of its own",
    }
    res = ingest_run(run, tmp_path / "c", PADS)
    assert (res.samples, res.bad_lines) == (1, 0)
