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


def _i(cid, prop, value):
    return {"id": cid, "property": prop, "value": value}


def _body(output: str, inputs: list[dict], state: list[dict], changed: list[str]) -> dict:
    outputs = [
        {"id": part.rsplit(".", 1)[0], "property": part.rsplit(".", 1)[1]}
        for part in output.strip(".").split("...")
    ]
    return {
        "output": output,
        "outputs": outputs if output.startswith("..") else outputs[0],
        "inputs": inputs,
        "state": state,
        "changedPropIds": changed,
    }


def _requests(run: str, steps: list[int], hist_click) -> dict[str, dict]:
    """The page's callbacks as the browser POSTs them: name -> request body."""
    last, mid = steps[-1], steps[len(steps) // 2]
    curves_out = "..{}..".format(
        "...".join(
            [f"reward-curve-{k}.figure" for k in ("reward", "kl", "length", "win")]
            + [f"reward-curve-{k}-title.children" for k in ("reward", "kl", "length", "win")]
            + [f"reward-curve-{k}-note.children" for k in ("reward", "kl", "length", "win")]
            + ["reward-curves-drawn.data"]
        )
    )
    step_out = (
        "..reward-hist.figure...reward-gain-hist.figure...reward-hist-title.children"
        "...reward-gain-hist-title.children...reward-hist-note.children...reward-gain-hist-note.children"
        "...reward-step-stats.children.."
    )
    sync_out = (
        "..reward-url.search...reward-run.data...reward-header.children...reward-notices.children"
        "...reward-selected.data...reward-step-text.children...reward-step.value...reward-step.max"
        "...reward-step.marks...reward-step.disabled...reward-band.value...reward-zero.value.."
    )
    clicks = [f"reward-curve-{k}" for k in ("reward", "kl", "length", "win")] + ["reward-heatmap"]

    def sync(search, index, changed):
        inputs = [
            _i("reward-url", "search", search),
            _i("reward-step", "value", index),
            _i("reward-band", "value", "std"),
            _i("reward-zero", "value", False),
            _i("reward-prev", "n_clicks", None),
            _i("reward-next", "n_clicks", None),
            *(_i(c, "clickData", None) for c in clicks),
        ]
        state = [_i("reward-run", "data", None), _i("reward-selected", "data", None)]
        return _body(sync_out, inputs, state, [changed])

    def curves_req(band, drawn):
        inputs = [
            _i("reward-run", "data", run),
            _i("reward-selected", "data", mid),
            _i("reward-band", "value", band),
            _i("reward-zero", "value", False),
        ]
        return _body(curves_out, inputs, [_i("reward-curves-drawn", "data", drawn)], ["reward-band.value"])

    def step_req():
        inputs = [_i("reward-run", "data", run), _i("reward-selected", "data", mid)]
        return _body(step_out, inputs, [], ["reward-selected.data"])

    def drill_req(click):
        inputs = [
            _i("reward-hist", "clickData", click),
            _i("reward-gain-hist", "clickData", None),
            _i("reward-run", "data", run),
            _i("reward-selected", "data", mid),
        ]
        return _body(
            "..reward-drill.children...reward-gain-drill.children..", inputs, [], ["reward-hist.clickData"]
        )

    def heat_req(drawn):
        inputs = [_i("reward-run", "data", run), _i("reward-selected", "data", mid)]
        return _body(
            "..reward-heatmap.figure...reward-heatmap-drawn.data..",
            inputs,
            [_i("reward-heatmap-drawn", "data", drawn)],
            ["reward-selected.data"],
        )

    page = _body(
        ".._pages_content.children..._pages_store.data..",
        [
            _i("_pages_location", "pathname", "/reward"),
            _i("_pages_location", "search", f"?run={run}&step={mid}"),
        ],
        [],
        ["_pages_location.search"],
    )
    return {
        "page_layout": page,
        "sync_url_load": sync(f"?run={run}&step={mid}", 0, "reward-url.search"),
        "sync_slider": sync(f"?run={run}&step={mid}", steps.index(last) - 1, "reward-step.value"),
        "curves_full": curves_req("p25-p75", None),
        "curves_step_patch": curves_req("p25-p75", [run, "p25-p75", False]),
        "step_histograms": step_req(),
        "step_bar_click": drill_req(hist_click),
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
    """Forget the page's cached aggregates and, with ``scalars``, the run's in-memory scalars."""
    from data import curves
    from data.store import reader as store

    if scalars:
        with store._SCALARS_LOCK:
            store._SCALARS_CACHE.clear()
    for fn in (curves._steps, curves._panels, curves._edges, curves._bars, curves._heatmap):
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
    from data.service import board

    t0 = time.perf_counter()
    import app as app_module

    b = board()
    b.ingest_now(run_dir.name)  # a no-op when the cache is up to date
    ingest_s = time.perf_counter() - t0
    store = b.store(run_dir.name)
    steps = curves.step_list(store)
    bars = curves.step_bars(store, "reward", steps[len(steps) // 2])
    k = int(bars.get_column("count").arg_max())
    lo, hi = float(bars.item(k, "lo")), float(bars.item(k, "hi"))
    click = {
        "points": [{"curveNumber": 0, "x": (lo + hi) / 2, "customdata": [lo, hi, int(bars.item(k, "count"))]}]
    }
    requests = _requests(run_dir.name, steps, click)
    client = app_module.app.server.test_client()

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
