"""Where an ingest spends its CPU: one in-process ingest under cProfile on every thread, and two such
profiles compared function by function (e.g. a "before" checkout against this one).

    uv run python benchmarks/profile_ingest.py RUN_DIR --cache-dir DIR --out PROF [--src CHECKOUT]
    uv run python benchmarks/profile_ingest.py --compare BEFORE.prof AFTER.prof [--top 25]

The first form ingests RUN_DIR into a fresh store under DIR with the code of CHECKOUT (default: this one),
each Python thread profiled with its own CPU clock (``time.thread_time``: the writer's pool threads
included, the waits excluded), and prints the process's CPU and wall seconds as JSON. Work Polars and
pyarrow do on their own native threads is in the process's CPU but in no Python function's time. The
second form prints the functions whose own (``tottime``) and cumulative CPU moved most between the two.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import shutil
import sys
import threading
import time
from pathlib import Path


def profile(run_dir: Path, cache_dir: Path, out: Path, src: Path) -> dict:
    """Ingest ``run_dir`` into a fresh store under ``cache_dir`` with the code at ``src``, profiled."""
    sys.path.insert(0, str(src))
    from data.config import load_settings
    from data.ingest import ingest_run

    shutil.rmtree(cache_dir, ignore_errors=True)
    settings = load_settings(cache_dir=cache_dir)
    profs: list[cProfile.Profile] = []

    def start(*_):  # the first event of a new thread: give it its own profiler (which replaces this hook)
        p = cProfile.Profile(time.thread_time)
        profs.append(p)
        p.enable()

    threading.setprofile(start)
    main = cProfile.Profile(time.thread_time)
    profs.append(main)
    wall, cpu = time.perf_counter(), time.process_time()
    main.enable()
    ingest_run(run_dir, cache_dir, settings.pad_tokens)
    main.disable()
    threading.setprofile(None)
    for p in profs:
        p.disable()
    res = {"cpu_s": round(time.process_time() - cpu, 2), "wall_s": round(time.perf_counter() - wall, 2)}
    pstats.Stats(*[p for p in profs if p.getstats()]).dump_stats(out)
    return res


def _by_function(path: Path) -> dict[str, tuple[float, float]]:
    """``{"folder/file:function": (tottime, cumtime)}`` of a profile, summed over same-named entries."""
    out: dict[str, tuple[float, float]] = {}
    for (file, _, name), (_, _, tt, ct, _) in pstats.Stats(str(path)).stats.items():
        parts = Path(file).parts
        key = f"{'/'.join(parts[-2:]) if len(parts) > 1 else file}:{name}"
        a, b = out.get(key, (0.0, 0.0))
        out[key] = (a + tt, b + ct)
    return out


def compare(before: Path, after: Path, top: int) -> dict:
    """The ``top`` functions whose own and whose cumulative CPU grew most from ``before`` to ``after``."""
    b, a = _by_function(before), _by_function(after)
    keys = set(a) | set(b)

    def moved(i: int) -> list[list]:
        rows = sorted(keys, key=lambda k: -(a.get(k, (0, 0))[i] - b.get(k, (0, 0))[i]))[:top]
        return [[k, round(b.get(k, (0, 0))[i], 3), round(a.get(k, (0, 0))[i], 3)] for k in rows]

    return {"own": moved(0), "cumulative": moved(1)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path, nargs="?")
    ap.add_argument("--cache-dir", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--src", type=Path, default=Path(__file__).resolve().parent.parent)
    ap.add_argument("--compare", type=Path, nargs=2, metavar=("BEFORE", "AFTER"))
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args(argv)
    if args.compare:
        res = compare(*args.compare, args.top)
    elif args.run_dir and args.cache_dir and args.out:
        res = profile(args.run_dir.resolve(), args.cache_dir.resolve(), args.out, args.src.resolve())
    else:
        ap.error("RUN_DIR --cache-dir --out, or --compare BEFORE AFTER")
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
