"""Prompts page benchmark on an ingested run: the prompt list and one prompt's history.

    python benchmarks/bench_prompts.py RUN_DIR CACHE_DIR [--repeat 20]

Opens the store of RUN_DIR in CACHE_DIR (ingesting first when there is none) and prints one JSON object
with times in milliseconds:

* ``scalars_load_ms``: reading the in-memory scalars (once per process; shared with every page);
* ``list_cold_ms``: per-prompt aggregates computed from the scalars (once per store version, then cached);
* ``list_warm_ms`` / ``list_never_ms`` / ``list_sorted_ms``: filter, sort and one page of the cached table
  (median over ``--repeat``);
* ``search_cold_ms``: a regex search over the prompt texts (reads the prompt column of the parts once);
* ``history_ms`` / ``history_min_ms`` / ``history_p95_ms``: one prompt's responses, per-step means, group columns, and its first
  and latest texts (two row-group reads), median and 95th percentile over ``--repeat`` prompts;
* ``callback_list_ms`` / ``callback_prompt_ms``: the page's content callback through the Flask test client
  (the whole answer the browser waits for: data, components, JSON), median (and min) over ``--repeat``.

The machine's 1-minute load average is printed before and after: on a shared machine it explains most of
the spread between runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 1)


def _median(xs: list[float]) -> float:
    return round(statistics.median(xs), 1)


def _min(xs: list[float]) -> float:
    return round(min(xs), 1)


def _p95(xs: list[float]) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(0.95 * len(xs)))], 1)


def _data_timings(store, repeat: int) -> dict:
    from data import prompts
    from data.views.prompts import PromptsView

    out: dict = {}
    t0 = time.perf_counter()
    scalars = store.scalars()
    out["scalars_load_ms"] = _ms(t0)
    out["responses"] = scalars.height
    out["has_repetition"] = "repetition" in scalars.columns

    t0 = time.perf_counter()
    table = prompts.prompt_table(store)
    out["list_cold_ms"] = _ms(t0)
    out["prompts"] = table.height
    out["recurring_prompts"] = int(table.filter(table["n_steps"] >= 2).height)

    def list_once(view):
        t = time.perf_counter()
        rows = prompts.filter_prompts(prompts.prompt_table(store), view)
        prompts.page_of(rows, view.page)
        prompts.overview(prompts.prompt_table(store))
        return _ms(t)

    base = PromptsView(run="bench")
    out["list_warm_ms"] = _median([list_once(base) for _ in range(repeat)])
    never = PromptsView(run="bench", view="never")
    out["list_never_ms"] = _median([list_once(never) for _ in range(repeat)])
    out["never_prompts"] = int(table["never_beats"].sum())
    by_delta = PromptsView(run="bench", sort="reward_delta", order="desc", page=3)
    out["list_sorted_ms"] = _median([list_once(by_delta) for _ in range(repeat)])

    t0 = time.perf_counter()
    hits = prompts.search_prompts(store, "(?i)moon")
    out["search_cold_ms"] = _ms(t0)
    out["search_hits"] = len(hits)

    keys = table.sort("order").get_column("prompt_key").to_list()
    step = max(1, len(keys) // repeat)
    sample = keys[::step][:repeat]
    times, sizes = [], []
    for key in sample:
        t = time.perf_counter()
        rows = prompts.history(store, key)
        prompts.history_by_step(rows)
        first, latest = prompts.first_and_latest(rows)
        prompts.texts(store, first)
        prompts.texts(store, latest)
        times.append(_ms(t))
        sizes.append(rows.height)
    out["history_ms"] = _median(times)
    out["history_min_ms"] = _min(times)
    out["history_p95_ms"] = _p95(times)
    out["history_responses_median"] = int(statistics.median(sizes)) if sizes else 0
    return out, sample


# The prompts page's own dcc.Location (components.layout.page_url).
URL = {"type": "app-page-url", "path": "/prompts"}


def _callback_timings(run: str, keys: list[str], repeat: int) -> dict:
    import app as app_module

    client = app_module.app.server.test_client()
    outputs = ["prompts-content.children", "prompts-notices.children", "prompts-header.children"]
    outputs.append("prompts-controls.style")

    def post(search):
        body = {
            "output": ".." + "...".join(outputs) + "..",
            "outputs": [dict(zip(("id", "property"), o.split("."), strict=True)) for o in outputs],
            "inputs": [{"id": URL, "property": "search", "value": search}],
            "changedPropIds": [json.dumps(URL, sort_keys=True, separators=(",", ":")) + ".search"],
            "state": [],
        }
        t = time.perf_counter()
        r = client.post("/_dash-update-component", json=body)
        took = _ms(t)
        if r.status_code != 200:
            raise RuntimeError(f"callback failed: {r.status_code} {r.data[:300]!r}")
        return took

    post(f"?run={run}")  # warm the store and the cache, as the first visitor does
    lists = [post(f"?run={run}") for _ in range(repeat)]
    one = [post(f"?run={run}&prompt={k}") for k in keys[:repeat]]
    return {
        "callback_list_ms": _median(lists),
        "callback_list_min_ms": _min(lists),
        "callback_never_ms": _median([post(f"?run={run}&view=never") for _ in range(repeat)]),
        "callback_prompt_ms": _median(one),
        "callback_prompt_min_ms": _min(one),
        "callback_prompt_p95_ms": _p95(one),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("cache_dir", type=Path)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--no-callbacks", action="store_true", help="time the data layer only")
    args = ap.parse_args(argv)
    run_dir, cache_dir = args.run_dir.resolve(), args.cache_dir.resolve()
    if not run_dir.is_dir():
        print(json.dumps({"error": f"no run folder {run_dir}"}))
        return 2

    # The app reads its settings from the environment when imported: point it at this run and cache.
    os.environ["RLBOARD_ROOT"] = str(run_dir.parent)
    os.environ["RLBOARD_CACHE_DIR"] = str(cache_dir)
    os.environ.setdefault("RLBOARD_REFRESH_SECONDS", "3600")
    from data.config import load_settings
    from data.ingest import ingest_run
    from data.store import open_store, store_dir_for

    settings = load_settings()
    store = open_store(store_dir_for(cache_dir, run_dir, settings.pad_tokens))
    ingested_s = None
    if store is None:
        t0 = time.perf_counter()
        res = ingest_run(run_dir, cache_dir, settings.pad_tokens)
        ingested_s = round(time.perf_counter() - t0, 1)
        store = open_store(res.store_dir)
    out = {"run": run_dir.name, "store_version": store.version, "ingest_s": ingested_s}
    out["load_avg_1min_before"] = round(os.getloadavg()[0], 2)
    data, keys = _data_timings(store, args.repeat)
    out.update(data)
    if not args.no_callbacks:
        out.update(_callback_timings(run_dir.name, keys, args.repeat))
    out["load_avg_1min_after"] = round(os.getloadavg()[0], 2)
    out["cpus"] = os.cpu_count()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
