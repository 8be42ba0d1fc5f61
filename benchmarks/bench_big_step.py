"""Peak memory of ``app.py ingest`` on a run whose one step holds millions of responses; prints one JSON object.

    uv run python benchmarks/bench_big_step.py --work /tmp/bench-big-step [--rows 3000000] [--tokens 8]
        [--src DIR --label before] [--rounds 1] [--delete]

Writes ``--work/root/big-step/rank{0..3}.jsonl`` once (``benchmarks/generate.append_step`` of step 1, in
pieces of 300,000 responses with seeds 0, 1, …, so that the generator's own memory stays small): every
response of the run in step 1. Then ingests it from scratch ``--rounds`` times, each the command line in a
child process under ``/usr/bin/time -v``: wall seconds, peak RSS, and the peak per response. ``--src``
measures another source tree of the app with this interpreter (the code before a change: ``git archive
main | tar -x -C DIR``). The run's files are kept for the next call (a before and an after share one run;
``--delete`` deletes ``--work`` once measured); each store is deleted once measured.
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

from benchmarks.generate import append_step  # noqa: E402

PIECE = 300_000


def make_run(run_dir: Path, rows: int, tokens: int) -> dict:
    """The run of one step of ``rows`` responses (kept across calls: made again only when its marker
    differs)."""
    marker = run_dir.parent / f".{run_dir.name}.made.json"  # beside the run: not a file of it
    want = {"rows": rows, "tokens": tokens}
    if marker.exists() and json.loads(marker.read_text()).get("params") == want:
        return json.loads(marker.read_text())["report"]
    shutil.rmtree(run_dir, ignore_errors=True)
    t0 = time.perf_counter()
    done, seed = 0, 0
    while done < rows:
        n = min(PIECE, rows - done)
        append_step(run_dir, 1, per_step=n, tokens=tokens, ranks=4, seed=seed)
        done, seed = done + n, seed + 1
    report = {
        "rows": rows,
        "bytes": sum(f.stat().st_size for f in run_dir.glob("*.jsonl")),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    marker.write_text(json.dumps({"params": want, "report": report}))
    return report


def ingest(src: Path, run_dir: Path, cache: Path) -> dict:
    """``app.py ingest`` from scratch in a child process: wall seconds and peak RSS (``time -v``)."""
    shutil.rmtree(cache, ignore_errors=True)
    t0 = time.perf_counter()
    before = os.getloadavg()[0]
    out = subprocess.run(
        ["/usr/bin/time", "-v", sys.executable, str(src / "app.py"), "ingest", str(run_dir),
         "--cache-dir", str(cache), "--json"],
        cwd=src, capture_output=True, text=True, check=True,
    )  # fmt: skip
    wall = time.perf_counter() - t0
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", out.stderr)
    summary = json.loads(out.stdout.strip().splitlines()[-1])["runs"][0]
    shutil.rmtree(cache, ignore_errors=True)
    return {
        "seconds": round(wall, 1),
        "peak_rss_mb": round(int(rss.group(1)) / 1024) if rss else None,
        "samples": summary.get("samples"),
        "load_1min": [round(before, 1), round(os.getloadavg()[0], 1)],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench-big-step"))
    ap.add_argument("--rows", type=int, default=3_000_000, help="responses of the one step")
    ap.add_argument("--tokens", type=int, default=8, help="mean response length in tokens")
    ap.add_argument("--src", type=Path, default=REPO, help="source tree of the app to measure")
    ap.add_argument("--label", default="this tree")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--delete", action="store_true", help="delete the run's files once measured")
    args = ap.parse_args(argv)
    run_dir = args.work / "root" / "big-step"
    made = make_run(run_dir, args.rows, args.tokens)
    rounds = [ingest(args.src.resolve(), run_dir, args.work / "cache") for _ in range(args.rounds)]
    peak = max(r["peak_rss_mb"] or 0 for r in rounds)
    print(
        json.dumps(
            {
                "label": args.label,
                "run": made,
                "rounds": rounds,
                "peak_rss_mb": peak,
                "bytes_per_response": round(peak * 2**20 / args.rows),
            }
        )
    )
    if args.delete:
        shutil.rmtree(args.work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
