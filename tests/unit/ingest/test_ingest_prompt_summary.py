"""The prompt list written beside the store at each commit (data.derived.prompts): its numbers by hand,
equal to the list a scan of every response gives, read by the prompts page instead of any scan."""

from __future__ import annotations

import json
import math

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from data import prompts
from data.compare import prompts as compare_prompts
from data.demo import write_demo_run
from data.derived import matches as derived_matches
from data.derived import prompts as prompt_summary
from data.derived.prompts import (
    prompt_list,
    read_prompt_list,
    read_prompt_matches,
)
from data.ingest import ingest_run
from data.metrics.degeneration import step_length_medians
from data.prompts import aggregates as prompts_aggregates
from data.store import open_store
from data.store.reader import RunStore
from tests.conftest import FIXTURE_RUNS, fixture_or_demo

PADS = ("<pad>", "<|endoftext|>")


def _write(run, records: list[dict], name: str = "a.jsonl", mode: str = "w") -> None:
    run.mkdir(parents=True, exist_ok=True)
    with open(run / name, mode) as f:
        f.write("".join(json.dumps(r) + "\n" for r in records))


def _rec(prompt: str, step: int, reward: float, ref: float | None = None) -> dict:
    r = {"prompt": prompt, "response": f"answer {step} {reward}", "reward": reward, "step": step}
    if ref is not None:
        r.update(ref_reward=ref, ref_response="reference answer")
    return r


def _scanned(store) -> tuple[pl.DataFrame, float]:
    """The list as a scan of every response gives it (the store as if committed without the file)."""
    return prompt_list(RunStore(store.dir, store.manifest.without("prompts")))


def _assert_same(store) -> None:
    written = read_prompt_list(store)
    assert written is not None
    table, threshold = _scanned(store)
    assert_frame_equal(written[0], table)  # exact: same rows, same order, same bits (NaN equal to NaN)
    assert written[1] == threshold


def test_promptsum001_written_list_by_hand(tmp_path):
    """Two prompts over three steps: counts, steps, means, wins and the threshold 0.2 σ, computed by hand."""
    run = tmp_path / "run"
    _write(
        run,
        [
            _rec("alpha", 1, 1.0, ref=0.5),
            _rec("alpha", 1, 3.0, ref=3.0),
            _rec("beta", 2, 2.0),
            _rec("alpha", 3, 5.0, ref=6.0),
        ],
    )
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    name = store.manifest.derived["prompts"].name
    assert (store.dir / name).exists()
    table = pl.read_parquet(store.dir / name)
    alpha = table.filter(pl.col("prompt_preview") == "alpha").row(0, named=True)
    beta = table.filter(pl.col("prompt_preview") == "beta").row(0, named=True)
    assert (alpha["n_responses"], alpha["n_steps"], alpha["first_step"], alpha["last_step"]) == (3, 2, 1, 3)
    assert alpha["reward_mean"] == 3.0  # (1 + 3 + 5) / 3
    assert alpha["reward_early"] == 2.0 and alpha["reward_late"] == 5.0  # step 1: (1 + 3) / 2; step 3: 5
    assert (alpha["n_both"], alpha["wins"], alpha["ties"]) == (3, 1, 1)  # 1 > 0.5; 3 = 3; 5 < 6
    assert math.isclose(alpha["gain_mean"], -0.5 / 3, rel_tol=1e-12)  # (0.5 + 0.0 − 1.0) / 3
    assert (beta["n_responses"], beta["n_steps"], beta["trend"]) == (1, 1, "single")
    assert (alpha["order"], beta["order"]) == (0, 1)  # first seen at lines 1 and 3: first and second
    # σ of 1, 3, 2, 5 (ddof 1): mean 2.75, squares 3.0625 + 0.0625 + 0.5625 + 5.0625 = 8.75, / 3
    assert math.isclose(
        store.manifest.derived["prompts"].meta["threshold"], 0.2 * math.sqrt(8.75 / 3), rel_tol=1e-12
    )
    assert alpha["trend"] == "improved"  # 5 − 2 = 3 > 0.2 σ


@pytest.mark.parametrize(
    "run",
    list(FIXTURE_RUNS),
)
def test_promptsum002_equal_to_the_scan_on_fixtures(fixtures_dir, tmp_path, run):
    """On real runs (with and without group ids, references, repetition), the written list is the scan's."""
    src = fixtures_dir / run
    if not src.exists():
        pytest.skip(f"fixture {run} is not in {fixtures_dir}")
    store = open_store(ingest_run(src, tmp_path / "cache", PADS).store_dir)
    _assert_same(store)


def test_promptsum003_equal_to_the_scan_on_the_demo_and_as_it_grows(tmp_path):
    """The demo run, then the same run grown by appended steps while a partial last step is hidden
    (``complete=False``): each commit's list is the scan's of the responses shown, hidden steps left out."""
    root = tmp_path / "root"
    run = write_demo_run(root, "demo", steps=12, per_step=32)
    cache = tmp_path / "cache"
    store = open_store(ingest_run(run, cache, PADS).store_dir)
    _assert_same(store)
    more = write_demo_run(tmp_path / "more", "demo", steps=16, per_step=32)
    for f in sorted(more.glob("*.jsonl")):
        lines = f.read_bytes().splitlines(keepends=True)
        (run / f.name).write_bytes(b"".join(lines[: len(lines) - 5]))  # the last step partly written
    store = open_store(ingest_run(run, cache, PADS, complete=False).store_dir)
    below = store.visible_below
    assert below is not None
    written, _ = read_prompt_list(store)
    assert int(written.get_column("last_step").max()) < below
    _assert_same(store)
    # Only this commit's list and the one before it stay beside the store.
    assert len(list(store.dir.glob("prompts-g*.parquet"))) <= 2


def test_promptsum004_the_page_reads_the_list_and_scans_nothing(tmp_path, monkeypatch):
    """prompt_table reads the written list (no scan of the responses); a store committed without one is
    scanned and gives the same list."""
    run = write_demo_run(tmp_path / "root", "demo", steps=6, per_step=16)
    store = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    expected, threshold = _scanned(store)
    prompts_aggregates._table.cache_clear()

    def no_scan(*a, **k):
        raise AssertionError("the prompt list scanned the responses")

    with monkeypatch.context() as m:
        m.setattr(RunStore, "scan", no_scan)
        assert_frame_equal(prompts.prompt_table(store), expected)
        assert prompts.run_trend_threshold(store) == threshold
    prompts_aggregates._table.cache_clear()
    old = RunStore(store.dir, store.manifest.without("prompts"))
    assert read_prompt_list(old) is None
    assert_frame_equal(prompts.prompt_table(old), expected)


@pytest.mark.parametrize("run", ["rlloggingboard-eval-poem", "trl-ppo-small", "real-verl-gsm8k-tools", None])
def test_promptsum005_step_medians_from_the_steps_summary(fixtures_dir, tmp_path, monkeypatch, run):
    """A step's median length (tokens and characters) is read from the steps summary, equal to the median
    of a scan of the responses (fixtures and the demo); by hand: 1, 2, 10 → 2 and 1, 2, 4, 10 → 3."""
    src = fixture_or_demo(fixtures_dir, tmp_path / "root", run, steps=6)
    store = open_store(ingest_run(src, tmp_path / "cache", PADS).store_dir)
    scanned = step_length_medians(store.scan(["step", "response_length", "response_chars"])).collect()
    with monkeypatch.context() as m:
        m.setattr(RunStore, "scan", lambda *a, **k: (_ for _ in ()).throw(AssertionError("scanned")))
        assert_frame_equal(prompts.step_medians(store), scanned)
    words = {1: ["a", "a b", "a b c d e f g h i j"], 2: ["a", "a b", "a b c d", "a b c d e f g h i j"]}
    recs = [
        {"prompt": "p", "response": w, "reward": 1.0, "step": s, "logprobs": [-0.5] * len(w.split())}
        for s, ws in words.items()
        for w in ws
    ]
    run2 = tmp_path / "hand"
    _write(run2, recs)
    small = open_store(ingest_run(run2, tmp_path / "cache2", PADS).store_dir)
    got = prompts.step_medians(small)
    assert got.get_column("length_median").to_list() == [2.0, 3.0]
    assert got.get_column("chars_median").to_list() == [3.0, 5.0]  # "a b" = 3; ("a b" 3 + "a b c d" 7) / 2


def _unwritten(store) -> RunStore:
    return RunStore(store.dir, store.manifest.without("prompts", "matches"))


@pytest.mark.parametrize("run", ["rlloggingboard-eval-poem", "trl-grpo-small", "real-verl-gsm8k-tools", None])
def test_promptsum006_compare_prompts_written_equal_the_scan(fixtures_dir, tmp_path, run):
    """The compare page's prompts of a run (match key, keys, last step, reward there, mean reward) as the
    commit wrote them are those computed from a scan of its responses and prompt texts."""
    src = fixture_or_demo(fixtures_dir, tmp_path / "root", run, steps=8)
    store = open_store(ingest_run(src, tmp_path / "cache", PADS).store_dir)
    written = read_prompt_matches(store)
    assert written is not None and written.height
    compare_prompts._run_prompts.cache_clear()
    assert_frame_equal(written, compare_prompts.run_prompt_matches(_unwritten(store)))


def test_promptsum007_pair_reads_only_the_steps_both_runs_have(tmp_path, monkeypatch):
    """A 14-step run against a 4-step one (demo prompts, other seed): the pairing from the written prompts
    and the means at the steps that can pair only is the pairing of both runs' whole scans (at the same gap
    limit, 0.1 × 14), and the long run's scalars are read within that limit of the short run's steps only."""
    a = open_store(ingest_run(write_demo_run(tmp_path / "ra", "a", 14, 16), tmp_path / "ca", PADS).store_dir)
    b = open_store(
        ingest_run(write_demo_run(tmp_path / "rb", "b", 4, 16, seed=1), tmp_path / "cb", PADS).store_dir
    )
    compare_prompts._run_prompts.cache_clear()
    full_a = compare_prompts.run_prompts(_unwritten(a))
    full_b = compare_prompts.run_prompts(_unwritten(b))
    expected = compare_prompts.pair_from("a", full_a, "b", full_b, 0.5, limit=0.1 * 14)
    assert expected.over_steps.height  # the demo's prompts recur: there is something to compare
    seen: list = []
    real = RunStore.scan

    def spy(self, columns=None, step=None, steps=None, hidden=False):
        seen.append((self.dir, step, steps))
        return real(self, columns, step, steps, hidden)

    compare_prompts._run_prompts.cache_clear()
    compare_prompts._pair.cache_clear()
    compare_prompts._by_step_shared.cache_clear()
    with monkeypatch.context() as m:
        m.setattr(RunStore, "scan", spy)
        got = compare_prompts.pair("a", a, "b", b, threshold=0.5)
    assert_frame_equal(got.table, expected.table)
    assert_frame_equal(got.over_steps, expected.over_steps)
    assert (got.a_prompts, got.b_prompts) == (expected.a_prompts, expected.b_prompts)
    reads_a = [s for d, _, s in seen if d == a.dir]
    assert reads_a and all(s is not None and s[1] <= 4 + 1.4 for s in reads_a), reads_a


@pytest.mark.parametrize("run", ["trl-grpo-small", "rlloggingboard-eval-poem", None])
def test_promptsum008_in_passes_as_at_once(fixtures_dir, tmp_path, monkeypatch, run):
    """A run aggregated in several passes (by prompt; groups by group_id counted over the whole run) gives
    the list of one pass, to the last bit."""
    src = fixture_or_demo(fixtures_dir, tmp_path / "root", run, steps=8)
    store = _unwritten(open_store(ingest_run(src, tmp_path / "cache", PADS).store_dir))
    once, threshold = prompt_list(store)
    monkeypatch.setattr(prompt_summary, "PASS_ROWS", 7)
    calls = []
    real = prompt_summary.prompt_aggregates
    monkeypatch.setattr(prompt_summary, "prompt_aggregates", lambda *a: calls.append(1) or real(*a))
    passes, again = prompt_list(store)
    assert len(calls) > 3
    assert_frame_equal(passes, once)
    assert again == threshold


def test_promptsum009_compare_prompts_in_passes_as_at_once(tmp_path, monkeypatch):
    """The compare page's prompts (and per-step means) aggregated in several passes by match are those of
    one pass, to the last bit."""
    store = _unwritten(
        open_store(ingest_run(write_demo_run(tmp_path / "r", "d", 8, 16), tmp_path / "c", PADS).store_dir)
    )
    once = compare_prompts._store_prompts(store)
    monkeypatch.setattr(derived_matches, "PASS_ROWS", 9)
    again = compare_prompts._store_prompts(store)
    assert_frame_equal(again.prompts, once.prompts)
    assert_frame_equal(again.by_step, once.by_step)


def test_promptsum010_wide_gap_reads_the_long_run_near_the_short_one(tmp_path, monkeypatch):
    """With a gap limit wider than both runs (every step may pair), a 14-step run against a 4-step one is
    paired as from both runs' whole scans, and the long run is read only at the short run's steps first
    (then windows around them, doubled while a prompt's pair may lie beyond: data.compare.paired_steps.near_rows),
    each step once."""
    a = open_store(ingest_run(write_demo_run(tmp_path / "ra", "a", 14, 16), tmp_path / "ca", PADS).store_dir)
    b = open_store(
        ingest_run(write_demo_run(tmp_path / "rb", "b", 4, 16, seed=1), tmp_path / "cb", PADS).store_dir
    )
    compare_prompts._run_prompts.cache_clear()
    full_a = compare_prompts.run_prompts(_unwritten(a))
    full_b = compare_prompts.run_prompts(_unwritten(b))
    expected = compare_prompts.pair_from("a", full_a, "b", full_b, 0.5, limit=100.0)
    seen: list = []
    real = RunStore.scan

    def spy(self, columns=None, step=None, steps=None, hidden=False):
        seen.append((self.dir, steps))
        return real(self, columns, step, steps, hidden)

    compare_prompts._run_prompts.cache_clear()
    compare_prompts._pair.cache_clear()
    compare_prompts._by_step_shared.cache_clear()
    with monkeypatch.context() as m:
        m.setattr(RunStore, "scan", spy)
        got = compare_prompts.pair("a", a, "b", b, threshold=0.5, gap=100)
    assert_frame_equal(got.table, expected.table)
    assert_frame_equal(got.over_steps, expected.over_steps)
    reads_a = [s for d, s in seen if d == a.dir]
    # First the short run's own span, steps 1-4 (a prompt it gives at a step A has too pairs there, gap 0),
    # then windows of that span around it, only steps not read yet.
    assert reads_a[0] == (1, 4), reads_a
    assert all(lo > hi_before for (_, hi_before), (lo, _) in zip(reads_a, reads_a[1:], strict=False)), reads_a
