"""The GRPO demo run: groups of responses to one prompt, scored by two reward functions, with the trainer's
own log beside the rollouts (``trainer_state.json``, as TRL's ``GRPOTrainer`` writes it).

Each step samples ``prompts_per_step`` prompts of the demo's pool (the PPO run's, so the compare page finds
shared prompts) and ``group_size`` responses to each, which share a ``group_id``. Two reward functions score
a response, 0 or 1 each: ``judge_reward`` (a judge's pass, likelier on easy prompts and as training goes on)
and ``format_reward`` (the asked format kept, soon learnt); the reward is their sum (TRL's default weights
of 1). ``advantage`` is TRL's: (reward − group mean) / (group std + 1e-4). Early every response of a hard
prompt fails and late every response of an easy one passes: zero-spread groups, which teach GRPO nothing.

The log's per-step means are computed from the dumped rollouts exactly as TRL computes them (``reward``,
``rewards/<fn>/mean``, ``kl`` = Σ k3 / Σ tokens, ``frac_reward_zero_std``), so the board's agreement check
agrees on every step.
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

import numpy as np
import orjson

from data.demo.numbers import policy_logprobs, ref_logprobs, round_sig, segment_ids, token_kinds
from data.demo.text import EOS, N_DEMO_PROMPTS, detokenize, normal_text, prompt_parts, prompt_pool, tokenize

REWARD_FUNCTIONS = ("judge_reward", "format_reward")
STD_EPS = 1e-4  # TRL's GRPO: advantages = (reward − mean) / (std + 1e-4)
RESPONSE_LIMIT = 160  # TRL's max_completion_length; longer responses are cut, no EOS
LEARNING_RATE = 1e-6


def _difficulty(prompt_id: int) -> float:
    """A prompt's fixed difficulty in [0.1, 0.9] (the same in every run: a hash of its id)."""
    return 0.1 + 0.8 * (zlib.crc32(f"demo-prompt-{prompt_id}".encode()) % 1000) / 999


def _group(
    rng: np.random.Generator, prompt_id: int, size: int, progress: float
) -> list[tuple[str, int, int]]:
    """``size`` responses to one prompt: ``(text, judge, format)`` each."""
    kind, topic = prompt_parts(prompt_id)
    p_judge = 1.0 / (1.0 + np.exp(-8.0 * (0.25 + 0.9 * progress - _difficulty(prompt_id))))
    p_format = 0.55 + 0.43 * min(1.0, 2.5 * progress)
    out = []
    for _ in range(size):
        judge = int(rng.random() < p_judge)
        fmt = int(rng.random() < p_format)
        quality = float(np.clip(0.1 + 0.55 * judge + 0.25 * fmt + rng.normal(0.0, 0.08), 0.0, 1.0))
        out.append((normal_text(rng, kind, topic, quality, progress), judge, fmt))
    return out


def _step_records(
    rng: np.random.Generator,
    *,
    step: int,
    progress: float,
    prompt_ids: list[int],
    size: int,
    first_group: int,
) -> list[dict]:
    """All records of one step, group after group; the log-probs are drawn for the whole step at once."""
    prompts = prompt_pool(N_DEMO_PROMPTS)
    rows: list[tuple[int, int, str, int, int]] = []  # prompt id, group id, text, judge, format
    for j, pid in enumerate(prompt_ids):
        for text, judge, fmt in _group(rng, pid, size, progress):
            rows.append((pid, first_group + j, text, judge, fmt))
    tokens_l = []
    for _, _, text, _, _ in rows:
        content = tokenize(text)
        tokens_l.append(content[:RESPONSE_LIMIT] if len(content) >= RESPONSE_LIMIT else content + [EOS])
    n_tok = np.array([len(t) for t in tokens_l], dtype=np.int64)
    starts, _, _ = segment_ids(n_tok)
    kinds = token_kinds([t for toks in tokens_l for t in toks], starts)
    ref = round_sig(ref_logprobs(rng, kinds))
    lp = round_sig(policy_logprobs(rng, ref, progress))
    reward = np.array([judge + fmt for _, _, _, judge, fmt in rows], dtype=np.float64)
    grouped = reward.reshape(len(prompt_ids), size)
    mean = np.repeat(grouped.mean(axis=1), size)
    std = np.repeat(grouped.std(axis=1, ddof=1) if size > 1 else np.zeros(len(prompt_ids)), size)
    advantage = round_sig((reward - mean) / (std + STD_EPS))
    lp_parts = np.split(lp, starts[1:])
    ref_parts = np.split(ref, starts[1:])
    return [
        {
            "prompt": prompts[pid],
            "response": detokenize(tokens_l[i]),
            "response_tokens": tokens_l[i],
            "logprobs": lp_parts[i],
            "ref_logprobs": ref_parts[i],
            "reward": float(reward[i]),
            "step": step,
            "prompt_id": pid,
            "group_id": gid,
            "advantage": float(advantage[i]),
            "judge_reward": float(judge),
            "format_reward": float(fmt),
        }
        for i, (pid, gid, _, judge, fmt) in enumerate(rows)
    ]


def _log_entry(records: list[dict], step: int, steps: int, size: int) -> dict:
    """TRL's ``log_history`` entry of one step, from the step's records (TRL's keys and definitions)."""
    reward = np.array([r["reward"] for r in records])
    lp = np.concatenate([r["logprobs"] for r in records])
    ref = np.concatenate([r["ref_logprobs"] for r in records])
    d = ref - lp
    kl = float(np.sum(np.exp(d) - d - 1.0) / len(lp))  # TRL GRPO: k3 per token, averaged over tokens
    groups = reward.reshape(-1, size)
    zero = float(np.mean(groups.std(axis=1) == 0.0))
    lengths = np.array([len(r["response_tokens"]) for r in records], dtype=np.float64)
    entry = {
        "completions/mean_length": lengths.mean(),
        "completions/max_length": lengths.max(),
        "completions/clipped_ratio": float(np.mean([r["response_tokens"][-1] != EOS for r in records])),
    }
    for name in REWARD_FUNCTIONS:
        values = np.array([r[name] for r in records])
        entry[f"rewards/{name}/mean"] = values.mean()
        entry[f"rewards/{name}/std"] = values.std(ddof=1)
    entry.update(
        {
            "reward": reward.mean(),
            "reward_std": float(np.mean(groups.std(axis=1, ddof=1))),
            "frac_reward_zero_std": zero,
            "kl": kl,
            "loss": 0.04 * kl,  # β · KL: the advantages' term averages to 0 at the first iteration
            "grad_norm": 0.8 * np.exp(-step / steps) + 0.05 * (step % 3),
            "learning_rate": LEARNING_RATE * (1.0 - (step - 1) / steps),
            "epoch": step / steps,
            "step": step,
        }
    )
    return {k: (v if k == "step" else float(round_sig([v])[0])) for k, v in entry.items()}


def write_grpo_run(
    root: Path,
    run_name: str = "demo-grpo",
    steps: int = 32,
    prompts_per_step: int = 8,
    group_size: int = 8,
    ranks: int = 2,
    seed: int = 1,
) -> Path:
    """Write ``root/run_name/rank{r}.jsonl`` (record ``i`` of a step to rank ``i % ranks``) and the trainer's
    ``trainer_state.json`` beside them; return the run folder. Byte-identical output for the same arguments."""
    if min(steps, prompts_per_step, group_size, ranks) < 1:
        raise ValueError("steps, prompts_per_step, group_size and ranks must be >= 1")
    run_dir = Path(root) / run_name
    run_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    lines: list[list[bytes]] = [[] for _ in range(ranks)]
    history = []
    for step in range(1, steps + 1):
        ids = rng.choice(N_DEMO_PROMPTS, size=prompts_per_step, replace=prompts_per_step > N_DEMO_PROMPTS)
        records = _step_records(
            rng,
            step=step,
            progress=(step - 1) / max(1, steps - 1),
            prompt_ids=ids.tolist(),
            size=group_size,
            first_group=(step - 1) * prompts_per_step,
        )
        for i, rec in enumerate(records):
            lines[i % ranks].append(orjson.dumps(rec, option=orjson.OPT_SERIALIZE_NUMPY))
        history.append(_log_entry(records, step, steps, group_size))
    history.append({"train_runtime": 1234.5, "train_loss": history[-1]["loss"], "epoch": 1.0, "step": steps})
    state = {"global_step": steps, "max_steps": steps, "log_history": history, "logging_steps": 1}
    files = {f"rank{r}.jsonl": b"\n".join(lines[r]) + b"\n" if lines[r] else b"" for r in range(ranks)}
    files["trainer_state.json"] = json.dumps(state, indent=2).encode() + b"\n"
    for name, data in files.items():
        tmp = run_dir / f".{name}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, run_dir / name)
    return run_dir
