"""Compare page benchmark: every query of ``/compare`` on two runs, cold and warm, with its payload size.

    python benchmarks/bench_compare.py RUN_A RUN_B CACHE_DIR [--repeat 7] [--trainer-log] [--callbacks]

RUN_A and RUN_B are run folders under one rollout root (generated with ``benchmarks/generate.py``; see
benchmarks/README.md), ingested into CACHE_DIR here when they are not yet. With ``--trainer-log`` a
``trl_log_history.json`` of 24 keys per step (the run's own mean reward as ``reward``, so that the
agreement check has work to do) is written into each run folder first, as TRL's GRPO logs it.

Each query is timed as the page calls it: "cold" once in a fresh state (the runs' scalars not in memory,
no cached aggregate), "cold_aggregates" with the scalars in memory but nothing cached (as after a new
step), and "warm" the min / median / max of ``--repeat`` later calls. ``json_bytes`` is the size of the
query's result as JSON (orjson, frames as columns like a figure's arrays), what the page sends for it at
most (``load_runs`` stays on the server: no size). Prints one JSON object; ``limits`` are the issue's: warm <= 100 ms, <= 300 kB.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

LIMIT_MS = 100.0
LIMIT_BYTES = 300_000
TRAINER_KEYS = 24
SERVER_ONLY = ("load_runs",)  # results the page never sends as they are


def _size(obj) -> int:
    """JSON size of a query result: frames as rows, dataclasses as their fields."""
    import dataclasses

    import polars as pl

    def conv(o):
        if isinstance(o, pl.DataFrame):
            return o.to_dict(as_series=False)  # columns, as a figure's arrays carry them
        if dataclasses.is_dataclass(o):
            return {f.name: conv(getattr(o, f.name)) for f in dataclasses.fields(o)}
        if isinstance(o, list | tuple):
            return [conv(x) for x in o]
        if isinstance(o, dict):
            return {str(k): conv(v) for k, v in o.items()}
        return o

    return len(
        orjson.dumps(conv(obj), option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS, default=str)
    )


def write_trainer_log(store, run_dir: Path) -> None:
    """A TRL-GRPO-like log history: ``reward`` (the run's own per-step mean) and 23 other keys per step,
    and the final summary entry."""
    steps = store.steps().sort("step")
    entries = []
    for i, (step, reward) in enumerate(steps.select("step", "reward_mean").iter_rows()):
        e = {"reward": reward, "loss": 1.0 / (1 + i), "learning_rate": 1e-6, "grad_norm": 0.5 + (i % 7) / 10}
        e.update({f"extra/metric_{k}": float(k * i) for k in range(TRAINER_KEYS - len(e))})
        e["step"] = int(step)
        entries.append(e)
    entries.append({"train_runtime": 1.0, "train_loss": 0.1, "step": int(steps.item(-1, "step"))})
    (run_dir / "trl_log_history.json").write_text(json.dumps(entries))


def _clear(scalars: bool) -> None:
    from data import curves
    from data.compare import curves as ccurves
    from data.compare import distribution, prompts, trainer
    from data.store import reader
    from data.trainer_logs import scalars as tscalars

    if scalars:
        reader.forget_indexes()
    for fn in (
        curves._steps,
        curves._bins,
        curves._bars,
        ccurves._run_frame,
        distribution._distinct,
        distribution._bars_cached,
        prompts._run_prompts,
    ):
        fn.cache_clear()
    prompts._pair.cache_clear()
    trainer._checks.cache_clear()
    with tscalars._LOCK:
        tscalars._CACHE.clear()


def _queries(board, a: str, b: str) -> dict:
    """name -> a call of the page's data functions (each returns what the page draws)."""
    from data.compare import curves, distribution, prompts, summary, trainer, word_diff
    from data.compare.runs import load_runs
    from data.trainer_logs import trainer_scalars

    def runs():
        return load_runs(board, [a, b])[0]

    def frames():
        return {r.name: r.frame for r in runs()}

    def stores():
        return {r.name: r.store for r in runs()}

    def all_curves():
        f = frames()
        return [curves.overlay(f, k, band="p25-p75", smoothing=0.6) for k in curves.metrics_of(f)]

    def curves_samples():
        f = frames()
        return [curves.overlay(f, k, smoothing=0.9, x="samples") for k in curves.metrics_of(f)]

    def dist():
        s = stores()
        steps = {r.name: int(r.frame.item(r.frame.height // 2, "step")) for r in runs()}
        return distribution.distributions(s, steps, distribution.shared_bins(s))

    def paired():
        s = stores()
        p = prompts.pair(a, s[a], b, s[b])
        # What the scatter and its histogram draw: both rewards, the difference and the prompt's preview.
        return p.table.select("match", "preview", "a_reward", "b_reward", "diff"), p.over_steps, p.notes

    def solved():
        s = stores()
        p = prompts.pair(a, s[a], b, s[b])
        return p.solved_by("a").head(50), p.solved_by("b").head(50)

    def responses_and_diff():
        s = stores()
        p = prompts.pair(a, s[a], b, s[b])
        row = p.table.row(p.table.height - 1, named=True)  # the largest difference in A's favour
        ra = prompts.prompt_responses(s[a], row["a_keys"], row["a_step"])
        rb = prompts.prompt_responses(s[b], row["b_keys"], row["b_step"])
        return ra, rb, word_diff.word_diff(ra.item(0, "response"), rb.item(0, "response"))

    def trainer_curve():
        rs = runs()
        logs = {r.name: trainer_scalars(r.run_dir) for r in rs}
        return trainer.trainer_overlay(logs, {r.name: r.frame for r in rs}, "loss", smoothing=0.6)

    def agreement():
        return [trainer.agreement(r.store, r.run_dir) for r in runs()]

    return {
        "load_runs": runs,
        "curves_all_metrics": all_curves,
        "curves_samples_axis": curves_samples,
        "step_notes": lambda: curves.step_notes(frames()),
        "summary_table": lambda: summary.summary_table(frames()),
        "distributions": dist,
        "paired_prompts": paired,
        "solved_lists": solved,
        "prompt_responses_and_diff": responses_and_diff,
        "trainer_curve": trainer_curve,
        "agreement": agreement,
    }


def _i(cid, prop, value):
    return {"id": cid, "property": prop, "value": value}


def _body(output: str, inputs: list, state: list, changed: list[str]) -> dict:
    parts = output.strip(".").split("...")
    outputs = [{"id": p.rsplit(".", 1)[0], "property": p.rsplit(".", 1)[1]} for p in parts]
    return {"output": output, "outputs": outputs if output.startswith("..") else outputs[0], "inputs": inputs,
            "state": state, "changedPropIds": changed}  # fmt: skip


def _callback_bodies(a: str, b: str, match: str) -> dict[str, dict]:
    """The compare page's callbacks as the browser POSTs them: name -> request body."""
    from urllib.parse import urlencode

    q = "?" + urlencode([("run", a), ("run", b), ("smooth", "0.6")])
    view = lambda search: [_i("compare-view", "data", search)]  # noqa: E731
    sections = {
        "curves_and_summary": "..compare-summary.children...compare-step-notes.children...compare-curves.children..",
        "trainer_and_agreement": "..compare-trainer-fig.figure...compare-trainer-notes.children...compare-agreement.children..",
        "distributions": "..compare-dist.figure...compare-dist-notes.children..",
        "paired_prompts": "..compare-scatter.figure...compare-diff-hist.figure...compare-over.figure...compare-pair-notes.children"
        "...compare-solved-a-title.children...compare-solved-a.children...compare-solved-b-title.children...compare-solved-b.children..",
    }  # fmt: skip
    out = {
        "page_layout": _body(
            ".._pages_content.children..._pages_store.data..",
            [_i("_pages_location", "pathname", "/compare"), _i("_pages_location", "search", q)],
            [],
            ["_pages_location.search"],
        ),
        "sync_x_axis": _body(
            "..compare-url.search...compare-view.data..",
            [
                _i("compare-url", "search", q),
                _i("compare-smooth", "value", 0.6),
                _i("compare-x", "value", "samples"),
                _i("compare-band", "value", "std"),
                _i("compare-trainer", "value", None),
                _i("compare-a", "value", a),
                _i("compare-b", "value", b),
                _i("compare-solved", "value", None),
                [_i({"type": "compare-at", "run": r}, "value", None) for r in (a, b)],
                _i("compare-scatter", "clickData", None),
                [],
                _i("compare-close", "n_clicks", None),
            ],
            [
                [
                    _i({"type": "compare-at", "run": r}, "id", {"type": "compare-at", "run": r})
                    for r in (a, b)
                ],
                _i("compare-view", "data", q),
            ],
            ["compare-x.value"],
        ),  # fmt: skip
    }
    for name, output in sections.items():
        out[name] = _body(output, view(q), [], ["compare-view.data"])
        out[name + "_samples_axis"] = _body(output, view(q + "&x=samples"), [], ["compare-view.data"])
    out["opened_prompt"] = _body(
        "..compare-opened.children...compare-close.className..",
        view(q + f"&prompt={match}"),
        [],
        ["compare-view.data"],
    )
    return out


def _callbacks(run_a: Path, run_b: Path, cache_dir: Path, repeat: int) -> dict:
    """Cold and warm times and answer sizes of every callback of the compare page."""
    os.environ["RLBOARD_ROOT"] = str(run_a.parent)
    os.environ["RLBOARD_CACHE_DIR"] = str(cache_dir)
    os.environ["RLBOARD_REFRESH_SECONDS"] = "1000000"
    import app as app_module
    from data.compare import prompts
    from data.service import board

    b = board()
    sa, sb = b.store(run_a.name), b.store(run_b.name)
    p = prompts.pair(run_a.name, sa, run_b.name, sb)
    match = p.table.item(p.table.height - 1, "match")
    client = app_module.app.server.test_client()
    out = {}
    for name, body in _callback_bodies(run_a.name, run_b.name, match).items():
        times, size = [], 0
        _clear(scalars=True)
        for _ in range(repeat + 1):
            t = time.perf_counter()
            r = client.post("/_dash-update-component", json=body)
            times.append((time.perf_counter() - t) * 1000)
            if r.status_code not in (200, 204):
                raise RuntimeError(f"{name}: {r.status_code} {r.data[:300]!r}")
            size = max(size, len(r.data))
        warm = times[1:]
        out[name] = {
            "cold_ms": round(times[0], 1),
            "warm_min_ms": round(min(warm), 1),
            "warm_median_ms": round(statistics.median(warm), 1),
            "warm_max_ms": round(max(warm), 1),
            "json_bytes": size,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_a")
    ap.add_argument("run_b")
    ap.add_argument("cache_dir")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--trainer-log", action="store_true")
    ap.add_argument("--callbacks", action="store_true", help="time the page's callbacks too")
    args = ap.parse_args(argv)
    run_a, run_b = Path(args.run_a).resolve(), Path(args.run_b).resolve()
    if run_a.parent != run_b.parent:
        ap.error("the two runs must be under one rollout root")

    from data.config import Settings
    from data.service import Board

    board = Board(Settings(root=run_a.parent, cache_dir=Path(args.cache_dir).resolve(), refresh_seconds=1e9))
    t0 = time.perf_counter()
    for run in (run_a, run_b):
        board.ingest_now(run.name)
        if args.trainer_log:
            write_trainer_log(board.store(run.name), run)
    ingest_s = time.perf_counter() - t0

    results = {}
    for name, fn in _queries(board, run_a.name, run_b.name).items():
        _clear(scalars=True)
        t = time.perf_counter()
        fn()
        cold = (time.perf_counter() - t) * 1000
        _clear(scalars=False)
        t = time.perf_counter()
        fn()
        cold_agg = (time.perf_counter() - t) * 1000
        warm = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            out = fn()
            warm.append((time.perf_counter() - t) * 1000)
        results[name] = {
            "cold_ms": round(cold, 1),
            "cold_aggregates_ms": round(cold_agg, 1),
            "warm_min_ms": round(min(warm), 1),
            "warm_median_ms": round(statistics.median(warm), 1),
            "warm_max_ms": round(max(warm), 1),
            "json_bytes": None if name in SERVER_ONLY else _size(out),
        }
    stores = {r: board.store(r) for r in (run_a.name, run_b.name)}
    out = {
        "runs": {
            r: {
                "bytes_on_disk": sum(p.stat().st_size for p in (run_a.parent / r).glob("*.jsonl")),
                "samples": int(s.scalars().height),
                "steps": int(s.steps().height),
            }
            for r, s in stores.items()
        },
        "load_average_1min": round(os.getloadavg()[0], 1),
        "cpus": os.cpu_count(),
        "ingest_check_s": round(ingest_s, 2),
        "limits": {"warm_ms": LIMIT_MS, "json_bytes": LIMIT_BYTES},
        "queries": results,
        "all_warm_within_limit": all(r["warm_max_ms"] <= LIMIT_MS for r in results.values()),
        "all_json_within_limit": all((r["json_bytes"] or 0) <= LIMIT_BYTES for r in results.values()),
    }
    if args.callbacks:
        cbs = _callbacks(run_a, run_b, Path(args.cache_dir).resolve(), args.repeat)
        out["callbacks"] = cbs
        out["callbacks_warm_within_limit"] = all(r["warm_max_ms"] <= LIMIT_MS for r in cbs.values())
        out["callbacks_json_within_limit"] = all(r["json_bytes"] <= LIMIT_BYTES for r in cbs.values())
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
