"""Stores on object storage: the default benchmark run (256,000 responses) ingested from and stored on an S3
server (moto's, on loopback, in its own process), against the same run on local disk.

    uv run python benchmarks/bench_shared.py --work /tmp/bench-shared [--steps 500] [--per-step 512]
        [--tokens 60] [--rounds 3] [--keep]

It measures three ways of serving the same run: all local (``--root DIR --cache-dir DIR``), the root on the
bucket and the store local (``--root s3://rollouts/root --cache-dir DIR``: what was there before the stores
could be on object storage) and both on the bucket (``--root s3://rollouts/root --cache-dir
s3://stores/bench``), so that what the store on the bucket costs is told from what the root there costs:

- ingest (``app.py ingest`` in a child process under ``/usr/bin/time -v``): wall seconds, CPU seconds and
  peak RSS; what the store on the bucket holds (objects, bytes);
- a replica's first mirror: ``app.py ingest`` of the same root with a fresh ``RLBOARD_WORK_DIR`` (it
  downloads the store and reads nothing of the run): wall seconds and bytes downloaded;
- every page's server time, as ``bench_scale.py`` takes it: the callbacks headless Chromium sends as it
  loads each page (recorded once, from the local server) replayed against gunicorn (1 worker of 4 threads)
  with an empty results cache (cold), then again (warm); the median of ``--rounds`` fresh servers. The
  bucket's server is a replica: its working copy is the mirror made above, and every poll
  (``RLBOARD_REFRESH_SECONDS``) lists the run on the bucket and the store's commits;
- ``/export?run=run&step=all&format=csv``: total seconds.

The three servers are measured one after the other within each round (the machine's speed drifts). Prints
one JSON object and, on stderr, a Markdown table with the ratios to the local one.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.bench_scale import (  # noqa: E402
    REF,
    RUN,
    Server,
    clear_server_caches,
    export,
    free_port,
    load,
    make_run,
    median_pages,
    page_urls,
    replay,
    targets,
)

BUCKET, STORES = "rollouts", "stores"


class Moto:
    """moto's S3 server (``moto_server``) in a process of its own, with the two buckets."""

    def __init__(self, log: Path):
        self.port = free_port()
        self.log = log
        self.env = {
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{self.port}",
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_REGION": "us-east-1",
        }

    def __enter__(self) -> Moto:
        import boto3

        exe = Path(sys.executable).with_name("moto_server")
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [str(exe), "-H", "127.0.0.1", "-p", str(self.port)], stdout=out, stderr=subprocess.STDOUT
            )
        self.client = boto3.client(
            "s3",
            endpoint_url=self.env["AWS_ENDPOINT_URL"],
            aws_access_key_id="bench",
            aws_secret_access_key="bench",
            region_name="us-east-1",
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                self.client.list_buckets()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        for b in (BUCKET, STORES):
            self.client.create_bucket(Bucket=b)
        return self

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)

    def upload(self, folder: Path, prefix: str) -> None:
        for f in sorted(folder.rglob("*")):
            if f.is_file() and not f.name.startswith("."):
                self.client.upload_file(str(f), BUCKET, f"{prefix}/{f.relative_to(folder).as_posix()}")

    def usage(self, bucket: str, prefix: str = "") -> dict:
        n = size = 0
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for o in page.get("Contents", []):
                n += 1
                size += o["Size"]
        return {"objects": n, "mb": round(size / 1e6, 1)}


def timed(args: list[str], env: dict) -> dict:
    """``app.py ARGS`` under ``/usr/bin/time -v``: wall and CPU seconds, peak RSS."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("RLBOARD_", "AWS_"))}
    t0 = time.perf_counter()
    before = load()
    out = subprocess.run(
        ["/usr/bin/time", "-v", sys.executable, str(REPO / "app.py"), *args],
        cwd=REPO, env={**clean, **env}, capture_output=True, text=True,
    )  # fmt: skip
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"app.py {' '.join(args)} failed:\n{out.stderr[-3000:]}")

    def field(name: str) -> float:
        m = re.search(rf"{name}: ([\d.]+)", out.stderr)
        return float(m.group(1)) if m else float("nan")

    return {
        "seconds": round(wall, 1),
        "cpu_seconds": round(field(r"User time \(seconds\)") + field(r"System time \(seconds\)"), 1),
        "peak_rss_mb": round(field(r"Maximum resident set size \(kbytes\)") / 1024),
        "load": [before, load()],
    }


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main(argv: list[str] | None = None) -> int:
    from benchmarks.load_test import capture
    from data.config import load_settings

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--per-step", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--export-timeout", type=float, default=600.0)
    ap.add_argument("--keep", action="store_true", help="keep the generated runs")
    args = ap.parse_args(argv)
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    root = work / "root"
    gen = make_run(root / RUN, args.steps, args.per_step, args.tokens)
    make_run(root / REF, 20, args.per_step, args.tokens)
    for d in ("cache", "cache-s3root", "w-writer", "w-replica"):
        shutil.rmtree(work / d, ignore_errors=True)
    res: dict = {"generated_gb": round(gen["bytes"] / 1e9, 2), "cpus": os.cpu_count()}
    with Moto(work / "moto.log") as s3:
        t0 = time.perf_counter()
        s3.upload(root, "root")
        res["upload_s"] = round(time.perf_counter() - t0, 1)
        url = f"s3://{STORES}/bench"
        writer = {**s3.env, "RLBOARD_WORK_DIR": str(work / "w-writer")}
        replica = {**s3.env, "RLBOARD_WORK_DIR": str(work / "w-replica")}
        # 1. ingest, local then on the bucket
        res["ingest_local"] = timed(["ingest", str(root / RUN), "--cache-dir", str(work / "cache")], {})
        timed(["ingest", str(root / REF), "--cache-dir", str(work / "cache")], {})
        s3root_cache = str(work / "cache-s3root")
        res["ingest_s3root"] = timed(
            ["ingest", f"s3://{BUCKET}/root/{RUN}", "--cache-dir", s3root_cache], s3.env
        )
        timed(["ingest", f"s3://{BUCKET}/root/{REF}", "--cache-dir", s3root_cache], s3.env)
        res["ingest_s3"] = timed(["ingest", f"s3://{BUCKET}/root/{RUN}", "--cache-dir", url], writer)
        timed(["ingest", f"s3://{BUCKET}/root/{REF}", "--cache-dir", url], writer)
        res["bucket"] = s3.usage(STORES)
        # 2. a replica's first mirror (downloads the stores, reads nothing)
        res["replica_mirror"] = timed(["ingest", f"s3://{BUCKET}/root", "--cache-dir", url], replica)
        copy = load_settings(environ=replica, cache_dir=url).cache_dir
        res["replica_copy_mb"] = round(du(copy) / 1e6, 1)
        local_store = next(d for d in (work / "cache").glob(f"{RUN}-*") if d.is_dir())
        res["local_store_mb"] = round(du(local_store) / 1e6, 1)
        t = targets(local_store)
        res["responses"] = t["responses"]
        urls = page_urls(t)

        def local_server() -> Server:
            return Server(REPO, root, work / "cache", work / "gunicorn-local.log")

        def s3root_server() -> Server:
            srv = Server(REPO, root, work / "cache-s3root", work / "gunicorn-s3root.log")
            srv.env.update(s3.env, RLBOARD_ROOT=f"s3://{BUCKET}/root")
            return srv

        def s3_server() -> Server:
            srv = Server(REPO, root, work / "cache", work / "gunicorn-s3.log")
            srv.env.update(s3.env, RLBOARD_ROOT=f"s3://{BUCKET}/root", RLBOARD_CACHE_DIR=url)
            srv.env["RLBOARD_WORK_DIR"] = replica["RLBOARD_WORK_DIR"]
            return srv

        # 3. the callbacks each page sends (from the local server), then rounds of both servers
        clear_server_caches(work / "cache")
        with local_server() as srv:
            capture(srv.base, urls, settle=3.0)
            bodies = capture(srv.base, urls, settle=3.0)
        res["callbacks_recorded"] = {p: len(b) for p, b in bodies.items()}
        rounds: dict[str, list] = {"local": [], "s3root": [], "s3": []}
        servers = (
            ("local", local_server, work / "cache"),
            ("s3root", s3root_server, work / "cache-s3root"),
            ("s3", s3_server, copy),
        )
        for i in range(args.rounds):
            for name, make, cache in servers:
                clear_server_caches(cache)
                with make() as srv:
                    cold, warm = replay(srv.base, bodies, srv), replay(srv.base, bodies, srv)
                    out = {"cold": cold, "warm": warm}
                    if i == args.rounds - 1:
                        out["export"] = export(srv.base, args.export_timeout)
                    rounds[name].append(out)
                print(f"round {i + 1} {name} done (load {load()})", file=sys.stderr, flush=True)
        for name, rs in rounds.items():
            res[name] = {
                "cold": median_pages([r["cold"] for r in rs]),
                "warm": median_pages([r["warm"] for r in rs]),
                "export": rs[-1]["export"],
            }
        res["rounds"] = rounds
        res["bucket_after"] = s3.usage(STORES)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(res))
    print(table(res), file=sys.stderr)
    return 0


def table(res: dict) -> str:
    """Each figure local, root on the bucket, root and store on the bucket; the last two over the first."""

    def row(key: str, vals: list) -> str:
        a = vals[0]
        ratios = ["–" if not a or v is None else f"{v / a:.2f}" for v in vals[1:]]
        return f"| {key} | " + " | ".join(f"{v:,}" for v in vals) + " | " + " | ".join(ratios) + " |"

    names = ("local", "s3root", "s3")
    lines = [
        f"| {res['responses']:,} responses | local | root on S3 | root + store on S3 | ratio root | ratio both |",
        "|---|---|---|---|---|---|",
    ]
    for key, label in (
        ("seconds", "ingest wall s"),
        ("cpu_seconds", "ingest CPU s"),
        ("peak_rss_mb", "ingest peak RSS MB"),
    ):
        lines.append(row(label, [res[f"ingest_{n}"][key] for n in names]))
    lines.append(
        f"| replica's first mirror | | | {res['replica_mirror']['seconds']} s, {res['replica_copy_mb']} MB | | |"
    )
    for page in res["local"]["cold"]:
        for kind in ("cold", "warm"):
            lines.append(row(f"{page} {kind} ms", [res[n][kind][page]["ms"] for n in names]))
    lines.append(row("export step=all s", [res[n]["export"]["total_s"] for n in names]))
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
