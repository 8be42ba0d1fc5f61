"""The smaller truths of trainers' files (issue 34, item 4, and NeMo Gym's side files): NeMo Gym's input
items rendered as its output items are, its side files recognised, verifiers' empty completion, the
trainer's own group key, secrets masked. Lines are built exactly as the frameworks write them (the source
file and line cited at each builder) and checked against the test's own reading of them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

from data.ingest import ingest_run
from data.store import open_store, run_file_stats, sample_id

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


# ---- NeMo Gym ---------------------------------------------------------------------------------------------


def _tau2_line(task: int, rollout: int, reward: float) -> dict:
    """One line of NeMo Gym's tau2 agent as ng_collect_rollouts writes it (NVIDIA-NeMo/Gym @07d6b0d):
    responses_api_agents/tau2/app.py:198-230 (Tau2VerifyResponse: the request's input followed by the
    conversation's items before the model's last turn, the rest as ``response.output``; config's
    ``llm_args_agent`` / ``llm_args_user`` with an ``api_key``, app.py:126-142); the items as
    nemo_gym/responses_converter.py:558-585 makes them (a tool call: ``function_call`` and
    ``function_call_output``, no role); ``_ng_task_index`` / ``_ng_rollout_index`` stamped by
    nemo_gym/rollout_collection.py:867-869. Shapes and values as in the first line of
    responses_api_agents/tau2/data/example_rollouts.jsonl (texts shortened)."""
    asked = f"I need help urgently: I accidentally canceled order #{task}. Can you reinstate it right away?"
    calls = [
        (
            "find_user_id_by_name_zip",
            '{"first_name": "Chen", "last_name": "Smith", "zip": "32278"}',
            "chen_8425",
        ),
        (
            "get_order_details",
            f'{{"order_id": "#W{task}"}}',
            f'{{"order_id": "#W{task}", "status": "cancelled"}}',
        ),
    ]
    items = []
    for k, (name, args, result) in enumerate(calls):
        call_id = f"chatcmpl-tool-{task}{rollout}{k}"
        items.append(
            {
                "arguments": args,
                "call_id": call_id,
                "name": name,
                "type": "function_call",
                "id": call_id,
                "status": "completed",
            }
        )
        items.append(
            {
                "call_id": call_id,
                "output": result,
                "type": "function_call_output",
                "id": None,
                "status": "completed",
            }
        )

    def said(role: str, text: str, n: int) -> dict:
        return {
            "id": f"msg_{task}{rollout}{n}",
            "content": [{"annotations": [], "text": text, "type": "output_text", "logprobs": None}],
            "role": role,
            "status": "completed",
            "type": "message",
        }

    transfer = "chatcmpl-tool-transfer"
    output = [
        said("assistant", f"Order #W{task} is cancelled; a cancellation is final.", 1),
        {
            "arguments": '{"summary": "wants the order back"}',
            "call_id": transfer,
            "name": "transfer_to_human_agents",
            "type": "function_call",
            "id": transfer,
            "status": "completed",
        },
        {
            "call_id": transfer,
            "output": "Transfer successful",
            "type": "function_call_output",
            "id": None,
            "status": "completed",
        },
        said("assistant", "YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON.", 2),
        {"content": "###TRANSFER###", "role": "user", "type": "message"},
    ]
    inputs = [
        {
            "content": "<instructions>\nYou are a customer service agent.\n</instructions>",
            "role": "system",
            "type": "message",
        },
        said("assistant", "Hi! How can I help you today?", 0),
        {"content": asked, "role": "user", "type": "message"},
        *items,
    ]
    tools = [{"name": "calculate", "parameters": {"type": "object"}, "strict": True, "type": "function"}]
    return {
        "responses_create_params": {
            "input": inputs,
            "model": "",
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": tools,
        },
        "response": {
            "id": f"tau2-retail-{task}",
            "created_at": 1775949738,
            "object": "response",
            "output": output,
            "model": "",
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": tools,
        },
        "reward": reward,
        "config": {
            "domain": "retail",
            "llm_user": "openai/dummy user model",
            "llm_args_user": {
                "temperature": 0.0,
                "api_base": "http://127.0.0.1:1/v1",
                "api_key": "dummy api key",
            },
            "llm_agent": "openai/dummy agent model",
            "llm_args_agent": {"api_base": "http://127.0.0.1:2/v1", "api_key": "sk-tau2-agent-key-0001"},
            "max_steps": 200,
        },
        "task": {"id": str(task), "user_scenario": {"instructions": {"domain": "retail"}}},
        "seed": 670487,
        "_ng_task_index": task,
        "_ng_rollout_index": rollout,
        "agent_ref": {"type": "responses_api_agents", "name": "tau2_agent"},
    }


def _gym_text(items: list[dict]) -> tuple[str, str]:
    """The test's own reading of Responses API items: ``role: text`` blocks (a call as ``[call
    name(arguments)]``, its output as the tool's), and the model's own (assistant) text."""
    out, own = [], []
    for it in items:
        if it["type"] == "message":
            c = it["content"]
            role, text = it["role"], c if isinstance(c, str) else "\n".join(p["text"] for p in c)
        elif it["type"] == "function_call":
            role, text = "assistant", f"[call {it['name']}({it['arguments']})]"
        else:
            assert it["type"] == "function_call_output"
            role, text = "tool", it["output"]
        out.append(f"{role}: {text}")
        if role == "assistant":
            own.append(text)
    return "\n\n".join(out), "\n\n".join(own)


def test_truths001_gym_input_items_read_as_its_output_items(tmp_path):
    """tau2's rollouts: the request's earlier function_call / function_call_output items are the model's
    calls and the tool's results (no empty user turn); the prompt previews the last user message that has
    text; the output is the response, its length counted on the model's turns; 0 bad lines."""
    from data import prompts as prompt_data
    from data.views.prompts import PromptsView

    lines = [_tau2_line(task, rollout, float(rollout % 2)) for task in (192, 193) for rollout in range(3)]
    _write(tmp_path / "run" / "rollouts.jsonl", lines)
    res, store = _ingest(tmp_path / "run", tmp_path / "cache")
    assert (res.bad_lines, res.samples) == (0, 6)
    assert store.manifest.files["rollouts.jsonl"]["dialect"] == "nemo_gym"
    rows = _rows(store)
    for n, want in enumerate(lines, start=1):
        got = rows[("rollouts.jsonl", n)]
        inputs = want["responses_create_params"]["input"]
        assert got["prompt"] == _gym_text(inputs)[0]
        assert "user: \n" not in got["prompt"] and not got["prompt"].endswith("user: ")
        asked = [i["content"] for i in inputs if i.get("role") == "user"][-1]
        assert got["prompt_preview"] == _preview(asked)
        shown, own = _gym_text(want["response"]["output"])
        assert got["response"] == shown
        assert got["response_chars"] == len(own)
        assert (got["reward"], got["step"]) == (want["reward"], 0)
    listing = prompt_data.prompt_list(store, PromptsView(run="run"))
    assert sorted(listing.rows.get_column("prompt_preview")) == sorted(
        _preview(line["responses_create_params"]["input"][2]["content"]) for line in lines[::3]
    )


def test_truths007_gym_items_by_hand():
    """Each kind of Responses API item, in a request's input as in a response's output: reasoning by its
    summary (``{"type": "summary_text", "text": …}``, as NeMo Gym's converter writes it), a message of no
    type by its role (else the side's own), the API's other calls by their type and their outputs as the
    tool's; an item that shows nothing (reasoning without text, an unknown type) is left out."""
    from data.schema.dialects.nemo_gym import input_messages, output_messages

    items = [
        {"role": "user", "content": "Find it."},
        {"content": [{"type": "input_text", "text": "no role"}]},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Search first."}]},
        {"type": "reasoning", "summary": []},
        {"type": "custom_tool_call", "name": "grep", "input": "needle", "call_id": "c1"},
        {"type": "custom_tool_call_output", "call_id": "c1", "output": "found"},
        {"type": "web_search_call", "action": {"query": "needle"}, "status": "completed"},
        {"type": "mcp_call", "name": "lookup", "arguments": '{"id": 7}', "server_label": "db", "output": "x"},
        {"type": "item_reference", "id": "x"},
    ]
    want = [
        ("user", "Find it."),
        (None, "no role"),
        ("assistant", "[reasoning]\nSearch first."),
        ("assistant", "[call grep(needle)]"),
        ("tool", "found"),
        ("assistant", '[call web_search_call({"query": "needle"})]'),
        ("assistant", '[call lookup({"id": 7})]'),
    ]
    for got, side in ((input_messages({"input": items}), "user"), (output_messages(items), "assistant")):
        assert [(m["role"], m["content"]) for m in got] == [(r or side, t) for r, t in want]


def _materialized_input(task: int, rollout: int) -> dict:
    """A line of ``<out>_materialized_inputs.jsonl``: the input row expanded for its rollout, with its task
    and rollout indices (nemo_gym/rollout_collection.py:641-659 and :792-794)."""
    return {
        "responses_create_params": {"input": [{"role": "user", "content": f"Solve {task}."}]},
        "expected_answer": str(task),
        "_ng_task_index": task,
        "_ng_rollout_index": rollout,
        "agent_ref": {"type": "responses_api_agents", "name": "math_with_judge_simple_agent"},
    }


def _reward_profile(task: int, rewards: list[float], sample: dict) -> dict:
    """A line of ``<out>_reward_profiling.jsonl``: one task's reward statistics, its input row as
    ``sample`` and its rollouts' infos (nemo_gym/reward_profile.py:243-260, written at :295-300)."""
    mean = sum(rewards) / len(rewards)
    return {
        "_ng_task_index": task,
        "reward/mean": mean,
        "reward/max": max(rewards),
        "reward/min": min(rewards),
        "sample": sample,
        "num_rollouts": len(rewards),
        "expected_num_rollouts": len(rewards),
        "missing_num_rollouts": 0,
        "reward_profile_completion_pct": 100.0,
        "rollout_infos": [{"_ng_rollout_index": k, "reward": r} for k, r in enumerate(rewards)],
    }


def test_truths002_gym_side_files_skipped_with_a_note(fixtures_dir, tmp_path):
    """Beside ``rollouts.jsonl``, ng_collect_rollouts' ``rollouts_materialized_inputs.jsonl``,
    ``rollouts_reward_profiling.jsonl`` and ``rollouts_failures.jsonl`` are not read: no bad line, nothing
    under "Not read", a note naming each; a file of such a name with no rollouts file beside it is read."""
    from data.store.reading import understood

    run = tmp_path / "root" / "gym"
    src = fixtures_dir / "real-nemo-gym-math" / "example_rollouts.jsonl"
    (run / "results").mkdir(parents=True)
    (run / "results" / "rollouts.jsonl").write_bytes(src.read_bytes())
    inputs = [_materialized_input(t, r) for t in range(5) for r in range(1)]
    _write(run / "results" / "rollouts_materialized_inputs.jsonl", inputs)
    _write(
        run / "results" / "rollouts_reward_profiling.jsonl",
        [_reward_profile(t, [0.0], inputs[t]) for t in range(5)],
    )
    _write(run / "results" / "rollouts_failures.jsonl", [{**inputs[0], "_ng_failure_class": "timeout"}])
    aside: list[tuple[str, str]] = []
    assert [rel for rel, _ in run_file_stats(run, aside=aside)] == ["results/rollouts.jsonl"]
    assert [rel for rel, _ in aside] == [
        "results/rollouts_failures.jsonl",
        "results/rollouts_materialized_inputs.jsonl",
        "results/rollouts_reward_profiling.jsonl",
    ]
    res, store = _ingest(run, tmp_path / "cache")
    assert (res.bad_lines, res.samples) == (0, 5)
    assert list(store.manifest.files) == ["results/rollouts.jsonl"]
    u = understood(store)
    alone = tmp_path / "alone"  # the rollouts without their side files: what is not read of them alone
    (alone / "results").mkdir(parents=True)
    (alone / "results" / "rollouts.jsonl").write_bytes(src.read_bytes())
    assert u.not_read == understood(_ingest(alone, tmp_path / "cache")[1]).not_read
    assert not any("prompt" in t or "responses_create_params" in t for t in u.not_read)
    (note,) = [n for n in u.notes if n.startswith("Not read as rollouts")]
    for rel, what in aside:
        assert f"{rel} ({what})" in note
    assert "materialized inputs of results/rollouts.jsonl" in note
    # A name alone does not make a side file: without its rollouts file beside it, it is read.
    lone = tmp_path / "root" / "lone"
    _write(lone / "rank0_failures.jsonl", [{"prompt": "p", "response": "r", "reward": 1.0, "step": 1}])
    assert [rel for rel, _ in run_file_stats(lone)] == ["rank0_failures.jsonl"]


def test_truths008_gym_side_files_on_object_storage(tmp_path):
    """A run on an object store (obstore's local file store, as the board opens a bucket) is walked by
    one listing: its side files are recognised there too, by the files of their own folder."""
    from data.remote import RemotePath, _Root

    run = tmp_path / "root" / "gym"
    _write(run / "results" / "rollouts.jsonl", [{"prompt": "p", "response": "r", "reward": 1.0, "step": 1}])
    _write(run / "results" / "rollouts_materialized_inputs.jsonl", [_materialized_input(0, 0)])
    _write(run / "rollouts_reward_profiling.jsonl", [_reward_profile(0, [1.0], _materialized_input(0, 0))])
    remote = RemotePath(_Root.of(f"file://{tmp_path / 'root'}", {}), "gym")
    aside: list[tuple[str, str]] = []
    got = [rel for rel, _ in run_file_stats(remote, aside=aside)]
    # The profile is not beside its rollouts file (that one is in results/): a file of the run like any.
    assert got == ["results/rollouts.jsonl", "rollouts_reward_profiling.jsonl"]
    assert aside == [
        (
            "results/rollouts_materialized_inputs.jsonl",
            "NeMo Gym's materialized inputs of results/rollouts.jsonl, the requests before rollout",
        )
    ]


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


def _vf_line(example_id: int, k: int, prompt: list[dict], reward: float) -> dict:
    """A line of today's verifiers results.jsonl (PrimeIntellect-ai/verifiers @a60a606,
    verifiers/legacy/utils/save_utils.py:199-235, state_to_output: ``example_id`` required, then the
    prompt, completion, answer, task, info and reward): wordle, whose examples share one prompt text (the
    secret word is in ``answer``)."""
    return {
        "example_id": example_id,
        "prompt": prompt,
        "completion": [{"role": "assistant", "content": f"<guess>[crane{k}]</guess>"}],
        "answer": ["crane", "slate", "pious", "gumbo", "fjord"][example_id],
        "task": "wordle",
        "info": {},
        "reward": reward,
        "correct_answer": reward,
    }


def test_truths004_the_trainers_group_key(fixtures_dir, tmp_path):
    """wordle's 5 examples x 3 rollouts share one prompt text: 5 groups of 3 by ``example_id`` (the
    prompts page says "5 groups"), not one of 15; NeMo Gym's rollouts group by ``_ng_task_index``; a run
    whose dialect knows no key groups by the prompt text as before, and so does verifiers 0.1.5's
    ``id``: vf-eval numbered its rows ``i // rollouts_per_example`` (verifiers/scripts/eval.py:159 @v0.1.5)
    while they came in the order of the dataset repeated, so one ``id`` holds several prompts (the fixture,
    ids 0 0 0 1 1 1 … over prompts 1 2 3 4 5 1 2 …)."""
    from data import prompts as prompt_data
    from data.metrics.group import group_stats
    from data.views.prompts import PromptsView

    prompt = [{"role": "system", "content": "Play wordle."}, {"role": "user", "content": "Guess the word."}]
    lines = [_vf_line(e, k, prompt, float(k == e % 3)) for e in range(5) for k in range(3)]
    _write(tmp_path / "wordle" / "results.jsonl", lines)
    _, store = _ingest(tmp_path / "wordle", tmp_path / "cache")
    groups = group_stats(store.scan(["step", "reward", "prompt_key", "group_id"])).collect()
    by_example = {e: [x["reward"] for x in lines if x["example_id"] == e] for e in range(5)}
    assert sorted(groups.get_column("group_n").to_list()) == [3] * 5
    assert sorted(groups.get_column("group_mean").to_list()) == sorted(
        sum(r) / 3 for r in by_example.values()
    )
    listing = prompt_data.prompt_list(store, PromptsView(run="wordle"))
    assert (listing.info["prompts"], listing.info["groups"], listing.info["group_by"]) == (1, 5, "group_id")
    assert listing.rows.get_column("n_groups").to_list() == [5]
    assert ("n_groups", "groups", "int") in listing.columns

    gym = [_tau2_line(task, rollout, 1.0) for task in (7, 8) for rollout in range(2)]
    for line in gym:  # one prompt text for both tasks: only the task index tells them apart
        line["responses_create_params"]["input"] = line["responses_create_params"]["input"][:3]
    _write(tmp_path / "gym" / "rollouts.jsonl", gym)
    _, store = _ingest(tmp_path / "gym", tmp_path / "cache")
    got = store.scan(["group_id", "_ng_task_index"]).collect()
    assert got.get_column("group_id").to_list() == [x["_ng_task_index"] for x in gym]
    assert prompt_data.prompt_list(store, PromptsView(run="gym")).info["groups"] == 2

    plain = [{k: v for k, v in x.items() if k != "example_id"} for x in lines]
    _write(tmp_path / "plain" / "results.jsonl", plain)
    _, store = _ingest(tmp_path / "plain", tmp_path / "cache")
    listing = prompt_data.prompt_list(store, PromptsView(run="plain"))
    assert (listing.info["prompts"], listing.info["groups"], listing.info["group_by"]) == (1, 1, "prompt")

    src = fixtures_dir / "real-verifiers-math-python"
    prompts_of_id: dict[int, set[str]] = {}
    for line in (json.loads(x) for x in (src / "results.jsonl").read_text().splitlines()):
        prompts_of_id.setdefault(line["id"], set()).add(line["prompt"][-1]["content"])
    assert all(len(p) == 3 for p in prompts_of_id.values())
    _, store = _ingest(src, tmp_path / "cache")
    listing = prompt_data.prompt_list(store, PromptsView(run=src.name))
    assert (listing.info["prompts"], listing.info["groups"], listing.info["group_by"]) == (5, 5, "prompt")
    assert listing.rows.get_column("n_groups").to_list() == [1] * 5


# ---- secrets ----------------------------------------------------------------------------------------------


def _stored_text(store_dir: Path) -> str:
    """Everything a store holds, as text: every Parquet and Arrow file's rows, every JSON file."""
    out = []
    for path in sorted(store_dir.rglob("*")):
        if path.suffix == ".parquet":
            out.append(str(pl.read_parquet(path).rows()))
        elif path.suffix == ".arrow":
            out.append(str(pl.read_ipc(path).rows()))
        elif path.suffix == ".json":
            out.append(path.read_text())
    return "\n".join(out)


def test_truths005_secrets_masked_at_ingest(tmp_path):
    """A text field named like a key or a password, at any depth and in any case (tau2's
    ``config.llm_args_agent.api_key``, ``auth.password``, ``auth.Authorization``, ``client_secret``) is
    masked in the store (no file of it holds the value), whole chunks and line by line, also in the start
    of a bad line kept to show it; a number or a list of such a name stays, and so does a name the rule
    does not list (``GitHub_Token``); the runs page says how many fields were masked."""
    from data.schema.secrets import MASK
    from data.store.reading import understood

    gym = [_tau2_line(9, 0, 1.0)]
    contract = [
        {
            "prompt": f"p{i}",
            "response": f"r{i}",
            "reward": float(i),
            "step": 1,
            "response_tokens": ["a", "b"],
            "token_rewards": [0.0, float(i)],
            "output_tokens": 2,
            "token": i,  # a number: data
            "tokenizer": "gpt2",  # not a secret's name
            "auth": {"password": "hunter2", "Authorization": "Bearer xyz-0001"},
            "GitHub_Token": "ghp_contract0001",  # ends in _token: not a listed ending, kept
            "client_secret": "s3cr3t-0001",
        }
        for i in range(3)
    ]
    run = tmp_path / "run"
    _write(run / "gym" / "rollouts.jsonl", gym)
    _write(run / "rank0.jsonl", contract)
    (run / "rank1.jsonl").write_text(
        json.dumps({"access_token": "hunter2", "prompt": 5, "response": "r", "reward": 1, "step": 1}) + "\n"
    )
    res, store = _ingest(run, tmp_path / "cache")
    assert (res.samples, res.bad_lines) == (4, 1)
    got = store.sample(sample_id("gym/rollouts.jsonl", 1))
    assert got["config.llm_args_agent.api_key"] == MASK and got["config.llm_args_user.api_key"] == MASK
    assert got["config.llm_args_agent.api_base"] == "http://127.0.0.1:2/v1"
    for n, want in enumerate(contract, start=1):
        got = store.sample(sample_id("rank0.jsonl", n))
        assert (got["auth.password"], got["auth.Authorization"], got["client_secret"]) == (MASK,) * 3
        assert (got["token"], got["tokenizer"], got["output_tokens"]) == (want["token"], "gpt2", 2)
        assert got["GitHub_Token"] == want["GitHub_Token"]
        assert got["response_tokens"] == ["a", "b"] and got["token_rewards"] == want["token_rewards"]
    stored = _stored_text(res.store_dir)
    assert "sk-tau2-agent-key-0001" not in stored and "hunter2" not in stored and "s3cr3t" not in stored
    assert "dummy api key" not in stored and "Bearer xyz" not in stored
    (issue,) = store.issues().to_dicts()
    assert MASK in issue["detail"]
    note = next(n for n in understood(store).notes if "masked" in n)
    assert note.startswith(f"5 fields masked as {MASK} (")
    for name in ("config.llm_args_agent.api_key", "auth.password", "auth.Authorization", "client_secret"):
        assert name in note


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("api_key", True),
        ("config.llm_args_agent.API_KEY", True),
        ("ApiKey", True),
        ("x.access_token", True),
        ("auth_token", True),
        ("token", True),
        ("Password", True),
        ("secret", True),
        ("headers.Authorization", True),
        ("openai_api_key", True),
        ("client_secret", True),
        ("db_password", True),
        ("tokens", False),
        ("output_tokens", False),
        ("token_rewards", False),
        ("secret_sauce", False),
        ("api_key.name", False),
        ("passwords", False),
    ],
)
def test_truths006_secret_names(name, secret):
    """The names whose texts are masked: the last segment, ignoring case, one of the listed names or
    ending in ``_api_key``, ``_secret``, ``_password``."""
    from data.schema.secrets import is_secret, mask_text

    assert is_secret(name) is secret
    last = name.rsplit(".", 1)[-1]
    raw = json.dumps({last: "v4lue", "n": 1})
    assert ("v4lue" not in mask_text(raw)) is secret


def test_truths009_no_secret_column_no_index(tmp_path, monkeypatch):
    """A run without a column of a secret's name says nothing masked, and the runs page learns it from the
    manifest alone (it builds no store index for it); with one, its masked columns are named."""
    from data.store.reader import RunStore
    from data.store.reading import masked_fields

    run = tmp_path / "run"
    _write(run / "rank0.jsonl", [{"prompt": "p", "response": "r", "reward": 1, "step": 1, "note": "x"}])
    _, store = _ingest(run, tmp_path / "cache")

    def no_schema(self):
        raise AssertionError("the store's schema was built")

    with monkeypatch.context() as m:
        m.setattr(RunStore, "schema", no_schema)
        assert masked_fields(store) == []
    _write(run / "rank0.jsonl", [{"prompt": "p", "response": "r", "reward": 1, "step": 1, "api_key": "sk-1"}])
    _, store = _ingest(run, tmp_path / "cache2")
    assert masked_fields(store) == ["api_key"]
