"""Polars (its in-memory and its streaming engine) against DuckDB on a store's scalar files: the queries the
pages run, each engine reading the same Parquet files lazily (projection and predicate pushdown), timed cold
(the first run in a fresh process per engine; the files may be in the OS page cache already) and warm, with
each process's peak resident memory.

    uv run --with duckdb python benchmarks/bench_engines.py STORE_DIR [--repeat 5]

DuckDB is not a dependency of the board: ``uv run --with duckdb`` puts it beside the project for this run.
Queries (the same answers, checked): one step's top 100 by reward (ties by sample id), every step's top 100,
the count and mean reward of the matches of a reward range over every step, per prompt the count and mean
reward, per step and reward bin the count (a heatmap). Prints one JSON object: per engine and query the
median ms (warm) and the first run's (cold), whether its answer is DuckDB's, the engine's peak RSS (MB),
with the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

EDGES = [-3 + 0.25 * i for i in range(25)]
ENGINES = ("polars", "polars-streaming", "duckdb")


def polars_queries(files: list[str], step: int, engine: str = "auto") -> dict:
    import polars as pl

    def scan():
        return pl.scan_parquet(files)

    def top(lf):
        return lf.sort(["reward", "sample_id"], descending=[True, False], nulls_last=True).head(100)

    inner = pl.lit(pl.Series(EDGES[1:-1]))
    return {
        "step_top100": lambda: (
            top(scan().filter(pl.col("step") == step).select("reward", "sample_id"))
            .collect(engine=engine)
            .get_column("sample_id")
            .to_list()
        ),
        "all_top100": lambda: (
            top(scan().select("reward", "sample_id")).collect(engine=engine).get_column("sample_id").to_list()
        ),
        "range_count_mean": lambda: (
            scan()
            .filter(pl.col("reward").is_finite() & (pl.col("reward") >= 0.5) & (pl.col("reward") < 1.5))
            .select(pl.len(), pl.col("reward").mean())
            .collect(engine=engine)
            .rows()[0]
        ),
        "per_prompt": lambda: (
            scan()
            .group_by("prompt_key")
            .agg(pl.len(), pl.col("reward").mean())
            .sort("prompt_key")
            .collect(engine=engine)
            .height
        ),
        "heatmap": lambda: (
            scan()
            .select("step", inner.search_sorted(pl.col("reward"), side="right").alias("bin"))
            .group_by("step", "bin")
            .len()
            .collect(engine=engine)
            .height
        ),
    }


def duckdb_queries(files: list[str], step: int) -> dict:
    import duckdb

    con = duckdb.connect()
    src = "read_parquet([" + ",".join(f"'{f}'" for f in files) + "])"
    cases = " + ".join(f"(reward >= {e})::INT" for e in EDGES[1:-1])
    return {
        "step_top100": lambda: [
            r[0]
            for r in con.execute(
                f"SELECT sample_id FROM {src} WHERE step = {step} "
                "ORDER BY reward DESC NULLS LAST, sample_id LIMIT 100"
            ).fetchall()
        ],
        "all_top100": lambda: [
            r[0]
            for r in con.execute(
                f"SELECT sample_id FROM {src} ORDER BY reward DESC NULLS LAST, sample_id LIMIT 100"
            ).fetchall()
        ],
        "range_count_mean": lambda: con.execute(
            f"SELECT count(*), avg(reward) FROM {src} WHERE isfinite(reward) AND reward >= 0.5 AND reward < 1.5"
        ).fetchone(),
        "per_prompt": lambda: len(
            con.execute(f"SELECT prompt_key, count(*), avg(reward) FROM {src} GROUP BY prompt_key").fetchall()
        ),
        "heatmap": lambda: len(
            con.execute(f"SELECT step, {cases} AS bin, count(*) FROM {src} GROUP BY step, bin").fetchall()
        ),
    }


def run_engine(engine: str, store: Path, repeat: int) -> dict:
    files = sorted(str(p) for p in (store / "scalars").glob("*.parquet"))
    m = json.loads((store / "manifest.json").read_text())
    import polars as pl

    steps = pl.read_parquet(store / m["steps_file"]).get_column("step").to_list()
    step = steps[len(steps) // 2]
    if engine == "duckdb":
        queries = duckdb_queries(files, step)
    else:
        queries = polars_queries(files, step, "streaming" if engine == "polars-streaming" else "in-memory")
    out = {}
    for name, q in queries.items():
        t0 = time.perf_counter()
        answer = q()
        cold = (time.perf_counter() - t0) * 1000
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            q()
            times.append((time.perf_counter() - t0) * 1000)
        out[name] = {
            "cold_ms": round(cold, 1),
            "warm_ms": round(statistics.median(times), 1),
            "answer": answer,
        }
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store", type=Path)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--engine", choices=ENGINES, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.engine:  # the child: one engine in a fresh process
        print(json.dumps(run_engine(args.engine, args.store, args.repeat), default=str))
        return 0
    result = {"store": str(args.store), "load_before": round(os.getloadavg()[0], 2)}
    for engine in ENGINES:
        cmd = [sys.executable, __file__, str(args.store), "--repeat", str(args.repeat), "--engine", engine]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        result[engine] = json.loads(done.stdout.strip().splitlines()[-1])
    ref = result["duckdb"]
    for engine in ENGINES:
        for name, got in result[engine].items():
            if name == "peak_rss_mb":
                continue
            a, b = got["answer"], ref[name]["answer"]
            if name == "range_count_mean":
                got["same_answer"] = a[0] == b[0] and abs(a[1] - b[1]) < 1e-9 * max(1.0, abs(b[1]))
            else:
                got["same_answer"] = a == b
            got["answer"] = a[:3] if isinstance(a, list) else a
    result["load_after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
