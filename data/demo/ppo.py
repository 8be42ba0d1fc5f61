"""The PPO demo run: what TRL's ``PPOTrainer`` dumps (see ``/work/shared/fixtures/README.md``).

* byte-level BPE tokens (``Ġ`` = leading space, ``Ċ`` = newline), words sometimes split into sub-words;
* the response ends with ``<|endoftext|>`` and, in most records, one extra trailing ``<pad>`` that appears in
  ``response_tokens`` / ``values`` / ``token_rewards`` but not in ``logprobs`` / ``ref_logprobs``; the sequence
  reward sits on that pad position. Some records are padded with several ``<pad>`` tokens, some have all
  arrays of the same length (reward on the last real token), and truncated responses carry no end token;
* ``token_rewards = -KL_COEF * (logprob - ref_logprob)`` plus the reward at the reward position.

Story over steps: the mean reward rises and sharpens while ``ref_reward`` stays flat, the policy drifts away
from the reference (growing KL), the critic converges toward the returns, responses grow longer, and from
about 60 % of the run on a growing share of long repetitive responses ("I am very confident. I am very
confident. ...") wins a high reward with a high KL: reward hacking.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import orjson

from data.demo.numbers import policy_logprobs, ref_logprobs, round_sig, segment_ids, token_kinds
from data.demo.text import (
    EDGE_CASES,
    EOS,
    HACK_PHRASES,
    N_DEMO_PROMPTS,
    PAD,
    RAMBLE_BANK,
    detokenize,
    normal_text,
    pick,
    prompt_parts,
    prompt_pool,
    slots,
    tokenize,
)

KL_COEF = 0.05
RESPONSE_LIMIT = 200  # max generated tokens (TRL's response_length); longer responses are cut, no EOS


def _step_records(
    rng: np.random.Generator,
    *,
    step: int,
    progress: float,
    hack_share: float,
    hack_progress: float,
    prompt_ids: list[int],
    prompts: list[str],
    edges: dict[int, str],
) -> list[dict]:
    """All records of one step. Text is built record by record; the numbers are drawn for the whole step
    at once (vectorised)."""
    n = len(prompt_ids)
    tokens_l: list[list[str]] = []
    n_lp = np.empty(n, dtype=np.int64)
    n_content = np.empty(n, dtype=np.int64)
    n_prefix = np.zeros(n, dtype=np.int64)
    hacked = np.zeros(n, dtype=bool)
    reward = np.empty(n)
    ref_reward = np.empty(n)
    ref_responses: list[str] = []

    # ---- pass 1: what the policy wrote, its reward, and a reference sample --------------------------
    for i, pid in enumerate(prompt_ids):
        kind, topic = prompt_parts(pid)
        edge_text = edges.get(i)
        if edge_text is None and rng.random() < hack_share:
            hacked[i] = True
            phrase = pick(rng, HACK_PHRASES)
            reps = int(rng.integers(8, 15)) + int(rng.integers(0, 1 + int(24 * hack_progress)))
            opener = normal_text(rng, kind, topic, 0.2, 0.0).split("\n")[0] if rng.random() < 0.5 else ""
            if opener:
                n_prefix[i] = len(tokenize(opener + " "))
            text = (opener + " " if opener else "") + " ".join([phrase] * reps)
            reward[i] = rng.normal(1.8 + 0.3 * hack_progress, 0.12)
        else:
            r = rng.normal(0.2 + 1.25 * progress, 0.7 - 0.5 * progress)
            quality = float(np.clip((r + 0.6) / 2.4, 0.0, 1.0))
            if edge_text is not None:
                text = edge_text.format(**slots(rng, topic))
            else:
                text = normal_text(rng, kind, topic, quality, progress)
                if rng.random() < 0.03 * (1.0 - progress):  # early rambling: hits the length limit
                    bank = RAMBLE_BANK
                    more = [bank[j].format(**slots(rng, topic)) for j in rng.integers(0, len(bank), 24)]
                    text += " " + " ".join(more)
                    r -= 1.0  # missing-EOS penalty
            reward[i] = r

        content = tokenize(text)
        n_content[i] = min(len(content), RESPONSE_LIMIT)
        if len(content) >= RESPONSE_LIMIT:
            tokens = content[:RESPONSE_LIMIT]  # cut: no EOS, all arrays equal, reward on the last token
            n_lp[i] = len(tokens)
        elif rng.random() < 0.06:
            tokens = content + [EOS]  # filled the batch's longest length: all arrays equal
            n_lp[i] = len(tokens)
        else:
            n_pad = 1 if rng.random() < 0.8 else int(rng.integers(2, 9))
            tokens = content + [EOS] + [PAD] * n_pad
            n_lp[i] = len(tokens) - 1  # TRL: one more trailing <pad> in tokens/values/token_rewards
        tokens_l.append(tokens)

        rr = rng.normal(0.3, 0.62)
        ref_reward[i] = rr
        ref_quality = float(np.clip((rr + 0.6) / 2.4, 0.0, 1.0))
        ref_responses.append(normal_text(rng, kind, topic, ref_quality, 0.0) + EOS)

    # ---- log-probs over the log-prob window of every record --------------------------------------
    lp_start, lp_rec, lp_pos = segment_ids(n_lp)
    kinds = token_kinds(
        [t for toks, m in zip(tokens_l, n_lp.tolist(), strict=True) for t in toks[:m]], lp_start
    )
    ref_lp = ref_logprobs(rng, kinds)
    lp = policy_logprobs(rng, ref_lp, progress)
    # reward hacking: the reference finds the switch into the repetition very unlikely, then less so;
    # the policy is sure of every token of it
    j = lp_pos - n_prefix[lp_rec]
    in_hack = hacked[lp_rec] & (j >= 0) & (kinds != 3)
    scale = 0.4 + 2.5 * np.exp(-np.maximum(j, 0) / 6.0)
    hack_ref = np.clip(-rng.gamma(2.0, 1.0, len(kinds)) * scale / 2.0, -14.0, -1e-3)
    hack_lp = np.clip(-rng.gamma(1.0, 0.04, len(kinds)), -14.0, -1e-6)
    ref_lp = np.where(in_hack, hack_ref, ref_lp)
    lp = np.where(in_hack, hack_lp, lp)
    after_eos = (kinds == 3) & (lp_pos > n_content[lp_rec])  # pads inside the window carry no KL
    lp = np.where(after_eos, ref_lp, lp)
    ref_lp = round_sig(ref_lp)
    lp = round_sig(lp)
    reward = round_sig(reward)

    # ---- per-token rewards, returns and critic values over all tokens ----------------------------
    n_tok = np.array([len(t) for t in tokens_l], dtype=np.int64)
    tok_start, tok_rec, _ = segment_ids(n_tok)
    token_rewards = np.zeros(int(n_tok.sum()))
    token_rewards[tok_start[lp_rec] + lp_pos] = -KL_COEF * (lp - ref_lp)
    token_rewards = round_sig(token_rewards)
    last = tok_start + n_tok - 1
    token_rewards[last] = round_sig(token_rewards[last] + reward)
    suffix = np.append(np.cumsum(token_rewards[::-1])[::-1], 0.0)
    returns = suffix[:-1] - suffix[(tok_start + n_tok)[tok_rec]]
    fit = np.full(n, 1.0 - np.exp(-3.5 * progress))
    fit[hacked] *= 0.8  # the critic lags behind the new behaviour
    f = fit[tok_rec]
    init = rng.normal(0.1, 0.3, n)[tok_rec] + rng.normal(0.0, 0.15, len(f))
    values = f * returns + (1.0 - f) * init + rng.normal(0.0, 1.0, len(f)) * (0.05 + 0.2 * (1.0 - f))
    values = round_sig(values)
    # The trainer's own per-token advantages (return − value, γ = λ = 1; TRL logs its GAE ones the same way):
    # the token page shows them "from the file". The scalar `advantage` is the first token's.
    advantages = round_sig(returns - values)
    advantage = advantages[tok_start]
    ref_reward = round_sig(ref_reward)

    lp_parts = np.split(lp, lp_start[1:])
    ref_parts = np.split(ref_lp, lp_start[1:])
    value_parts = np.split(values, tok_start[1:])
    tr_parts = np.split(token_rewards, tok_start[1:])
    adv_parts = np.split(advantages, tok_start[1:])
    return [
        {
            "prompt": prompts[pid],
            "response": detokenize(tokens_l[i]),
            "response_tokens": tokens_l[i],
            "logprobs": lp_parts[i],
            "ref_logprobs": ref_parts[i],
            "values": value_parts[i],
            "token_rewards": tr_parts[i],
            "reward": float(reward[i]),
            "step": step,
            "prompt_id": pid,
            "advantage": float(advantage[i]),
            "advantages": adv_parts[i],
            "ref_response": ref_responses[i],
            "ref_reward": float(ref_reward[i]),
        }
        for i, pid in enumerate(prompt_ids)
    ]


_DUMP_OPTS = orjson.OPT_SERIALIZE_NUMPY


def write_demo_run(
    root: Path,
    run_name: str = "demo-ppo",
    steps: int = 48,
    per_step: int = 64,
    ranks: int = 2,
    seed: int = 0,
) -> Path:
    """Write ``root/run_name/rank{r}.jsonl`` (record ``i`` of a step goes to rank ``i % ranks``; lines are
    sorted by step in each file) and return the run folder. Byte-identical output for the same arguments.
    Each file is written under a temporary name and renamed into place."""
    if steps < 1 or per_step < 1 or ranks < 1:
        raise ValueError("steps, per_step and ranks must be >= 1")
    run_dir = Path(root) / run_name
    run_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    prompts = prompt_pool(N_DEMO_PROMPTS)
    hack_start = max(2, round(steps * 30 / 48))
    edges: dict[int, dict[int, str]] = {}
    for (s, i), text in EDGE_CASES.items():
        edges.setdefault(min(s, steps), {})[min(i, per_step - 1)] = text
    lines: list[list[bytes]] = [[] for _ in range(ranks)]
    for step in range(1, steps + 1):
        progress = (step - 1) / max(1, steps - 1)
        if step < hack_start:
            hack_share, hack_progress = 0.0, 0.0
        else:
            hack_progress = (step - hack_start) / max(1, steps - hack_start)
            hack_share = 0.08 + 0.27 * hack_progress
        ids = rng.choice(len(prompts), size=per_step, replace=per_step > len(prompts))
        records = _step_records(
            rng,
            step=step,
            progress=progress,
            hack_share=hack_share,
            hack_progress=hack_progress,
            prompt_ids=ids.tolist(),
            prompts=prompts,
            edges=edges.get(step, {}),
        )
        for i, rec in enumerate(records):
            lines[i % ranks].append(orjson.dumps(rec, option=_DUMP_OPTS))
    for r in range(ranks):
        path = run_dir / f"rank{r}.jsonl"
        tmp = run_dir / f".rank{r}.jsonl.tmp"
        tmp.write_bytes(b"\n".join(lines[r]) + b"\n" if lines[r] else b"")
        os.replace(tmp, path)
    return run_dir
