"""Fast synthetic rollout generator for benchmarks.

    python benchmarks/generate.py OUT_DIR --steps 500 --per-step 512 --tokens 200 --ranks 4 \
        [--recurring-prompts 2048] [--seed 0] [--rare-token Ġzyzzyva --rare-share 0.005] [--zst]

writes ``OUT_DIR/rank{r}.jsonl`` (``.jsonl.zst`` with ``--zst``, for a run larger than the disk's room) in the demo's format (every token-level field, TRL's extra trailing
``<pad>``, prompts drawn from a pool so they recur across steps; without the demo's per-token ``advantages``,
so that figures stay comparable with earlier runs) and prints one JSON line:
``{"files": [...], "bytes": ..., "lines": ..., "seconds": ..., "mb_per_s": ...}``.

The numbers of a step are drawn with numpy for the whole step at once (rng seeded by ``(seed, step)``, so
``append_step`` of step ``s`` writes exactly what ``generate`` writes for step ``s``), serialised with orjson
straight from numpy arrays, and written one step at a time, so memory stays small at any run size. The
default scale is about 2.5 GB.

``--rare-token T --rare-share p`` plants a token in a share ``p`` of each step's responses (so in every
file): one content token of each such response, at a random place, becomes ``T`` (its text too). Which
responses and where are drawn from their own generator (seeded by ``(seed, step, 1)``), so every other number
of the run is exactly what it is without the option: the token filter's benchmark of a token present in
<= 1 % of responses (the generated vocabulary has none rarer than ~5 %).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from data.demo import EOS, KL_COEF, PAD, detokenize, prompt_pool, round_sig, token_vocabulary  # noqa: E402

__all__ = ["append_step", "generate", "main"]

_OPTS = orjson.OPT_SERIALIZE_NUMPY
_REF_RESPONSE_TOKENS = 24


class _Vocab:
    """Token strings and their text, as numpy object arrays for fancy indexing."""

    def __init__(self) -> None:
        tokens = token_vocabulary()
        self.tokens = np.array(tokens, dtype=object)
        self.text = np.array([detokenize([t]) for t in tokens], dtype=object)
        self.size = len(tokens)


_VOCAB: _Vocab | None = None
_POOLS: dict[int, list[str]] = {}


def _vocab() -> _Vocab:
    global _VOCAB
    if _VOCAB is None:
        _VOCAB = _Vocab()
    return _VOCAB


def _pool(n: int) -> list[str]:
    if n not in _POOLS:
        _POOLS[n] = prompt_pool(n)
    return _POOLS[n]


def _plant(tok_rows: list, text_rows: list, n_content, step: int, seed: int, rare: tuple[str, float] | None):
    """Put the rare token ``rare = (token, share)`` in place of one content token of a share of the rows
    (drawn from their own generator, so that nothing else of the step changes)."""
    if rare is None:
        return
    token, share = rare
    rng = np.random.default_rng([seed, step, 1])
    rows = np.flatnonzero(rng.random(len(tok_rows)) < share)
    at = (rng.random(len(rows)) * n_content[rows]).astype(np.int64)
    text = detokenize([token])
    for i, j in zip(rows.tolist(), at.tolist(), strict=True):
        tok_rows[i][j] = token
        text_rows[i][j] = text


def _step_lines(
    step: int,
    per_step: int,
    tokens: int,
    ranks: int,
    seed: int,
    recurring_prompts: int,
    rare: tuple[str, float] | None = None,
):
    """The JSON lines of one step, per rank (record ``i`` goes to rank ``i % ranks``)."""
    rng = np.random.default_rng([seed, step])
    vocab = _vocab()
    pool = _pool(recurring_prompts)
    n = per_step
    progress = 1.0 - np.exp(-step / 200.0)

    # content length (without EOS/pad); 5 % are cut at the limit: no EOS, all arrays the same length
    limit = max(2, (3 * tokens) // 2)
    n_content = np.clip(np.rint(rng.normal(tokens - 2, 0.2 * tokens, n)), 1, limit).astype(np.int64)
    cut = rng.random(n) < 0.05
    n_content[cut] = limit
    n_lp = np.where(cut, n_content, n_content + 1)  # + EOS
    n_tok = np.where(cut, n_content, n_content + 2)  # + EOS + trailing <pad> (TRL)
    width = int(n_tok.max())

    ids = (vocab.size * rng.random((n, width)) ** 2).astype(np.int64)  # skewed: some tokens are frequent
    tok_rows = vocab.tokens[ids].tolist()
    text_rows = vocab.text[ids].tolist()
    _plant(tok_rows, text_rows, n_content, step, seed, rare)

    ref_lp = rng.standard_exponential((n, width))
    ref_lp *= -1.1
    np.maximum(ref_lp, -14.0, out=ref_lp)
    lp = ref_lp * np.exp(-0.4 * progress * rng.random((n, width)))
    cols = np.arange(width)
    in_lp = cols[None, :] < n_lp[:, None]
    token_rewards = np.where(in_lp, -KL_COEF * (lp - ref_lp), 0.0)
    reward = rng.normal(0.2 + 1.4 * progress, 0.7 - 0.4 * progress, n)
    rows = np.arange(n)
    token_rewards[rows, n_tok - 1] += reward
    returns = np.cumsum(token_rewards[:, ::-1], axis=1)[:, ::-1]
    fit = 1.0 - np.exp(-step / 50.0)
    values = fit * returns + rng.normal(0.0, 0.05 + 0.3 * (1.0 - fit), (n, width))

    ref_lp = round_sig(ref_lp)
    lp = round_sig(lp)
    token_rewards = round_sig(token_rewards)
    values = round_sig(values)
    advantage = round_sig(returns[:, 0] - values[:, 0]).tolist()
    reward = round_sig(reward).tolist()
    ref_reward = round_sig(rng.normal(0.3, 0.6, n)).tolist()
    prompt_ids = rng.integers(0, recurring_prompts, n).tolist()
    ref_ids = (vocab.size * rng.random((n, _REF_RESPONSE_TOKENS)) ** 2).astype(np.int64)
    ref_text = vocab.text[ref_ids].tolist()

    out: list[list[bytes]] = [[] for _ in range(ranks)]
    tail_text = EOS + PAD
    for i in range(n):
        c = int(n_content[i])
        if cut[i]:
            toks = tok_rows[i][:c]
            response = "".join(text_rows[i][:c])
        else:
            toks = tok_rows[i][:c]
            toks.append(EOS)
            toks.append(PAD)
            response = "".join(text_rows[i][:c]) + tail_text
        m, k = int(n_lp[i]), int(n_tok[i])
        rec = {
            "prompt": pool[prompt_ids[i]],
            "response": response,
            "response_tokens": toks,
            "logprobs": lp[i, :m],
            "ref_logprobs": ref_lp[i, :m],
            "values": values[i, :k],
            "token_rewards": token_rewards[i, :k],
            "reward": reward[i],
            "step": step,
            "prompt_id": prompt_ids[i],
            "advantage": advantage[i],
            "ref_response": "".join(ref_text[i]) + EOS,
            "ref_reward": ref_reward[i],
        }
        out[i % ranks].append(orjson.dumps(rec, option=_OPTS))
    return out


def _write_step(
    handles, step: int, per_step: int, tokens: int, seed: int, recurring_prompts: int, rare=None
) -> int:
    per_rank = _step_lines(step, per_step, tokens, len(handles), seed, recurring_prompts, rare)
    for fh, lines in zip(handles, per_rank, strict=True):
        if lines:
            fh.write(b"\n".join(lines))
            fh.write(b"\n")
    return per_step


def _rank_paths(out_dir: Path, ranks: int, zst: bool = False) -> list[Path]:
    return [Path(out_dir) / f"rank{r}.jsonl{'.zst' if zst else ''}" for r in range(ranks)]


def _open(path: Path, zst: bool):
    if not zst:
        return open(path, "wb", buffering=4 << 20)  # noqa: SIM115
    import zstandard

    return zstandard.ZstdCompressor(level=3).stream_writer(open(path, "wb"), closefd=True)  # noqa: SIM115


def generate(
    out_dir: Path | str,
    steps: int = 500,
    per_step: int = 512,
    tokens: int = 200,
    ranks: int = 4,
    seed: int = 0,
    recurring_prompts: int = 2048,
    rare: tuple[str, float] | None = None,
    zst: bool = False,
) -> dict:
    """Write ``out_dir/rank{r}.jsonl`` for steps ``1..steps`` (existing files are replaced; zstd-compressed
    ``.jsonl.zst`` with ``zst``; ``rare``: ``(token, share)`` planted, see the module docstring) and return
    ``{"files", "bytes", "lines", "seconds", "mb_per_s"}``."""
    if min(steps, per_step, tokens, ranks, recurring_prompts) < 1 or seed < 0:
        raise ValueError("steps, per_step, tokens, ranks, recurring_prompts must be >= 1 and seed >= 0")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = _rank_paths(out_dir, ranks, zst)
    t0 = time.perf_counter()
    lines = 0
    handles = [_open(p, zst) for p in paths]
    try:
        for step in range(1, steps + 1):
            lines += _write_step(handles, step, per_step, tokens, seed, recurring_prompts, rare)
    finally:
        for fh in handles:
            fh.close()
    return _report(paths, lines, time.perf_counter() - t0)


def append_step(
    out_dir: Path | str,
    step: int,
    per_step: int = 512,
    tokens: int = 200,
    ranks: int = 4,
    seed: int = 0,
    recurring_prompts: int = 2048,
) -> dict:
    """Append the records of one more ``step`` to ``out_dir/rank{r}.jsonl`` (files are created if missing)
    and return the same report as ``generate`` (bytes and lines of this step only)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = _rank_paths(out_dir, ranks)
    before = [p.stat().st_size if p.exists() else 0 for p in paths]
    t0 = time.perf_counter()
    handles = [open(p, "ab") for p in paths]  # noqa: SIM115
    try:
        lines = _write_step(handles, step, per_step, tokens, seed, recurring_prompts)
    finally:
        for fh in handles:
            fh.close()
    report = _report(paths, lines, time.perf_counter() - t0)
    report["bytes"] -= sum(before)
    report["mb_per_s"] = round(report["bytes"] / 1e6 / max(report["seconds"], 1e-9), 1)
    return report


def _report(paths: list[Path], lines: int, seconds: float) -> dict:
    size = sum(p.stat().st_size for p in paths)
    return {
        "files": [str(p) for p in paths],
        "bytes": size,
        "lines": lines,
        "seconds": round(seconds, 3),
        "mb_per_s": round(size / 1e6 / max(seconds, 1e-9), 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", type=Path, help="run folder to write rank{r}.jsonl into")
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--per-step", type=int, default=512, help="records per step (over all ranks)")
    ap.add_argument("--tokens", type=int, default=200, help="mean response length in tokens")
    ap.add_argument("--ranks", type=int, default=4, help="number of rank files")
    ap.add_argument("--recurring-prompts", type=int, default=2048, help="size of the prompt pool")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--append-step", type=int, default=None, metavar="STEP",
                    help="append this one step to existing files instead of writing the run")  # fmt: skip
    ap.add_argument("--rare-token", default=None, help="a token string to plant (see the docstring)")
    ap.add_argument(
        "--rare-share", type=float, default=0.005, help="share of each step's responses holding it"
    )
    ap.add_argument("--zst", action="store_true", help="write rank{r}.jsonl.zst (not with --append-step)")
    args = ap.parse_args(argv)
    rare = (args.rare_token, args.rare_share) if args.rare_token else None
    common = dict(per_step=args.per_step, tokens=args.tokens, ranks=args.ranks, seed=args.seed,
                  recurring_prompts=args.recurring_prompts)  # fmt: skip
    if args.append_step is not None:
        report = append_step(args.out_dir, args.append_step, **common)
    else:
        report = generate(args.out_dir, steps=args.steps, **common, rare=rare, zst=args.zst)
    sys.stdout.write(orjson.dumps(report).decode() + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
