"""The inference–trainer gap's costs: what its per-response aggregates add to ingest, and what a correction
preview's token shares cost when counted from the token arrays on demand.

    uv run python benchmarks/bench_infer_gap.py WORK_DIR [--steps 16] [--per-step 512] [--tokens 135] [--rounds 5]

``aggregates``: :func:`data.metrics.response.response_list_aggregates` on a chunk of 2,048 NeMo-RL-shaped
responses with ``generation_logprobs`` (A) against the same chunk without them (B, the aggregates as they
were: the gap's arrays are empty), interleaved A B A B, ``--rounds`` counted rounds after a warm-up; the
median of the per-pair ratios. ``preview``: a run of ``--steps`` steps written as NeMo-RL writes them,
ingested, then :func:`data.infer_gap.token_counts` of masked IS at C = 2 over every step (cold, the parts
read from disk each time): ms and ms per million positions, from which ``GAP_PREVIEW_TOKENS`` is set.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from data.ingest import ingest_run  # noqa: E402
from data.metrics.response import response_list_aggregates  # noqa: E402
from data.store import open_store  # noqa: E402

PADS = ("<pad>", "<|endoftext|>")


def _arrays(rng: random.Random, n: int) -> tuple[list[float], list[float]]:
    prev = [round(rng.uniform(-4, -0.01), 4) for _ in range(n)]
    gen = [p - (rng.gauss(0, 0.1) + (rng.choice([-1.5, 1.5]) if rng.random() < 0.03 else 0.0)) for p in prev]
    return prev, gen


def chunk(rows: int, tokens: int, seed: int = 0) -> pl.DataFrame:
    """A conformed chunk: token strings, the trainer's log-probs and the inference engine's."""
    rng = random.Random(seed)
    cols: dict[str, list] = {"response_tokens": [], "logprobs": [], "generation_logprobs": []}
    for _ in range(rows):
        n = rng.randrange(tokens // 2, tokens * 3 // 2)
        prev, gen = _arrays(rng, n)
        cols["response_tokens"].append([f"t{i % 50}" for i in range(n)])
        cols["logprobs"].append(prev)
        cols["generation_logprobs"].append(gen)
    lists = {"logprobs": pl.List(pl.Float32), "generation_logprobs": pl.List(pl.Float32)}
    return pl.DataFrame(cols, schema_overrides=lists)


def write_run(run: Path, steps: int, per_step: int, tokens: int) -> int:
    """``train_data_step{N}.jsonl`` as NeMo-RL logs a GRPO step; returns the generated positions."""
    rng = random.Random(1)
    run.mkdir(parents=True, exist_ok=True)
    total = 0
    for step in range(1, steps + 1):
        with (run / f"train_data_step{step}.jsonl").open("w") as f:
            for i in range(per_step):
                n = rng.randrange(tokens // 2, tokens * 3 // 2)
                prev, gen = _arrays(rng, n)
                total += n
                line = {
                    "content": [["What is 2+2?", "It is 4.", "Environment: correct"]],
                    "rewards": [1.0],
                    "input_lengths": [n + 4],
                    "token_ids": [list(range(4 + n))],
                    "token_loss_mask": [[0] * 4 + [1] * n],
                    "generation_logprobs": [[0.0] * 4 + gen],
                    "prev_logprobs": [[0.0] * 4 + prev],
                    "idx": i,
                }
                f.write(json.dumps(line) + "\n")
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("work", type=Path)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--per-step", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=135)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    a = chunk(2048, args.tokens)
    b = a.drop("generation_logprobs")
    times: dict[str, list[float]] = {"A": [], "B": []}
    for r in range(args.rounds + 1):
        for name, df in (("A", a), ("B", b)):
            t0 = time.perf_counter()
            response_list_aggregates(df, PADS)
            if r:  # the first round warms up
                times[name].append(time.perf_counter() - t0)
    ratios = [x / y for x, y in zip(times["A"], times["B"], strict=True)]

    run = args.work / "root" / "nemo"
    positions = write_run(run, args.steps, args.per_step, args.tokens)
    t0 = time.perf_counter()
    store = open_store(ingest_run(run, args.work / "cache", PADS).store_dir)
    ingest_s = time.perf_counter() - t0
    from data.infer_gap import token_counts

    steps = store.steps().get_column("step").to_list()
    counts = []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        got = token_counts(store, steps, "mis", 2.0)
        counts.append(time.perf_counter() - t0)
    assert int(got.get_column("tokens").sum()) == positions
    ms = statistics.median(counts) * 1000
    print(
        json.dumps(
            {
                "aggregates_ms_with_gap": round(statistics.median(times["A"]) * 1000, 1),
                "aggregates_ms_without": round(statistics.median(times["B"]) * 1000, 1),
                "aggregates_ratio_median": round(statistics.median(ratios), 3),
                "aggregates_ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
                "run": {"steps": args.steps, "per_step": args.per_step, "positions": positions},
                "ingest_s": round(ingest_s, 2),
                "token_counts_ms": round(ms, 1),
                "token_counts_ms_per_million": round(ms / positions * 1e6, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
