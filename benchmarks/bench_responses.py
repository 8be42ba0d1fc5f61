"""Responses page benchmark on an ingested run; prints one JSON object.

    uv run python benchmarks/bench_responses.py RUN_DIR CACHE_DIR [--step S] [--export-rows N]

Measures (cold = the page's caches emptied first):
- the first grid page (rows 0-100) of one step sorted by every sortable column, both orders, through
  ``data.responses`` and end to end through the grid's Dash callback (Flask test client);
- ``step=all`` sorted by ``kl_mean`` with a regex filter (cold, then warm), and the time to build the
  text index that search scans (the page builds it in the background when it opens);
- a CSV export of about ``--export-rows`` rows (a reward threshold picks them), streamed: wall time, bytes,
  and the peak RSS growth while streaming (Linux ``VmHWM`` reset through ``/proc/self/clear_refs``), in a
  child process, next to the same for a 1,000-row export (the fixed cost of reading parts at all).
The store is only read: a run that has no store in CACHE_DIR yet is ingested first.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# Regexes over prompt and response: a case-insensitive word, an alternation, one that never matches.
PATTERNS = (r"(?i)\bsaxophones\b", r"Endgames|Grandmasters", r"zebra crossing")


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 1)


def _clear_caches() -> None:
    from data import responses

    responses.clear_caches()


def open_or_ingest(run_dir: Path, cache_dir: Path):
    from data.config import load_settings
    from data.ingest import ingest_run
    from data.store import open_store, store_dir_for

    pads = load_settings().pad_tokens
    store = open_store(store_dir_for(cache_dir, run_dir, pads))
    if store is None:
        store = open_store(ingest_run(run_dir, cache_dir, pads).store_dir)
    return store


def first_pages(store, step: int) -> dict:
    """Cold first page of ``step`` for every sortable column and both orders (data layer)."""
    from data.responses import json_rows, page_rows, sortable_columns
    from data.run_context import steps_of
    from data.views.responses import ResponsesView

    steps = steps_of(store)
    flt = ResponsesView(step=step).response_filter(steps)
    per_col = {}
    for col in sortable_columns(store):
        times = []
        for desc in (True, False):
            _clear_caches()
            t0 = time.perf_counter()
            df, count = page_rows(store, flt, col, desc, 0, 100)
            json_rows(df)
            times.append(_ms(t0))
        per_col[col] = max(times)
    return {
        "step": step,
        "rows_in_step": count,
        "max_ms": max(per_col.values()),
        "median_ms": round(statistics.median(per_col.values()), 1),
        "per_column_max_ms": per_col,
    }


def callback_pages(run_dir: Path, cache_dir: Path, step: int, columns: list[str]) -> dict:
    """Cold first page through the grid's Dash callback (JSON in, rows with links out), per column."""
    os.environ["RLBOARD_ROOT"] = str(run_dir.parent)
    os.environ["RLBOARD_CACHE_DIR"] = str(cache_dir)
    os.environ.setdefault("RLBOARD_REFRESH_SECONDS", "3600")
    import app as app_module

    client = app_module.app.server.test_client()
    view = f"?run={run_dir.name}&step={step}"
    client.get(f"/responses{view}")  # first request: app start-up, store refresh check (not timed)
    per_col = {}
    for col in columns:
        times = []
        for order in ("desc", "asc"):
            _clear_caches()
            body = {
                "output": "responses-grid.getRowsResponse",
                "outputs": {"id": "responses-grid", "property": "getRowsResponse"},
                "inputs": [
                    {
                        "id": "responses-grid",
                        "property": "getRowsRequest",
                        "value": {"startRow": 0, "endRow": 100, "sortModel": [{"colId": col, "sort": order}]},
                    }
                ],
                "state": [{"id": "responses-view", "property": "data", "value": view}],
                "changedPropIds": ["responses-grid.getRowsRequest"],
            }
            t0 = time.perf_counter()
            r = client.post("/_dash-update-component", json=body)
            times.append(_ms(t0))
            assert r.status_code == 200, r.data[:300]
        per_col[col] = max(times)
    return {
        "max_ms": max(per_col.values()),
        "median_ms": round(statistics.median(per_col.values()), 1),
        "per_column_max_ms": per_col,
    }


def text_index_build(store) -> dict:
    """Time to write the text index of every part from scratch (in a temporary folder) and its size."""
    import shutil
    import tempfile

    from data.derived.text import index_new_parts

    tmp = Path(tempfile.mkdtemp(prefix="bench-text-index-"))
    try:
        # What ingest adds over its commits (data.derived.text), here every part at once, into a
        # copy's folder (the store's own index files are left alone).
        for f in store.part_files():
            (tmp / f.relative_to(store.dir)).parent.mkdir(parents=True, exist_ok=True)
            (tmp / f.relative_to(store.dir)).symlink_to(f)
        t0 = time.perf_counter()
        files = index_new_parts(tmp, [f.relative_to(store.dir).as_posix() for f in store.part_files()])
        seconds = time.perf_counter() - t0
        size = sum(f.stat().st_size for f in files)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"seconds": round(seconds, 2), "mb": round(size / 1e6, 1)}


def regex_all_steps(store) -> list[dict]:
    from data.responses import json_rows, page_rows
    from data.run_context import steps_of
    from data.search.texts import text_index_files
    from data.views.responses import ResponsesView

    text_index_files(store)  # written by ingest; built here for a store ingested before it was
    steps = steps_of(store)
    out = []
    for pattern in PATTERNS:
        flt = ResponsesView(step="all", q=pattern).response_filter(steps)
        _clear_caches()
        t0 = time.perf_counter()
        df, count = page_rows(store, flt, "kl_mean", True, 0, 100)
        json_rows(df)
        cold = _ms(t0)
        t0 = time.perf_counter()
        page_rows(store, flt, "kl_mean", True, 100, 200)
        out.append({"q": pattern, "matches": count, "cold_ms": cold, "next_page_warm_ms": _ms(t0)})
    return out


def all_steps_pages(store) -> dict:
    """step=all without a filter: cold first page (one sort of the whole run) and a later page (cached)."""
    from data.responses import json_rows, page_rows
    from data.run_context import steps_of
    from data.views.responses import ResponsesView

    flt = ResponsesView(step="all").response_filter(steps_of(store))
    out = {}
    for col in ("kl_mean", "reward"):
        _clear_caches()
        t0 = time.perf_counter()
        df, _count = page_rows(store, flt, col, True, 0, 100)
        json_rows(df)
        cold = _ms(t0)
        t0 = time.perf_counter()
        json_rows(page_rows(store, flt, col, True, 5000, 5100)[0])
        out[col] = {"cold_ms": cold, "page_5000_warm_ms": _ms(t0)}
    return out


def regex_one_step(store, step: int) -> dict:
    """Cold first page of one step with a regex filter (the parts' statistics skip the other steps)."""
    from data.responses import json_rows, page_rows
    from data.run_context import steps_of
    from data.views.responses import ResponsesView

    flt = ResponsesView(step=step, q=PATTERNS[0]).response_filter(steps_of(store))
    _clear_caches()
    t0 = time.perf_counter()
    df, count = page_rows(store, flt, "reward", True, 0, 100)
    json_rows(df)
    return {"step": step, "q": PATTERNS[0], "matches": count, "cold_ms": _ms(t0)}


def export_rows(store, n_rows: int) -> dict:
    """Stream a CSV export of the ~n_rows best-rewarded responses (all steps, by reward); peak RSS growth."""
    import polars as pl

    from data.export import export_stream
    from data.queries import ResponseFilter

    rewards = store.scalars().get_column("reward").drop_nans().drop_nulls().sort(descending=True)
    threshold = float(rewards[min(n_rows, len(rewards)) - 1])
    flt = ResponseFilter(step=None, reward_min=threshold)
    expected = store.scalars().filter(pl.col("reward") >= threshold).height
    rss_before = _status_kb("VmRSS")
    peak_ok = _reset_peak()
    t0 = time.perf_counter()
    size = lines = chunks = 0
    biggest_chunk = 0
    for chunk in export_stream(store, flt, "csv", "reward", True):
        size += len(chunk)
        lines += chunk.count(b"\n")  # texts may hold newlines (quoted): an upper bound of rows + 1
        chunks += 1
        biggest_chunk = max(biggest_chunk, len(chunk))
    seconds = time.perf_counter() - t0
    peak = _status_kb("VmHWM")
    return {
        "rows": expected,
        "bytes": size,
        "chunks": chunks,
        "largest_chunk_bytes": biggest_chunk,
        "seconds": round(seconds, 2),
        "rows_per_s": round(expected / seconds),
        "rss_before_mb": round(rss_before / 1024, 1),
        "peak_rss_growth_mb": round((peak - rss_before) / 1024, 1) if peak_ok else None,
        "output_mb": round(size / 1e6, 1),
    }


def export_in_child(run_dir: Path, cache_dir: Path, n_rows: int) -> dict:
    code = (
        "import json,sys;sys.path.insert(0,%r);sys.path.insert(0,%r);from pathlib import Path;"
        "import bench_responses as b;s=b.open_or_ingest(Path(%r),Path(%r));s.index();"
        "print(json.dumps(b.export_rows(s,%d)))"
    ) % (str(REPO), str(REPO / "benchmarks"), str(run_dir), str(cache_dir), n_rows)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("cache_dir", type=Path)
    ap.add_argument("--step", type=int, help="step of the first-page test (default: the middle step)")
    ap.add_argument("--export-rows", type=int, default=100_000)
    ap.add_argument("--skip-callback", action="store_true", help="skip the end-to-end Dash callback timing")
    args = ap.parse_args(argv)
    run_dir = args.run_dir.resolve()

    from data.responses import sortable_columns
    from data.run_context import steps_of

    t0 = time.perf_counter()
    store = open_or_ingest(run_dir, args.cache_dir)
    open_ms = _ms(t0)
    t0 = time.perf_counter()
    scalars = store.scalars()
    load_ms = _ms(t0)
    steps = steps_of(store)
    step = args.step if args.step is not None else steps[len(steps) // 2]
    result = {
        "run": run_dir.name,
        "responses": scalars.height,
        "steps": len(steps),
        "open_store_ms": open_ms,
        "scalars_load_ms": load_ms,
        "first_page_of_step": first_pages(store, step),
        "first_page_of_last_step": first_pages(store, steps[-1]),
        "all_steps_first_page": all_steps_pages(store),
        "text_index_build": text_index_build(store),
        "all_steps_by_kl_mean_with_regex": regex_all_steps(store),
        "one_step_with_regex": regex_one_step(store, step),
    }
    if not args.skip_callback:
        result["first_page_via_callback"] = callback_pages(
            run_dir, args.cache_dir, step, sortable_columns(store)
        )
    # Each export in a fresh process (RSS growth not hidden by pools a previous test left). The small one's
    # growth is the fixed cost (parquet readers, allocator pools, thread pools); streaming keeps the large
    # one's growth close to it, far below its output size.
    result["export_csv_small"] = export_in_child(run_dir, args.cache_dir, 1000)
    result["export_csv"] = export_in_child(run_dir, args.cache_dir, args.export_rows)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
