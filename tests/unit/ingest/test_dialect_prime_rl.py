"""prime-rl's file monitor, built as its writer builds it and read back response by response against the
records, read here with json and walked by the test's own rules.

The issue described prime-rl's file monitor as ``traces/stream.jsonl`` with ``stream.index.jsonl`` and
``traces/annotations/<producer>.jsonl`` in zstd chunks; its current source writes none of these. Source
read: PrimeIntellect-ai/prime-rl at 559b44772e471d1538537b8805cc77f3824a5e64 and PrimeIntellect-ai/verifiers
at a60a606ecc4d309247edf9ff92c3eabca362781f:
- prime-rl src/prime_rl/monitors/file.py:43-59 ``FileMonitor.log_episodes``: ``rollouts/step_{step}/{kind}/
  {subset}/traces.jsonl``, appended with ``orjson.dumps(episode.to_record(), default=str,
  option=OPT_APPEND_NEWLINE | OPT_SERIALIZE_NUMPY)``; src/prime_rl/monitors/base.py:12-13 kind train / eval,
  subset all / effective; skills/training/monitor-run/SKILL.md:145-160 (all/ holds trace-less failures);
- verifiers/v1/episode.py:85-108,149-155 ``Episode`` (id, env, task, group, run, ok, errors, traces) and
  ``to_record`` (``model_dump(mode="json", exclude={"traces": {"__all__": EXCLUDE_FIELDS}},
  exclude_none=True)``), 47-60 ``TrainWorkInfo`` (step, policy span);
- verifiers/v1/trace.py:41-49 ``EXCLUDE_FIELDS`` (multi_modal_data, routed_experts, kept_tokens off disk),
  135-141 ``Reward.value = score * weight``, 363-415 ``Trace`` fields and ``reward`` (the sum of the values),
  451-470 ``branches`` (one root-to-leaf path per leaf);
- verifiers/v1/graph.py:64-113 ``MessageNode`` (parent, message, sampled, token_ids, mask, logprobs /
  advantages / reference_logprobs over the sampled tokens, loss_weights over all its tokens), 647-651 leaves;
- verifiers/v1/types.py:56-86 messages (an assistant's content, reasoning_content, tool_calls of id, name,
  arguments).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data.ingest import ingest_run
from data.schema.dialects import detect
from data.store import open_store, sample_id

PADS = ("<pad>",)
REL = "rollouts/step_3/train/all/traces.jsonl"


def _node(parent, message, sampled=False, tokens=(), mask=(), **lists) -> dict:
    """A MessageNode as model_dump(mode="json", exclude_none=True) writes it, in its fields' order."""
    node = {"parent": parent, "message": message, "sampled": sampled, "timestamp": 1.7e9}
    node |= {
        "token_ids": list(tokens),
        "mask": list(mask),
        "is_content": [],
        "logprobs": lists.pop("logprobs", []),
    }
    node |= {k: v for k, v in lists.items() if v is not None}
    return {k: v for k, v in node.items() if v is not None}


def _trace(nodes, rewards, agent="agent", ok=True, **extra) -> dict:
    return {
        "version": 1,
        "id": f"t-{agent}",
        "verifiers": {"version": "0.3.1"},
        "task": {"type": "gsm8k", "data": {"question": "2+2?", "answer": "4"}, "key": "q7"},
        "agent": {"config": {"model": "m"}, "name": agent, "trainable": True},
        "tools": [],
        "nodes": nodes,
        "calls": [],
        "request_rewrites": [],
        "response_rewrites": [],
        "rewards": rewards,
        "metrics": {"num_turns": 1.0},
        "info": {},
        "extra_usage": [],
        "is_completed": True,
        "ok": ok,
        "stop_condition": "completed",
        "errors": [],
        "timing": {"start": 1.7e9},
    } | extra


def _episode(traces, step=3, group="g1", **extra) -> dict:
    ep = {
        "id": f"ep-{group}",
        "env": {"id": "gsm8k", "name": "gsm8k"},
        "task": {"type": "gsm8k", "data": {"question": "2+2?", "answer": "4"}, "key": "q7"},
        "group": {"id": group},
        "run": {
            "type": "train",
            "id": "r1",
            "work": {"type": "train", "step": step, "policy": {"start": 2, "end": 3}},
        },
        "ok": True,
        "errors": [],
        "traces": traces,
    }
    return ep | extra


SYS = {"role": "system", "content": "Answer briefly."}
USER = {"role": "user", "content": [{"type": "text", "text": "What is 2+2?"}]}


def _single_turn(answer_ids, logprobs, advantages, ref, score) -> dict:
    """system, user, then the model's answer: its node's tokens are the generation prompt scaffold (mask
    false) and the sampled completion (mask true)."""
    n = len(answer_ids)
    nodes = [
        _node(None, SYS, tokens=[1, 2], mask=[False, False]),
        _node(0, USER, tokens=[3, 4, 5], mask=[False] * 3),
        _node(
            1,
            {"role": "assistant", "content": "4", "reasoning_content": "two and two"},
            sampled=True,
            tokens=[9, 9, *answer_ids],
            mask=[False, False] + [True] * n,
            logprobs=logprobs,
            advantages=advantages,
            reference_logprobs=ref,
            loss_weights={"echo": [0.0, 0.0] + [1.0] * n},
        ),
    ]
    return _trace(
        nodes, {"correct": {"score": score, "weight": 1.0}, "format": {"score": 0.5, "weight": 0.2}}
    )


def _write(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in records))


def _rows(store) -> dict[str, dict]:
    return {r["sample_id"]: r for r in store.scan_parts().collect().iter_rows(named=True)}


def test_prime_rl001_episodes_read_per_trace(tmp_path):
    """Two episodes of step 3 (one trace each) and a trace-less failure: 2 responses, 0 bad lines, the
    failure a note; reward = Σ score × weight; step from run.work.step; group_id = group.id; the prompt the
    messages before the sampled one, the response its reasoning and content; the per-token fields the
    sampled tokens' (loss weights cut to them)."""
    run = tmp_path / "run"
    eps = [
        _episode([_single_turn([40, 41], [-0.5, -0.25], [1.0, 1.0], [-0.75, -0.5], 1.0)], group="g1"),
        _episode([_single_turn([42], [-2.0], None, None, 0.0)], group="g2"),
        _episode([], group="g3", ok=False, errors=[{"type": "TimeoutError", "message": "sandbox"}]),
    ]
    _write(run / REL, eps)
    res, store = _ingest(run, tmp_path / "c")
    entry = store.manifest.files[REL]
    assert (entry["dialect"], entry["matched"]) == ("prime_rl", "sure")
    assert (res.samples, res.bad_lines, res.steps) == (2, 0, 1)
    notes = [r["line"] for r in store.issues().iter_rows(named=True) if r["severity"] == "note"]
    assert notes == [3]
    rows = _rows(store)
    for ln, ep in enumerate(eps[:2], start=1):
        got = rows[f"{sample_id(REL, ln)}.0"]
        trace = ep["traces"][0]
        want_reward = sum(r["score"] * r["weight"] for r in trace["rewards"].values())
        assert got["reward"] == pytest.approx(want_reward)
        assert (got["step"], got["group_id"]) == (ep["run"]["work"]["step"], ep["group"]["id"])
        assert got["prompt"] == "system: Answer briefly.\n\nuser: What is 2+2?"
        assert got["response"] == "two and two\n\n4"
        model = trace["nodes"][2]
        sampled = [t for t, m in zip(model["token_ids"], model["mask"], strict=True) if m]
        assert got["response_tokens"] == [str(t) for t in sampled]
        assert got["logprobs"] == pytest.approx(model["logprobs"])
        assert got["rewards.correct"] == trace["rewards"]["correct"]["score"]
        assert got["loss_weights.echo"] == [1.0] * len(sampled)
        assert (got["task.key"], got["policy.end"], got["agent"]) == ("q7", 3, "agent")
    first = rows[f"{sample_id(REL, 1)}.0"]
    assert first["advantages"] == [1.0, 1.0] and first["ref_logprobs"] == pytest.approx([-0.75, -0.5])
    assert rows[f"{sample_id(REL, 2)}.0"]["advantages"] is None


def test_prime_rl002_multi_turn_tools_and_branches(tmp_path):
    """A tool-using trace: the response is the model's sampled turns (tool calls shown) with the tool result
    between them, its tokens both turns' sampled tokens in order; a trace of two branches (a compaction)
    gives a response per branch; a trace with no reward recorded (failed) reads 0, as verifiers' Trace.reward."""
    call = {"id": "c1", "name": "calc", "arguments": '{"x": "2+2"}'}
    nodes = [
        _node(None, {"role": "user", "content": "2+2?"}, tokens=[1], mask=[False]),
        _node(
            0,
            {"role": "assistant", "content": None, "tool_calls": [call]},
            True,
            [7, 8],
            [False, True],
            logprobs=[-0.1],
        ),
        _node(1, {"role": "tool", "tool_call_id": "c1", "content": "4"}, tokens=[2, 3], mask=[False, False]),
        _node(
            2,
            {"role": "assistant", "content": "It is 4."},
            True,
            [9, 10, 11],
            [False, True, True],
            logprobs=[-0.2, -0.3],
        ),
        # A second branch from the user message (a compacted retry).
        _node(0, {"role": "assistant", "content": "4"}, True, [12], [True], logprobs=[-0.4]),
    ]
    failed = _trace(
        [_node(None, USER), _node(0, {"role": "assistant", "content": ""}, True)], {}, agent="judge", ok=False
    )
    run = tmp_path / "run"
    _write(run / REL, [_episode([_trace(nodes, {"r": {"score": 1.0, "weight": 2.0}}), failed])])
    res, store = _ingest(run, tmp_path / "c")
    assert (res.samples, res.bad_lines) == (3, 0)
    rows = _rows(store)
    tools, retry, judge = (rows[f"{sample_id(REL, 1)}.{k}"] for k in range(3))
    assert tools["prompt"] == retry["prompt"] == "2+2?"
    assert tools["response"] == 'assistant: [call calc({"x": "2+2"})]\n\ntool: 4\n\nassistant: It is 4.'
    assert tools["response_chars"] == len('[call calc({"x": "2+2"})]\n\nIt is 4.')  # the model's turns only
    assert tools["response_tokens"] == ["8", "10", "11"] and tools["logprobs"] == pytest.approx(
        [-0.1, -0.2, -0.3]
    )
    assert (tools["branch"], retry["branch"]) == (0, 1)
    assert (retry["response"], retry["response_tokens"]) == ("4", ["12"])
    assert tools["reward"] == retry["reward"] == 2.0
    assert (judge["reward"], judge["ok"], judge["agent"], judge["response"]) == (0.0, False, "judge", "")


def test_prime_rl003_recognised_by_its_records():
    """An episode record (traces, task) or a bare trace record (nodes, task, agent) is prime-rl's, sure."""
    assert (
        detect(REL, frozenset({"id", "env", "task", "group", "run", "ok", "errors", "traces"})).how == "sure"
    )
    m = detect("traces.jsonl", frozenset({"version", "id", "task", "agent", "nodes", "rewards"}))
    assert (m.dialect.name, m.how) == ("prime_rl", "sure")
    assert detect("r.jsonl", frozenset({"prompt", "completion", "task"})).dialect.name == "verifiers"


def _ingest(run: Path, cache: Path):
    res = ingest_run(run, cache, PADS)
    return res, open_store(res.store_dir)
