"""Reward page benchmark: server time and JSON size of every callback of ``/reward`` on one run.

    python benchmarks/bench_reward.py RUN_DIR CACHE_DIR [--repeat 5]

RUN_DIR is a run folder (its parent is used as the rollout root), CACHE_DIR the cache it was ingested
into (``app.py ingest RUN_DIR --cache-dir CACHE_DIR``; ingested here if not yet). Each callback is POSTed
through the Flask test client exactly as the browser does, so a timing is the whole server side (store
access, Polars, figure building, Dash's JSON encoding). "cold" is the first request in a fresh process
state (the run's scalars not yet read from the store, no cached aggregates), "cold_aggregates" the first
request with the scalars in memory but the page's aggregates not cached (as after a store update), and
"warm" the min, median and max of ``--repeat`` later requests (on a shared machine the min is the
cost of the work itself, the max includes waiting for a core). Prints one JSON object.
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

LIMIT_MS = 100.0
LIMIT_BYTES = 200_000


def _id(text: str):
    """A component id as the callback map writes it: a dict id (a page's own Location) as JSON."""
    return json.loads(text) if text.startswith("{") else text


def _body(callback_map: dict, marker: str, values: dict, changed: str) -> dict:
    """The POST of the page's callback whose outputs include ``marker``, as the browser sends it: each input
    and state from ``values`` (by ``id.property``; any ``search`` is the page's own URL), None otherwise;
    ``changed`` the input that fired (``id.property``, or ``search``)."""
    output = next(k for k in callback_map if marker in k)
    cb = callback_map[output]

    def filled(deps):
        out = []
        for d in deps:
            name = "search" if d["property"] == "search" else f"{d['id']}.{d['property']}"
            out.append({"id": _id(d["id"]), "property": d["property"], "value": values.get(name)})
        return out

    url = next((f"{d['id']}.search" for d in cb["inputs"] if d["property"] == "search"), None)
    outputs = [
        {"id": _id(part.rsplit(".", 1)[0]), "property": part.rsplit(".", 1)[1]}
        for part in output.strip(".").split("...")
    ]
    return {
        "output": output,
        "outputs": outputs if output.startswith("..") else outputs[0],
        "inputs": filled(cb["inputs"]),
        "state": filled(cb.get("state", [])),
        "changedPropIds": [url if changed == "search" else changed],
    }


def _requests(callback_map: dict, run: str, steps: list[int], hist_click) -> dict[str, dict]:
    """The page's callbacks as the browser POSTs them: name -> request body (found in the app's callback
    map by one of their outputs, so the script follows the page's ids)."""
    last, mid = steps[-1], steps[len(steps) // 2]
    shown = {"reward-run.data": run, "reward-selected.data": mid}

    def sync(search, index, changed):
        values = {
            "search": search,
            "reward-step.value": index,
            "reward-band.value": "std",
            "reward-zero.value": False,
        }
        return _body(callback_map, "reward-selected.data", values, changed)

    def curves_req(band, drawn):
        values = {
            **shown,
            "reward-band.value": band,
            "reward-zero.value": False,
            "reward-curves-drawn.data": drawn,
        }
        return _body(callback_map, "reward-curves-drawn.data", values, "reward-band.value")

    def heat_req(drawn):
        values = {**shown, "reward-heatmap-drawn.data": drawn}
        return _body(callback_map, "reward-heatmap-drawn.data", values, "reward-selected.data")

    page = {
        "output": ".._pages_content.children..._pages_store.data..",
        "outputs": [
            {"id": "_pages_content", "property": "children"},
            {"id": "_pages_store", "property": "data"},
        ],
        "inputs": [
            {"id": "_pages_location", "property": "pathname", "value": "/reward"},
            {"id": "_pages_location", "property": "search", "value": f"?run={run}&step={mid}"},
        ],
        "state": [],
        "changedPropIds": ["_pages_location.search"],
    }
    return {
        "page_layout": page,
        "sync_url_load": sync(f"?run={run}&step={mid}", 0, "search"),
        "sync_slider": sync(f"?run={run}&step={mid}", steps.index(last) - 1, "reward-step.value"),
        "curves_full": curves_req("p25-p75", None),
        "curves_step_patch": curves_req("p25-p75", [run, "p25-p75", False]),
        "step_histograms": _body(callback_map, "reward-step-stats.children", shown, "reward-selected.data"),
        "step_bar_click": _body(
            callback_map,
            "reward-nav.href",
            {**shown, "reward-hist.clickData": hist_click},
            "reward-hist.clickData",
        ),
        "heatmap_full": heat_req(None),
        "heatmap_step_patch": heat_req(run),
    }


def _post(client, body) -> tuple[float, int, dict | None]:
    t0 = time.perf_counter()
    r = client.post("/_dash-update-component", json=body)
    ms = (time.perf_counter() - t0) * 1000
    if r.status_code not in (200, 204):
        raise RuntimeError(f"callback failed ({r.status_code}): {r.data[:300]!r}")
    return ms, len(r.data), (r.get_json() if r.status_code == 200 else None)


def _clear_caches(scalars: bool = True) -> None:
    """Forget the page's cached aggregates and, with ``scalars``, the store's index and footers read."""
    from data import curves
    from data.store import reader as store

    if scalars:
        store.forget_indexes()
    for fn in (curves._steps, curves._panels, curves._bins, curves._bars, curves._heatmap):
        fn.cache_clear()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir")
    ap.add_argument("cache_dir")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    run_dir = Path(args.run_dir).resolve()
    # app.py builds its app at import from RLBOARD_* variables: point them at this run before importing.
    os.environ["RLBOARD_ROOT"] = str(run_dir.parent)
    os.environ["RLBOARD_CACHE_DIR"] = str(Path(args.cache_dir).resolve())
    os.environ["RLBOARD_REFRESH_SECONDS"] = "1000000"  # no background re-check during the timings

    from data import curves
    from data.run_context import steps_of
    from data.service import board

    t0 = time.perf_counter()
    import app as app_module

    b = board()
    b.ingest_now(run_dir.name)  # a no-op when the cache is up to date
    ingest_s = time.perf_counter() - t0
    store = b.store(run_dir.name)
    steps = list(steps_of(store))
    bars = curves.step_bars(store, "reward", steps[len(steps) // 2])
    k = int(bars.get_column("count").arg_max())
    lo, hi = float(bars.item(k, "lo")), float(bars.item(k, "hi"))
    click = {
        "points": [{"curveNumber": 0, "x": (lo + hi) / 2, "customdata": [lo, hi, int(bars.item(k, "count"))]}]
    }
    client = app_module.app.server.test_client()
    client.get("/")  # Dash registers the pages' router on the first request
    requests = _requests(app_module.app.callback_map, run_dir.name, steps, click)

    results = {}
    for name, body in requests.items():
        _clear_caches()
        cold_ms, size, _ = _post(client, body)
        _clear_caches(scalars=False)
        cold_agg_ms, _, _ = _post(client, body)
        warm = [_post(client, body) for _ in range(args.repeat)]
        warm_ms = [w[0] for w in warm]
        results[name] = {
            "cold_ms": round(cold_ms, 1),
            "cold_aggregates_ms": round(cold_agg_ms, 1),
            "warm_min_ms": round(min(warm_ms), 1),
            "warm_median_ms": round(statistics.median(warm_ms), 1),
            "warm_max_ms": round(max(warm_ms), 1),
            "json_bytes": max(size, *(w[1] for w in warm)),
        }
    out = {
        "run": str(run_dir),
        "load_average_1min": round(os.getloadavg()[0], 1),
        "cpus": os.cpu_count(),
        "samples": int(store.scalars().height),
        "steps": len(steps),
        "bytes_on_disk": sum(p.stat().st_size for p in run_dir.glob("*.jsonl")),
        "startup_and_ingest_check_s": round(ingest_s, 2),
        "limits": {"warm_ms": LIMIT_MS, "json_bytes": LIMIT_BYTES},
        "callbacks": results,
        "all_warm_within_limit": all(r["warm_max_ms"] <= LIMIT_MS for r in results.values()),
        "all_json_within_limit": all(r["json_bytes"] <= LIMIT_BYTES for r in results.values()),
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
