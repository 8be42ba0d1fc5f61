"""Export of every step of a run of many small files (veRL's one file per step); prints one JSON object.

    uv run python benchmarks/bench_many_files_export.py --work /tmp/bench-many [--files 10000] [--lines 1]
        [--src DIR --label before] [--rounds 3] [--format csv] [--delete]

Writes ``--work/run/{step}.jsonl`` (``benchmarks/bench_small_files.write_run``: ``--lines`` responses a
file) once and ingests it once with this tree; then times the export of every step (``step=all``, file
order: ``data.export.export_stream``, as ``/export`` streams it) in a child process per round, alternating
this tree and ``--src`` (another source tree of the app with this interpreter, e.g. the code before a
change: ``git archive main | tar -x -C DIR``; both read the same store, so ``STORE_FORMAT`` must agree):
wall seconds of the export alone, rows and bytes, and the SHA-256 of its bytes (equal between the trees:
the same export). The machine's load average is printed beside the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.bench_small_files import write_run  # noqa: E402

# Run in the child, with the tree under test first on sys.path.
CHILD = """
import hashlib, json, sys, time
from pathlib import Path
from data.export import export_stream
from data.queries import ResponseFilter
from data.store import open_store
store = open_store(Path(sys.argv[1]))
t0 = time.perf_counter()
h, size = hashlib.sha256(), 0
for chunk in export_stream(store, ResponseFilter(), sys.argv[2], limit=None):
    h.update(chunk)
    size += len(chunk)
print(json.dumps({"seconds": round(time.perf_counter() - t0, 2), "bytes": size, "sha256": h.hexdigest()[:16]}))
"""


def export_once(src: Path, store: Path, fmt: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(store), fmt],
        cwd=src,
        env={**os.environ, "PYTHONPATH": str(src)},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench-many"))
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--lines", type=int, default=1)
    ap.add_argument("--src", type=Path, default=None, help="another source tree to compare with")
    ap.add_argument("--label", default="before")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--format", default="csv", choices=("csv", "jsonl", "parquet"))
    ap.add_argument("--delete", action="store_true", help="delete --work once measured")
    args = ap.parse_args(argv)
    from data.config import DEFAULT_PAD_TOKENS
    from data.ingest import ingest_run

    run, cache = args.work / "run", args.work / "cache"
    if not run.is_dir() or len(list(run.glob("*.jsonl"))) != args.files:
        shutil.rmtree(args.work, ignore_errors=True)
        write_run(run, args.files, args.lines, None, 0)
    res = ingest_run(run, cache, DEFAULT_PAD_TOKENS)
    trees = {"this tree": REPO} | ({args.label: args.src.resolve()} if args.src else {})
    rounds: dict[str, list[dict]] = {k: [] for k in trees}
    loads = [round(os.getloadavg()[0], 1)]
    for _ in range(args.rounds):  # interleaved: each round runs every tree once
        for label, src in trees.items():
            rounds[label].append(export_once(src, res.store_dir, args.format))
    loads.append(round(os.getloadavg()[0], 1))
    out = {
        "files": args.files,
        "rows": res.samples,
        "format": args.format,
        "load_1min": loads,
        **{
            label: {
                "median_s": statistics.median(r["seconds"] for r in rs),
                "seconds": [r["seconds"] for r in rs],
                "bytes": rs[0]["bytes"],
                "sha256": sorted({r["sha256"] for r in rs}),
            }
            for label, rs in rounds.items()
        },
    }
    if args.src:
        out["ratio_before_over_after"] = round(out[args.label]["median_s"] / out["this tree"]["median_s"], 2)
    print(json.dumps(out))
    if args.delete:
        shutil.rmtree(args.work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
