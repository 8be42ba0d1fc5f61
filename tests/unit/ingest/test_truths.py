"""The smaller truths of trainers' files (issue 34, item 4, and NeMo Gym's side files): NeMo Gym's input
items rendered as its output items are, its side files recognised, verifiers' empty completion, the
trainer's own group key, secrets masked. Lines are built exactly as the frameworks write them (the source
file and line cited at each builder) and checked against the test's own reading of them."""

from __future__ import annotations

import json
import re
from pathlib import Path

from data.ingest import ingest_run
from data.store import open_store

PADS = ("<pad>", "<|endoftext|>")


def _ingest(run: Path, cache: Path):
    res = ingest_run(run, cache, PADS)
    return res, open_store(res.store_dir)


def _rows(store) -> dict[tuple[str, int], dict]:
    return {(r["source"], r["line"]): r for r in store.scan_parts().collect().iter_rows(named=True)}


def _write(path: Path, lines: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def _preview(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()[:160]


# ---- verifiers ----------------------------------------------------------------------------------------------


def _vf015_line(i: int, rollouts_per_example: int, prompt: list[dict]) -> dict:
    """A line of verifiers 0.1.5's vf-eval results.jsonl (PrimeIntellect-ai/verifiers @v0.1.5,
    verifiers/scripts/eval.py:158-180, written by Dataset.to_json at :206): ``id``, ``prompt``,
    ``completion`` (here none: a tool-test environment whose rollouts ended before the model spoke),
    ``task``, timings, ``reward`` and each reward function's score (``info`` and ``answer`` only when
    given)."""
    return {
        "id": i // rollouts_per_example,
        "prompt": prompt,
        "completion": [],
        "task": "tool_test",
        "generation_ms": 12.5 + i,
        "scoring_ms": 0.25,
        "total_ms": 12.75 + i,
        "reward": 0.0,
        "tool_call_reward_func": 0.0,
    }


def test_truths003_an_empty_completion_is_an_empty_response(tmp_path):
    """verifiers 0.1.5's ``"completion": []``: every line read, its response empty (whole chunks and line
    by line, beside completions that have messages)."""
    prompt = [{"role": "system", "content": "Call the tools."}, {"role": "user", "content": "Call tool_a."}]
    empty = [_vf015_line(i, 2, prompt) for i in range(6)]
    _write(tmp_path / "a" / "results.jsonl", empty)
    res, store = _ingest(tmp_path / "a", tmp_path / "cache")
    assert (res.bad_lines, res.samples) == (0, 6)
    rows = _rows(store)
    for n, want in enumerate(empty, start=1):
        got = rows[("results.jsonl", n)]
        assert (got["response"], got["response_chars"]) == ("", 0)
        assert got["prompt"] == "system: Call the tools.\n\nuser: Call tool_a."
        assert (got["reward"], got["tool_call_reward_func"]) == (
            want["reward"],
            want["tool_call_reward_func"],
        )
    mixed = [*empty[:3], {**empty[3], "completion": [{"role": "assistant", "content": "done"}]}]
    _write(tmp_path / "b" / "results.jsonl", mixed)
    res, store = _ingest(tmp_path / "b", tmp_path / "cache")
    assert (res.bad_lines, res.samples) == (0, 4)
    assert [r["response"] for _, r in sorted(_rows(store).items())] == ["", "", "", "done"]
