"""Source trees' ``app.py ingest`` of one rollout root, interleaved: A B C, C B A, …, each a fresh store.

    uv run python benchmarks/bench_ingest_ab.py ROOT --src before=SRC_A --src after=SRC_B [--src …] \
        --work DIR [--rounds 3]

Each ingest runs in a child process under ``/usr/bin/time -v`` (``nice -n 5``) into its own cache folder
under ``--work`` (deleted before and after, unless ``--keep``): wall seconds, CPU seconds (user + system),
peak RSS and the store's bytes, with the load average before and after. The order of the sides reverses
every round. Prints one JSON object: per side the medians, their ratios to the first side's, and every
ingest's figures. The
machine is shared, so only figures taken in one run, interleaved, compare; CPU seconds move less than
wall seconds with the load.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def ingest(src: Path, root: Path, cache: Path, keep: bool) -> dict:
    """``app.py ingest ROOT`` of ``src`` into a fresh ``cache``: its figures."""
    shutil.rmtree(cache, ignore_errors=True)
    before = _load()
    t0 = time.perf_counter()
    out = subprocess.run(
        ["nice", "-n", "5", "/usr/bin/time", "-v", sys.executable, str(src / "app.py"), "ingest", str(root),
         "--cache-dir", str(cache)],
        cwd=src, capture_output=True, text=True, check=True,
    )  # fmt: skip
    wall = time.perf_counter() - t0

    def field(name: str) -> float:
        return float(re.search(rf"{name}: ([\d.]+)", out.stderr).group(1))

    res = {
        "wall_s": round(wall, 2),
        "cpu_s": round(field(r"User time \(seconds\)") + field(r"System time \(seconds\)"), 2),
        "peak_rss_mb": round(field(r"Maximum resident set size \(kbytes\)") / 1024),
        "store_bytes": _du(cache),
        "load": [before, _load()],
    }
    if not keep:
        shutil.rmtree(cache, ignore_errors=True)
    return res


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", type=Path)
    ap.add_argument(
        "--src", action="append", required=True, help="LABEL=DIR, a source tree; the first is the base"
    )
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep each side's last store")
    args = ap.parse_args(argv)
    sides = {label: Path(d).resolve() for label, _, d in (s.partition("=") for s in args.src)}
    runs: dict[str, list[dict]] = {label: [] for label in sides}
    for r in range(args.rounds):
        for side in list(sides) if r % 2 == 0 else list(sides)[::-1]:
            res = ingest(sides[side], args.root.resolve(), args.work / side, args.keep)
            runs[side].append(res)
            print(side, r, json.dumps(res), file=sys.stderr, flush=True)
    keys = ("wall_s", "cpu_s", "peak_rss_mb", "store_bytes")
    med = {s: {k: statistics.median(x[k] for x in runs[s]) for k in keys} for s in runs}
    base = next(iter(sides))
    out = {
        "src": {s: str(p) for s, p in sides.items()},
        "median": med,
        f"over_{base}": {
            s: {k: round(med[s][k] / med[base][k], 3) for k in keys} for s in sides if s != base
        },
        "runs": runs,
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
