"""Two versions of the app, one page (or a few), interleaved: A B A B …, each round a fresh gunicorn server.

    uv run python benchmarks/bench_ab.py --root /work/scale/x10/root \\
        --a SRC_A STORES_A CALLBACKS_A --b SRC_B STORES_B CALLBACKS_B --pages compare [--export] [--rounds 5]

Each side is a source tree of the app, a folder holding its stores (``<run>-<hash>/``, e.g. a
``benchmarks/bench_scale.py --keep`` work folder's ``x10/cache``) and the callbacks ``bench_scale.py``
recorded for that version (``callbacks-<label>.json``). The stores are linked, never written, into a cache
folder of this run's own (``--work``), so that the results cache and text indexes a server makes stay
there. A round starts each side's server in turn (which one first alternates), replays the pages' callbacks
on an empty results cache (``cold``), then ``--warm-passes`` times (``warm``, their median), as
``bench_scale.py`` does (``--export``: then the export of every step, as CSV). Prints one JSON object: per page and side the median of the rounds, their ratio
B / A, each round's figures and the load average beside each: the machine is shared, so only figures
taken in one run, interleaved, compare.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.bench_scale import Server, clear_server_caches, export, load, median_pages, replay  # noqa: E402


def side_cache(work: Path, name: str, stores: Path) -> Path:
    """A cache folder for one side: links to its stores, nothing else."""
    cache = work / name
    cache.mkdir(parents=True, exist_ok=True)
    for d in stores.iterdir():
        link = cache / d.name
        if d.is_dir() and (d / "manifest.json").exists() and not link.exists():
            link.symlink_to(d.resolve())
    return cache


def one_round(src: Path, root: Path, cache: Path, bodies: dict, warm_passes: int, with_export: bool) -> dict:
    clear_server_caches(cache)
    with Server(src, root, cache, cache / "gunicorn.log") as srv:
        cold = replay(srv.base, bodies, srv)
        warm = median_pages([replay(srv.base, bodies, srv) for _ in range(warm_passes)])
        out = {"cold": cold, "warm": warm}
        if with_export:
            out["export"] = export(srv.base, 900)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, required=True, help="the rollout root both sides serve")
    ap.add_argument("--a", nargs=3, type=Path, required=True, metavar=("SRC", "STORES", "CALLBACKS"))
    ap.add_argument("--b", nargs=3, type=Path, required=True, metavar=("SRC", "STORES", "CALLBACKS"))
    ap.add_argument("--pages", nargs="*", default=[], help="pages of the callbacks files, e.g. compare")
    ap.add_argument(
        "--export", action="store_true", help="and /export?run=run&step=all&format=csv, after them"
    )
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warm-passes", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench-ab"))
    args = ap.parse_args(argv)
    sides = {}
    for name, (src, stores, callbacks) in (("a", args.a), ("b", args.b)):
        recorded = json.loads(callbacks.read_text())
        sides[name] = {
            "src": src.resolve(),
            "cache": side_cache(args.work, name, stores),
            "bodies": {p: recorded[p] for p in args.pages},
            "rounds": [],
        }
    for i in range(args.rounds):
        for name in ("a", "b") if i % 2 == 0 else ("b", "a"):
            s = sides[name]
            s["rounds"].append(
                one_round(s["src"], args.root, s["cache"], s["bodies"], args.warm_passes, args.export)
            )
            print(f"round {i} {name} load {load()}", file=sys.stderr, flush=True)
    out: dict = {"pages": {}, "rounds": {n: s["rounds"] for n, s in sides.items()}}
    for page in args.pages:
        for kind in ("cold", "warm"):
            med = {n: statistics.median(r[kind][page]["ms"] for r in s["rounds"]) for n, s in sides.items()}
            cpu = {
                n: statistics.median(r[kind][page]["cpu_ms"] for r in s["rounds"]) for n, s in sides.items()
            }
            out["pages"][f"{page} {kind}"] = {
                "a_ms": med["a"],
                "b_ms": med["b"],
                "ratio": round(med["b"] / med["a"], 2) if med["a"] else None,
                "a_cpu_ms": cpu["a"],
                "b_cpu_ms": cpu["b"],
                "loads": [r[kind][page]["load"] for s in sides.values() for r in s["rounds"]],
            }
            print(f"{page} {kind}: a {med['a']} ms, b {med['b']} ms, b/a {out['pages'][f'{page} {kind}']['ratio']}",
                  file=sys.stderr)  # fmt: skip
    if args.export:
        tot = {n: statistics.median(r["export"]["total_s"] for r in s["rounds"]) for n, s in sides.items()}
        out["export total s"] = {"a": tot["a"], "b": tot["b"], "ratio": round(tot["b"] / tot["a"], 2)}
        print(
            f"export total: a {tot['a']} s, b {tot['b']} s, b/a {out['export total s']['ratio']}",
            file=sys.stderr,
        )
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
