"""The pages' recorded callbacks replayed in this process, as ``bench_scale.py`` replays them on a server:
cold (an empty results cache, no text index) then ``--warm`` passes, each page's wall and CPU time.

    cd SRC && uv run python /path/to/benchmarks/bench_inproc.py --root /work/scale/x10/root --cache C \\
        --callbacks W/x10/callbacks-<label>.json --pages runs reward responses responses_all_sorted [--warm 3] \
        [--drop-caches] [--per-callback]

Run from the source tree to measure (its ``app``). ``--cache`` is a cache folder of one's own (links to
stores: its results cache and text indexes are removed first, nothing inside a store is written). After
the app is built its objects leave the garbage collector's sight, as ``gunicorn.conf.py`` does in each
worker. One process is one round: interleave two source trees' rounds (A B B A ...) and compare medians;
CPU time is the figure that a shared machine moves least. After each page the process waits until it and its
search helpers are idle (``background_s``: a search's count left running), as ``bench_scale.py`` waits on
its server. ``--per-callback`` adds each cold callback's wall and CPU ms (which of a page's callbacks a
difference comes from); ``--drop-caches`` (root) empties the kernel's page cache once the app is built, so
the cold pass reads the stores from the disk.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

CALLBACK_PATH = "/_dash-update-component"


def cpu_seconds() -> float:
    """CPU seconds of this process and of the search helpers it started (``data.bounded``), as
    ``bench_scale.Server.cpu_seconds`` counts a worker's (not imported from there: this script imports
    ``benchmarks.bench_scale`` from the source tree it measures, an older one among them)."""
    import psutil

    total = time.process_time()
    for child in psutil.Process().children(recursive=True):
        try:
            t = child.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system
    return total


def app_client(root: Path, cache: Path):
    """A Flask test client of the source tree in the working folder (its ``app``) serving ``root`` with the
    cache folder ``cache``, whose results cache and text indexes are removed first."""
    sys.path.insert(0, os.getcwd())
    from benchmarks.bench_scale import clear_server_caches

    clear_server_caches(cache)
    os.environ.update(
        RLBOARD_ROOT=str(root), RLBOARD_CACHE_DIR=str(cache), RLBOARD_DEMO="0", RLBOARD_LOG_LEVEL="warning"
    )
    import app

    client = app.server.test_client()
    client.get("/healthz")
    return client


def settle(window: float = 0.3, busy: float = 0.05, limit: float = 120.0) -> float:
    """Seconds until this process and its helpers are idle (less than ``busy`` CPU seconds over ``window``):
    the work a page's answers left running (a search's count), which would otherwise fall into the next
    page's figures; as ``bench_scale.Server.settle``."""
    t0, last = time.perf_counter(), cpu_seconds()
    while time.perf_counter() - t0 < limit:
        time.sleep(window)
        now = cpu_seconds()
        if now - last < busy:
            break
        last = now
    return round(max(0.0, time.perf_counter() - t0 - window), 2)


def replay(client, bodies: list[dict], each: list | None = None) -> tuple[float, float]:
    """``(wall ms, CPU ms)`` of one page's callbacks posted one after the other; ``each``: a list that
    gets ``[output, wall ms, CPU ms]`` of every callback (its output's first 60 characters)."""
    t0, c0 = time.perf_counter(), cpu_seconds()
    for body in bodies:
        t1, c1 = time.perf_counter(), cpu_seconds()
        r = client.post(CALLBACK_PATH, json=body)
        if r.status_code not in (200, 204):
            raise SystemExit(f"{r.status_code} {body['output'][:60]}")
        if each is not None:
            ms = ((time.perf_counter() - t1) * 1000, (cpu_seconds() - c1) * 1000)
            each.append([body["output"][:60], *(round(v, 1) for v in ms)])
    return (time.perf_counter() - t0) * 1000, (cpu_seconds() - c0) * 1000


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, required=True)
    ap.add_argument("--cache", type=Path, required=True)
    ap.add_argument("--callbacks", type=Path, required=True, help="a bench_scale.py callbacks-<label>.json")
    ap.add_argument("--pages", nargs="+", required=True)
    ap.add_argument("--warm", type=int, default=0, help="warm passes after the cold one (their median)")
    ap.add_argument("--per-callback", action="store_true", help="each cold callback's wall and CPU ms too")
    ap.add_argument("--drop-caches", action="store_true", help="empty the kernel's page cache first (root)")
    args = ap.parse_args(argv)
    client = app_client(args.root, args.cache)
    from benchmarks.bench_scale import load

    gc.collect()
    gc.freeze()
    recorded = json.loads(args.callbacks.read_text())
    if args.drop_caches:  # as bench_scale's --drop-caches (not imported: an older source tree may lack it)
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    out = {p: {"load": load()} for p in args.pages}
    for page in args.pages:
        each = [] if args.per_callback else None
        out[page]["cold_ms"], out[page]["cold_cpu_ms"] = replay(client, recorded[page], each)
        if each is not None:
            out[page]["cold_callbacks"] = each
        out[page]["background_s"] = settle()
    warm: dict[str, list] = {p: [] for p in args.pages}
    for _ in range(args.warm):
        for page in args.pages:
            warm[page].append(replay(client, recorded[page]))
            settle()
    for page, got in warm.items():
        if got:
            out[page]["warm_ms"] = round(statistics.median(w for w, _ in got), 1)
            out[page]["warm_cpu_ms"] = round(statistics.median(c for _, c in got), 1)
    print(
        json.dumps(
            {p: {k: round(v, 1) if isinstance(v, float) else v for k, v in o.items()} for p, o in out.items()}
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
