"""The JSON API's answers (``/api/v1/<view>``, issue 37): each page's answer cold and warm, and its JSON's size.

    uv run python benchmarks/bench_api.py --root ROOT --cache-dir C --run RUN [--run2 RUN2] [--rounds 5] \
        [--url "/responses?run=RUN&step=all&sort=kl_mean"]...

Each URL (default: one per page of ``api/answers/``, on ``RUN``; compare pairs ``RUN`` with ``RUN2``) is
answered as ``/api/v1/<view>`` answers it (``api.registry``'s function for the page, then
``api.answer.to_json``), in a child process of its own per round: ``cold`` is its first answer (an empty
results cache: the cache folder's ``results-cache`` is set aside for the child, nothing of the run cached
but the operating system's page cache), ``warm`` the median of the next five. The runs are read first (a
store up to date); the figure is the median of ``--rounds`` rounds, the URLs' order turned every other
round. Prints one JSON object, and a Markdown table on stderr, with the machine's load average (figures
taken under load are not comparable).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
sys.path.insert(0, {repo!r})
import app  # noqa: F401 (the shell module: cli_views imports prepare_root from it)
from api.answer import to_json
from api.registry import by_path
from cli_views import _board
from data.views.codec import parse_search

class A:
    root = {root!r}
    cache_dir = {cache!r}

board = _board(A)
url = {url!r}
path, _, search = url.partition("?")
name, answer = by_path(path)
query = parse_search(search)
out = {{}}
t0 = time.perf_counter()
body = json.dumps(to_json(answer(query)), allow_nan=False)
out["cold_ms"] = (time.perf_counter() - t0) * 1000
warm = []
for _ in range(5):
    t0 = time.perf_counter()
    json.dumps(to_json(answer(query)), allow_nan=False)
    warm.append((time.perf_counter() - t0) * 1000)
out["warm_ms"] = sorted(warm)[2]
out["bytes"] = len(body)
print(json.dumps(out))
"""


def default_urls(run: str, run2: str | None) -> list[str]:
    urls = [
        "/",
        f"/reward?run={run}",
        f"/scatter?run={run}",
        f"/responses?run={run}",
        f"/responses?run={run}&step=all&sort=kl_mean",
        f"/tokens?run={run}",
        f"/drift?run={run}",
        f"/prompts?run={run}",
        f"/gap?run={run}",
    ]
    if run2:
        urls.append(f"/compare?run={run}&run={run2}")
    return urls


def _read_runs(root: str, cache: str, runs: list[str]) -> None:
    """Bring the runs' stores up to date (``app.py ingest``), so that no child reads a run."""
    for run in runs:
        subprocess.run(
            [sys.executable, str(REPO / "app.py"), "ingest", str(Path(root) / run), "--cache-dir", cache],
            check=True,
            stdout=subprocess.DEVNULL,
        )


def one(root: str, cache: str, url: str) -> dict:
    """One child's cold and warm answer of ``url``, with an empty results cache."""
    results = Path(cache) / "results-cache"
    aside = Path(tempfile.mkdtemp(dir=cache, prefix=".bench-api-"))
    moved = results.exists()
    if moved:
        results.rename(aside / "results-cache")
    try:
        code = CHILD.format(repo=str(REPO), root=root, cache=cache, url=url)
        got = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
        return json.loads(got.stdout.strip().splitlines()[-1])
    finally:
        if results.exists():
            import shutil

            shutil.rmtree(results)
        if moved:
            (aside / "results-cache").rename(results)
        aside.rmdir()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--cache-dir", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--run2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--url", action="append", help="a page's URL (repeat); default: one per page")
    args = ap.parse_args()
    urls = args.url or default_urls(args.run, args.run2)
    _read_runs(args.root, args.cache_dir, [r for r in (args.run, args.run2) if r])
    got: dict[str, list[dict]] = {u: [] for u in urls}
    loads = [os.getloadavg()[0]]
    for r in range(args.rounds):
        for u in urls if r % 2 == 0 else urls[::-1]:
            got[u].append(one(args.root, args.cache_dir, u))
        loads.append(os.getloadavg()[0])
    table = {
        u: {
            "cold_ms": round(statistics.median(x["cold_ms"] for x in xs), 1),
            "warm_ms": round(statistics.median(x["warm_ms"] for x in xs), 1),
            "kb": round(xs[0]["bytes"] / 1024, 1),
        }
        for u, xs in got.items()
    }
    print(json.dumps({"rounds": args.rounds, "load": [min(loads), max(loads)], "urls": table}, indent=1))
    print(f"| URL | cold ms | warm ms | JSON KB |  (load {min(loads):.1f}-{max(loads):.1f})", file=sys.stderr)
    print("|---|---|---|---|", file=sys.stderr)
    for u, t in table.items():
        print(f"| `{u}` | {t['cold_ms']} | {t['warm_ms']} | {t['kb']} |", file=sys.stderr)


if __name__ == "__main__":
    main()
