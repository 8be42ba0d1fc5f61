"""Several versions of the app, their pages' recorded callbacks warm, in-process: where a warm page's time goes.

    uv run --group test python benchmarks/bench_warm.py --root /work/scale/x1/root \\
        --side before SRC_A CACHE_A CALLBACKS_A --side after SRC_B CACHE_B CALLBACKS_B [--rounds 9] \\
        [--pages prompt,responses] [--per-callback]

Each side is a source tree of the app, a cache folder holding its stores (``app.py ingest ROOT --cache-dir
CACHE`` run with that tree's code: a store of another version is rebuilt, or refused) and the callbacks
``bench_scale.py`` recorded for that version (``callbacks-<label>.json``: the browser's POSTs to
``/_dash-update-component``). Each side runs in one long-lived process of its own (this checkout's
interpreter, the side's tree first on ``sys.path``), which posts its callbacks through the Flask test client
(``tests/dash_calls.py`` does the same): no server, no HTTP, no other process between the figures and the
callbacks. A first pass fills the side's results cache; then each round asks every side for one pass, in
turn (which one first alternates), and each callback's wall time and the thread's CPU time are kept. Prints,
per page, the median over the rounds of the page's total (the sum of its callbacks), wall and CPU, and the
ratio of each side to the first; ``--per-callback`` adds each callback's medians and answer size. CPU time
is the figure to read on a shared machine: the wall time swings with the load, the CPU time much less.

Cold times are not measured here (``bench_scale.py`` or ``bench_ab.py`` start fresh servers).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

CALLBACK_PATH = "/_dash-update-component"


def worker(src: str, root: str, cache: str, callbacks: str) -> None:
    """One side: its app in this process; one pass of every page's callbacks per line read on stdin, printed
    as one JSON line ``{page: [[wall_ms, cpu_ms, bytes], ...]}``."""
    os.chdir(src)
    sys.path.insert(0, src)
    os.environ.update(RLBOARD_ROOT=root, RLBOARD_CACHE_DIR=cache, RLBOARD_DEMO="0")
    import app  # noqa: PLC0415 (the side's own app, once its tree is on the path)

    client = app.server.test_client()
    bodies = json.loads(Path(callbacks).read_text())
    headers = {"Accept-Encoding": "gzip, deflate, br"}  # as a browser, so that answers are compressed

    def one_pass() -> dict:
        out = {}
        for page, calls in bodies.items():
            out[page] = []
            for body in calls:
                t0, c0 = time.perf_counter(), time.thread_time()
                r = client.post(CALLBACK_PATH, json=body, headers=headers)
                wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
                if r.status_code not in (200, 204):
                    raise SystemExit(f"{page}: {r.status_code} on {body['output'][:80]}")
                out[page].append([round(wall * 1000, 3), round(cpu * 1000, 3), len(r.data)])
        return out

    one_pass()  # the results cache filled
    print(json.dumps({"ready": True}), flush=True)
    for _ in sys.stdin:
        print(json.dumps(one_pass()), flush=True)


def outputs(callbacks: str) -> dict[str, list[str]]:
    return {p: [b["output"] for b in calls] for p, calls in json.loads(Path(callbacks).read_text()).items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True, help="the rollout root the stores were ingested from")
    ap.add_argument("--side", nargs=4, action="append", metavar=("LABEL", "SRC", "CACHE", "CALLBACKS"))
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--pages", help="comma-separated pages (default: every recorded page)")
    ap.add_argument("--per-callback", action="store_true")
    ap.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(*args.worker)
        return 0
    if not args.side or len(args.side) < 2:
        ap.error("give two --side or more")
    procs = {}
    for label, src, cache, callbacks in args.side:
        cmd = [sys.executable, __file__, "--root", args.root, "--worker", str(Path(src).resolve()), args.root]
        cmd += [cache, callbacks]
        procs[label] = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    for label, p in procs.items():
        if not p.stdout.readline():
            raise SystemExit(f"side {label} did not start")
    labels = list(procs)
    runs: dict[str, list[dict]] = {s: [] for s in labels}
    for i in range(args.rounds):
        for s in labels if i % 2 == 0 else labels[::-1]:
            procs[s].stdin.write("pass\n")
            procs[s].stdin.flush()
            line = procs[s].stdout.readline()
            if not line:
                raise SystemExit(f"side {s} stopped")
            runs[s].append(json.loads(line))
    for p in procs.values():
        p.stdin.close()
        p.wait()
    pages = args.pages.split(",") if args.pages else list(runs[labels[0]][0])

    def med(side: str, page: str, k: int, i: int | None = None) -> float:
        rows = [r[page] for r in runs[side]]
        return statistics.median(sum(c[k] for c in row) if i is None else row[i][k] for row in rows)

    names = {label: outputs(cb) for label, _, _, cb in args.side}
    print(f"warm ms, median of {args.rounds} rounds; ratios to {labels[0]}")
    print(f"{'page':22} {'wall':>{9 * len(labels)}}   {'cpu':>{9 * len(labels)}}   cpu ratios")
    for page in pages:
        wall = [med(s, page, 0) for s in labels]
        cpu = [med(s, page, 1) for s in labels]
        print(
            f"{page:22} " + "".join(f"{v:9.1f}" for v in wall) + "   " + "".join(f"{v:9.1f}" for v in cpu)
            + "   " + " ".join(f"{v / cpu[0]:.2f}" for v in cpu[1:])
        )  # fmt: skip
        if args.per_callback:
            for s in labels:
                for i, out in enumerate(names[s][page]):
                    size = runs[s][0][page][i][2]
                    print(
                        f"    {s:10} wall {med(s, page, 0, i):7.2f} cpu {med(s, page, 1, i):7.2f} {size:8d} B  {out[:60]}"
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
