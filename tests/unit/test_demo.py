"""The demo runs' generators (data/demo/: the PPO run, the GRPO run and its trainer log), what the pages
show of them, and the benchmark generator (benchmarks/generate.py)."""

from __future__ import annotations

import collections
import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from data.demo import (  # noqa: E402
    EOS,
    KL_COEF,
    PAD,
    detokenize,
    ensure_demo,
    prompt_pool,
    round_sig,
    tokenize,
    write_demo_run,
    write_grpo_run,
)

STEPS, PER_STEP, RANKS = 48, 64, 2


def _read_run(run_dir: Path) -> dict[str, list[dict]]:
    return {
        p.name: [orjson.loads(line) for line in p.read_bytes().splitlines()]
        for p in sorted(run_dir.glob("*.jsonl"))
    }


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory) -> Path:
    return write_demo_run(tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="module")
def records(demo_dir) -> list[dict]:
    return [rec for recs in _read_run(demo_dir).values() for rec in recs]


@pytest.fixture(scope="module")
def by_step(records) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = collections.defaultdict(list)
    for rec in records:
        out[rec["step"]].append(rec)
    return dict(sorted(out.items()))


def _kl_sum(rec: dict) -> float:
    return float(np.sum(np.array(rec["logprobs"]) - np.array(rec["ref_logprobs"])))


def _is_long_repetitive(rec: dict) -> bool:
    sentences = [s.strip() for s in rec["response"].replace(EOS, "").replace(PAD, "").split(".") if s.strip()]
    return len(rec["response_tokens"]) >= 60 and max(collections.Counter(sentences).values()) >= 5


def _mean_over(by_step: dict, steps, fn) -> float:
    return float(np.mean([fn(rec) for s in steps for rec in by_step[s]]))


# ---- files and determinism ----------------------------------------------------------------------------


def test_layout_and_byte_identical(tmp_path, demo_dir):
    assert demo_dir.name == "demo-ppo"
    assert sorted(p.name for p in demo_dir.iterdir()) == ["rank0.jsonl", "rank1.jsonl"]
    again = write_demo_run(tmp_path / "again")
    for name in ("rank0.jsonl", "rank1.jsonl"):
        assert (again / name).read_bytes() == (demo_dir / name).read_bytes()
    other = write_demo_run(tmp_path / "other", seed=1)
    assert (other / "rank0.jsonl").read_bytes() != (demo_dir / "rank0.jsonl").read_bytes()


def test_custom_size(tmp_path):
    run = write_demo_run(tmp_path, run_name="tiny", steps=3, per_step=5, ranks=3, seed=7)
    files = _read_run(run)
    assert sorted(files) == ["rank0.jsonl", "rank1.jsonl", "rank2.jsonl"]
    assert [len(v) for v in files.values()] == [6, 6, 3]
    assert sorted({r["step"] for v in files.values() for r in v}) == [1, 2, 3]


def test_lines_sorted_by_step_and_split_across_ranks(demo_dir):
    files = _read_run(demo_dir)
    for recs in files.values():
        steps = [r["step"] for r in recs]
        assert steps == sorted(steps)
        assert len(recs) == STEPS * PER_STEP // RANKS
    for step in range(1, STEPS + 1):
        assert all(sum(r["step"] == step for r in recs) == PER_STEP // RANKS for recs in files.values())


# ---- schema -------------------------------------------------------------------------------------------


def test_every_record_has_the_fields_with_the_right_types(records):
    assert len(records) == STEPS * PER_STEP
    str_fields = ("prompt", "response", "ref_response")
    float_fields = ("reward", "ref_reward", "advantage")
    list_float = ("logprobs", "ref_logprobs", "values", "token_rewards", "advantages")
    for rec in records:
        for k in str_fields:
            assert isinstance(rec[k], str)
        for k in float_fields:
            assert isinstance(rec[k], float) and math.isfinite(rec[k])
        assert type(rec["step"]) is int and 1 <= rec["step"] <= STEPS
        assert type(rec["prompt_id"]) is int and 0 <= rec["prompt_id"] < 96
        assert isinstance(rec["response_tokens"], list) and all(
            isinstance(t, str) for t in rec["response_tokens"]
        )
        for k in list_float:
            assert isinstance(rec[k], list) and rec[k]
            assert all(isinstance(x, float) and math.isfinite(x) for x in rec[k]), k
        assert set(rec) == {*str_fields, *float_fields, *list_float, "step", "prompt_id", "response_tokens"}


def test_trl_ppo_token_layout(records):
    n_extra = n_multi_pad = n_no_eos = 0
    for rec in records:
        toks, lp = rec["response_tokens"], rec["logprobs"]
        assert len(lp) == len(rec["ref_logprobs"])
        assert len(toks) == len(rec["values"]) == len(rec["token_rewards"]) == len(rec["advantages"])
        # The trainer's own advantages: return (γ = 1) minus value, per token; the scalar is the first's.
        ret = np.cumsum(rec["token_rewards"][::-1])[::-1]
        assert rec["advantages"] == pytest.approx(ret - np.array(rec["values"]), abs=2e-5)
        assert rec["advantage"] == rec["advantages"][0]
        assert rec["response"] == detokenize(toks)
        assert all(-14.0 <= x <= 0.0 for x in lp + rec["ref_logprobs"])
        extra = len(toks) - len(lp)
        assert extra in (0, 1)
        tr = rec["token_rewards"]
        for t in range(len(lp) - (1 - extra)):  # every position but the reward position: KL penalty only
            assert tr[t] == pytest.approx(-KL_COEF * (lp[t] - rec["ref_logprobs"][t]), abs=2e-6)
        if extra:
            n_extra += 1
            assert toks[-1] == PAD and toks[-2] in (PAD, EOS)
            assert tr[-1] == rec["reward"]  # the sequence reward sits on the trailing pad
            assert rec["response"].endswith(PAD) and EOS + PAD in rec["response"]
            n_multi_pad += toks.count(PAD) > 1
        else:
            kl = -KL_COEF * (lp[-1] - rec["ref_logprobs"][-1])
            assert tr[-1] == pytest.approx(kl + rec["reward"], rel=1e-5, abs=2e-6)
        n_no_eos += EOS not in toks
    n = len(records)
    assert 0.7 * n < n_extra < n
    assert n_multi_pad > 0.05 * n
    assert 0 < n_no_eos < 0.1 * n


def test_realistic_logprobs(records):
    lp = np.concatenate([r["logprobs"] for r in records])
    assert lp.min() < -10 and lp.max() <= 0
    mid = np.mean((lp > -3) & (lp < -0.1))
    assert mid > 0.4


def test_prompts_recur(records):
    per_prompt = collections.defaultdict(set)
    for rec in records:
        per_prompt[rec["prompt"]].add(rec["step"])
        assert rec["prompt"] == prompt_pool()[rec["prompt_id"]]
    assert 80 <= len(per_prompt) <= 96
    assert np.median([len(s) for s in per_prompt.values()]) >= 20


def test_text_edge_cases(records):
    responses = [r["response"] for r in records]
    assert any("<script>alert(1)</script>" in r for r in responses)
    assert any("<think>" in r and "</think>" in r for r in responses)
    assert any("**" in r and "🚀" in r for r in responses)
    assert sum(r.count("\n") >= 2 for r in responses) > 10


def test_floats_have_at_most_6_significant_digits(records):
    for rec in records[::7]:
        floats = [rec["reward"], rec["ref_reward"], rec["advantage"]]
        for k in ("logprobs", "ref_logprobs", "values", "token_rewards"):
            floats.extend(rec[k])
        assert all(float(f"{x:.6g}") == x for x in floats)


# ---- the story ----------------------------------------------------------------------------------------


def test_reward_rises_and_sharpens_ref_reward_flat(by_step):
    first, last = range(1, 6), range(STEPS - 4, STEPS + 1)
    r_first = _mean_over(by_step, first, lambda r: r["reward"])
    r_last = _mean_over(by_step, last, lambda r: r["reward"])
    assert r_last > r_first + 0.8
    assert 1.3 < r_last < 2.0 and r_first < 0.5
    ref_first = _mean_over(by_step, first, lambda r: r["ref_reward"])
    ref_last = _mean_over(by_step, last, lambda r: r["ref_reward"])
    assert abs(ref_last - ref_first) < 0.3
    std = {s: np.std([r["reward"] for r in recs]) for s, recs in by_step.items()}
    assert np.mean([std[s] for s in last]) < 0.8 * np.mean([std[s] for s in first])
    win = {s: np.mean([r["reward"] > r["ref_reward"] for r in recs]) for s, recs in by_step.items()}
    assert np.mean([win[s] for s in last]) > np.mean([win[s] for s in first]) + 0.3


def test_kl_and_length_grow(by_step):
    thirds = [range(1, 9), range(21, 29), range(STEPS - 7, STEPS + 1)]
    kl = [_mean_over(by_step, t, _kl_sum) for t in thirds]
    assert abs(kl[0]) < 2 < kl[1] < kl[2]
    length = [_mean_over(by_step, t, lambda r: len(r["response_tokens"])) for t in thirds]
    assert length[0] < length[1] < length[2]


def test_critic_converges(by_step):
    def value_error(rec):
        return abs(rec["values"][0] - sum(rec["token_rewards"]))

    assert _mean_over(by_step, range(1, 6), value_error) > 2 * _mean_over(by_step, range(40, 49), value_error)


def test_reward_hacking_appears_late(by_step):
    early = [r for s in range(1, 30) for r in by_step[s]]
    late = [r for s in range(30, STEPS + 1) for r in by_step[s]]
    share_early = np.mean([_is_long_repetitive(r) for r in early])
    share_late = np.mean([_is_long_repetitive(r) for r in late])
    assert share_early < 0.02 and share_late > 0.1
    last = [r for s in range(STEPS - 7, STEPS + 1) for r in by_step[s]]
    hacks = [r for r in last if _is_long_repetitive(r)]
    normal = [r for r in last if not _is_long_repetitive(r)]
    assert np.mean([r["reward"] for r in hacks]) > np.mean([r["reward"] for r in normal]) + 0.3
    assert np.mean([_kl_sum(r) for r in hacks]) > 1.5 * np.mean([_kl_sum(r) for r in normal])
    assert np.mean([len(r["response_tokens"]) for r in hacks]) > np.mean(
        [len(r["response_tokens"]) for r in normal]
    )


# ---- ensure_demo ----------------------------------------------------------------------------------------


def test_ensure_demo_writes_into_empty_root_once(tmp_path):
    """An empty (even missing) root gets both demo runs, no temporary folder left; a second call writes
    nothing."""
    root = tmp_path / "rollouts"  # does not exist yet
    runs = ensure_demo(root)
    assert runs == [root / "demo-ppo", root / "demo-grpo"]
    assert sorted(p.name for p in runs[0].iterdir()) == ["rank0.jsonl", "rank1.jsonl"]
    assert sorted(p.name for p in runs[1].iterdir()) == ["rank0.jsonl", "rank1.jsonl", "trainer_state.json"]
    assert sorted(p.name for p in root.iterdir()) == ["demo-grpo", "demo-ppo"]  # no temporary folder left
    files = [p for run in runs for p in run.iterdir()]
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in files}
    assert ensure_demo(root) == []
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in files} == before


def test_ensure_demo_leaves_existing_runs_alone(tmp_path):
    (tmp_path / "my-run").mkdir()
    (tmp_path / "my-run" / "data.jsonl").write_text(
        '{"prompt": "p", "response": "r", "reward": 1, "step": 0}\n'
    )
    assert ensure_demo(tmp_path) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my-run"]


def test_ensure_demo_ignores_folders_without_jsonl(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("hi")
    (tmp_path / "README.md").write_text("rollouts")
    assert ensure_demo(tmp_path) == [tmp_path / "demo-ppo", tmp_path / "demo-grpo"]


# ---- the GRPO run -----------------------------------------------------------------------------------------

GRPO_STEPS, PROMPTS_PER_STEP, GROUP = 32, 8, 8


@pytest.fixture(scope="module")
def grpo_dir(tmp_path_factory) -> Path:
    return write_grpo_run(tmp_path_factory.mktemp("grpo"))


@pytest.fixture(scope="module")
def grpo_records(grpo_dir) -> list[dict]:
    return [rec for recs in _read_run(grpo_dir).values() for rec in recs]


def test_grpo_layout_and_byte_identical(tmp_path, grpo_dir):
    """Two rank files and TRL's trainer_state.json, byte-identical for the same arguments."""
    assert grpo_dir.name == "demo-grpo"
    names = ["rank0.jsonl", "rank1.jsonl", "trainer_state.json"]
    assert sorted(p.name for p in grpo_dir.iterdir()) == names
    again = write_grpo_run(tmp_path / "again")
    assert all((again / n).read_bytes() == (grpo_dir / n).read_bytes() for n in names)


def test_grpo_groups_share_a_prompt_and_carry_trls_advantage(grpo_records):
    """Each step holds PROMPTS_PER_STEP groups of GROUP responses to one prompt (one group_id); the reward is
    the sum of the two reward functions, the advantage (reward − mean) / (std + 1e-4), the arrays aligned."""
    assert len(grpo_records) == GRPO_STEPS * PROMPTS_PER_STEP * GROUP
    groups: dict[int, list[dict]] = collections.defaultdict(list)
    for rec in grpo_records:
        groups[rec["group_id"]].append(rec)
        assert rec["reward"] == rec["judge_reward"] + rec["format_reward"]
        assert len(rec["response_tokens"]) == len(rec["logprobs"]) == len(rec["ref_logprobs"])
        assert "values" not in rec and "token_rewards" not in rec
    assert len(groups) == GRPO_STEPS * PROMPTS_PER_STEP
    zero_spread = 0
    for members in groups.values():
        assert len(members) == GROUP
        assert len({(r["step"], r["prompt"]) for r in members}) == 1
        rewards = np.array([r["reward"] for r in members])
        want = (rewards - rewards.mean()) / (rewards.std(ddof=1) + 1e-4)
        assert np.allclose([r["advantage"] for r in members], want, rtol=1e-5, atol=1e-6)
        zero_spread += rewards.std() == 0
    assert 0 < zero_spread < len(groups)  # some groups teach GRPO nothing, most do


def test_grpo_reward_rises(grpo_records):
    """The judge passes more often as training goes on, and the format is learnt."""
    by = collections.defaultdict(list)
    for rec in grpo_records:
        by[rec["step"] <= GRPO_STEPS // 4].append(rec)
    early, late = (np.mean([r["reward"] for r in by[k]]) for k in (True, False))
    assert late > early + 0.4


def test_grpo_trainer_log_is_trls(grpo_dir):
    """trainer_state.json: one log_history entry per step with TRL GRPO's keys, then the run's summary."""
    history = json.loads((grpo_dir / "trainer_state.json").read_text())["log_history"]
    assert [e["step"] for e in history[:-1]] == list(range(1, GRPO_STEPS + 1))
    keys = {"reward", "reward_std", "kl", "frac_reward_zero_std", "loss", "learning_rate"}
    keys |= {"rewards/judge_reward/mean", "rewards/format_reward/mean"}
    assert all(keys <= set(e) for e in history[:-1])
    assert "train_runtime" in history[-1]


# ---- what the pages show of the demo ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_stores(tmp_path_factory):
    """The demo runs as the board writes them into an empty root, ingested: name -> store."""
    from data.ingest import ingest_run
    from data.store import open_store

    base = tmp_path_factory.mktemp("demo-root")
    runs = ensure_demo(base / "root")
    pads = ("<pad>", "<|endoftext|>")
    return base / "root", {
        run.name: open_store(ingest_run(run, base / "cache", pads).store_dir) for run in runs
    }


def test_demo_compare_page_has_shared_prompts_and_bins(demo_stores):
    """The compare page's data for the two demo runs: shared bins over both, and prompts they share."""
    from data.compare import distribution
    from data.compare import prompts as shared

    _, stores = demo_stores
    assert sorted(stores) == ["demo-grpo", "demo-ppo"]
    assert len(distribution.shared_bins(stores).edges) > 2
    ppo, grpo = shared.run_prompts(stores["demo-ppo"]), shared.run_prompts(stores["demo-grpo"])
    paired = shared.pair_from("demo-ppo", ppo, "demo-grpo", grpo, 1.0)
    assert paired.table.height >= 50 and paired.over_steps.height > 0


def test_demo_prompts_page_shows_grpo_groups(demo_stores):
    """The prompts page's list of the GRPO run counts groups (and zero-spread ones)."""
    from data import prompts

    _, stores = demo_stores
    table = prompts.prompt_table(stores["demo-grpo"])
    assert table.get_column("n_groups").sum() == GRPO_STEPS * PROMPTS_PER_STEP
    assert table.get_column("zero_spread_groups").sum() > 0
    assert prompts.overview(table)["recurring"] > 0


def test_demo_trainer_log_agrees_with_the_rollouts(demo_stores):
    """The agreement check of the GRPO run's trainer log: every check comparable, and agreeing on every step."""
    from data.compare import trainer

    root, stores = demo_stores
    checks = trainer.agreement(stores["demo-grpo"], root / "demo-grpo")
    keys = {"reward", "kl", "frac_reward_zero_std", "rewards/judge_reward/mean", "rewards/format_reward/mean"}
    assert {c.key for c in checks} >= keys
    assert all(c.status == "agrees" and c.steps == GRPO_STEPS for c in checks if c.key in keys)


# ---- helpers --------------------------------------------------------------------------------------------


def test_tokenize_round_trip_and_bpe_style():
    text = "Hello world, it's a **wonderful** day 🚀\n\n<think>x</think>\n\tindented_name 12345"
    toks = tokenize(text)
    assert detokenize(toks) == text
    assert "Ġworld" in toks and "Ċ" in "".join(toks)
    assert tokenize("Imagine something extraordinary") == tokenize("Imagine something extraordinary")


def test_round_sig():
    x = np.array([0.0, -0.0, 1.234567891, -9.9999996, 123456789.0, 3.814697180359872e-08, np.nan])
    out = round_sig(x)
    assert out[:6].tolist() == [0.0, 0.0, 1.23457, -10.0, 123457000.0, 3.8147e-08]
    assert math.copysign(1.0, out[1]) == 1.0 and math.isnan(out[6])


# ---- benchmarks/generate.py -------------------------------------------------------------------------------


def _load_generate():
    spec = importlib.util.spec_from_file_location("bench_generate", ROOT / "benchmarks" / "generate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_benchmark_generator_cli_tiny(tmp_path):
    out = tmp_path / "bench-run"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "generate.py"), str(out),
         "--steps", "3", "--per-step", "8", "--tokens", "20", "--ranks", "2", "--recurring-prompts", "5"],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["lines"] == 24 and report["bytes"] > 0 and report["seconds"] >= 0
    assert sorted(Path(f).name for f in report["files"]) == ["rank0.jsonl", "rank1.jsonl"]
    recs = [rec for recs in _read_run(out).values() for rec in recs]
    assert len(recs) == 24
    assert sum(p.stat().st_size for p in out.glob("*.jsonl")) == report["bytes"]
    assert len({r["prompt"] for r in recs}) <= 5
    for rec in recs:
        toks = rec["response_tokens"]
        assert len(rec["logprobs"]) == len(rec["ref_logprobs"]) and len(toks) == len(rec["values"])
        assert len(toks) == len(rec["token_rewards"]) and len(toks) - len(rec["logprobs"]) in (0, 1)
        assert rec["response"] == detokenize(toks)
        assert isinstance(rec["reward"], float) and isinstance(rec["prompt_id"], int)
        assert rec["token_rewards"][-1] == pytest.approx(
            rec["reward"]
            + (0 if toks[-1] == PAD else -KL_COEF * (rec["logprobs"][-1] - rec["ref_logprobs"][-1])),
            rel=1e-5,
            abs=2e-6,
        )
    for f in out.glob("*.jsonl"):
        steps = [orjson.loads(line)["step"] for line in f.read_bytes().splitlines()]
        assert steps == sorted(steps) and set(steps) == {1, 2, 3}


def test_benchmark_append_step_matches_generate(tmp_path):
    gen = _load_generate()
    kw = dict(per_step=8, tokens=20, ranks=2, seed=3, recurring_prompts=16)
    full = gen.generate(tmp_path / "full", steps=3, **kw)
    assert full["lines"] == 24
    gen.generate(tmp_path / "inc", steps=2, **kw)
    rep = gen.append_step(tmp_path / "inc", 3, **kw)
    assert rep["lines"] == 8 and rep["bytes"] > 0
    for name in ("rank0.jsonl", "rank1.jsonl"):
        assert (tmp_path / "inc" / name).read_bytes() == (tmp_path / "full" / name).read_bytes()
