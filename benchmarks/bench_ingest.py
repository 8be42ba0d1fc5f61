"""Ingest and query benchmark of the store on a generated run; prints one JSON object.

    uv run python benchmarks/bench_ingest.py RUN_DIR [--cache-dir DIR] [--fresh]

Measures, in one run: ingest MB/s, CPU seconds and peak RSS (in a child process), a plain single-thread
orjson loop's MB/s over the same files, the hypervisor's steal time during the ingest, store size,
re-opening an ingested run,
appending one step and re-ingesting, and the latency of the store queries the pages use (per-step
histogram, top-50 of a step, one response's token arrays, run-level curves). Generate a run first with
benchmarks/generate.py.

The orjson loop is the reference, and this machine's speed moves by a third within minutes (a shared VM),
so a lone ingest against a lone loop gives a ratio that moves with it. With ``--fresh``, ``--rounds N``
(default 3) ingests from scratch N times with the loop run before the first and after each: each round's
ratio is its ingest MB/s over the mean of the two loops around it, and ``ratio_to_orjson`` is the median
of the rounds (every round is printed). Peak RSS is the highest of the rounds.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _files(run: Path) -> list[Path]:
    return sorted(run.glob("*.jsonl"))


def orjson_loop(run: Path) -> dict:
    import orjson

    t0 = time.perf_counter()
    n = size = 0
    for f in _files(run):
        with open(f, "rb") as fh:
            for line in fh:
                orjson.loads(line)
                n += 1
                size += len(line)
    dt = time.perf_counter() - t0
    return {"lines": n, "seconds": round(dt, 2), "mb_per_s": round(size / 1e6 / dt, 1)}


def _cpu_ticks() -> list[int] | None:
    """The machine's CPU time counters (``/proc/stat``'s cpu line), or None where there is none."""
    try:
        with open("/proc/stat") as f:
            return [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None


def _steal_percent(a: list[int] | None, b: list[int] | None) -> float | None:
    if not a or not b or len(a) < 8:
        return None
    delta = [y - x for x, y in zip(a, b, strict=False)]
    return round(100 * delta[7] / max(sum(delta[:8]), 1), 1)


def child_ingest(run: Path, cache: Path) -> dict:
    """Ingest in a child process so that its peak RSS is the ingest's alone."""
    code = (
        "import json,sys,time,resource;sys.path.insert(0,%r);from pathlib import Path;"
        "from data.ingest import ingest_run;from data.config import DEFAULT_PAD_TOKENS;"
        "r=ingest_run(Path(%r),Path(%r),DEFAULT_PAD_TOKENS);"
        "print(json.dumps({'seconds':r.seconds,'bytes':r.bytes_read,'samples':r.samples,'steps':r.steps,"
        "'maxrss_kb':resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,"
        "'cpu':resource.getrusage(resource.RUSAGE_SELF).ru_utime+resource.getrusage(resource.RUSAGE_SELF).ru_stime}))"
    ) % (str(REPO), str(run), str(cache))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def timed(fn, repeat: int = 7) -> dict:
    """Cold (first call) and warm (median of the next calls) latency in ms."""
    t0 = time.perf_counter()
    fn()
    cold = (time.perf_counter() - t0) * 1000
    warm = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        warm.append((time.perf_counter() - t0) * 1000)
    return {"cold_ms": round(cold, 1), "warm_ms": round(statistics.median(warm), 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("run", type=Path)
    ap.add_argument("--cache-dir", type=Path, default=Path("/tmp/bench/cache"))
    ap.add_argument("--fresh", action="store_true", help="delete the cache first (measure a full ingest)")
    ap.add_argument(
        "--rounds", type=int, default=3, help="with --fresh: full ingests, each between two orjson loops"
    )
    ap.add_argument("--skip-append", action="store_true")
    ap.add_argument(
        "--per-step", type=int, default=512, help="as given to generate.py (for the appended step)"
    )
    ap.add_argument("--tokens", type=int, default=135)
    ap.add_argument("--ranks", type=int, default=4)
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")

    import polars as pl

    from data.config import DEFAULT_PAD_TOKENS
    from data.queries import histogram, histogram_edges, sort_rows
    from data.store import open_store, store_dir_for

    run, cache = args.run, args.cache_dir
    out: dict = {"run": str(run), "bytes": sum(f.stat().st_size for f in _files(run))}
    loops = [orjson_loop(run)]
    rounds = []
    for _ in range(args.rounds if args.fresh else 1):
        if args.fresh:
            shutil.rmtree(cache, ignore_errors=True)
        steal0 = _cpu_ticks()
        ing = child_ingest(run, cache)
        steal1 = _cpu_ticks()
        loops.append(orjson_loop(run))
        mb_s = ing["bytes"] / 1e6 / max(ing["seconds"], 1e-9)
        around = (loops[-2]["mb_per_s"] + loops[-1]["mb_per_s"]) / 2
        rounds.append(
            {
                "seconds": round(ing["seconds"], 2),
                "mb_per_s": round(mb_s, 1),
                "orjson_mb_per_s_around": round(around, 1),
                "ratio_to_orjson": round(mb_s / around, 2) if ing["bytes"] else None,
                "peak_rss_mb": round(ing["maxrss_kb"] / 1024, 1),
                # CPU seconds of the whole child (imports included) and the share of the machine's CPU
                # time the hypervisor gave to others meanwhile.
                "cpu_seconds": round(ing["cpu"], 1),
                "steal_percent": _steal_percent(steal0, steal1),
            }
        )
    ratios = [r["ratio_to_orjson"] for r in rounds if r["ratio_to_orjson"] is not None]
    out["orjson_loops"] = loops
    out["ingest"] = {
        "mb_per_s": statistics.median(r["mb_per_s"] for r in rounds),
        "ratio_to_orjson": statistics.median(ratios) if ratios else None,
        "peak_rss_mb": max(r["peak_rss_mb"] for r in rounds),
        "samples": ing["samples"],
        "steps": ing["steps"],
        "rounds": rounds,
    }
    store_dir = store_dir_for(cache, run, DEFAULT_PAD_TOKENS)
    out["store_mb"] = round(sum(p.stat().st_size for p in store_dir.rglob("*") if p.is_file()) / 1e6, 1)

    # Re-opening an ingested run in a fresh process: check the files (nothing new), open the store and read
    # the run-level curves; then, separately, load the per-response scalars that histograms and tables use.
    code = (
        "import sys,time,json;sys.path.insert(0,%r);from pathlib import Path;"
        "from data.ingest import ingest_run;from data.store import open_store;from data.config import DEFAULT_PAD_TOKENS;"
        "t0=time.perf_counter();r=ingest_run(Path(%r),Path(%r),DEFAULT_PAD_TOKENS);s=open_store(r.store_dir);s.steps();"
        "t1=time.perf_counter();s.scalars();t2=time.perf_counter();"
        "print(json.dumps({'reopen':t1-t0,'scalars':t2-t1,'new_rows':r.new_rows}))"
    ) % (str(REPO), str(run), str(cache))
    t0 = time.perf_counter()
    reopen = json.loads(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    )
    out["reopen"] = {
        "seconds": round(reopen["reopen"], 3),
        "load_scalars_seconds": round(reopen["scalars"], 2),
        "seconds_with_interpreter_start": round(time.perf_counter() - t0, 2),
        "new_rows": reopen["new_rows"],
    }

    store = open_store(store_dir)
    sc = store.scalars()
    steps = store.steps()
    last_step = int(steps.get_column("step").max())
    lo, hi = sc.select(pl.col("reward").min().alias("lo"), pl.col("reward").max().alias("hi")).row(0)
    edges = histogram_edges(lo, hi)
    mid = int(steps.get_column("step").to_list()[len(steps) // 2])
    ids = sc.filter(pl.col("step") == mid).get_column("sample_id").to_list()[:20]
    q = {}
    q["step_histogram"] = timed(
        lambda: histogram(store.scan(["reward"], step=mid), "reward", edges).collect()
    )
    for col in ("reward", "kl_mean", "response_length"):
        q[f"top50_{col}"] = timed(
            lambda col=col: sort_rows(store.scan([col, "sample_id"], step=mid), col, True).head(50).collect()
        )
    it = iter(ids * 10)
    q["one_response_token_arrays"] = timed(lambda: open_store(store_dir).sample(next(it)))
    q["run_curves"] = timed(
        lambda: (
            open_store(store_dir)
            .steps()
            .select(
                "step", "reward_mean", "reward_p25", "reward_p75", "kl_token_mean", "response_length_mean"
            )
        )
    )
    out["queries"] = q

    if not args.skip_append:
        from benchmarks.generate import append_step

        app = append_step(run, last_step + 1, per_step=args.per_step, tokens=args.tokens, ranks=args.ranks)
        t0 = time.perf_counter()
        ing2 = child_ingest(run, cache)
        out["append_one_step"] = {
            "bytes": app.get("bytes"),
            "reingest_seconds_in_process": round(ing2["seconds"], 2),
            "seconds_with_interpreter_start": round(time.perf_counter() - t0, 2),
            "steps_after": ing2["steps"],
        }
    out["maxrss_this_process_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
