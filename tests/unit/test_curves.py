"""data/curves.py: spread bands, zero shift, panels and their notes, run-level edges, step histograms
(counts equal to the responses filter), the steps x bins heatmap and the store-version cache."""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest

from data import critic_curves, curve_panels, curves, heatmaps, histograms, thinning
from data.config import DEFAULT_PAD_TOKENS
from data.ingest import ingest_run
from data.metrics import label
from data.metrics.step import kl_top_share, step_summary
from data.queries import ResponseFilter, bar_interval
from data.run_context import steps_of
from data.store import open_store


def _scalars(rows: list[tuple[int, float, float | None]]) -> pl.DataFrame:
    """A scalars-like frame from (step, reward, ref_reward) rows."""
    df = pl.DataFrame(
        {
            "sample_id": [f"s{i}" for i in range(len(rows))],
            "step": [r[0] for r in rows],
            "reward": [r[1] for r in rows],
            "ref_reward": [r[2] for r in rows],
        },
        schema={"sample_id": pl.String, "step": pl.Int64, "reward": pl.Float64, "ref_reward": pl.Float64},
    )
    return df.with_columns((pl.col("reward") - pl.col("ref_reward")).alias("reward_gain"))


def _summary(df: pl.DataFrame) -> pl.DataFrame:
    """step_summary of a frame missing the token-level columns (filled with nulls, as in the store)."""
    missing = {
        "response_length": pl.Int64,
        "response_chars": pl.Int64,
        "n_kl_tokens": pl.Int64,
        "kl_sum": pl.Float64,
        "log_ratio_sum": pl.Float64,
        "kl_mean": pl.Float64,
        "value_error_abs_mean": pl.Float64,
        "value_error_mean": pl.Float64,
    }
    df = df.with_columns(pl.lit(None, dtype=t).alias(c) for c, t in missing.items() if c not in df.columns)
    return step_summary(df.lazy()).collect()


def test_curves001_band_bounds_from_summary():
    """±1 std, p25–p75 and p5–p95 bands read the summary's mean ± std and quantile columns."""
    steps = pl.DataFrame(
        {
            "step": [1],
            "reward_mean": [1.0],
            "reward_std": [0.5],
            "reward_p05": [0.1],
            "reward_p25": [0.6],
            "reward_p75": [1.4],
            "reward_p95": [1.9],
        }
    )
    got = {b: curve_panels.curve(steps, "reward", b).row(0) for b in curve_panels.BANDS}
    assert got["std"] == (1, 1.0, 0.5, 1.5)
    assert got["p25-p75"] == (1, 1.0, 0.6, 1.4)
    assert got["p5-p95"] == (1, 1.0, 0.1, 1.9)


def test_curves002_zero_shift_subtracts_first_finite_value():
    """Zero shift subtracts the first finite value from the curve and its band; NaN stays a gap."""
    steps = pl.DataFrame(
        {
            "step": [3, 1, 2],
            "reward_mean": [4.0, float("nan"), 2.0],
            "reward_std": [1.0, 1.0, 0.5],
        }
    )
    out = curve_panels.curve(steps, "reward", "std", zero_shift=True)
    assert out.get_column("step").to_list() == [1, 2, 3]
    assert out.get_column("y").to_list() == [None, 0.0, 2.0]
    assert out.get_column("lo").to_list() == [None, -0.5, 1.0]
    assert out.get_column("hi").to_list() == [None, 0.5, 3.0]


def test_curves003_curve_sorts_steps_numerically():
    """Steps that arrive out of order and skip numbers come out in numeric order."""
    steps = pl.DataFrame({"step": [100, 9, 20], "win_rate": [0.5, 0.25, 0.75]})
    out = curve_panels.curve(steps, "win_rate", mean=False)
    assert out.rows() == [(9, 0.25), (20, 0.75), (100, 0.5)]


def test_curves004_panels_without_ref_or_token_fields_carry_notes():
    """A run without ref_reward and token fields: reward alone, no KL, length in characters, no win rate."""
    df = _scalars([(1, 1.0, None), (1, 2.0, None), (2, 3.0, None)]).with_columns(
        pl.Series("response_chars", [10, 20, 30], dtype=pl.Int64)
    )
    panels = {p.key: p for p in curve_panels.panels(_summary(df))}
    assert [s.key for s in panels["reward"].series] == ["reward"]
    assert panels["reward"].note == curve_panels.NOTE_NO_REF
    assert panels["kl"].series == () and panels["kl"].note == curve_panels.NOTE_NO_KL
    assert [s.key for s in panels["length"].series] == ["response_chars"]
    assert panels["length"].series[0].label == label("response_chars")
    assert panels["length"].note == curve_panels.NOTE_CHARS
    assert panels["win"].series == () and panels["win"].note == curve_panels.NOTE_NO_WIN
    # The length in characters has its spread band too: ±1 std of 10 and 20 at step 1 (std 7.07).
    chars = panels["length"].series[0]
    assert chars.band_label == curve_panels.BANDS[curve_panels.DEFAULT_BAND]
    assert chars.frame.row(0, named=True)["hi"] == pytest.approx(15 + 50**0.5)
    # A summary written before the character quantiles were kept (mean only) gives the line, no band.
    old = _summary(df).drop(
        c for c in _summary(df).columns if c.startswith("response_chars_") and c != "response_chars_mean"
    )
    old_chars = {p.key: p for p in curve_panels.panels(old)}["length"].series[0]
    assert old_chars.band_label is None and "hi" not in old_chars.frame.columns


def test_curves005_full_panels_labelled_from_metrics():
    """With every field the panels hold reward + reference, k3 and log-ratio, token length and win rate,
    each labelled from data.metrics."""
    df = _scalars([(1, 1.0, 0.0), (1, 2.0, 3.0), (2, 3.0, 1.0)]).with_columns(
        pl.Series("response_length", [5, 7, 9], dtype=pl.Int64),
        pl.Series("response_chars", [10, 20, 30], dtype=pl.Int64),
        pl.Series("n_kl_tokens", [5, 7, 9], dtype=pl.Int64),
        pl.Series("kl_sum", [0.5, 0.7, 1.8]),
        pl.Series("log_ratio_sum", [1.0, -0.7, 0.9]),
    )
    steps = _summary(df)
    panels = {p.key: p for p in curve_panels.panels(steps, "p25-p75")}
    assert [(s.key, s.label) for s in panels["reward"].series] == [
        ("reward", label("reward")),
        ("ref_reward", label("ref_reward")),
    ]
    assert panels["reward"].series[0].band_label == "p25–p75"
    kl = {s.key: s for s in panels["kl"].series}
    assert kl["kl_token_mean"].label.startswith(label("kl"))
    assert kl["log_ratio_token_mean"].label.startswith(label("log_ratio"))
    # kl_token_mean is Σ kl / Σ tokens over the step: (0.5 + 0.7) / 12 at step 1.
    assert kl["kl_token_mean"].frame.get_column("y").to_list() == pytest.approx([1.2 / 12, 1.8 / 9])
    assert panels["length"].series[0].label == label("response_length") and panels["length"].note is None
    win = panels["win"].series[0]
    assert win.frame.get_column("y").to_list() == [0.5, 1.0] and panels["win"].percent


def test_curves006_zero_spread_share_shown_when_present():
    """A zero_spread_share column in the step summary (GRPO groups) becomes a curve of the win panel,
    after the win rate and the share of ties."""
    df = _scalars([(1, 1.0, 0.0), (2, 3.0, 1.0)])
    steps = _summary(df).with_columns(pl.Series("zero_spread_share", [0.25, 0.5]))
    win = next(p for p in curve_panels.panels(steps) if p.key == "win")
    assert [s.key for s in win.series] == ["win_rate", "tie_rate", "zero_spread_share"]


def test_curves007_edges_cover_reward_and_reference():
    """The reward edges span the run's rewards and reference rewards (from the step summary); an absent
    column gives no edges."""
    df = _scalars([(1, 0.0, -1.0), (2, 2.0, 0.5)])
    edges = histograms.edges_for(_summary(df), ("reward", "ref_reward"))
    assert edges[0] <= -1.0 and edges[-1] >= 2.0
    assert histograms.edges_for(_summary(df), ("reward",))[:2] == [
        -0.05,
        0.05,
    ]  # the bar of 0 is centred on it
    assert histograms.edges_for(_summary(df), ("no_such_column",)) == []


def test_curves008_bars_counts_by_hand_and_match_filter():
    """One step's bars on run edges: counts by hand, zero bars included, each equal to the filter count."""
    df = _scalars([(1, 0.0, 0.0), (1, 0.5, 0.0), (1, 0.5, 0.0), (1, 1.0, 0.0), (2, 0.25, 0.0)])
    edges = [0.0, 0.25, 0.5, 0.75, 1.0]
    b = histograms.bars(df, "reward", 1, edges)
    assert b.get_column("count").to_list() == [1, 0, 2, 1]
    for k, n in enumerate(b.get_column("count").to_list()):
        lo, hi = bar_interval(edges, k)
        flt = ResponseFilter(step=1, reward_min=lo, reward_max=hi)
        assert df.filter(flt.scalar_expr()).height == n


def test_curves009_one_response_and_all_equal_rewards():
    """A step with one response gives one non-empty bar; a run whose rewards are all equal has one bar."""
    df = _scalars([(1, 0.7, 0.7)])
    edges = histograms.edges_for(_summary(df), ("reward", "ref_reward"))
    assert edges == [0.7, 0.7]
    b = histograms.bars(df, "reward", 1, edges)
    assert b.rows() == [(0, 0.7, 0.7, 1)]
    lo, hi = bar_interval(edges, 0)
    assert (lo, hi) == (0.7, None)
    assert df.filter(ResponseFilter(step=1, reward_min=lo, reward_max=hi).scalar_expr()).height == 1


def test_curves010_empty_inputs():
    """No edges or no column gives an empty bars frame and an all-zero heatmap of the right shape."""
    df = _scalars([(1, 1.0, 0.0)])
    assert histograms.bars(df, "reward", 1, []).height == 0
    assert histograms.bars(df, "missing", 1, [0.0, 1.0]).height == 0
    hm = heatmaps.heatmap(df, "missing", [0.0, 1.0, 2.0], [1, 2])
    assert hm.share.shape == (2, 2) and not hm.share.any()
    assert heatmaps.heatmap(df, "reward", [], [1]).share.shape == (0, 1)


def test_curves011_heatmap_shares_by_hand():
    """Heatmap cell (bin, step) holds the share of the step's values in the bin; steps without values stay 0."""
    df = _scalars([(1, 0.1, 0.0), (1, 0.6, 0.0), (1, 0.7, 0.0), (1, 0.9, 0.0), (3, 0.2, 0.0)])
    hm = heatmaps.heatmap(df, "reward", [0.0, 0.5, 1.0], [3, 2, 1])
    assert hm.steps.tolist() == [1, 2, 3]
    np.testing.assert_allclose(hm.share, [[0.25, 0.0, 1.0], [0.75, 0.0, 0.0]])
    assert hm.count.tolist() == [[1, 0, 1], [3, 0, 0]] and hm.count.dtype == np.uint8


def _write_run(path, steps):
    path.mkdir(parents=True, exist_ok=True)
    with open(path / "rank0.jsonl", "a") as f:
        for s in steps:
            for i in range(3):
                rec = {"prompt": f"p{i}", "response": "r", "reward": s + i / 4, "ref_reward": 0.5, "step": s}
                f.write(json.dumps(rec) + "\n")


def test_curves013_cached_results_follow_the_store_version(tmp_path):
    """Cached edges and panels are reused for one store version and recomputed when the store grows."""
    run = tmp_path / "root" / "tiny"
    _write_run(run, [1, 2])
    res = ingest_run(run, tmp_path / "cache", DEFAULT_PAD_TOKENS)
    store = open_store(res.store_dir)
    edges = curves.run_edges(store, "reward")
    assert curves.run_edges(open_store(res.store_dir), "reward") == edges
    assert curves.run_panels(store) is curves.run_panels(open_store(res.store_dir))
    assert curves.step_bars(store, "reward", 2).get_column("count").sum() == 3
    _write_run(run, [3])
    ingest_run(run, tmp_path / "cache", DEFAULT_PAD_TOKENS)
    grown = open_store(res.store_dir)
    assert grown.version != store.version
    assert list(steps_of(grown)) == [1, 2, 3]
    assert curves.run_edges(grown, "reward")[-1] >= 3.5 > edges[-1]
    hm = curves.run_heatmap(grown)
    assert hm.steps.tolist() == [1, 2, 3]
    assert math.isclose(float(hm.share[:, 2].sum()), 1.0, rel_tol=1e-6)


def test_curves014_bin_index_matches_one_comparison_per_edge():
    """data.queries.bin_index (binary search) equals counting the inner edges <= x, on edges, between
    them, beyond them and for non-finite values (null)."""
    from data.queries import bin_index

    edges = [-1.0, -0.5, 0.0, 0.25, 0.5]
    values = [
        -1.0,
        -0.75,
        -0.5,
        -1e-12,
        0.0,
        0.1,
        0.25,
        0.49,
        0.5,
        7.0,
        -3.0,
        float("nan"),
        float("inf"),
        None,
    ]
    expected = [
        None if v is None or not math.isfinite(v) else sum(v >= e for e in edges[1:-1]) for v in values
    ]
    df = pl.DataFrame({"x": values}, schema={"x": pl.Float64})
    assert df.select(bin_index("x", edges)).to_series().to_list() == expected
    assert df.select(bin_index("x", [0.7, 0.7])).to_series().to_list() == [
        None if e is None else 0 for e in expected
    ]


def _hand_bars(values: list[float], edges: list[float]) -> list[int]:
    """Counts per bar by plain comparisons: edges[k] <= x < edges[k+1], the last bar x >= edges[-2]."""
    nb = len(edges) - 1
    return [sum(edges[k] <= x and (k == nb - 1 or x < edges[k + 1]) for x in values) for k in range(nb)]


def test_curves015_verifier_rewards_get_one_bar_per_value():
    """0/1 rewards (a verifier): two bars, [0, 1) and ≥ 1, each holding one value; counts and the
    responses filter agree; the heatmap has one row per value (was 20 rows, 18 of them empty)."""
    rows = [(1, 0.0, None), (1, 1.0, None), (1, 1.0, None), (2, 0.0, None), (2, -0.0, None), (2, 1.0, None)]
    df = _scalars(rows)
    bins = histograms.bins_for(_summary(df), df, ("reward", "ref_reward"))
    assert bins.discrete and bins.edges == (0.0, 1.0, 2.0)
    assert histograms.bars(df, "reward", 2, list(bins.edges)).get_column("count").to_list() == [2, 1]
    for step in (1, 2):
        counts = histograms.bars(df, "reward", step, list(bins.edges)).get_column("count").to_list()
        assert counts == _hand_bars([r[1] for r in rows if r[0] == step], list(bins.edges))
        for k, n in enumerate(counts):
            lo, hi = bar_interval(list(bins.edges), k)
            flt = ResponseFilter(step=step, reward_min=lo, reward_max=hi)
            assert df.filter(flt.scalar_expr()).height == n
    hm = heatmaps.heatmap(df, "reward", list(bins.edges), [1, 2], bins.discrete)
    assert hm.discrete and hm.count.tolist() == [[1, 2], [2, 1]]
    # A verifier's boolean reward (read as 0 / 1) that is always right is one value, one bar.
    same = _scalars([(1, 1.0, None), (2, 1.0, None)])
    assert histograms.bins_for(_summary(same), same, ("reward",)).edges == (1.0, 1.0)


def test_curves016_half_step_rewards_and_reference_share_value_bars():
    """Rewards in steps of 0.5 with reference rewards among them: one bar per value of either column
    (the reference's 2.5 has a bar although no reward has it), counts by hand for both columns."""
    rows = [(1, 0.0, 1.0), (1, 1.5, 2.5), (1, 3.0, 0.0), (1, 3.0, 1.0), (2, 1.5, 1.5)]
    df = _scalars(rows)
    bins = histograms.bins_for(_summary(df), df, ("reward", "ref_reward"))
    assert bins.discrete and bins.edges == (0.0, 1.0, 1.5, 2.5, 3.0, 3.5)
    edges = list(bins.edges)
    assert histograms.bars(df, "reward", 1, edges).get_column("count").to_list() == [1, 0, 1, 0, 2]
    assert histograms.bars(df, "ref_reward", 1, edges).get_column("count").to_list() == [1, 2, 0, 1, 0]
    gain = histograms.bins_for(_summary(df), df, ("reward_gain",))
    assert gain.discrete and gain.edges == (-1.0, 0.0, 2.0, 3.0, 4.0)  # gains -1, 0, 2, 3 (closest gap 1)


def test_curves017_many_or_crowded_values_keep_even_bins():
    """More than MAX_DISCRETE_VALUES distinct values, or two values closer than MIN_DISCRETE_GAP of the
    range (a bar would be too thin to see), keep the evenly spaced bins of edges_for."""
    from data.queries import MAX_DISCRETE_VALUES

    many = _scalars([(1, k / 10, None) for k in range(MAX_DISCRETE_VALUES + 1)])
    bins = histograms.bins_for(_summary(many), many, ("reward",))
    assert not bins.discrete and list(bins.edges) == histograms.edges_for(_summary(many), ("reward",))
    few = _scalars([(1, k / 10, None) for k in range(MAX_DISCRETE_VALUES)])
    assert histograms.bins_for(_summary(few), few, ("reward",)).discrete
    crowded = _scalars([(1, 0.0, None), (1, 0.001, None), (1, 1.0, None)])
    assert not histograms.bins_for(_summary(crowded), crowded, ("reward",)).discrete
    nothing = _scalars([(1, float("nan"), None)])
    assert histograms.bins_for(_summary(nothing), nothing, ("reward",)).edges == ()


def _fixture_rows(run_dir) -> list[dict]:
    rows = []
    for path in sorted(run_dir.glob("*.jsonl")):
        with open(path, encoding="utf-8") as f:
            rows += [json.loads(line) for line in f]
    return rows


@pytest.mark.parametrize("run", ["trl-ppo-small", "rlloggingboard-eval-poem"])
def test_curves018_fixture_bins_and_counts_by_hand(tmp_path, fixtures_dir, run):
    """On the fixtures: PPO's rewards (multiples of 0.5) get one bar per value of reward and reference
    reward together, the poem run's 80-odd values even bins; every step's bar counts equal counts made by
    hand from the JSON lines, and the heatmap has one row per bar."""
    res = ingest_run(fixtures_dir / run, tmp_path / "cache", DEFAULT_PAD_TOKENS)
    store = open_store(res.store_dir)
    rows = _fixture_rows(fixtures_dir / run)
    values = sorted({float(r[c]) for r in rows for c in ("reward", "ref_reward")})
    bins = curves.run_bins(store, "reward")
    if run == "trl-ppo-small":
        assert values == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0]
        assert bins.discrete and bins.edges == (*values, 3.5)
        gains = sorted({r["reward"] - r["ref_reward"] for r in rows})
        assert curves.run_bins(store, "reward_gain").edges == (*gains, gains[-1] + 0.5)
    else:
        assert len(values) > 24 and not bins.discrete
    edges = list(bins.edges)
    for step in sorted({r["step"] for r in rows}):
        for col in ("reward", "ref_reward"):
            got = curves.step_bars(store, "reward", step, col).get_column("count").to_list()
            assert got == _hand_bars([float(r[col]) for r in rows if r["step"] == step], edges), (step, col)
    hm = curves.run_heatmap(store, "reward")
    assert hm.share.shape == (len(edges) - 1, len({r["step"] for r in rows})) and hm.discrete == bins.discrete


def test_curves019_even_bins_are_centred_on_round_numbers():
    """Even bins are centred on multiples of their width, so a value on a round number (the poem run's
    rewards are 0.0 for 37.7 % of responses) is in the middle of its bar, not on its left edge; the edges
    cover [lo, hi], are equally wide, few, and exact short decimals."""
    from data.queries import histogram_edges

    assert histogram_edges(-2.5, 0.25) == [round(-2.5 + 0.2 * k, 12) for k in range(15)]
    assert histogram_edges(0.0, 1.0)[:2] == [-0.025, 0.025] and histogram_edges(0.0, 1.0)[-1] == 1.025
    rng = np.random.default_rng(7)
    for lo, span in zip(rng.normal(0, 50, 300), rng.lognormal(0, 3, 300), strict=True):
        hi = lo + span
        edges = histogram_edges(lo, hi)
        width = edges[1] - edges[0]
        assert edges[0] <= lo and edges[-1] >= hi and 2 <= len(edges) <= 27
        assert all(math.isclose(b - a, width, rel_tol=1e-6) for a, b in zip(edges, edges[1:], strict=False))
        centre = (edges[0] + edges[1]) / 2
        assert math.isclose(centre / width, round(centre / width), abs_tol=1e-6)
        assert all(e == float(repr(e)) and len(repr(e)) <= 20 for e in edges)


def test_curves020_poem_zero_rewards_sit_in_the_middle_of_their_bar(tmp_path, fixtures_dir):
    """The poem fixture (80-odd reward values, even bins): the bar holding reward 0.0 is centred on 0
    (was [0, 0.2), drawn at 0.1), and its count at the last step equals the count by hand."""
    run = fixtures_dir / "rlloggingboard-eval-poem"
    store = open_store(ingest_run(run, tmp_path / "cache", DEFAULT_PAD_TOKENS).store_dir)
    edges = curves.run_edges(store, "reward")
    k = next(k for k in range(len(edges) - 1) if edges[k] <= 0.0 < edges[k + 1])
    assert (edges[k] + edges[k + 1]) / 2 == pytest.approx(0.0, abs=1e-12)
    rows = [r for r in _fixture_rows(run) if r["step"] == 2300]
    bars = curves.step_bars(store, "reward", 2300).get_column("count").to_list()
    assert bars[k] == sum(edges[k] <= r["reward"] < edges[k + 1] for r in rows)


def test_curves021_step_histogram_panels_and_stats(tmp_path):
    """A step's histogram panels say what they show (the reference's bars only when the step has reference
    rewards) and its key figures leave out what the run lacks."""
    run = tmp_path / "root" / "no-ref"
    run.mkdir(parents=True)
    rows = [{"prompt": "p", "response": "r", "reward": float(i % 3), "step": 1} for i in range(6)]
    (run / "rank0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = open_store(ingest_run(run, tmp_path / "cache", DEFAULT_PAD_TOKENS).store_dir)
    reward, gain = curves.histogram_panels(store, 1)
    assert reward.title == "Reward at step 1" and reward.ref_bars is None
    assert reward.note.startswith(curve_panels.NOTE_NO_REF) and reward.bars.get_column("count").sum() == 6
    assert gain.bars is None and gain.note.startswith("No reference reward")
    assert [s[0] for s in curves.step_stats(store, 1)] == ["step", "responses", "reward mean"]


def test_curves022_thin_rows_keeps_each_runs_lowest_highest_and_first_gap():
    """Runs of 4 rows: [3, 1, 4, 1] keeps rows 1 (lowest, the first of two 1s) and 2 (highest); [5, NaN, 2,
    NaN] keeps 4 (highest), 5 (first gap), 6 (lowest); [NaN, NaN] keeps its first gap, 8."""
    nan = float("nan")
    y = np.array([3, 1, 4, 1, 5, nan, 2, nan, nan, nan])
    bucket = np.arange(10) // 4
    assert thinning.thin_rows(y, bucket) == [1, 2, 4, 5, 6, 8]
    assert thinning.thin_rows(np.array([]), np.array([], int)) == []


def test_curves023_thinned_panel_keeps_exact_points_and_says_so():
    """A curve of 10 steps (1..10) drawn at most at 4 points: runs of 5 steps, each run's lowest and highest
    value plus the selected step 8, with exact values; the note says which; 4 steps or fewer: unchanged."""
    y = [0.5, 0.1, 0.9, 0.3, 0.2, 0.6, 0.4, 0.45, 1.0, 0.0]
    frame = pl.DataFrame(
        {"step": list(range(1, 11)), "y": y, "lo": [v - 1 for v in y], "hi": [v + 1 for v in y]}
    )
    s = curve_panels.Series("reward", "reward", frame, "±1 std")
    panel = curve_panels.Panel("reward", "Reward", "reward", (s,), "A note.")
    steps = list(range(1, 11))
    out = thinning.thinned(panel, steps, keep=8, max_points=4)
    got = out.series[0].frame
    assert got.get_column("step").to_list() == [2, 3, 8, 9, 10]
    assert got.get_column("y").to_list() == [0.1, 0.9, 0.45, 1.0, 0.0]
    assert got.get_column("hi").to_list() == [1.1, 1.9, 1.45, 2.0, 1.0]
    assert out.note == (
        "A note. 10 steps: each curve is drawn at the lowest and highest value of every 5 steps "
        "(1–5, 6–10, …) and at the selected step, each point exact."
    )
    assert thinning.thinned(panel, steps, keep=8, max_points=10) is panel
    empty = curve_panels.Panel("search", "Search", "share", (), "No search yet.")
    assert thinning.thinned(empty, steps, keep=8, max_points=4) is empty


def test_curves024_thinned_then_the_step_added_equals_thinned_with_the_step():
    """with_step(thinned(panel), panel, s) is thinned(panel, keep=s) for every step of test_curves023's
    curve (a selected step already drawn, or not among the curve's steps, adds nothing)."""
    y = [0.5, 0.1, 0.9, 0.3, 0.2, 0.6, 0.4, 0.45, 1.0, 0.0]
    frame = pl.DataFrame({"step": list(range(1, 11)), "y": y})
    other = pl.DataFrame({"step": [1, 2, 3, 5, 8, 9, 10], "y": [0.0, 1.0, 0.2, 0.3, 0.7, 0.1, 0.9]})
    panel = curve_panels.Panel(
        "reward",
        "Reward",
        "reward",
        (curve_panels.Series("a", "a", frame), curve_panels.Series("b", "b", other)),
        "N.",
    )
    steps = list(range(1, 11))
    base = thinning.thinned(panel, steps, max_points=4)
    for s in (*steps, 99, None):
        want = thinning.thinned(panel, steps, keep=s, max_points=4)
        got = thinning.with_step(base, panel, s)
        assert got.note == want.note
        for g, w in zip(got.series, want.series, strict=True):
            assert g.frame.equals(w.frame), s
    assert thinning.with_step(panel, panel, 3) is panel


def _hand_heatmap() -> heatmaps.Heatmap:
    """7 steps (1..7) on 2 bars: counts by hand, shares per step."""
    count = np.array([[1, 2, 0, 3, 1, 0, 4], [1, 0, 2, 1, 1, 4, 0]], dtype=np.uint8)
    share = (count / count.sum(axis=0)).astype(np.float32)
    return heatmaps.Heatmap(np.arange(1, 8), [0.0, 1.0, 2.0], share, count)


def test_curves025_heatmap_columns_of_a_long_run_sum_runs_of_steps():
    """At most 3 columns of 7 steps: runs of 3 steps (1-3, 4-6, 7); counts summed (3|3, 4|6, 4|0), the
    share of each run's responses (0.5|0.5, 0.4|0.6, 1|0), drawn at the runs' middles; the note says so."""
    cols = heatmaps.heatmap_columns(_hand_heatmap(), max_columns=3)
    assert cols.k == 3 and cols.window is None
    assert cols.first.tolist() == [1, 4, 7] and cols.last.tolist() == [3, 6, 7]
    assert cols.x.tolist() == [2.0, 5.0, 7.0]
    assert cols.count.tolist() == [[3, 4, 4], [3, 6, 0]]
    assert np.allclose(cols.share, [[0.5, 0.4, 1.0], [0.5, 0.6, 0.0]])
    assert cols.note == (
        "7 steps, each column 3 of them (1–3, 4–6, …): the colour is the share of their responses in the "
        "bin. Click a column to draw the 3 steps around it, one column per step."
    )


def test_curves026_heatmap_columns_one_per_step_and_windows():
    """Up to max_columns steps: the heatmap as it is, without a note; a window of 3 steps: those steps'
    columns, each exact, and a note; a window without steps: the whole run. zoom_window centres a run of
    steps on a column, within the run."""
    hm = _hand_heatmap()
    whole = heatmaps.heatmap_columns(hm, max_columns=7)
    assert whole.k == 1 and whole.note == "" and whole.count is hm.count and whole.x is hm.steps
    win = heatmaps.heatmap_columns(hm, (4, 6), max_columns=3)
    assert win.k == 1 and win.window == (4, 6) and win.x.tolist() == [4, 5, 6]
    assert win.count.tolist() == [[3, 1, 0], [1, 1, 4]]
    assert np.allclose(win.share, [[0.75, 0.5, 0.0], [0.25, 0.5, 1.0]])
    assert win.note == "Steps 4–6 of 7, one column per step: click a cell for its responses."
    assert heatmaps.heatmap_columns(hm, (100, 200), max_columns=3).window is None
    steps = list(range(1, 8))
    assert heatmaps.zoom_window(steps, 4, 6, size=3) == (4, 6)
    assert heatmaps.zoom_window(steps, 7, 7, size=3) == (5, 7)
    assert heatmaps.zoom_window(steps, 1, 3, size=3) == (1, 3)
    assert heatmaps.zoom_window(steps, 1, 3, size=10) == (1, 7)
    assert heatmaps.zoom_window(steps, 50, 60, size=3) is None


def test_curves027_step_list_reads_the_step_column_alone(tmp_path, monkeypatch):
    """The run's one step list (the navbar's, the curves', the table's row layout, the token page's first
    response, the live snapshot) comes from the summary's step column alone, in numeric order, read once per
    store version in the process; the whole summary, when read, is kept in the process, not the results
    cache."""
    from data import live, responses, tokens
    from data.cache import StoreKey
    from data.demo import write_demo_run
    from data.run_context import _steps
    from data.store.reader import RunStore

    run = write_demo_run(tmp_path / "root", steps=12, per_step=4)
    store = open_store(ingest_run(run, tmp_path / "cache", DEFAULT_PAD_TOKENS).store_dir)
    with monkeypatch.context() as m:
        m.setattr(RunStore, "steps", lambda self: pytest.fail("the whole summary was read"))
        assert steps_of(store) == tuple(range(1, 13))
        assert steps_of(store) is steps_of(store)  # one read
        snap = live._snapshot(run.name, store)
        assert (snap.steps, snap.last_step) == (12, 12)
        assert responses.table_spec(store).preview_lines >= 1
        assert tokens.first_sample(store) is not None
        assert curves.run_panels_at(store, step=5)
    assert curves.run_steps(store).get_column("step").to_list() == list(range(1, 13))
    assert curves._steps.peek(StoreKey(store)) is None
    assert _steps.peek(StoreKey(store)) is None


def test_curves028_reward_page_reads_its_summary_columns_alone(tmp_path, monkeypatch):
    """The curves, the bins, one step's key figures and histograms read the summary's columns they draw
    (at most 53 of its 82 and more, in one read: the KL curve's band, largest response and flagged steps
    take 9, the step's largest-KL response 3 more, the critic card's sums 7), and give what the whole summary
    gives; the curves are not kept in the results cache."""
    from data.demo import write_demo_run
    from data.store.reader import RunStore

    run = write_demo_run(tmp_path / "root", steps=12, per_step=4)
    store = open_store(ingest_run(run, tmp_path / "cache", DEFAULT_PAD_TOKENS).store_dir)
    whole = curves.run_steps(store)
    want = (curve_panels.panels(whole, "p25-p75"), histograms.edges_for(whole, ("reward", "ref_reward")))
    read: list = []
    real = RunStore.steps_columns

    def spy(self, columns):
        read.append(tuple(columns))
        return real(self, columns)

    for f in (curves._steps, curves._panels, curves._bins, curves._summary, curves._bars):
        f.cache_clear()
    with monkeypatch.context() as m:
        m.setattr(RunStore, "steps", lambda self: pytest.fail("the whole summary was read"))
        m.setattr(RunStore, "steps_columns", spy)
        got = curves.run_panels(store, "p25-p75")
        assert list(curves.run_bins(store, "reward").edges) == want[1]
        stats = curves.step_stats(store, 5)
        curves.histogram_panels(store, 5)
        critic = critic_curves.run_critic_panel(store, None)
    assert len(read) == 1 and len(read[0]) == 1 + len(curves.PAGE_COLUMNS) <= 53 < whole.width  # of 82+
    alone = critic_curves.critic_panel(whole)
    assert critic.series and [s.key for s in critic.series] == [s.key for s in alone.series]
    assert all(s.frame.equals(t.frame) for s, t in zip(critic.series, alone.series, strict=True))
    assert [(p.key, p.title, p.note, [s.key for s in p.series]) for p in got] == [
        (p.key, p.title, p.note, [s.key for s in p.series]) for p in want[0]
    ]
    assert all(
        s.frame.equals(t.frame)
        for p, q in zip(got, want[0], strict=True)
        for s, t in zip(p.series, q.series, strict=True)
    )
    row = whole.filter(pl.col("step") == 5)
    assert dict((n, v) for n, v, _ in stats)["responses"] == row.item(0, "n")
    # The panels (every curve's every step) are kept in the process, not pickled into the results cache.
    assert curves._panels.peek(curves.StoreKey(store), "p25-p75", False) is None


def test_curves029_heatmap_from_cells_by_hand():
    """The heatmap's counts summed from cells on edges 0, 1, 2, 3, by hand: two one-value cells of one bar
    add up, a cell of a step not shown is left out, a step whose cell lies across an edge is 0 and named;
    each share is the bar's count over its step's."""
    cells = pl.DataFrame(
        {
            "step": [1, 1, 1, 2, 2, 3, 9],
            "col": ["reward", "reward", "reward", "reward", "ref_reward", "reward", "reward"],
            "lo": [0.5, 0.5, 2.0, 0.2, 0.0, 0.9, 0.0],
            "hi": [0.5, 0.5, 3.0, 0.8, 0.0, 1.1, 0.0],
            "n": [2, 3, 5, 4, 7, 6, 8],
            "w": [float("nan")] * 7,
        },
        schema_overrides={"n": pl.UInt32},
    )
    count, split = heatmaps.cell_histograms(cells, "reward", [0.0, 1.0, 2.0, 3.0], [3, 2, 1, 4])
    assert split == [3]
    assert count.tolist() == [[5, 4, 0, 0], [0, 0, 0, 0], [5, 0, 0, 0]]  # steps 1, 2, 3, 4
    hm = heatmaps.dense_heatmap(count, [0.0, 1.0, 2.0, 3.0], [3, 2, 1, 4])
    assert hm.steps.tolist() == [1, 2, 3, 4] and hm.count.dtype == np.uint8
    assert hm.share.tolist() == [[0.5, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.5, 0.0, 0.0, 0.0]]


def test_curves030_panels_thinned_together_as_one_by_one():
    """Several panels thinned together (their curves of the same steps on one table of runs, a curve of
    other steps apart, a panel without curves left as it is) keep what a loop over each run of each curve
    keeps: its lowest and highest value (the first of equal ones, its first row without a value) and its
    first gap."""
    rng = np.random.default_rng(7)
    steps = list(range(3, 3 + 3 * 97, 3))
    sparse = steps[::2]

    def frame(at, ties=False):
        y = rng.integers(0, 4, len(at)).astype(float) if ties else rng.normal(size=len(at))
        y[rng.random(len(at)) < 0.25] = np.nan
        y[10:30] = np.nan  # whole runs without a value
        return pl.DataFrame({"step": at, "y": y}).with_columns(pl.col("y").fill_nan(None))

    def by_loop(f, k):
        y = f.get_column("y").to_list()
        run = [steps.index(s) // k for s in f.get_column("step")]
        kept = set()
        for r in sorted(set(run)):
            rows = [i for i in range(len(y)) if run[i] == r]
            vals = [i for i in rows if y[i] is not None]
            gaps = [i for i in rows if y[i] is None]
            kept |= {min(vals, key=lambda i: y[i]), max(vals, key=lambda i: y[i])} if vals else {rows[0]}
            kept |= set(gaps[:1])
        return sorted(kept)

    a = curve_panels.Series("a", "a", frame(steps))
    b = curve_panels.Series("b", "b", frame(steps, ties=True))
    c = curve_panels.Series("c", "c", frame(sparse))
    panels = (
        curve_panels.Panel("p", "P", "y", (a, b)),
        curve_panels.Panel("e", "E", "y", (), "None."),
        curve_panels.Panel("q", "Q", "y", (c, a), "Q."),
    )
    out = thinning.thinned_all(panels, steps, keep=steps[40], max_points=20)
    k = -(-len(steps) // 10)
    assert out[1] is panels[1] and out[2].note.startswith("Q. 97 steps: each curve is drawn")
    for p, o in zip(panels, out, strict=True):
        alone = thinning.thinned(p, steps, keep=steps[40], max_points=20)
        assert alone.note == o.note
        for s, t, u in zip(p.series, o.series, alone.series, strict=True):
            assert u.frame.equals(t.frame)
            want = sorted(
                {*by_loop(s.frame, k), *(i for i, x in enumerate(s.frame["step"]) if x == steps[40])}
            )
            assert t.frame.equals(s.frame[want])


def test_curves040_kl_outliers_by_hand(fixtures_dir, tmp_path):
    """On the real TRL GRPO run, per step: the share of the step's KL (k3 summed over every position with
    both log-probs) that its largest response carries, the largest response's per-token mean, and the
    response the page names (file:line from 1), each equal to the value computed by hand from the file;
    the KL curve flags exactly the steps where one response carries over half; a step without KL (the
    first: the policy is its reference) has no share and names no response."""
    run = fixtures_dir / "trl-grpo-small"
    store = open_store(ingest_run(run, tmp_path / "cache", DEFAULT_PAD_TOKENS).store_dir)
    sums: dict[int, list[tuple[float, float, str]]] = {}
    for f in sorted(run.glob("rank*.jsonl")):
        for i, line in enumerate(f.read_text().splitlines(), start=1):
            r = json.loads(line)
            lp, ref = r["logprobs"], r["ref_logprobs"]
            k3 = [math.exp(b - a) - 1 + (a - b) for a, b in zip(lp, ref, strict=True)]  # lr = a − b
            sums.setdefault(r["step"], []).append((sum(k3), sum(k3) / len(k3), f"{f.name}:{i}"))
    steps = curves.run_steps(store).with_columns(kl_top_share())
    flagged = []
    for step, rows in sorted(sums.items()):
        top = max(rows, key=lambda t: t[0])
        row = steps.filter(pl.col("step") == step).row(0, named=True)
        if sum(t[0] for t in rows) == 0:  # the first step: the policy is the reference, no share at all
            assert row["kl_top_share"] is None and curves.kl_top_response(store, step) is None
            continue
        share = top[0] / sum(t[0] for t in rows)
        assert row["kl_top_share"] == pytest.approx(share, rel=1e-9)
        assert row["kl_mean_max"] == pytest.approx(max(t[1] for t in rows), rel=1e-9)
        got = curves.kl_top_response(store, step)
        assert got.text() == f"{top[2]} carries {share * 100:.1f} % of the step's KL"
        assert got.flagged == (share > 0.5)
        if share > 0.5:
            flagged.append(step)
    kl = next(p for p in curves.run_panels(store, "p25-p75") if p.key == "kl")
    assert [s.key for s in kl.series][:2] == ["kl_token_mean", "kl_mean_max"]
    marks = [s for s in kl.series if s.flags]
    got_flagged = marks[0].frame.drop_nulls("y").get_column("step").to_list() if marks else []
    assert got_flagged == flagged


def test_curves042_std_band_clipped_to_the_observed_range():
    """The ±1 std reward band is cut to the run's observed reward range (min / max over its steps) and its
    legend says so: means 0.5 and 2.5, std 1, rewards seen from 0 to 3: bands [0, 1.5] and [1.5, 3] (not
    [-0.5, 1.5] and [1.5, 3.5]). A quantile band, and a std band inside the range, are left as they are."""
    from data.curve_panels import panels

    steps = pl.DataFrame(
        {
            "step": [1, 2],
            "reward_mean": [0.5, 2.5],
            "reward_std": [1.0, 1.0],
            "reward_min": [0.0, 1.0],
            "reward_max": [1.0, 3.0],
            "reward_p25": [0.0, 2.0],
            "reward_p75": [1.0, 3.0],
        }
    )
    reward = panels(steps, "std")[0].series[0]
    assert reward.band_label == "±1 std, clipped to the observed range 0 – 3"
    assert reward.frame.select("lo", "hi").rows() == [(0.0, 1.5), (1.5, 3.0)]
    shifted = panels(steps, "std", zero_shift=True)[0].series[0]
    assert shifted.frame.select("lo", "hi").rows() == [(-0.5, 1.0), (1.0, 2.5)]  # clipped, then shifted
    assert panels(steps, "p25-p75")[0].series[0].band_label == "p25–p75"
    inside = steps.with_columns(pl.col("reward_std") * 0.25)
    assert panels(inside, "std")[0].series[0].band_label == "±1 std"


def test_curves043_ppo_band_clipped_on_the_page(tmp_path, fixtures_dir):
    """On the real TRL PPO run (rewards 0 to 3 by its rule; mean + std passes 3 at some steps) the reward
    page's band is cut at the highest reward seen, its legend saying so."""
    from data import curves

    store = open_store(
        ingest_run(fixtures_dir / "trl-ppo-small", tmp_path / "cache", DEFAULT_PAD_TOKENS).store_dir
    )
    steps = store.steps()
    assert (steps["reward_mean"] + steps["reward_std"]).max() > 3.0 == steps["reward_max"].max()
    reward = curves.run_panels(store, "std")[0].series[0]
    assert reward.band_label == "±1 std, clipped to the observed range 0 – 3"
    assert reward.frame["hi"].max() == 3.0 and reward.frame["lo"].min() >= 0.0


def test_curves044_values_in_asks_a_column_not_listed():
    """``values_in`` answers the listed columns from one pass and asks any other on its own: a column left
    out of the list is not taken for empty. a: values; b: NaN and null only (no finite value); c, not listed,
    has one; d is absent."""
    from data.curve_panels import has_values, values_in

    steps = pl.DataFrame({"a": [1.0, 2.0], "b": [float("nan"), None], "c": [None, 3.0]})
    has = values_in(steps, ["a", "b"])
    assert [has(c) for c in "abcd"] == [True, False, True, False]
    assert [has(c) for c in "abcd"] == [has_values(steps, c) for c in "abcd"]
