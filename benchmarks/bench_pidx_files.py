"""What one prompt's history costs to read from the prompt index (``data.derived.pidx.read``) as a store's
commits left it, and from the same rows written again in more files (what a large read leaves since its full
files are no longer merged: ~14 files at 2.56M responses).

    uv run python benchmarks/bench_pidx_files.py STORE_DIR [--split 18500 ...] [--keys 60] [--rounds 3] \
        [--threads N] [--drop-caches]

``STORE_DIR``: one run's store (e.g. ``<cache>/run-<hash>`` after an ingest). Each ``--split N`` writes the
store's rows again as index files of N rows each, none merged, beside the store (deleted after; no manifest
names them), and reads the same ``--keys`` prompts (a fixed sample) from each layout, ``--rounds`` times,
interleaved. Prints per layout its count of files and the median milliseconds of one prompt's read, and the
process's resident memory before the first read and after the last. ``--threads N`` reads a prompt's files
N at a time (1: one after the other; default: ``pidx.READ_THREADS``): run it once per N, alternately, since
the memory threads keep is the process's. ``--drop-caches`` (root) empties the page cache before each read
(after one read warms the code), so that the files come from the disk: use few ``--keys`` and ``--rounds``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_scale import drop_page_cache  # noqa: E402
from data.derived import pidx  # noqa: E402
from data.prompts.detail import HISTORY_COLUMNS  # noqa: E402
from data.store.manifest import Manifest  # noqa: E402
from data.store.reader import RunStore  # noqa: E402


def _rss_mb() -> int:
    """This process's resident memory, MB."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store", type=Path)
    ap.add_argument("--split", type=int, action="append", default=[])
    ap.add_argument("--keys", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--drop-caches", action="store_true")
    args = ap.parse_args()
    if args.threads is not None:
        pidx.READ_THREADS = args.threads
        if args.threads == 1:
            pidx.READ_ALONE = sys.maxsize
    data = json.loads((args.store / "manifest.json").read_text())
    store = RunStore(args.store, Manifest.from_dict(data))
    cols = [c for c in HISTORY_COLUMNS if c in store.schema()]
    keys = store.scan(["prompt_key"]).unique().collect().get_column("prompt_key").drop_nulls()
    keys = keys.sort().sample(min(args.keys, keys.len()), seed=1).to_list()
    layouts = {"as committed": store}
    written: list[Path] = []
    rows = pidx.FILE_ROWS
    try:
        for n in args.split:
            pidx.FILE_ROWS = n
            try:
                entry, names = pidx.update(
                    args.store, {**data, pidx.INDEX_KEY: None}, 999_000 + n % 997, f"b{n}"
                )
            finally:
                pidx.FILE_ROWS = rows
            written += [args.store / name for name in names]
            layouts[f"files of {n} rows"] = RunStore(
                args.store, Manifest.from_dict({**data, pidx.INDEX_KEY: entry})
            )
        times: dict[str, list[float]] = {name: [] for name in layouts}
        if args.drop_caches:  # the code's first use not timed: the reads then differ by their files alone
            pidx.read(store, keys[0], cols)
        rss_before = _rss_mb()
        for _ in range(args.rounds):
            for name, st in layouts.items():
                for key in keys:
                    if args.drop_caches:
                        drop_page_cache()
                    t = time.perf_counter()
                    pidx.read(st, key, cols)
                    times[name].append(time.perf_counter() - t)
        out = {
            name: {
                "files": len(st.manifest.derived["pidx"].meta["files"]),
                "ms": round(statistics.median(times[name]) * 1000, 2),
            }
            for name, st in layouts.items()
        }
        out["threads"] = args.threads or pidx.READ_THREADS
        out["rss_mb"] = {"before": rss_before, "after": _rss_mb()}
        print(json.dumps(out, indent=1))
    finally:
        for p in written:
            p.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
