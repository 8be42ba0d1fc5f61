"""The trainer-side writer (data/writer.py): what it appends is read back by ingest exactly."""

from __future__ import annotations

import json

import numpy as np
import pytest

from data.ingest import ingest_run
from data.store import open_store
from data.writer import write_rollouts


def test_writer001_steps_and_ranks_read_back(tmp_path):
    """Two steps from two ranks, token arrays as numpy arrays and extras: one file per rank, every line
    read with its step, reward, texts and log-probs; a later step appends to the same files."""
    run = tmp_path / "run"
    for step in (1, 2):
        for rank in (0, 1):
            write_rollouts(
                run,
                step,
                [f"q{rank}", f"q{rank}"],
                [f"a{step}{rank}0", f"a{step}{rank}1"],
                np.array([0.5 * step, -1.0 * rank]),
                rank=rank,
                logprobs=[np.array([-0.5, -0.25], dtype=np.float32), np.array([-1.0])],
                response_tokens=[["a", "b"], ["c"]],
                group_id=[rank, rank],
            )
    assert sorted(p.name for p in run.iterdir()) == ["rank0.jsonl", "rank1.jsonl"]
    lines = [json.loads(x) for x in (run / "rank1.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 1, 2, 2]
    res = ingest_run(run, tmp_path / "cache", ("<pad>",))
    store = open_store(res.store_dir)
    assert (res.samples, res.steps, res.bad_lines) == (8, 2, 0)
    sc = store.scalars().sort("source", "line")
    assert sc.get_column("reward").to_list() == [0.5, 0.0, 1.0, 0.0, 0.5, -1.0, 1.0, -1.0]
    assert sc.get_column("response_length").to_list() == [2, 1] * 4
    first = store.sample(sc.get_column("sample_id")[0])
    assert (first["prompt"], first["response"], first["logprobs"]) == ("q0", "a100", [-0.5, -0.25])


def test_writer002_bad_arguments(tmp_path):
    """A column with a value count other than the prompts' is refused before anything is written; the rank
    comes from $RANK when not given."""
    with pytest.raises(ValueError, match="rewards: 1 values for 2 prompts"):
        write_rollouts(tmp_path, 1, ["p", "q"], ["a", "b"], [1.0])
    assert not list(tmp_path.iterdir())
    import os

    os.environ["RANK"] = "3"
    try:
        assert write_rollouts(tmp_path, 1, ["p"], ["a"], [1.0]).name == "rank3.jsonl"
    finally:
        del os.environ["RANK"]
