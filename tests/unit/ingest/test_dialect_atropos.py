"""Atropos' scored groups (``--env.data_path_to_save_groups``), built as its writer builds them and read back
response by response against the lines, read here with json and split by the test's own rules.

Source read: NousResearch/atropos at 296a0bc55760e43b9c0743c052f8d6c2732606d1:
- atroposlib/envs/base.py:57-72 ``ScoredDataGroup`` (tokens, masks, scores, advantages, ref_logprobs,
  messages, generation_params, inference_logprobs, group_overrides, overrides, images, distill_*);
- atroposlib/envs/base.py:902-932 ``handle_send_to_api``: ``setdefault`` of ref_logprobs, overrides,
  group_overrides, distill_token_ids, distill_logprobs to None; with ``include_messages`` (which the
  ``process`` command sets, base.py:1662) and no messages, one user message holding
  ``tokenizer.decode(tokens[i])``; then ``self.jsonl_writer.write(group)`` (jsonlines, base.py:293);
- atroposlib/envs/base.py:355-377 the default ``collect_trajectories``: advantages / ref_logprobs /
  messages / overrides collected into lists that stay ``[]`` where no rollout gave one;
- environments/gsm8k_server.py:234-267, 300-306: tokens, masks (-100 over the prompt) and
  inference_logprobs from the managed server's nodes; scores ±1;
- atroposlib/envs/server_handling/managed_server.py:367-368: ``masked_tokens = [-100] * prompt_len +
  output_tokens``, ``logprobs = [1.0] * prompt_len + output_logprobs``;
- atroposlib/utils/tokenize_for_trainer.py:7,40-54: roles ``assistant`` and ``agent`` are trained on
  (their tokens unmasked), the others masked; ``{"messages": chat}`` with include_messages;
- environments/community/accessibility_env/accessibility_env.py:306-312: messages as one string per rollout,
  ``role: content`` lines;
- atroposlib/frontend/jsonl2html.py:62-80: a rollout's messages are a string or a list of role messages.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data.ingest import ingest_run
from data.schema import BadLine
from data.schema.dialects import atropos, detect
from data.store import open_store, sample_id

PADS = ("<pad>", "<|endoftext|>")
SYSTEM = "You are a deep thinking AI. Put the answer in \\boxed{}."


def _chatml(turns: list[tuple[str, str]]) -> str:
    """A conversation as Qwen's chat template renders it and ``tokenizer.decode`` keeps it."""
    return "".join(f"<|im_start|>{role}\n{text}<|im_end|>\n" for role, text in turns)


def _write(path: Path, groups: list[dict]) -> None:
    """As jsonlines.Writer writes (json.dumps with its default separators, one object a line)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(g, ensure_ascii=False) + "\n" for g in groups))


def _gsm8k_group(seed: int, n: int = 4) -> dict:
    """gsm8k_server.score's group, then handle_send_to_api's setdefaults and the process command's
    messages fallback (one user message of the decoded sequence)."""
    prompt_len = 5 + seed
    tokens, masks, logprobs, messages, answers = [], [], [], [], []
    for i in range(n):
        out = [1000 + 10 * seed + i + k for k in range(3 + i)]
        seq = [151644 + k for k in range(prompt_len)] + out
        tokens.append(seq)
        masks.append([-100] * prompt_len + out)
        logprobs.append([1.0] * prompt_len + [-0.1 * (k + 1) - i for k in range(len(out))])
        answer = f"<think>step {i}</think> \\boxed{{{seed + i}}}"
        answers.append(answer)
        text = _chatml([("system", SYSTEM), ("user", f"question {seed}"), ("assistant", answer)])
        messages.append([{"role": "user", "content": text}])
    group = {
        "tokens": tokens,
        "masks": masks,
        "scores": [1.0 if i % 2 else -1.0 for i in range(n)],
        "inference_logprobs": logprobs,
    }
    for key in ("ref_logprobs", "overrides", "group_overrides", "distill_token_ids", "distill_logprobs"):
        group.setdefault(key, None)
    group["messages"] = messages
    return group


def _ingest(run: Path, cache: Path, **kw):
    res = ingest_run(run, cache, PADS, **kw)
    return res, open_store(res.store_dir)


def _rows(store) -> dict[str, dict]:
    return {r["sample_id"]: r for r in store.scan_parts().collect().iter_rows(named=True)}


def test_atropos001_gsm8k_process_groups_one_row_per_rollout(tmp_path):
    """Three groups of four from gsm8k's process command: 12 responses, 0 bad lines, matched as atropos
    (sure); each rollout's reward is its score, its response the text after the last assistant header of
    its decoded sequence, its prompt the text before it; its tokens the unmasked ids (no tokenizer: the
    ids), its logprobs the inference log-probs at those positions; the line is its group."""
    src = tmp_path / "run" / "data" / "gsm8k.jsonl"
    groups = [_gsm8k_group(s) for s in range(3)]
    _write(src, groups)
    res, store = _ingest(src.parent.parent, tmp_path / "c")
    assert (res.bad_lines, res.samples, res.steps) == (0, 12, 1)
    entry = store.manifest.files["data/gsm8k.jsonl"]
    assert (entry["dialect"], entry["matched"], entry["step"]) == ("atropos", "sure", 0)
    rows = _rows(store)
    assert len(rows) == 12
    for ln, want in enumerate(json.loads(x) for x in src.read_text().splitlines()):
        for i in range(4):
            got = rows[f"{sample_id('data/gsm8k.jsonl', ln + 1)}.{i}"]
            text = want["messages"][i][0]["content"]
            head = "<|im_start|>assistant\n"
            before, after = text[: text.rindex(head)], text[text.rindex(head) + len(head) :]
            assert (
                got["response"]
                == after.removesuffix("<|im_end|>\n")
                == f"<think>step {i}</think> \\boxed{{{ln + i}}}"
            )
            assert got["prompt"] == before
            assert (got["reward"], got["step"], got["line"]) == (want["scores"][i], 0, ln + 1)
            kept = [j for j, m in enumerate(want["masks"][i]) if m != -100]
            assert got["response_tokens"] == [str(want["tokens"][i][j]) for j in kept]
            assert got["logprobs"] == pytest.approx([want["inference_logprobs"][i][j] for j in kept])
            assert got["ref_logprobs"] is None
            assert got["group_id"] == sample_id("data/gsm8k.jsonl", ln + 1)
    # The prompt's preview is the question, not the shared system text.
    assert {r["prompt_preview"] for r in rows.values()} == {"question 0", "question 1", "question 2"}


def test_atropos002_role_messages_assistant_and_agent_turns(tmp_path):
    """Rollouts tokenized by tokenize_for_trainer with include_messages (train_on_all_assistant_turns):
    the prompt is the turns before the model's first, the response the model's turns (role assistant or
    agent) with the tool turns between them, its length counted on the model's turns; the tokens are the
    unmasked positions only (two separate spans), ref_logprobs and advantages cut the same way."""
    chats = [
        [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "find x"},
            {"role": "agent", "content": "<tool_call>search</tool_call>"},
            {"role": "tool", "content": "x = 3"},
            {"role": "agent", "content": "x is 3"},
        ],
        [
            {"role": "user", "content": "find y"},
            {"role": "assistant", "content": "y is 4"},
        ],
    ]
    # Positions: prompt (masked), model span, tool (masked), model span.
    masks = [[-100, -100, 11, 12, -100, -100, 13, 14, 15], [-100, -100, 21, 22]]
    tokens = [[1, 2, 11, 12, 3, 4, 13, 14, 15], [5, 6, 21, 22]]
    group = {
        "tokens": tokens,
        "masks": masks,
        "scores": [0.25, 0.75],
        "advantages": [[float(j) for j in range(len(t))] for t in tokens],
        "ref_logprobs": [[-0.01 * j for j in range(len(t))] for t in tokens],
        "messages": chats,
        "group_overrides": {},
        "overrides": [{"set_advantage_to_zero": False}, {"set_advantage_to_zero": True}],
        "images": [],
    }
    src = tmp_path / "run" / "rollouts.jsonl"
    _write(src, [group])
    res, store = _ingest(src.parent, tmp_path / "c")
    assert (res.bad_lines, res.samples) == (0, 2)
    rows = _rows(store)
    a, b = rows[sample_id("rollouts.jsonl", 1) + ".0"], rows[sample_id("rollouts.jsonl", 1) + ".1"]
    assert a["prompt"] == "system: sys\n\nuser: find x"
    assert a["response"] == "agent: <tool_call>search</tool_call>\n\ntool: x = 3\n\nagent: x is 3"
    assert a["response_chars"] == len("<tool_call>search</tool_call>\n\nx is 3")  # the agent's turns only
    assert (b["prompt"], b["response"]) == ("find y", "y is 4")
    assert a["response_tokens"] == ["11", "12", "13", "14", "15"]
    assert a["advantages"] == [2.0, 3.0, 6.0, 7.0, 8.0]
    assert a["ref_logprobs"] == pytest.approx([-0.02, -0.03, -0.06, -0.07, -0.08])
    assert b["response_tokens"] == ["21", "22"] and b["advantages"] == [2.0, 3.0]
    assert (a["reward"], b["reward"]) == (0.25, 0.75)
    assert (a["overrides.set_advantage_to_zero"], b["overrides.set_advantage_to_zero"]) == (False, True)
    assert a["group_id"] == b["group_id"] == sample_id("rollouts.jsonl", 1)


def test_atropos003_string_messages_and_no_messages(tmp_path):
    """A rollout's messages as one ``role: content`` string (accessibility_env) is split at its last
    ``assistant: ``; a group without messages (include_messages off) takes its text from the tokens: the
    ids (no tokenizer), and with a local tokenizer.json the decoded text and token names."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    run = tmp_path / "run"
    run.mkdir()
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel()
    tok.train_from_iterator(
        ["the alt text is good", "describe the image"], trainers.BpeTrainer(special_tokens=["<unk>"])
    )
    tok.save(str(run / "tokenizer.json"))
    dialogue = "system: be brief\nuser: add alt text\nassistant: <img alt='a cat'>"
    prompt_ids, out_ids = tok.encode("describe the image").ids, tok.encode("the alt text is good").ids
    strings = {
        "tokens": [[1, 2, 3], [1, 2, 4]],
        "masks": [[-100, -100, 3], [-100, -100, 4]],
        "scores": [1.0, 0.0],
        "advantages": None,
        "ref_logprobs": None,
        "group_overrides": {},
        "messages": [dialogue, "system: be brief\nuser: add alt text\nassistant: <img alt=''>"],
    }
    bare = {
        "tokens": [prompt_ids + out_ids, prompt_ids + out_ids[:2]],
        "masks": [[-100] * len(prompt_ids) + out_ids, [-100] * len(prompt_ids) + out_ids[:2]],
        "scores": [0.5, -0.5],
        "ref_logprobs": None,
        "overrides": None,
        "group_overrides": None,
        "distill_token_ids": None,
        "distill_logprobs": None,
    }
    _write(run / "groups.jsonl", [strings, bare])
    res, store = _ingest(run, tmp_path / "a")
    assert (res.bad_lines, res.samples) == (0, 4)
    rows = _rows(store)
    first = rows[sample_id("groups.jsonl", 1) + ".0"]
    assert first["prompt"] == "system: be brief\nuser: add alt text"
    assert first["response"] == "<img alt='a cat'>"
    assert rows[sample_id("groups.jsonl", 1) + ".1"]["response"] == "<img alt=''>"
    got = rows[sample_id("groups.jsonl", 2) + ".0"]
    assert got["response"] == " ".join(map(str, out_ids)) and got["prompt"] == " ".join(map(str, prompt_ids))
    (run / "rlboard.toml").write_text('tokenizer = "tokenizer.json"\n')
    _, store = _ingest(run, tmp_path / "b")
    got = _rows(store)[sample_id("groups.jsonl", 2) + ".1"]
    assert got["response"] == tok.decode(out_ids[:2], skip_special_tokens=False)
    assert got["prompt"] == tok.decode(prompt_ids, skip_special_tokens=False)
    assert got["response_tokens"] == [tok.id_to_token(i) for i in out_ids[:2]]
    assert got["reward"] == -0.5


def test_atropos004_bad_groups_and_rollouts_named(tmp_path):
    """A line that is no group (scores not a list, tokens of another count) is one bad line with its
    reason; a group whose one rollout has no score keeps its other rollouts, the bad one named."""
    good = _gsm8k_group(0, n=2)
    short = _gsm8k_group(1, n=2) | {"tokens": [[1, 2]]}
    one_bad = _gsm8k_group(2, n=2)
    one_bad["scores"] = [None, 1.0]
    run = tmp_path / "run"
    _write(run / "g.jsonl", [good, {"tokens": [], "masks": [], "scores": 3}, short, one_bad])
    res, store = _ingest(run, tmp_path / "c")
    assert (res.samples, res.bad_lines) == (3, 3)
    issues = {
        (r["line"], r["reason"]) for r in store.issues().iter_rows(named=True) if r["severity"] == "error"
    }
    assert issues == {
        (2, "field 'scores' is not a non-empty list (an Atropos group has one score per rollout)"),
        (3, "field 'tokens' does not hold one list per score (2 scores, tokens: 1)"),
        (4, "response 0: missing required field 'reward'"),
    }
    assert sample_id("g.jsonl", 4) + ".1" in _rows(store)


def test_atropos005_recognised_only_by_a_group_line():
    """tokens, masks and scores together are Atropos' (sure over the contract, which takes `tokens` as
    response_tokens); a contract line is not Atropos'; rows() refuses a line that is no group."""
    m = detect("data/gsm8k.jsonl", frozenset({"tokens", "masks", "scores", "messages", "ref_logprobs"}))
    assert (m.dialect.name, m.how) == ("atropos", "sure")
    assert detect("r.jsonl", frozenset({"prompt", "response", "reward", "tokens"})).dialect.name != "atropos"
    with pytest.raises(BadLine):
        atropos.rows({"tokens": [[1]], "masks": [[1]], "scores": []})
    assert atropos.split_template("no header here") is None
    assert atropos.split_template("<|im_start|>assistant\n<|im_end|>") is None  # nothing after: not empty
    # A model's text that holds "assistant: " is not split there when the template's own header is present.
    text = _chatml([("user", "q"), ("assistant", "quote:\nassistant: hi")])
    assert atropos.split_template(text) == ("<|im_start|>user\nq<|im_end|>\n", "quote:\nassistant: hi")


def test_atropos006_each_rollout_found_by_its_sample_id(tmp_path):
    """The token page's way to a response (store.sample by id) reaches each rollout of a group, and an id
    without the rollout's number reaches none of them."""
    run = tmp_path / "run"
    _write(run / "g.jsonl", [_gsm8k_group(0, n=3)])
    _, store = _ingest(run, tmp_path / "c")
    line = sample_id("g.jsonl", 1)
    got = [store.sample(f"{line}.{i}") for i in range(3)]
    assert [g["reward"] for g in got] == [-1.0, 1.0, -1.0]
    assert [g["response_tokens"][0] for g in got] == ["1000", "1001", "1002"]
    assert store.sample(line) is None


def test_atropos007_groups_in_a_parquet_file_named_atropos(tmp_path):
    """Groups kept in a Parquet file (a row a group) with ``dialect = "atropos"`` in rlboard.toml are read as
    the lines are: a response per rollout, numbered within their row."""
    import polars as pl

    run = tmp_path / "run"
    run.mkdir()
    groups = [_gsm8k_group(s, n=2) for s in range(2)]
    keep = ("tokens", "masks", "scores", "inference_logprobs")
    pl.DataFrame([{k: g[k] for k in keep} for g in groups]).write_parquet(run / "groups.parquet")
    (run / "rlboard.toml").write_text('dialect = "atropos"\n')
    res, store = _ingest(run, tmp_path / "c")
    assert (res.samples, res.bad_lines) == (4, 0)
    rows = _rows(store)
    for n, g in enumerate(groups, start=1):
        for i in range(2):
            got = rows[f"{sample_id('groups.parquet', n)}.{i}"]
            kept = [j for j, m in enumerate(g["masks"][i]) if m != -100]
            assert got["reward"] == g["scores"][i]
            assert got["response_tokens"] == [str(g["tokens"][i][j]) for j in kept]
