"""``app.py ingest --ray`` on a local Ray cluster against a local ``app.py ingest``; prints one JSON object.

    uv run python benchmarks/bench_ray.py RUN_DIR --work DIR [--workers 2] [--rounds 2]

Starts a cluster in this process (a head without CPUs and ``--workers`` worker nodes of one CPU each, as
the tests do; its start-up is timed apart), then ingests RUN_DIR from scratch ``--rounds`` times each way,
alternating (local, Ray, local, Ray, …), each in a child process running the command line. For each
ingest: wall seconds, the driver's peak RSS (a local ingest is that one process), and for Ray the peak of
the summed RSS of every process this benchmark started (the driver, the workers, the cluster's GCS and
raylets) above what they held before the ingest, sampled every 0.1 s; the idle cluster's RSS is given
beside it. The machine's load average is printed with the figures
(2 cores shared with other work: compare only figures of one run). Generate the run first:

    uv run python benchmarks/generate.py /tmp/bench/ray-run --steps 80 --per-step 512 --tokens 135 --ranks 4
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]


def _tree_rss(root: psutil.Process) -> int:
    total = 0
    for p in [root, *root.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def _ingest(run: Path, cache: Path, ray_address: str | None) -> dict:
    """One ingest from scratch in a child process: wall seconds, the driver's peak RSS, and the peak of what
    every process this benchmark started holds beyond what they held before (for Ray: the driver, its
    workers and what the cluster's own processes grew by)."""
    shutil.rmtree(cache, ignore_errors=True)
    cmd = [sys.executable, str(REPO / "app.py"), "ingest", str(run), "--cache-dir", str(cache), "--json"]
    if ray_address:
        cmd += ["--ray-address", ray_address]
    me = psutil.Process()
    base = _tree_rss(me)
    peak = {"driver": 0, "tree": base}
    done = threading.Event()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLBOARD_", "RAY_ADDRESS"))}
    t0 = time.perf_counter()
    child = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    driver = psutil.Process(child.pid)

    def sample() -> None:
        while not done.is_set():
            try:
                peak["driver"] = max(peak["driver"], driver.memory_info().rss)
            except psutil.Error:
                pass
            peak["tree"] = max(peak["tree"], _tree_rss(me))
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = child.communicate()
    wall = time.perf_counter() - t0
    done.set()
    sampler.join()
    if child.returncode != 0:
        raise SystemExit(f"ingest failed ({child.returncode}): {err.decode()[-2000:]}")
    return {
        "seconds": round(wall, 1),
        "driver_peak_mb": round(peak["driver"] / 1e6),
        "added_peak_mb": round((peak["tree"] - base) / 1e6),
        "runs": json.loads(out)["runs"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    from ray.cluster_utils import Cluster

    size = sum(p.stat().st_size for p in args.run.iterdir() if p.is_file())
    me = psutil.Process()
    before = _tree_rss(me)
    t0 = time.perf_counter()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        for _ in range(args.workers):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        start = time.perf_counter() - t0
        time.sleep(2)
        idle = _tree_rss(me) - before
        rounds = {"local": [], "ray": []}
        for _ in range(args.rounds):
            rounds["local"].append(_ingest(args.run, args.work / "local-cache", None))
            rounds["ray"].append(_ingest(args.run, args.work / "ray-cache", cluster.address))
        assert rounds["local"][0]["runs"] == rounds["ray"][0]["runs"], "the two ingests hold different runs"
    finally:
        cluster.shutdown()

    def median(kind: str, key: str) -> float:
        return statistics.median(r[key] for r in rounds[kind])

    print(
        json.dumps(
            {
                "run_mb": round(size / 1e6),
                "responses": rounds["local"][0]["runs"][0]["samples"],
                "workers": args.workers,
                "cluster_start_seconds": round(start, 1),
                "cluster_idle_rss_mb": round(idle / 1e6),
                "local_seconds": median("local", "seconds"),
                "ray_seconds": median("ray", "seconds"),
                "ray_over_local": round(median("ray", "seconds") / median("local", "seconds"), 2),
                "local_peak_mb": median("local", "driver_peak_mb"),
                "ray_driver_peak_mb": median("ray", "driver_peak_mb"),
                "ray_added_peak_mb": median("ray", "added_peak_mb"),
                "rounds": {k: [{x: r[x] for x in r if x != "runs"} for r in v] for k, v in rounds.items()},
                "load_average": os.getloadavg(),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
