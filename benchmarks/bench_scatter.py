"""The scatter page's data at scale: one step, a range of steps and every step of a run's store.

    uv run python benchmarks/bench_scatter.py STORE_DIR [--rounds 5] [--range 500]

``STORE_DIR`` is a run's store (e.g. the 2.56M-response run ``bench_scale.py --keep`` leaves; only its
``scalars/``, manifest and derived files are read, so a copy without ``parts/`` and ``text/`` will do).
Each round times, cold (the results cache cleared first), :func:`data.scatter.scatter` of reward against
KL sum at the last step (points), over ``--range`` steps and over every step (a 2-D histogram), and the
responses page's count of a box over every step (``search.order.count_or_progress`` of its filter); and,
interleaved with the all-steps scatter, the same two columns read from a scan of every scalar column
(what reading "only the two columns" saves). Medians of the rounds; the size of each figure's JSON. The
load average is printed: this machine's 2 cores are shared, so compare figures of one run only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import polars as pl  # noqa: E402

from components import scatter as sv  # noqa: E402
from data import scatter as sd  # noqa: E402
from data.search import order as search_order  # noqa: E402
from data.store import open_store  # noqa: E402
from data.views.scatter import ScatterView, box_responses  # noqa: E402


def timed(fn) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def every_column(store, steps: sd.Steps) -> int:
    """The baseline: every scalar column of the steps read, then the two columns taken."""
    lf = store.scan() if steps.first is None else store.scan(steps=(steps.first, steps.last))
    both = lf.collect().select(sd.axis_expr("kl_sum"), sd.axis_expr("reward"))
    return both.height


def figure_bytes(sc: sd.Scatter) -> int:
    if sc.density:
        c = sc.cells
        fig = sv.density_figure(
            sc.x_edges, sc.y_edges, c["xbin"], c["ybin"], c["count"], x_label="x", y_label="y"
        )
    else:
        p = sc.points
        fig = sv.points_figure(
            p["x"], p["y"], p["step"], p["sample_id"], x_label="x", y_label="y", colour="#000000"
        )
    return len(fig.to_json())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store", type=Path)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--range", type=int, default=500, help="steps in the range scatter")
    args = ap.parse_args()
    store = open_store(args.store)
    steps = store.steps_columns(["step"]).get_column("step").to_list()
    n_rows = store.scan(["step"]).select(pl.len()).collect().item()
    cases = {
        "one_step": sd.Steps(steps[-1], steps[-1]),
        "range": sd.Steps(steps[-args.range], steps[-1]),
        "all_steps": sd.Steps(),
    }
    sd.scatter(store, "kl_sum", "reward", cases["one_step"])  # opens the results cache, so that clearing it
    times: dict[str, list[float]] = {k: [] for k in [*cases, "all_steps_every_column", "box_count_all_steps"]}
    info: dict[str, dict] = {}
    for _ in range(args.rounds):
        for name, st in cases.items():
            sd._scatter.cache_clear()
            t, sc = timed(lambda st=st: sd.scatter(store, "kl_sum", "reward", st))
            times[name].append(t)
            info[name] = {"drawn": sc.n, "density": sc.density, "figure_json_bytes": figure_bytes(sc)}
            if name == "all_steps":
                # Interleaved, in turn first and second, so the machine's drift falls on both alike.
                t_all, _ = timed(lambda: every_column(store, sd.Steps()))
                times["all_steps_every_column"].append(t_all)
                drawn = sc
        view = ScatterView("run", every=True)
        mid_x = (drawn.x_edges[0] + drawn.x_edges[-1]) / 2
        mid_y = (drawn.y_edges[0] + drawn.y_edges[-1]) / 2
        box = sd.brushed(drawn, (drawn.x_edges[0], mid_x), (mid_y, drawn.y_edges[-1]))
        flt = box_responses(ScatterView(view.run, every=True, box=box), steps).response_filter(steps)
        search_order._summary.cache_clear()
        t, got = timed(lambda flt=flt: search_order.count_or_progress(store, flt))
        times["box_count_all_steps"].append(t)
        info["box_count_all_steps"] = {"count": got.count, "box": box.text("kl_sum", "reward")}
    med = {k: round(statistics.median(v), 4) for k, v in times.items()}
    out = {
        "store": str(args.store),
        "responses": n_rows,
        "steps": len(steps),
        "rounds": args.rounds,
        "load_1min": round(os.getloadavg()[0], 2),
        "seconds_median": med,
        "every_column_over_two_columns": round(med["all_steps_every_column"] / med["all_steps"], 2),
        "cases": info,
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
