"""The scatter's data (data/scatter.py) and view (data/views/scatter.py) on the real TRL GRPO run, checked
against the rollout files read by hand: each response's KL sum is Σ_t k3_t over its positions with both
log-probs (k3 = exp(r) − 1 − r, r = ref_logprob − logprob), as TRL's GRPOTrainer logged them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from data import scatter as sd
from data.config import DEFAULT_PAD_TOKENS
from data.ingest import ingest_run
from data.search.order import matching
from data.store import open_store
from data.views.scatter import ScatterView, box_responses

RUN = "trl-grpo-small"


class _Ctx:
    """A stand-in RunContext: the run, its steps, the step rule (the nearest step at or below)."""

    def __init__(self, run, steps):
        self.run, self.step_list, self.notices = run, steps, []

    def step(self, asked):
        below = [s for s in self.step_list if s <= asked]
        got = below[-1] if below else self.step_list[0]
        return got, ([] if got == asked else [f"step {asked} -> {got}"])


def hand_rows(run_dir: Path) -> list[dict]:
    """Every response of the run's files: file, line (from 1), step, reward and the KL sum by hand."""
    rows = []
    for f in sorted(run_dir.glob("*.jsonl")):
        for i, line in enumerate(f.read_text().splitlines(), 1):
            r = json.loads(line)
            kl = 0.0
            for lp, ref in zip(r["logprobs"], r["ref_logprobs"], strict=False):
                d = ref - lp
                kl += math.exp(d) - 1 - d
            rows.append({"source": f.name, "line": i, "step": r["step"], "reward": r["reward"], "kl_sum": kl})
    return rows


@pytest.fixture(scope="module")
def grpo(fixtures_dir, tmp_path_factory):
    run = fixtures_dir / RUN
    res = ingest_run(run, tmp_path_factory.mktemp("cache"), DEFAULT_PAD_TOKENS)
    return open_store(res.store_dir), hand_rows(run)


def test_scatter001_points_are_the_files_values(grpo):
    """At one step every response is a point at its (KL sum, reward) computed by hand from the file."""
    store, rows = grpo
    got = sd.scatter(store, "kl_sum", "reward", sd.Steps(7, 7))
    want = sorted((r["kl_sum"], r["reward"]) for r in rows if r["step"] == 7)
    assert not got.density and (got.n, got.missing) == (16, 0)
    pts = sorted(zip(got.points["x"].to_list(), got.points["y"].to_list(), strict=True))
    assert [p[1] for p in pts] == [w[1] for w in want]
    assert [p[0] for p in pts] == pytest.approx([w[0] for w in want], rel=1e-9, abs=1e-12)
    assert set(got.points["step"].to_list()) == {7}
    assert got.note(sd.Steps(7, 7)).startswith("16 responses at step 7: one point each")


def test_scatter002_density_counts_are_exact(grpo):
    """Past max_points the run is a 2-D histogram whose every cell holds exactly the responses a hand
    binning of the file's values puts there (bar k: edges[k] <= v < edges[k+1], the last one closed)."""
    store, rows = grpo
    got = sd.scatter(store, "kl_sum", "reward", sd.Steps(3, 20), max_points=50)
    assert got.density and got.n == sum(3 <= r["step"] <= 20 for r in rows) == 288

    def bar(v, edges):
        for k in range(len(edges) - 1):
            if edges[k] <= v < edges[k + 1] or (k == len(edges) - 2 and v == edges[-1]):
                return k
        raise AssertionError(v)

    want: dict[tuple[int, int], int] = {}
    for r in rows:
        if 3 <= r["step"] <= 20:
            cell = (bar(r["kl_sum"], got.x_edges), bar(r["reward"], got.y_edges))
            want[cell] = want.get(cell, 0) + 1
    cells = {(a, b): c for a, b, c in got.cells.iter_rows()}
    assert cells == want and sum(cells.values()) == 288
    assert got.x_edges[0] <= min(r["kl_sum"] for r in rows if 3 <= r["step"] <= 20)
    assert "more than 50, so drawn as a" in got.note(sd.Steps(3, 20))


def test_scatter003_no_values_is_said(fixtures_dir, tmp_path):
    """A run without log-probs (an evaluation dump) has no KL sum: nothing drawn, every response counted
    as missing."""
    store = open_store(
        ingest_run(fixtures_dir / "rlloggingboard-eval-poem", tmp_path, DEFAULT_PAD_TOKENS).store_dir
    )
    got = sd.scatter(store, "kl_sum", "reward", sd.Steps())
    assert (got.n, got.missing) == (0, 3000)
    assert "3,000 more have no finite KL sum (k3) or reward" in got.note(sd.Steps())
    lengths = sd.scatter(store, "length", "reward", sd.Steps(0, 0))
    assert lengths.n == 128 and lengths.missing == 0  # the length in characters where there are no tokens


def test_scatter004_snap_widens_to_the_lattice():
    """A box side snaps out to lattice points: the largest <= its low end, the smallest > its high end,
    written exactly (no 0.30000000000000004 in a URL)."""
    assert sd.snap(0.31, 0.62, (0.0, 0.05)) == (0.3, 0.65)
    assert sd.snap(0.3, 0.65, (0.0, 0.05)) == (0.3, 0.7)  # a high end on the lattice: the next point
    assert sd.snap(2.2, -1.1, (0.25, 0.5)) == (-1.25, 2.25)  # cell edges at 0.25 + k / 2, either way round
    assert sd.snap(1e-7, 3e-7, (0.0, 2e-8)) == (1e-7, 3.2e-7)


def test_scatter005_box_opens_exactly_the_files_rows(grpo):
    """A box dragged over steps 5-20 becomes the KL sum's and reward's range filters and the step's range
    (step_max = last + 1): the responses it opens are exactly those a hand filter of the files keeps."""
    store, rows = grpo
    ctx = _Ctx(RUN, sorted({r["step"] for r in rows}))
    view, msgs = ScatterView.from_query({"run": [RUN], "step": ["5-20"]}, ctx)
    assert msgs == [] and view.steps(ctx.step_list) == sd.Steps(5, 20)
    drawn = sd.scatter(store, view.x, view.y, view.steps(ctx.step_list))
    box = sd.brushed(drawn, (0.31, 6.07), (0.93, 2.61))
    assert box.x_min <= 0.31 and box.x_max > 6.07 and box.y_min <= 0.93 and box.y_max > 2.61
    resp = box_responses(ScatterView(RUN, span=(5, 20), box=box), ctx.step_list)
    assert (resp.step, resp.step_min, resp.step_max) == ("all", 5, 21)
    flt = resp.response_filter(ctx.step_list)
    got = matching(store, flt, ["source", "line"]).collect()
    want = {
        (r["source"], r["line"])
        for r in rows
        if 5 <= r["step"] <= 20
        and box.x_min <= r["kl_sum"] < box.x_max
        and box.y_min <= r["reward"] < box.y_max
    }
    assert 20 < len(want) < 280  # the box holds some responses of those steps, not all
    assert set(zip(got["source"].to_list(), got["line"].to_list(), strict=True)) == want
    assert got.height == len(want)


def test_scatter006_view_round_trip_and_notices():
    """The URL's steps (one, a range, all), columns and box decode and encode back; a bad value falls back
    with a notice."""
    ctx = _Ctx(RUN, [1, 2, 3, 10])
    q = "?run=trl-grpo-small&step=2-3&x=repetition&y=gain"
    view, msgs = ScatterView.from_query(
        {"run": [RUN], "step": ["2-3"], "x": ["repetition"], "y": ["reward_gain"]}, ctx
    )
    assert msgs == [] and view.span == (2, 3) and (view.x, view.y) == ("repetition", "reward_gain")
    assert view.to_query() == q.replace("gain", "reward_gain")
    view, msgs = ScatterView.from_query(
        {
            "run": [RUN],
            "step": ["7"],
            "kl_sum_min": ["1"],
            "kl_sum_max": ["2"],
            "reward_min": ["0"],
            "reward_max": ["3"],
        },
        ctx,
    )
    assert view.step == 3 and msgs == ["step 7 -> 3"] and view.box == sd.Box(1.0, 2.0, 0.0, 3.0)
    assert view.to_query() == f"?run={RUN}&step=3&kl_sum_min=1&kl_sum_max=2&reward_min=0&reward_max=3"
    assert box_responses(view, ctx.step_list).to_query() == (
        f"?run={RUN}&step=3&reward_min=0&reward_max=3&kl_sum_min=1&kl_sum_max=2"
    )
    every, _ = ScatterView.from_query({"run": [RUN], "step": ["all"]}, ctx)
    assert every.steps(ctx.step_list) == sd.Steps() and every.steps_text([1]) == "all"
    assert ScatterView(RUN).steps([1, 2, 3, 10]) == sd.Steps(10, 10)
    bad, msgs = ScatterView.from_query(
        {
            "run": [RUN],
            "step": ["9-2"],
            "x": ["prompt"],
            "y": ["kl_sum"],
            "reward_min": ["1"],
            "len_max": ["4"],
        },
        ctx,
    )
    assert (bad.step, bad.span, bad.x, bad.y, bad.box) == (None, None, "kl_sum", "reward", None)
    assert any(m.startswith("Ignored step='9-2'") for m in msgs)
    assert any(m.startswith("Ignored x='prompt'") for m in msgs)
    assert any(m.startswith("Ignored y='kl_sum'") for m in msgs)
    assert any(m.startswith("Ignored len_max") for m in msgs) and any(
        m.startswith("Ignored the box") for m in msgs
    )


def test_scatter007_new_steps_drop_the_box():
    """Typing other steps (or a bad text, which changes nothing and says why) keeps the box only while the
    steps stay the same."""
    ctx = _Ctx(RUN, [1, 2, 3])
    view = ScatterView(RUN, step=2, box=sd.Box(0, 1, 0, 1))
    assert view.with_steps("2", ctx) == (view, [])
    assert view.with_steps("1-3", ctx) == (ScatterView(RUN, span=(1, 3)), [])
    same, msgs = view.with_steps("x", ctx)
    assert same == view and msgs[0].startswith("Ignored step='x'")


def test_scatter008_lattice_indices_are_the_binary_searchs():
    """The O(n) binning of the density gives every value the bar the reward page's binary search gives
    (data.queries.bar_indices), on random ranges and on values lying exactly on the edges."""
    import numpy as np

    from data.queries import bar_indices

    rng = np.random.default_rng(35)
    for _ in range(200):
        lo = float(rng.choice([0.0, -1.0, 1e-7, -3e5, 0.35])) * float(rng.uniform(0.5, 2))
        hi = lo + float(rng.choice([1e-6, 0.3, 1.0, 7.0, 2e4])) * float(rng.uniform(0.1, 3))
        values = rng.uniform(lo, hi, 2000)
        values[:2] = lo, hi
        for col in ("kl_sum", "length"):
            edges = sd.axis_edges(col, values)
            on = np.concatenate(
                [values, np.asarray(edges)[(np.asarray(edges) >= lo) & (np.asarray(edges) <= hi)]]
            )
            assert np.array_equal(sd.lattice_indices(on, edges), bar_indices(on, edges)), (lo, hi, col)


def test_scatter009_a_box_to_the_top_edge_holds_the_largest_value():
    """A density whose largest value lies on its top edge (reward 2.225 on cells 0.05 wide, edges at odd
    multiples of 0.025): a box ending in the top cell goes one cell further, so that ``v < max`` keeps it."""
    import numpy as np

    xs = np.array([0.0, 1.0, 2.225] * 10)
    edges = sd.axis_edges("reward", xs)
    assert edges[-1] == 2.225  # the top edge is the largest value itself
    sc = sd.Scatter("kl_sum", "reward", 30, 0, None, sd.density_cells(xs, xs, edges, edges), tuple(edges), tuple(edges),
                    (sd._cell_lattice(edges), sd._cell_lattice(edges)))  # fmt: skip
    box = sd.brushed(sc, (0.9, 2.2), (0.9, 2.2))
    assert (box.x_min, box.x_max) == (0.875, 2.275)
    assert box.x_min <= 2.225 < box.x_max


def test_scatter010_log_axis_counts_and_box_are_exact(grpo):
    """On a log KL-sum axis the density's cells are evenly wide in log10, their edges written to 6 digits;
    every cell holds exactly the responses a hand binning of the files' values on those edges puts there;
    a value <= 0 is left out and counted; a box dragged in log10 coordinates snaps out to the cells' edges
    and opens exactly the responses a hand filter keeps."""
    store, rows = grpo
    got = sd.scatter(store, "kl_sum", "reward", sd.Steps(), max_points=50, logs=(True, False))
    kls = [r["kl_sum"] for r in rows]
    assert got.density and got.n + got.off_log + got.missing == 400
    assert got.off_log == sum(k <= 0 for k in kls) and got.n == sum(k > 0 for k in kls)
    e = got.x_edges
    assert all(float(f"{v:.6g}") == v for v in e[1:-1]) and e[0] <= min(k for k in kls if k > 0)
    steps = {round(math.log10(b) - math.log10(a), 3) for a, b in zip(e[1:-2], e[2:-1], strict=False)}
    assert len(steps) == 1  # evenly wide in log10

    def bar(v, edges):
        return next(
            k for k in range(len(edges) - 1) if edges[k] <= v < edges[k + 1] or v == edges[-1] == edges[k + 1]
        )

    want: dict[tuple[int, int], int] = {}
    for r in rows:
        if r["kl_sum"] > 0:
            cell = (bar(r["kl_sum"], e), bar(r["reward"], got.y_edges))
            want[cell] = want.get(cell, 0) + 1
    assert {(a, b): c for a, b, c in got.cells.iter_rows()} == want
    box = sd.brushed(got, (math.log10(0.5), math.log10(20.0)), (0.9, 2.1))
    assert box.x_min in e and box.x_max in e and box.x_min <= 0.5 and box.x_max > 20.0
    resp = box_responses(ScatterView(RUN, every=True, box=box, xlog=True), sorted({r["step"] for r in rows}))
    hits = matching(store, resp.response_filter([]), ["source", "line"]).collect()
    hand = {
        (r["source"], r["line"])
        for r in rows
        if box.x_min <= r["kl_sum"] < box.x_max and box.y_min <= r["reward"] < box.y_max
    }
    assert set(zip(hits["source"].to_list(), hits["line"].to_list(), strict=True)) == hand and len(hand) > 20
    points = sd.scatter(store, "kl_sum", "reward", sd.Steps(7, 7), logs=(True, True))
    assert not points.density and (points.points["x"] > 0).all() and (points.points["y"] > 0).all()
    pbox = sd.brushed(points, (math.log10(0.123456), math.log10(4.56789)), (0.0, 0.3))
    assert (pbox.x_min, pbox.x_max, pbox.y_min, pbox.y_max) == (0.123, 4.57, 1.0, 2.0)


def test_scatter011_log_scales_in_the_url():
    """xlog=1 / ylog=1 decode and encode back; a bad value is noticed."""
    ctx = _Ctx(RUN, [1, 2])
    view, msgs = ScatterView.from_query({"run": [RUN], "xlog": ["1"]}, ctx)
    assert msgs == [] and view.logs == (True, False) and view.to_query() == f"?run={RUN}&xlog=1"
    _, msgs = ScatterView.from_query({"run": [RUN], "ylog": ["maybe"]}, ctx)
    assert any("ylog" in m for m in msgs)
