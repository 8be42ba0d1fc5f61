"""The per-step summary kept up to date by ingest: summarised again only where rows came or went, from the
parts that hold those steps (no whole-run table), and equal to the summary of the files read at once."""

from __future__ import annotations

import json
import math

import pytest
from polars.testing import assert_frame_equal

from data.derived import steps as ingest_summary
from data.derived.cells import read_hist_cells
from data.ingest import ingest_run
from data.store import open_store
from tests.conftest import fixture_or_demo

PADS = ("<pad>",)


def _line(step: int, k: int, rank: int) -> bytes:
    rec = {
        "prompt": f"q{k % 3}",
        "response": "a b c"[: 1 + (k + step) % 5],
        "reward": (step * 7 + k * 3 + rank) % 11 / 10,
        "ref_reward": (k * 5 + rank) % 7 / 10,
        "step": step,
        "logprobs": [-0.1 * (k % 4 + 1), -0.5],
        "ref_logprobs": [-0.2, -0.4 - 0.01 * step],
    }
    return (json.dumps(rec) + "\n").encode()


def _steps(store) -> list[dict]:
    """The steps table with NaN made comparable."""
    return [
        {k: ("nan" if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
        for row in store.steps().to_dicts()
    ]


def _spy_reads(monkeypatch) -> list[list[int]]:
    """Record the parts whose scalars each summary read opens."""
    reads: list[list[int]] = []
    real = ingest_summary.scan_part_scalars

    def spy(store_dir, data, pids):
        pids = sorted(pids)
        reads.append(pids)
        return real(store_dir, data, pids)

    monkeypatch.setattr(ingest_summary, "scan_part_scalars", spy)
    return reads


def test_summary001_appends_and_a_rewritten_file_give_the_summary_of_one_read(tmp_path, monkeypatch):
    """A run grown step by step, then a rank file rewritten (its old rows dropped, a step it alone held
    gone), has exactly the steps table of the same files ingested at once; each append reads again only
    the parts holding the new step."""
    run = tmp_path / "run"
    run.mkdir()
    for r in range(2):
        (run / f"rank{r}.jsonl").write_bytes(b"".join(_line(s, k, r) for s in range(4) for k in range(5)))
    cache = tmp_path / "cache"
    ingest_run(run, cache, PADS, chunk_bytes=700)
    reads = _spy_reads(monkeypatch)
    for step in range(4, 7):
        for r in range(2):
            with open(run / f"rank{r}.jsonl", "ab") as f:
                f.write(b"".join(_line(step, k, r) for k in range(5)))
        before = {int(k) for k in open_store(next(cache.iterdir())).manifest.parts}
        res = ingest_run(run, cache, PADS, chunk_bytes=700)
        parts = open_store(res.store_dir).manifest.parts
        new = sorted(int(k) for k in parts if int(k) not in before)
        assert reads[-1] == new, (step, reads[-1], new)  # only the new parts: no older step is read again
        assert all(parts[str(p)]["steps"] == [step, step] for p in new)
    # rank1 rewritten: steps 0-6 again, and a step 9 that only it has; then shortened to steps 0-1.
    (run / "rank1.jsonl").write_bytes(b"".join(_line(s, k, 5) for s in (*range(7), 9) for k in range(5)))
    res = ingest_run(run, cache, PADS, chunk_bytes=700)
    assert open_store(res.store_dir).steps().get_column("step").to_list() == [*range(7), 9]
    (run / "rank1.jsonl").write_bytes(b"".join(_line(s, k, 6) for s in range(2) for k in range(5)))
    res = ingest_run(run, cache, PADS, chunk_bytes=700)
    monkeypatch.undo()
    whole = ingest_run(run, tmp_path / "whole", PADS)
    assert res.samples == whole.samples == 7 * 5 + 2 * 5
    assert _steps(open_store(res.store_dir)) == _steps(open_store(whole.store_dir))
    assert open_store(res.store_dir).steps().get_column("n").to_list() == [10, 10, 5, 5, 5, 5, 5]


def test_summary003_a_commit_mid_read_hides_partial_steps_and_the_next_shows_them(tmp_path):
    """Steps a commit hid as possibly partial (``complete=False``) are summarised again, whole, by the
    next complete commit, even when it reads nothing new."""
    run = tmp_path / "run"
    run.mkdir()
    for r in range(2):
        (run / f"rank{r}.jsonl").write_bytes(b"".join(_line(s, k, r) for s in range(3) for k in range(3)))
    cache = tmp_path / "cache"
    res = ingest_run(run, cache, PADS, complete=False)
    assert open_store(res.store_dir).steps().get_column("step").to_list() == [0, 1]
    res = ingest_run(run, cache, PADS, complete=True)
    whole = ingest_run(run, tmp_path / "whole", PADS)
    assert _steps(open_store(res.store_dir)) == _steps(open_store(whole.store_dir))
    assert open_store(res.store_dir).steps().get_column("n").to_list() == [6, 6, 6]


def test_summary004_step_windows_by_hand():
    """Windows of steps of at most ``rows`` rows, a part's rows spread evenly over its steps: two parts of
    steps 0-3 (8 rows) and 2-5 (4 rows) hold 2, 2, 3, 3, 1, 1 rows at steps 0-5; a gap of steps no part
    holds closes a window; a step denser than ``rows`` is a window alone."""
    sw = ingest_summary.step_windows
    assert sw([], 5) == []
    assert sw([(0, 3, 8), (2, 5, 4)], 5) == [(0, 1), (2, 2), (3, 5)]
    assert sw([(0, 3, 8), (2, 5, 4)], 100) == [(0, 5)]
    assert sw([(0, 1, 2), (10, 11, 2)], 100) == [(0, 1), (10, 11)]
    assert sw([(7, 7, 50), (8, 9, 2)], 10) == [(7, 7), (8, 9)]


def test_summary010_a_part_over_a_vast_range_of_steps_is_summarised():
    """One line at step 2^40 after steps 1-2 (issue 33, row 4): the part spans 2^40 steps with 9 rows, a
    density below the old 1e-9 tolerance, and its every step was left out of the summary: the run showed
    "0 samples, 0 steps", silently. Now every step a part holds is in a window."""
    sw = ingest_summary.step_windows
    assert sw([(1, 2**40, 9)], 100) == [(1, 2**40)]
    assert sw([(1, 2, 8), (2**40, 2**40, 1)], 100) == [(1, 2), (2**40, 2**40)]
    assert sw([(0, 2**62, 3), (5, 5, 500)], 100) == [(0, 4), (5, 5), (6, 2**62)]


@pytest.mark.parametrize("run", ["trl-grpo-small", "real-verl-gsm8k-tools", "rlloggingboard-eval-poem", None])
def test_summary005_summarised_in_windows_as_at_once(fixtures_dir, tmp_path, monkeypatch, run):
    """A commit's stale steps summarised a few rows at a time (windows of steps, see REFRESH_ROWS) give the
    steps table and the histogram cells of one read of them all, to the last bit (fixtures and the demo
    run, read in small chunks so that parts span several steps)."""
    src = fixture_or_demo(fixtures_dir, tmp_path / "root", run, steps=9)
    once = open_store(ingest_run(src, tmp_path / "once", PADS, chunk_bytes=20_000).store_dir)
    windows = []
    real = ingest_summary.step_windows
    monkeypatch.setattr(ingest_summary, "REFRESH_ROWS", 5)
    monkeypatch.setattr(ingest_summary, "step_windows", lambda *a: windows.append(real(*a)) or windows[-1])
    small = open_store(ingest_run(src, tmp_path / "small", PADS, chunk_bytes=20_000).store_dir)
    assert max(len(w) for w in windows) >= min(3, once.steps().height)  # a window a step, or fewer
    assert_frame_equal(small.steps(), once.steps())
    cells = read_hist_cells(small)
    assert cells is not None and cells.height > 0
    assert_frame_equal(cells, read_hist_cells(once))


def test_summary006_repetition_mean_by_hand():
    """``repetition_mean`` is the mean of a step's finite repetitions: (0.5 + 0.25) / 2 at step 1 (NaN, inf
    and null left out), null at step 2 (none)."""
    import polars as pl

    from data.metrics.step import step_summary
    from data.store.layout import SCALAR_DTYPES

    df = pl.DataFrame(
        {
            "step": [1, 1, 1, 1, 1, 2],
            "reward": [1.0] * 6,
            "repetition": [0.5, float("nan"), None, 0.25, float("inf"), None],
        }
    )
    absent = [pl.lit(None, t).alias(c) for c, t in SCALAR_DTYPES.items() if c not in df.columns]
    st = step_summary(df.with_columns(absent).lazy()).collect()
    assert st.get_column("repetition_mean").to_list() == [0.375, None]


@pytest.mark.parametrize("run", ["trl-ppo-small", "real-verifiers-math-python", None])
def test_summary007_repetition_mean_is_the_scans(fixtures_dir, tmp_path, run):
    """The reward page's repetition curve read from the summary equals the per-step mean of the responses'
    repetitions read from the scalars, to the last bit (fixtures and the demo run)."""
    import polars as pl

    from data.cache import StoreKey
    from data.signals import _repetition

    src = fixture_or_demo(fixtures_dir, tmp_path / "root", run, steps=9)
    store = open_store(ingest_run(src, tmp_path / "cache", PADS, chunk_bytes=20_000).store_dir)
    rep = pl.col("repetition").cast(pl.Float64)
    scanned = (
        store.scan(["step", "repetition"])
        .group_by("step")
        .agg(rep.filter(rep.is_finite()).mean().alias("y"))
        .sort("step")
        .collect()
    )
    assert scanned.get_column("y").drop_nulls().len() > 0
    assert_frame_equal(_repetition.__wrapped__(StoreKey(store)), scanned)


def test_summary009_a_check_that_finds_nothing_new_reads_no_summary(tmp_path, monkeypatch):
    """A second ingest of files that did not change (the check pages make every few seconds) commits
    nothing and reads neither the steps summary nor the histogram cells whole; its result still counts
    the run's steps, responses and tokens."""
    import polars as pl

    run = tmp_path / "run"
    run.mkdir()
    (run / "rank0.jsonl").write_bytes(b"".join(_line(s, k, 0) for s in range(3) for k in range(4)))
    cache = tmp_path / "cache"
    first = ingest_run(run, cache, PADS)
    read = pl.read_parquet

    def refuse(path, *a, **k):
        assert not str(path).endswith(".parquet"), f"read whole: {path}"
        return read(path, *a, **k)

    monkeypatch.setattr(ingest_summary.pl, "read_parquet", refuse)
    again = ingest_run(run, cache, PADS)
    assert again.generation == first.generation
    assert (again.steps, again.samples, again.tokens) == (first.steps, first.samples, first.tokens)
    assert (again.steps, again.samples) == (3, 12)
    # Its sums are those of the summary file the commit wrote, read once: a third check scans nothing.
    monkeypatch.setattr(pl, "scan_parquet", lambda *a, **k: pytest.fail(f"scanned: {a}"))
    third = ingest_run(run, cache, PADS)
    assert (third.steps, third.samples, third.tokens) == (first.steps, first.samples, first.tokens)


def test_summary011_a_step_larger_than_a_window_by_columns_as_at_once():
    """step_summary_by_columns (a few columns of a step's rows at a time) gives step_summary's frame to the
    last bit: columns, order, counts, quantiles, win rate, groups and an extra column's mean, with a
    column the rows lack (repetition) summarised to nulls as step_summary does."""
    import random

    import polars as pl

    from data.metrics.step import step_summary, step_summary_by_columns
    from data.store.layout import SCALAR_DTYPES

    rng = random.Random(11)
    n = 5000
    df = pl.DataFrame(
        {
            "step": [1 + (k % 3 == 0) for k in range(n)],
            "reward": [rng.gauss(0, 1) if k % 97 else float("nan") for k in range(n)],
            "ref_reward": [rng.gauss(0, 1) if k % 5 else None for k in range(n)],
            "prompt_key": [f"p{k % 40}" for k in range(n)],
            "response_length": [rng.randrange(1, 300) for _ in range(n)],
            "kl_sum": [rng.random() for _ in range(n)],
            "n_kl_tokens": [rng.randrange(0, 9) for _ in range(n)],
            "score": [rng.random() for _ in range(n)],
        }
    ).with_columns((pl.col("reward") - pl.col("ref_reward")).alias("reward_gain"))
    absent = [pl.lit(None, t).alias(c) for c, t in SCALAR_DTYPES.items() if c not in df.columns]
    at_once = step_summary(df.with_columns(absent).drop("repetition").lazy(), ["score"]).collect()
    reads: list[list[str]] = []

    def read(columns):
        reads.append(list(columns))
        have = [c for c in dict.fromkeys(columns) if c in df.columns]
        filled = [c for c in columns if c not in df.columns and c in SCALAR_DTYPES and c != "repetition"]
        return df.select(have).with_columns(pl.lit(None, SCALAR_DTYPES[c]).alias(c) for c in filled)

    by_columns = step_summary_by_columns(read, ["score"])
    assert_frame_equal(by_columns, at_once)
    assert max(len(r) for r in reads) <= 5  # never every column at once
    assert by_columns.get_column("repetition_mean").to_list() == [None, None]


def test_summary012_one_step_over_the_window_read_by_columns(tmp_path, monkeypatch):
    """A step of more rows than a window holds (REFRESH_ROWS) is summarised a few columns at a time, and the
    steps table and histogram cells are those of a store summarised whole."""
    from data.metrics import step as step_metrics

    run = tmp_path / "run"
    run.mkdir()
    (run / "r0.jsonl").write_bytes(
        b"".join(_line(1, k, 0) for k in range(300)) + b"".join(_line(2, k, 0) for k in range(7))
    )
    once = open_store(ingest_run(run, tmp_path / "once", PADS).store_dir)
    used: list[list[int]] = []
    real = step_metrics.step_summary_by_columns

    def spy(read, extras=()):
        out = real(read, extras)
        used.append(out.get_column("step").to_list())
        return out

    monkeypatch.setattr(ingest_summary, "step_summary_by_columns", spy)
    monkeypatch.setattr(ingest_summary, "REFRESH_ROWS", 50)
    big = open_store(ingest_run(run, tmp_path / "big", PADS).store_dir)
    # Step 1 (300 rows) by columns (step 2 too, when its part's rows are counted as spread over both steps).
    assert [1] in used and all(len(steps) == 1 for steps in used)
    assert_frame_equal(big.steps(), once.steps())
    assert big.steps().get_column("n").to_list() == [300, 7]
    assert_frame_equal(read_hist_cells(big), read_hist_cells(once))
