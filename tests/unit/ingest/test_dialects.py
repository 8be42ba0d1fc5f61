"""Trainers' own dumps (../shared/fixtures, sections 6-9 of its README) read by their dialect, checked line
by line against the source files, read here independently (json, pyarrow) and not through the board."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from data.ingest import ingest_run
from data.store import open_store, sample_id

PADS = ("<pad>", "<|endoftext|>")
TRL_WEIGHTS = (("sentiment", 1.0), ("concise_format", 0.5))  # the fixture's reward_weights


def _ingest(run: Path, cache: Path, **kw):
    res = ingest_run(run, cache, PADS, **kw)
    return res, open_store(res.store_dir)


def _rows(store) -> dict[tuple[str, int], dict]:
    """Every response of a store with its texts, by (file, line)."""
    df = store.scan_parts().collect()
    return {(r["source"], r["line"]): r for r in df.iter_rows(named=True)}


def _preview(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()[:160]


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_dialects001_verl_rollout_dump_line_by_line(fixtures_dir, tmp_path):
    """veRL's rollout_data_dir file: 1,024 responses of step 2, 0 bad lines; prompt = input, reward =
    score, step = step; a multi-turn output is the model's turns with the tool results between them marked
    `tool:`, its length and repetition counted on the model's turns only; each prompt previewed by its
    question (64 distinct previews, not one shared system text)."""
    src = fixtures_dir / "real-verl-gsm8k-tools" / "2.jsonl"
    res, store = _ingest(src.parent, tmp_path)
    assert (res.bad_lines, res.samples, res.steps) == (0, 1024, 1)
    assert store.manifest.files["2.jsonl"]["dialect"] == "verl"
    rows = _rows(store)
    multi = 0
    for n, want in enumerate(_jsonl(src), start=1):
        got = rows[("2.jsonl", n)]
        assert (got["prompt"], got["reward"], got["step"]) == (want["input"], want["score"], want["step"])
        # The test's own split of the flat text: a role alone on a line starts a turn.
        parts = re.split(r"\n(user|assistant)\n", want["output"])
        turns = [("assistant", parts[0])] + list(zip(parts[1::2], parts[2::2], strict=True))
        turns = [("tool" if r == "user" and t.startswith("<tool_response>") else r, t) for r, t in turns]
        own = "\n\n".join(t for r, t in turns if r == "assistant")
        if len(turns) == 1:
            assert got["response"] == want["output"]
        else:
            multi += 1
            assert got["response"] == "\n\n".join(f"{r}: {t}" for r, t in turns)
        assert got["response_chars"] == len(own)
        question = want["input"].rsplit("\nuser\n", 1)[1].removesuffix("\nassistant\n")
        assert got["prompt_preview"] == _preview(question)
        assert got["request_id"] == want["request_id"]
    assert multi > 0
    assert store.scalars().get_column("prompt_preview").n_unique() == 64


def test_dialects002_nemo_gym_rollouts_line_by_line(fixtures_dir, tmp_path):
    """NeMo Gym's rollouts: 5 lines, 0 bad; prompt = the request's input message, response = the output's
    assistant message (its reasoning item has no text), reward as given, step 0 noted as no step."""
    src = fixtures_dir / "real-nemo-gym-math" / "example_rollouts.jsonl"
    res, store = _ingest(src.parent, tmp_path)
    assert (res.bad_lines, res.samples) == (0, 5)
    entry = store.manifest.files["example_rollouts.jsonl"]
    assert (entry["dialect"], entry["step"], entry["step_from"]) == ("nemo_gym", 0, "none")
    rows = _rows(store)
    for n, want in enumerate(_jsonl(src), start=1):
        got = rows[("example_rollouts.jsonl", n)]
        (msg,) = want["responses_create_params"]["input"]
        texts = [
            p["text"] for o in want["response"]["output"] if o["type"] == "message" for p in o["content"]
        ]
        assert got["prompt"] == msg["content"]
        assert got["response"] == "\n".join(texts)
        assert (got["reward"], got["step"]) == (want["reward"], 0)
        assert got["expected_answer"] == want["expected_answer"]
        assert got["output_tokens"] == want["response"]["usage"]["output_tokens"]


def _verifiers_text(messages: list[dict]) -> tuple[str, str]:
    """The test's own rendering of verifiers messages: `role: content` blocks, tool calls (JSON strings)
    as `[call name(arguments)]`; and the assistant's own text."""
    out, own = [], []
    for m in messages:
        calls = [json.loads(c) if isinstance(c, str) else c for c in m.get("tool_calls") or []]
        lines = [m["content"]] if m["content"] else []
        lines += [f"[call {c['function']['name']}({c['function']['arguments']})]" for c in calls]
        text = "\n".join(lines)
        out.append(f"{m['role']}: {text}")
        if m["role"] == "assistant":
            own.append(text)
    return "\n\n".join(out), "\n\n".join(own)


def test_dialects003_verifiers_results_line_by_line(fixtures_dir, tmp_path):
    """verifiers' results.jsonl: 15 lines, 0 bad, step 0; prompt and completion rendered with roles, each
    tool call (a JSON string) shown as a call, the tool results between the model's turns; length counts
    the assistant's turns; reward and each reward function's score as given; the 5 examples x 3 rollouts
    are 5 prompts."""
    src = fixtures_dir / "real-verifiers-math-python" / "results.jsonl"
    res, store = _ingest(src.parent, tmp_path)
    assert (res.bad_lines, res.samples) == (0, 15)
    assert store.manifest.files["results.jsonl"]["dialect"] == "verifiers"
    rows = _rows(store)
    for n, want in enumerate(_jsonl(src), start=1):
        got = rows[("results.jsonl", n)]
        shown, own = _verifiers_text(want["completion"])
        assert got["response"] == shown
        assert got["response_chars"] == len(own)
        assert got["prompt"] == _verifiers_text(want["prompt"])[0]
        assert got["prompt_preview"] == _preview(want["prompt"][-1]["content"])
        assert (got["reward"], got["step"]) == (want["reward"], 0)
        assert got["correct_answer_reward_func"] == want["correct_answer_reward_func"]
        assert got["total_tool_calls"] == want["total_tool_calls"]
    assert store.scalars().get_column("prompt_key").n_unique() == 5


@pytest.mark.parametrize("weights", [TRL_WEIGHTS, None])
def test_dialects004_trl_completions_parquet_line_by_line(fixtures_dir, tmp_path, weights):
    """TRL's completions/*.parquet (found in their folder): 400 rows over 25 steps, 0 bad; prompt,
    completion and step as written; each reward function a column; the reward their weighted sum with the
    weights given, or, when none are, those fitted to TRL's logged reward (the run's real ones, 1 and 0.5;
    said in the manifest). TRL's own advantage is reproduced from the reward in every group of 4 (the GRPO
    groups are found: one prompt key per group), and the step means match TRL's logged `reward`."""
    run = fixtures_dir / "trl-grpo-completions"
    res, store = _ingest(run, tmp_path, reward_weights=weights)
    assert (res.bad_lines, res.samples, res.steps, res.files) == (0, 400, 25, 25)
    rows = _rows(store)
    w = dict(TRL_WEIGHTS)  # given, or fitted to the run's log history
    for path in sorted((run / "completions").glob("*.parquet")):
        rel = f"completions/{path.name}"
        assert store.manifest.files[rel]["dialect"] == "trl"
        for n, want in enumerate(pq.read_table(path).to_pylist(), start=1):
            got = rows[(rel, n)]
            assert (got["prompt"], got["response"], got["step"]) == (
                want["prompt"],
                want["completion"],
                want["step"],
            )
            assert got["reward"] == pytest.approx(sum(w[k] * want[k] for k in w))
            assert (got["sentiment"], got["concise_format"]) == (want["sentiment"], want["concise_format"])
            assert got["advantage"] == want["advantage"]
    formed = store.manifest.reward_formed
    assert formed["parts"] == ["sentiment", "concise_format"]
    assert formed["reward"] == f"1 × sentiment + {w['concise_format']:g} × concise_format"
    assert formed["weights_from"].startswith("fitted to" if weights is None else "the setting")
    assert store.steps().get_column("n_groups").to_list() == [4] * 25  # the board's own GRPO groups
    sc = store.scalars()
    groups = sc.group_by("step", "prompt_key").agg(
        pl.len().alias("n"),
        ((pl.col("reward") - pl.col("reward").mean()) / (pl.col("reward").std() + 1e-4) - pl.col("advantage"))
        .abs()
        .max()
        .alias("err"),
    )
    assert groups.height == 100 and groups.get_column("n").to_list() == [4] * 100
    assert groups.get_column("err").max() < 1e-5
    history = {e["step"]: e for e in json.loads((run / "log_history.json").read_text()) if "reward" in e}
    means = dict(sc.group_by("step").agg(pl.col("reward").mean()).iter_rows())
    assert all(means[s] == pytest.approx(history[s]["reward"], abs=1e-6) for s in means)


def test_dialects005_trl_weights_from_rlboard_toml(fixtures_dir, tmp_path):
    """A run folder's rlboard.toml names the reward weights (and its dialect); a change of them reads the
    run again."""
    run = tmp_path / "trl"
    (run / "completions").mkdir(parents=True)
    for p in sorted((fixtures_dir / "trl-grpo-completions" / "completions").glob("*.parquet"))[:2]:
        (run / "completions" / p.name).write_bytes(p.read_bytes())
    (run / "rlboard.toml").write_text(
        'dialect = "trl"\n[reward_weights]\nsentiment = 1.0\nconcise_format = 0.5\n'
    )
    _, store = _ingest(run, tmp_path / "cache")
    want = pq.read_table(run / "completions" / "completions_00001.parquet").to_pylist()[0]
    got = store.sample(sample_id("completions/completions_00001.parquet", 1))
    assert got["reward"] == pytest.approx(want["sentiment"] + 0.5 * want["concise_format"])
    assert store.manifest.files["completions/completions_00001.parquet"]["matched"] == "named"
    assert store.manifest.reward_formed["weights_from"] == "rlboard.toml"
    # Unchanged weights: nothing is read again (the key kept as JSON equals the options' own).
    res, again = _ingest(run, tmp_path / "cache")
    assert (res.bytes_read, res.new_rows, again.version) == (0, 0, store.version)
    before = {p.name for p in (store.dir / "scalars").glob("p*.parquet")}
    (run / "rlboard.toml").write_text("[reward_weights]\nsentiment = 2.0\nconcise_format = 0.0\n")
    _, store = _ingest(run, tmp_path / "cache")
    got = store.sample(sample_id("completions/completions_00001.parquet", 1))
    assert got["reward"] == pytest.approx(2 * want["sentiment"])
    # Read again into files of new names, never over the files readers of the old state may hold open.
    after = {f"p{int(k):06d}.parquet" for k in store.manifest.parts}
    assert after and not after & before and store.manifest.generation > again.manifest.generation


def _nemo_rl_line(idx: int, messages: list[tuple[str, str, list[int]]], reward: float, width: int) -> dict:
    """One line as NeMo-RL's Logger.log_batched_dict_as_jsonl writes a GRPO step (grpo.py's log_data): a
    batch of one (every value in a list of one item) with `idx`; `content` the messages' contents without
    their roles; the full-sequence arrays over prompt and response, right-padded to the batch's width;
    `token_loss_mask` 1 on the model's tokens; log-probs 0 at the first position (NeMo-RL's convention)."""
    ids = [t for _, _, toks in messages for t in toks]
    mask = [1 if role == "assistant" else 0 for role, _, toks in messages for _ in toks]
    pad = width - len(ids)
    gen = [0.0] + [-0.1 * (i % 7) for i in range(1, len(ids))]
    prev = [g - 0.01 for g in gen]
    return {
        "content": [[text for _, text, _ in messages]],
        "rewards": [reward],
        "input_lengths": [len(ids)],
        "token_ids": [ids + [0] * pad],
        "token_loss_mask": [mask + [0] * pad],
        "sample_loss_mask": [1.0],
        "advantages": [[reward - 0.5 if m else 0.0 for m in mask] + [0.0] * pad],
        "generation_logprobs": [gen + [0.0] * pad],
        "prev_logprobs": [prev + [0.0] * pad],
        "idx": idx,
    }


def test_dialects006_nemo_rl_train_and_validation_dumps(tmp_path):
    """NeMo-RL's train_data_step{N}.jsonl as its rollout loop and logger write it (the message log ends
    with the environment's observation after every turn): the prompt is what came before the model's
    first turn (so each step's 4 prompts x 5 generations are 4 groups of 5), the response the model's
    turns with the environment's observations between them marked, length and repetition on the model's
    turns; the arrays are cut to the generated tokens (token_loss_mask within input_lengths): prev_logprobs
    as the log-probs, generation_logprobs and advantages as the trainer's own fields, token ids as tokens.
    val_data_step{N}.jsonl is a run of its own, never bad lines and never merged into training steps."""
    from data.store import scan_root

    run = tmp_path / "root" / "nemo"
    run.mkdir(parents=True)
    system = "You are a careful solver."
    expected = {}
    for step in (1, 2):
        lines = []
        for i in range(20):
            q = f"<|im_start|>user\nQuestion {i // 5} of step {step}?<|im_end|>\n<|im_start|>assistant\n"
            msgs = [("system", system, [1, 2]), ("user", q, [3, 4, 5])]
            if i % 5 == 4:  # a two-turn rollout: a tool call, its result, the answer, an empty observation
                msgs += [
                    ("assistant", "<tool_call>calc(2)</tool_call>", [10, 11]),
                    ("environment", "<tool_response>4</tool_response>", [20, 21, 22]),
                    ("assistant", f"The answer is {i}.", [12, 13, 14]),
                    ("environment", "", []),
                ]
            else:
                msgs += [
                    ("assistant", f"It is {i}.", [15 + i, 16]),
                    ("environment", "Environment: correct", [30]),
                ]
            reward = float(i % 2)
            lines.append(_nemo_rl_line(i, msgs, reward, width=16))
            turns = msgs[2:]
            expected[(f"train_data_step{step}.jsonl", i + 1)] = (
                step,
                reward,
                f"system: {system}\n\nuser: {q}",
                "\n\n".join(f"{r}: {t}" for r, t, _ in turns),
                "\n\n".join(t for r, t, _ in turns if r == "assistant"),
                [str(t) for r, _, toks in turns if r == "assistant" for t in toks],
                f"Question {i // 5} of step {step}?",
            )
        (run / f"train_data_step{step}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    val = [
        {
            "content": [
                [
                    {"role": "user", "content": "2+2?"},
                    {"role": "assistant", "content": "4"},
                    {"role": "environment", "content": "Environment: correct"},
                ]
            ],
            "rewards": [1.0],
            "idx": 0,
        }
    ]
    (run / "val_data_step2.jsonl").write_text("".join(json.dumps(x) + "\n" for x in val))
    scan = scan_root(tmp_path / "root")
    assert set(scan.runs) == {"nemo", "nemo (validation)"}
    assert scan.split("nemo (validation)") == "validation"

    res, store = _ingest(run, tmp_path / "cache")
    assert (res.bad_lines, res.samples, res.steps, res.files) == (0, 40, 2, 2)
    rows = _rows(store)
    for key, (step, reward, prompt, response, own, tokens, question) in expected.items():
        got = rows[key]
        assert (got["step"], got["reward"], got["prompt"], got["response"]) == (
            step,
            reward,
            prompt,
            response,
        )
        assert got["response_chars"] == len(own)
        assert got["response_tokens"] == tokens and got["response_length"] == len(tokens)
        assert (
            len(got["logprobs"]) == len(got["generation_logprobs"]) == len(got["advantages"]) == len(tokens)
        )
        assert got["logprobs"] == pytest.approx([g - 0.01 for g in got["generation_logprobs"]], abs=1e-6)
        assert got["prompt_preview"] == question
        assert got["advantages"] == [reward - 0.5] * len(tokens)
    sc = store.scalars()
    groups = sc.group_by("step", "prompt_key").len()
    assert groups.height == 8 and set(groups.get_column("len")) == {5}
    assert "token_ids" not in list(store.manifest.ignored_fields)
    assert {"generation_logprobs", "advantages"} <= set(store.token_extras())

    res, vstore = _ingest(run, tmp_path / "cache", split="validation")
    assert (res.bad_lines, res.samples, res.steps) == (0, 1, 1)
    got = vstore.sample(sample_id("val_data_step2.jsonl", 1))
    assert (got["prompt"], got["response"], got["step"]) == (
        "2+2?",
        "assistant: 4\n\nenvironment: Environment: correct",
        2,
    )
    assert vstore.dir != store.dir and store.steps().get_column("n").to_list() == [20, 20]


def test_dialects007_runs_as_frameworks_lay_them_out(fixtures_dir, tmp_path):
    """prime-rl's rollouts/step_{n}/train_rollouts.jsonl (verifiers' records, no step in the lines) take
    the folder's step; its eval_rollouts.jsonl and an eval/ folder are the run's validation; of its
    traces, all/ is read and effective/ (the same episodes again) is not; .jsonl.gz and .jsonl.zst files
    are read like .jsonl; a checkpoint folder is not looked into."""
    import gzip

    import zstandard

    from data.store import run_file_stats, scan_root

    lines = (fixtures_dir / "real-verifiers-math-python" / "results.jsonl").read_bytes().splitlines(True)
    run = tmp_path / "root" / "prime"
    for step in (3, 4):
        d = run / "rollouts" / f"step_{step}"
        d.mkdir(parents=True)
        (d / "train_rollouts.jsonl").write_bytes(b"".join(lines[:5]))
        (d / "eval_rollouts.jsonl").write_bytes(lines[5])
    for sub in ("all", "effective"):
        (run / "rollouts" / "step_5" / "train" / sub).mkdir(parents=True)
        (run / "rollouts" / "step_5" / "train" / sub / "traces.jsonl").write_bytes(b"".join(lines[:2]))
    (run / "packed").mkdir()
    (run / "packed" / "step_6.jsonl.gz").write_bytes(gzip.compress(b"".join(lines[:3])))
    (run / "packed" / "step_7.jsonl.zst").write_bytes(
        zstandard.ZstdCompressor().compress(b"".join(lines[:4]))
    )
    (run / "checkpoint-100").mkdir()
    (run / "checkpoint-100" / "rank0.jsonl").write_bytes(lines[0])
    assert [rel for rel, _ in run_file_stats(run)] == [
        "packed/step_6.jsonl.gz",
        "packed/step_7.jsonl.zst",
        "rollouts/step_3/train_rollouts.jsonl",
        "rollouts/step_4/train_rollouts.jsonl",
        "rollouts/step_5/train/all/traces.jsonl",
    ]
    assert set(scan_root(tmp_path / "root").runs) == {"prime", "prime (validation)"}
    res, store = _ingest(run, tmp_path / "cache")
    assert res.bad_lines == 0
    steps = dict(store.steps().select("step", "n").iter_rows())
    assert steps == {3: 5, 4: 5, 5: 2, 6: 3, 7: 4}
    src = _jsonl(fixtures_dir / "real-verifiers-math-python" / "results.jsonl")
    got = store.sample(sample_id("packed/step_7.jsonl.zst", 4))
    assert (got["reward"], got["response"]) == (src[3]["reward"], _verifiers_text(src[3]["completion"])[0])
    res, vstore = _ingest(run, tmp_path / "cache", split="validation")
    assert (res.samples, dict(vstore.steps().select("step", "n").iter_rows())) == (2, {3: 1, 4: 1})


def test_dialects008_whole_files_read_again_when_they_change(fixtures_dir, tmp_path):
    """A Parquet or compressed file is read whole, and again whole (its old rows dropped) when it changes;
    an unchanged one is not read again. A growing .jsonl beside them is still read on from its offset."""
    import gzip

    run = tmp_path / "run"
    (run / "completions").mkdir(parents=True)
    src = sorted((fixtures_dir / "trl-grpo-completions" / "completions").glob("*.parquet"))
    (run / "completions" / "completions_00001.parquet").write_bytes(src[0].read_bytes())
    rows = _jsonl(fixtures_dir / "real-verifiers-math-python" / "results.jsonl")
    gz = run / "step_9.jsonl.gz"
    gz.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows[:2]).encode()))
    res, store = _ingest(run, tmp_path / "cache")
    assert res.samples == 18
    res, _ = _ingest(run, tmp_path / "cache")
    assert res.new_rows == 0 and res.bytes_read == 0
    table = pq.read_table(src[0]).slice(0, 10)
    pq.write_table(table, run / "completions" / "completions_00001.parquet")
    gz.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows[:5]).encode()))
    res, store = _ingest(run, tmp_path / "cache")
    assert (res.samples, res.new_rows) == (15, 15)
    assert dict(store.steps().select("step", "n").iter_rows()) == {1: 10, 9: 5}


def test_dialects009_length_in_characters_without_tokens(fixtures_dir, tmp_path):
    """A run without token arrays (veRL's dump) is filtered by its length in characters (len_min /
    len_max) and sorted by it (sort=len), labelled as characters; a run with tokens keeps tokens."""
    from data.export import select_rows
    from data.metrics import label
    from data.metrics.registry import length_column
    from data.queries import ResponseFilter
    from data.responses import ResponsesView

    _, store = _ingest(fixtures_dir / "real-verl-gsm8k-tools", tmp_path)
    sc = store.scalars()
    present = {c for c in sc.columns if sc.get_column(c).null_count() < sc.height}
    assert length_column(present) == "response_chars"
    assert label(length_column(present)) == "response length (characters, pads excluded)"
    want = sc.filter((pl.col("response_chars") >= 300) & (pl.col("response_chars") < 600)).height
    got = select_rows(store, ResponseFilter(len_min=300, len_max=600)).collect()
    assert 0 < got.height == want < sc.height
    view, notes = ResponsesView.from_query({"sort": "len"}, sortable=["reward", "response_chars"])
    assert (view.sort, notes) == ("response_chars", [])
    view, _ = ResponsesView.from_query(
        {"sort": "len"}, sortable=["reward", "response_length", "response_chars"]
    )
    assert view.sort == "response_length"


def test_dialects010_pages_say_step_zero_and_assumed_weights(fixtures_dir, tmp_path):
    """Every page of an evaluation dump says its responses are shown as step 0; of a TRL run without
    weights, that equal weights are assumed and where to name them; a run in the contract says nothing."""
    from data.store.reading import page_notices

    _, store = _ingest(fixtures_dir / "real-nemo-gym-math", tmp_path / "a")
    assert page_notices(store) == [
        "No step in example_rollouts.jsonl (an evaluation dump): its responses are shown as step 0."
    ]
    bare = tmp_path / "bare"  # TRL's completions without its log history: nothing to fit weights to
    shutil.copytree(fixtures_dir / "trl-grpo-completions" / "completions", bare / "completions")
    _, store = _ingest(bare, tmp_path / "b")
    (notice,) = page_notices(store)
    assert notice.startswith("reward = 1 × sentiment + 1 × concise_format: no weights were given")
    _, store = _ingest(fixtures_dir / "trl-grpo-completions", tmp_path / "c", reward_weights=TRL_WEIGHTS)
    assert page_notices(store) == []
    _, store = _ingest(fixtures_dir / "trl-grpo-small", tmp_path / "d")
    assert page_notices(store) == []


def test_dialects011_a_whole_file_cut_short_is_pending_not_a_failure(fixtures_dir, tmp_path):
    """A .jsonl.gz or .parquet still being written (cut short) does not fail the ingest: it is listed as
    pending with its reason, the other files load, and it is read whole once it changes."""
    import gzip

    rows = (fixtures_dir / "real-verifiers-math-python" / "results.jsonl").read_bytes()
    run = tmp_path / "run"
    run.mkdir()
    whole_gz = gzip.compress(rows)
    (run / "step_1.jsonl.gz").write_bytes(whole_gz[: len(whole_gz) // 2])
    whole_pq = (
        fixtures_dir / "trl-grpo-completions" / "completions" / "completions_00001.parquet"
    ).read_bytes()
    (run / "completions_00001.parquet").write_bytes(whole_pq[: len(whole_pq) // 2])
    (run / "step_2.jsonl").write_bytes(rows)
    res, store = _ingest(run, tmp_path / "cache")
    pending = store.issues().filter(pl.col("severity") == "pending")
    assert set(pending.get_column("source")) == {"step_1.jsonl.gz", "completions_00001.parquet"}
    assert res.samples >= 15
    (run / "step_1.jsonl.gz").write_bytes(whole_gz)
    (run / "completions_00001.parquet").write_bytes(whole_pq)
    res, store = _ingest(run, tmp_path / "cache")
    assert (res.samples, res.bad_lines) == (15 + 15 + 16, 0)
    assert store.issues().filter(pl.col("severity") == "pending").height == 0


def test_dialects012_token_ids_named_by_a_local_tokenizer(tmp_path):
    """NeMo-RL logs token ids: with a tokenizer.json in the run folder named by rlboard.toml (or the
    setting), the tokens are their text (tokenizers' id_to_token), pads excluded from the length; without
    one they are the ids; a tokenizer outside the run folder is refused with a reason (ids shown)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel()
    tok.train_from_iterator(
        ["the answer is four", "it is 4"], trainers.BpeTrainer(special_tokens=["<pad>", "<unk>"])
    )
    run = tmp_path / "run"
    run.mkdir()
    tok.save(str(run / "tokenizer.json"))
    answer = tok.encode("the answer is 4").ids + [tok.token_to_id("<pad>")]
    msgs = [("user", "q?", [7, 8]), ("assistant", "the answer is 4", answer), ("environment", "", [])]
    (run / "train_data_step1.jsonl").write_text(json.dumps(_nemo_rl_line(0, msgs, 1.0, width=12)) + "\n")
    names = [tok.id_to_token(i) for i in answer]

    _, store = _ingest(run, tmp_path / "a")
    got = store.sample(sample_id("train_data_step1.jsonl", 1))
    assert got["response_tokens"] == [str(i) for i in answer]
    _, store = _ingest(run, tmp_path / "b", tokenizer=run / "tokenizer.json")  # the setting
    assert store.sample(sample_id("train_data_step1.jsonl", 1))["response_tokens"] == names
    (run / "rlboard.toml").write_text('tokenizer = "tokenizer.json"\n')
    _, store = _ingest(run, tmp_path / "a")
    got = store.sample(sample_id("train_data_step1.jsonl", 1))
    assert got["response_tokens"] == names and names[-1] == "<pad>"
    assert got["response_length"] == len(answer) - 1  # the pad is not counted
    (run / "rlboard.toml").write_text('tokenizer = "../elsewhere.json"\n')
    _, store = _ingest(run, tmp_path / "a")
    assert store.sample(sample_id("train_data_step1.jsonl", 1))["response_tokens"] == [str(i) for i in answer]
    assert list(store.manifest.problems) == [
        "rlboard.toml: tokenizer '../elsewhere.json' is not in the run folder"
    ]


def test_dialects030_weights_fitted_to_trls_logged_reward(fixtures_dir, tmp_path):
    """The fixture was trained with reward_weights=[1.0, 0.5]; its log history implies them: the reward of
    every response is then 1 × sentiment + 0.5 × concise_format, as with the weights given, and the
    agreement check with TRL's logged reward holds. A weight given by the user still wins."""
    from data.store.reading import page_notices, understood
    from data.trainer_logs import trainer_scalars
    from data.trainer_logs.agreement import AGREES, checks

    run = fixtures_dir / "trl-grpo-completions"
    _, fitted = _ingest(run, tmp_path / "a")
    _, given = _ingest(run, tmp_path / "b", reward_weights=TRL_WEIGHTS)
    assert page_notices(fitted) == []
    formed = fitted.manifest.reward_formed
    assert formed["reward"] == "1 × sentiment + 0.5 × concise_format"
    assert formed["weights_from"].startswith("fitted to the reward TRL logged (log_history.json: 25 steps")
    cols = ["source", "line", "reward", "sentiment", "concise_format"]
    a = fitted.scalars().select(cols).sort("source", "line")
    b = given.scalars().select(cols).sort("source", "line")
    assert a.equals(b)
    row = a.row(0, named=True)
    assert row["reward"] == row["sentiment"] + 0.5 * row["concise_format"]
    assert "fitted to the reward TRL logged" in str(understood(fitted))
    status = {c.key: c.status for c in checks(trainer_scalars(run), fitted.scan(), fitted.steps())}
    assert status["reward"] == AGREES


def test_dialects031_weight_fit_by_hand():
    """reward = Σ wᵢ · meanᵢ at every logged step: the weights are found where the log pins them down, and
    not where it does not (too few steps, dependent means, a step that breaks the identity)."""
    from data.ingest.options import fit_reward_weights

    names = ("a", "b")

    def log(*steps):
        return [
            {"reward": r, "rewards/a/mean": a, "rewards/b/mean": b, "step": i}
            for i, (r, a, b) in enumerate(steps)
        ]

    # 2 × a + 0.25 × b: (1, 0) → 2, (0, 4) → 1, (1, 1) → 2.25
    w, n, worst = fit_reward_weights(
        [{"loss": 1.0}, *log((2.0, 1.0, 0.0), (1.0, 0.0, 4.0), (2.25, 1.0, 1.0))], names
    )
    assert (w, n) == ({"a": 2.0, "b": 0.25}, 3) and worst < 1e-12
    assert fit_reward_weights(log((2.0, 1.0, 0.0), (1.0, 0.0, 4.0)), names) is None  # no step to check on
    assert fit_reward_weights(log((1.0, 1.0, 1.0), (2.0, 2.0, 2.0), (3.0, 3.0, 3.0)), names) is None  # a = b
    assert fit_reward_weights(log((2.0, 1.0, 0.0), (1.0, 0.0, 4.0), (9.0, 1.0, 1.0)), names) is None  # broken
    assert fit_reward_weights(log((2.0, 1.0, 0.0), (1.0, 0.0, 4.0), (float("nan"), 1.0, 1.0)), names) is None


def test_dialects032_compressed_file_matched_by_its_fields(tmp_path):
    """A zstd-compressed file is matched by its first record's fields like a plain one (zstandard's reader has
    no readline: every .jsonl.zst was guessed the contract), also when written in several frames (seekable
    zstd, as prime-rl seals its trace chunks)."""
    import zstandard

    line = json.dumps({"sample_index": 0, "group_index": 0, "status": "completed", "reward": 1.0,
                       "prompt": "2+2?", "messages": [{"role": "user", "content": "2+2?"},
                                                      {"role": "assistant", "content": "4"}]}).encode() + b"\n"  # fmt: skip
    c = zstandard.ZstdCompressor()
    path = tmp_path / "run" / "trajectory" / "3.jsonl.zst"
    path.parent.mkdir(parents=True)
    path.write_bytes(c.compress(line[:40]) + c.compress(line[40:]))
    res = ingest_run(tmp_path / "run", tmp_path / "c", ("<pad>",))
    entry = open_store(res.store_dir).manifest.files["trajectory/3.jsonl.zst"]
    assert (entry["dialect"], entry["matched"], res.samples, res.bad_lines) == ("miles", "sure", 1, 0)
