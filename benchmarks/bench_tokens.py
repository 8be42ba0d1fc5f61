"""Token page benchmark: the server part of opening one response.

    python benchmarks/bench_tokens.py RUN_DIR CACHE_DIR [--samples 40] [--seed 0] [--http]
    python benchmarks/bench_tokens.py RUN_DIR CACHE_DIR --long 4000     # writes RUN_DIR first (small run
                                                                         # with one 4,000-token response)
    python benchmarks/bench_tokens.py RUN_DIR CACHE_DIR --long 32000 --browser [--src DIR]

Times, per random sample (cold: the token-view cache is cleared each time), what the page does on the
server: ``read`` (store.lookup + one row-group read), ``view`` (token frame, metrics, hover texts,
neighbours), ``build`` (strip data, legend, three per-position figures, two top-k tables) and ``serialize``
(JSON of what Dash sends: Plotly's encoder). ``server_ms`` = read + view + build (the 50 ms budget);
``--http`` adds the full page callback through Flask. ``--browser`` opens the page of the first sample in
headless Chromium against gunicorn (``gunicorn.conf.py``; ``--src``: another source tree of the app) and
times, from the navigation's start, the page's body in (the end of its biggest callback answer), the strip
filled (the page's ``tokens-strip-filled`` mark) and every per-position chart drawn, with the bytes of the
page's callbacks (the first load warms the server; the
next ``--browser-loads`` are timed). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from data.config import DEFAULT_PAD_TOKENS  # noqa: E402

WORDS = "the model said that we will go to a very good place and then think about it again".split()


def write_long_run(run_dir: Path | str, tokens: int = 4000, others: int = 7, seed: int = 0) -> str:
    """Write ``run_dir/data.jsonl``: one step of ``others + 1`` responses, the first with ``tokens`` tokens
    (byte-level ``Ġ`` / ``Ċ`` markers, TRL's trailing ``<pad>`` carrying the reward), the others 20 tokens.
    Returns the sample id of the long response (line 1)."""
    from data.store import sample_id

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(others + 1):
        n = tokens if i == 0 else 20
        toks = []
        for k in range(n - 2):
            w = WORDS[int(rng.integers(len(WORDS)))]
            toks.append(("Ċ" if k % 97 == 96 else "Ġ") + w)
        toks += ["<|endoftext|>", "<pad>"]
        ref = -rng.exponential(1.0, n - 1)
        lp = ref + rng.normal(0.0, 0.3, n - 1)
        tr = np.append(-0.04 * (lp - ref), 0.0)
        reward = float(rng.normal(1.0, 0.5))
        tr[-1] = reward
        values = np.cumsum(tr[::-1])[::-1] + rng.normal(0, 0.2, n)
        response = "".join(t.replace("Ġ", " ").replace("Ċ", "\n") for t in toks[:-2]) + "<|endoftext|><pad>"
        rec = {
            "prompt": f"Write something long, number {i}.",
            "response": response,
            "response_tokens": toks,
            "logprobs": lp.round(5),
            "ref_logprobs": ref.round(5),
            "values": values.round(5),
            "token_rewards": tr.round(6),
            "reward": reward,
            "ref_reward": float(rng.normal(0.8, 0.5)),
            "ref_response": "a short reference answer",
            "step": 1,
        }
        lines.append(orjson.dumps(rec, option=orjson.OPT_SERIALIZE_NUMPY))
    (run_dir / "data.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    return sample_id("data.jsonl", 1)


def build_parts(view, metric: str = "kl") -> dict:
    """What the page builds for a response (strip data, legend, figures, tables), as plain objects."""
    from components.theme import colour_stops
    from components.token_figures import logprob_figure, token_reward_figure, value_figure
    from components.token_strip import legend, strip_data
    from components.token_tables import top_table
    from data.metrics import METRICS, label
    from data.tokens import HOVER_METRICS, hover_metrics, scale_range, top_tokens, visible_tokens

    labels = {k: label(k) for k in HOVER_METRICS}
    shown = visible_tokens(view.tokens, False)
    signed = METRICS[metric].signed
    lo, hi = scale_range(metric, shown.get_column(metric))
    stops = colour_stops(metric, signed)
    return {
        "strip": strip_data(
            shown, metric, lo, hi, stops, "bench", [(m, labels[m]) for m in hover_metrics(view.fields)]
        ),
        "legend": legend(labels[metric], lo, hi, stops, signed),
        "figures": [
            logprob_figure(shown, labels),
            value_figure(shown, labels),
            token_reward_figure(shown, labels),
        ],
        "tables": [
            top_table(top_tokens(view.tokens, "log_ratio"), "top", labels, "a"),
            top_table(top_tokens(view.tokens, "kl"), "top", labels, "b"),
        ],
    }


def _serialize(parts: dict) -> int:
    from plotly.io.json import to_json_plotly

    payload = {
        "strip": parts["strip"],
        "legend": parts["legend"].to_plotly_json(),
        "figures": [f.to_plotly_json() for f in parts["figures"]],
        "tables": [t.to_plotly_json() for t in parts["tables"]],
    }
    return len(to_json_plotly(payload))


def time_sample(store, sample: str, pad_tokens) -> dict:
    """Cold timings (ms) of one sample: read, view, build, serialize; plus its token count and JSON size."""
    from data.tokens import build_view

    t0 = time.perf_counter()
    part, row = store.lookup(sample)
    frame = store.read_rows(part, [row])
    t1 = time.perf_counter()
    step = frame.item(0, "step")
    view = build_view(frame, store.scan(["sample_id", "source", "line", "step"], step=step), pad_tokens)
    t2 = time.perf_counter()
    parts = build_parts(view)
    t3 = time.perf_counter()
    size = _serialize(parts)
    t4 = time.perf_counter()
    return {
        "read": (t1 - t0) * 1e3,
        "view": (t2 - t1) * 1e3,
        "build": (t3 - t2) * 1e3,
        "serialize": (t4 - t3) * 1e3,
        "server": (t3 - t0) * 1e3,
        "tokens": view.tokens.height,
        "json_bytes": size,
    }


def _summary(rows: list[dict]) -> dict:
    out = {}
    for key in ("server", "read", "view", "build", "serialize"):
        v = sorted(r[key] for r in rows)
        out[key] = {
            "p50": round(statistics.median(v), 2),
            "p95": round(v[min(len(v) - 1, int(0.95 * len(v)))], 2),
            "max": round(v[-1], 2),
        }
    return out


def _http_ms(run_dir: Path, cache_dir: Path, sample: str, repeat: int = 5) -> float:
    """Median time of the page-content callback (Dash's router) for one sample, via the Flask client."""
    os.environ["RLBOARD_ROOT"] = str(run_dir.parent)
    os.environ["RLBOARD_CACHE_DIR"] = str(cache_dir)
    os.environ["RLBOARD_DEMO"] = "0"
    import app as app_module

    client = app_module.app.server.test_client()
    client.get("/")
    search = f"?run={run_dir.name}&sample={sample}"
    body = {
        "output": ".._pages_content.children..._pages_store.data..",
        "outputs": [
            {"id": "_pages_content", "property": "children"},
            {"id": "_pages_store", "property": "data"},
        ],
        "inputs": [
            {"id": "_pages_location", "property": "pathname", "value": "/tokens"},
            {"id": "_pages_location", "property": "search", "value": search},
        ],
        "changedPropIds": ["_pages_location.pathname"],
        "state": [],
    }
    times = []
    for _ in range(repeat):
        from data.tokens import _cached_view

        _cached_view.cache_clear()
        t = time.perf_counter()
        r = client.post("/_dash-update-component", json=body)
        times.append((time.perf_counter() - t) * 1e3)
        assert r.status_code == 200, r.data[:300]
    return round(statistics.median(times), 2)


# Every per-position chart drawn: each graph of the charts' row has its traces in the SVG.
CHARTS_DRAWN_JS = """
var graphs = document.querySelectorAll('#tokens-charts .js-plotly-plot');
if (!graphs.length) { return null; }
for (var i = 0; i < graphs.length; i++) {
    if (!graphs[i].querySelector('.scatterlayer .trace, .barlayer .trace')) { return null; }
}
return performance.now();
"""
STRIP_FILLED_JS = """
var m = performance.getEntriesByName('tokens-strip-filled');
return m.length ? m[m.length - 1].startTime : null;
"""
# The page's body in: the end of the biggest callback answer (the page content, strip data included). The
# strip filled minus this is the browser's part (render, then fill); before it, start-up and the server.
BODY_IN_JS = """
var b = performance.getEntriesByType('resource')
    .filter(function (e) { return e.name.indexOf('_dash-update-component') >= 0; })
    .sort(function (x, y) { return (y.encodedBodySize || 0) - (x.encodedBodySize || 0); })[0];
return b ? b.responseEnd : null;
"""
CALLBACK_BYTES_JS = """
return performance.getEntriesByType('resource')
    .filter(function (e) { return e.name.indexOf('_dash-update-component') >= 0; })
    .reduce(function (a, e) { return a + (e.encodedBodySize || 0); }, 0);
"""


def browser_times(run_dir: Path, cache_dir: Path, sample: str, src: Path, loads: int) -> dict:
    """Open the token page of ``sample`` in headless Chromium (gunicorn serving ``src``): per load, ms from
    navigation start to the strip filled and to every chart drawn, and the callbacks' bytes."""
    import shutil

    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options

    from benchmarks.bench_scale import Server

    opts = Options()
    opts.binary_location = shutil.which("chromium") or shutil.which("chromium-browser") or ""
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--no-first-run", "--window-size=1440,1000"):  # fmt: skip
        opts.add_argument(flag)
    out = []
    with Server(src, run_dir.parent, cache_dir, cache_dir / "gunicorn-tokens.log") as srv:
        driver = webdriver.Chrome(options=opts)
        try:
            url = f"{srv.base}/tokens?run={run_dir.name}&sample={sample}"
            for i in range(loads + 1):
                driver.get("about:blank")
                driver.get(url)
                deadline = time.monotonic() + 120
                strip = charts = None
                while time.monotonic() < deadline and (strip is None or charts is None):
                    strip = strip or driver.execute_script(STRIP_FILLED_JS)
                    charts = charts or driver.execute_script(CHARTS_DRAWN_JS)
                    time.sleep(0.02)
                if i == 0:
                    continue  # the first load warms the server's caches and the browser's
                out.append(
                    {
                        "body_in_ms": round(driver.execute_script(BODY_IN_JS) or 0),
                        "strip_filled_ms": None if strip is None else round(strip),
                        "charts_drawn_ms": None if charts is None else round(charts),
                        "callback_kb": round(driver.execute_script(CALLBACK_BYTES_JS) / 1024, 1),
                        "spans": driver.execute_script(
                            "return document.querySelectorAll('#tokens-strip > span').length;"
                        ),
                    }
                )
        finally:
            driver.quit()
    drawn = [max(r["strip_filled_ms"] or 1e9, r["charts_drawn_ms"] or 1e9) for r in out]
    return {"loads": out, "drawn_ms_median": round(statistics.median(drawn)), "load_avg": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir")
    p.add_argument("cache_dir")
    p.add_argument("--samples", type=int, default=40)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--long", type=int, default=0, help="first write RUN_DIR with one response of N tokens")
    p.add_argument("--http", action="store_true", help="also time the page callback through Flask")
    p.add_argument("--browser", action="store_true", help="time the page drawn in headless Chromium")
    p.add_argument("--browser-loads", type=int, default=3)
    p.add_argument("--src", type=Path, default=ROOT, help="source tree of the app served (--browser)")
    args = p.parse_args(argv)
    run_dir, cache_dir = Path(args.run_dir), Path(args.cache_dir)

    from data.ingest import ingest_run
    from data.store import open_store

    long_id = write_long_run(run_dir, args.long) if args.long else None
    t = time.perf_counter()
    res = ingest_run(run_dir, cache_dir, DEFAULT_PAD_TOKENS)
    ingest_s = time.perf_counter() - t
    store = open_store(res.store_dir)
    scalars = store.scalars()
    ids = scalars.get_column("sample_id").to_list()
    rng = random.Random(args.seed)
    picks = [long_id] * 5 if long_id else rng.sample(ids, min(args.samples, len(ids)))
    time_sample(store, picks[0], DEFAULT_PAD_TOKENS)  # warm-up: imports, Plotly validators
    rows = [time_sample(store, s, DEFAULT_PAD_TOKENS) for s in picks]
    out = {
        "run": str(run_dir),
        "responses": len(ids),
        "ingest_s": round(ingest_s, 2),
        "samples_timed": len(rows),
        "tokens_p50": int(statistics.median(r["tokens"] for r in rows)),
        "json_kb_p50": round(statistics.median(r["json_bytes"] for r in rows) / 1024, 1),
        "ms": _summary(rows),
    }
    if args.http:
        out["http_page_ms_p50"] = _http_ms(run_dir, cache_dir, picks[0])
    if args.browser:
        out["browser"] = browser_times(
            run_dir.resolve(), cache_dir.resolve(), picks[0], args.src.resolve(), args.browser_loads
        )
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
