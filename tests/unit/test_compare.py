"""data/compare on hand-made runs: TensorBoard's EMA, the samples-seen axis, overlays and their notes,
the summary table, shared bins, prompt matching (normalisation), paired differences and solved lists
computed by hand, the word diff, and runs that cannot be compared."""

from __future__ import annotations

import json
import random

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from data.compare import curves, distribution, paired_steps, prompts, summary, word_diff
from data.compare.notes import METRIC, PROMPTS, RUN, STEPS
from data.compare.runs import CompareRun, load_runs
from data.compare.smoothing import ema
from data.config import Settings
from data.ingest import ingest_run
from data.service import Board
from data.store import open_store
from tests.conftest import FIXTURE_RUNS, fixture_or_demo

PADS = ("<pad>", "<|endoftext|>")


def _run(tmp_path, name: str, records: list[dict]):
    """Write ``records`` as one JSON-lines file of run ``name`` under ``tmp_path/root``, ingest, return
    the store."""
    run = tmp_path / "root" / name
    run.mkdir(parents=True, exist_ok=True)
    (run / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)


def _rec(prompt: str, step: int, reward: float, response: str = "r", **extra) -> dict:
    return {"prompt": prompt, "response": response, "reward": reward, "step": step, **extra}


# ---- smoothing ---------------------------------------------------------------------------------------------


def test_compare001_ema_is_tensorboards_debiased_ema():
    """w = 0.5 on [1, 3, gap, 5] gives 1, 7/3, gap, 27/7 (last/(1 − w^n), n counting finite points only);
    a constant series and w = 0 are left alone; w = 1 is refused."""
    out = ema([1.0, 3.0, None, 5.0], 0.5)
    assert out[0] == pytest.approx(1.0)
    assert out[1] == pytest.approx(1.75 / 0.75)
    assert out[2] != out[2]  # NaN: a gap stays a gap
    assert out[3] == pytest.approx(3.375 / 0.875)
    assert list(ema([2.0, 2.0, 2.0], 0.9)) == [2.0, 2.0, 2.0]
    assert list(ema([1.0, 5.0], 0.0)) == [1.0, 5.0]
    with pytest.raises(ValueError):
        ema([1.0], 1.0)


def test_compare002_ema_matches_the_definition_on_random_series():
    """The EMA equals the weighted sum Σ w^(n−k)(1−w) y_k / (1 − w^n) computed directly."""
    rng = random.Random(3)
    for _ in range(20):
        ys = [rng.uniform(-5, 5) for _ in range(rng.randint(2, 30))]
        w = rng.choice([0.1, 0.6, 0.95, 0.999])
        out = ema(ys, w)
        for n in range(1, len(ys) + 1):
            direct = sum(w ** (n - k) * (1 - w) * ys[k - 1] for k in range(1, n + 1)) / (1 - w**n)
            assert out[n - 1] == pytest.approx(direct, rel=1e-9, abs=1e-9)


# ---- curves ------------------------------------------------------------------------------------------------


def test_compare003_samples_seen_and_overlay(tmp_path):
    """x = responses seen up to and including the step (3, then 3 + 1 = 4, then 6); y the step's mean
    reward; smoothing leaves y raw and adds the EMA."""
    store = _run(
        tmp_path,
        "a",
        [_rec("p", 1, r) for r in (0, 1, 2)] + [_rec("p", 2, 4)] + [_rec("p", 5, r) for r in (1, 3)],
    )
    frame = curves.run_frame(store)
    assert frame.select("step", "samples").rows() == [(1, 3), (2, 4), (5, 6)]
    ov = curves.overlay({"a": frame}, "reward", band="std", smoothing=0.5, x="samples")
    line = ov.lines[0].frame
    assert line.get_column("x").to_list() == [3.0, 4.0, 6.0]
    assert line.get_column("y").to_list() == [1.0, 4.0, 2.0]
    assert line.get_column("smooth").to_list() == pytest.approx(list(ema([1.0, 4.0, 2.0], 0.5)), rel=1e-5)
    assert {"lo", "hi"} <= set(line.columns)
    assert ov.label == "reward" and ov.notes == ()


def test_compare004_missing_metrics_and_step_ranges_are_notes(tmp_path):
    """A run without token arrays gets a note instead of a KL line and its length in characters; runs
    with different step ranges, and ranges that do not overlap, are said so."""
    tok = {"response_tokens": ["a", "b"], "logprobs": [-1.0, -2.0], "ref_logprobs": [-1.5, -2.0]}
    a = _run(tmp_path, "a", [_rec("p", s, 1.0, **tok) for s in (1, 2, 3)])
    b = _run(tmp_path, "b", [_rec("p", s, 0.0) for s in (10, 20)])
    frames = {"a": curves.run_frame(a), "b": curves.run_frame(b)}
    assert "kl_token_mean" in curves.available(frames["a"]) and "response_length" in curves.available(
        frames["a"]
    )
    assert "kl_token_mean" not in curves.available(frames["b"]) and "response_chars" in curves.available(
        frames["b"]
    )
    ov = curves.overlay(frames, "kl_token_mean")
    assert [line.run for line in ov.lines] == ["a"]
    assert ov.notes[0].kind == METRIC and ov.notes[0].runs == ("b",) and "log-probs" in ov.notes[0].text
    notes = curves.step_notes(frames)
    assert [n.kind for n in notes] == [STEPS, STEPS]
    assert "a: steps 1–3 (3 steps); b: steps 10–20 (2 steps)" in notes[0].text
    assert notes[1].text == "Their step ranges do not overlap."


def test_compare005_reward_components_are_curves(tmp_path):
    """An extra column ``rewards.<fn>`` (a file's {"rewards": {...}}) is a component: its per-step mean."""
    recs = [
        _rec("p", 1, 1.0, rewards={"acc": 1.0}),
        _rec("p", 1, 0.0, rewards={"acc": 0.0}),
        _rec("p", 2, 1.0, rewards={"acc": 1.0}),
    ]
    frame = curves.run_frame(_run(tmp_path, "a", recs))
    assert "component:rewards.acc" in curves.available(frame)
    ov = curves.overlay({"a": frame}, "component:rewards.acc")
    assert ov.lines[0].frame.select("step", "y").rows() == [(1, 0.5), (2, 1.0)]


# ---- summary table -----------------------------------------------------------------------------------------


def test_compare006_summary_row_by_hand(tmp_path):
    """Steps 1, 2, 3 with mean rewards 0.5, 2, 1: last 1, best 2 at step 2; 7 responses; length over the
    first and last tenth (one step each) in characters; zero-spread share over all groups."""
    recs = [
        _rec("p", 1, 0, "aa"), _rec("p", 1, 1, "aaaa"),  # group spread 1
        _rec("p", 2, 2, "a"), _rec("p", 2, 2, "a"), _rec("q", 2, 2, "a"),  # p: zero spread; q: single
        _rec("p", 3, 1, "abcdef"), _rec("p", 3, 1, "abcdef"),  # zero spread
    ]  # fmt: skip
    row = summary.summary_row("a", curves.run_frame(_run(tmp_path, "a", recs)))
    assert row["steps"] == 3 and (row["first_step"], row["last_step"]) == (1, 3)
    assert row["responses"] == 7
    assert row["reward_last"] == 1.0 and row["reward_best"] == 2.0 and row["reward_best_step"] == 2
    assert row["kl_last"] is None
    assert (row["length_first"], row["length_last"], row["length_unit"]) == (3.0, 6.0, "characters")
    assert row["zero_spread_share"] == pytest.approx(2 / 3)
    table = summary.summary_table({"a": curves.run_frame(_run(tmp_path, "a", recs))})
    assert table.columns == list(summary.COLUMNS) and table.height == 1


# ---- distributions -----------------------------------------------------------------------------------------


def test_compare007_shared_bins_and_shares(tmp_path):
    """Rewards {0, 1} and {0, 0.5, 1}: one bar per value of the union; each run's shares at its step."""
    a = _run(tmp_path, "a", [_rec("p", 1, r) for r in (0, 1, 1, 1)])
    b = _run(tmp_path, "b", [_rec("p", 1, r) for r in (0, 0.5)] + [_rec("p", 2, r) for r in (0.5, 1)])
    stores = {"a": a, "b": b}
    bins = distribution.shared_bins(stores)
    assert bins.discrete and bins.edges == (0.0, 0.5, 1.0, 1.5)
    bars, notes = distribution.distributions(stores, {"a": 1, "b": 3}, bins)
    assert bars[0].frame.get_column("count").to_list() == [1, 0, 3]
    assert bars[0].frame.get_column("share").to_list() == [0.25, 0.0, 0.75]
    assert bars[1].step == 2 and bars[1].frame.get_column("count").to_list() == [0, 1, 1]
    assert notes[0].runs == ("b",) and "no step 3" in notes[0].text


# ---- prompts -----------------------------------------------------------------------------------------------


def test_compare008_match_text_normalisation():
    """Pads, Unicode composition and white space runs do not split a prompt; case, punctuation and
    compatibility forms (full-width letters) do."""
    same = [
        ("<pad>Hello world<|endoftext|>", "Hello world"),
        ("caf\u00e9", "cafe\u0301"),
        ("a\t b\n\nc ", "a b c"),
        ("  a\u00a0b", "a b"),
        ("a<pad> b", "a b"),
    ]
    for x, y in same:
        assert prompts.match_text(x, PADS) == prompts.match_text(y, PADS), (x, y)
    differ = [("Hello", "hello"), ("Hello.", "Hello"), ("\uff21B", "AB"), ("ab", "a b")]
    for x, y in differ:
        assert prompts.match_text(x, PADS) != prompts.match_text(y, PADS), (x, y)
    assert prompts.match_text("a\t b\n\nc ", PADS) == "a b c"
    assert prompts.match_key("a") != prompts.match_key("b") and len(prompts.match_key("a")) == 32


def _two_runs(tmp_path):
    a = _run(
        tmp_path,
        "a",
        [_rec("What is 2+2?", 1, r) for r in (0, 1)]
        + [_rec("What is 2+2?", 2, r) for r in (1, 1)]
        + [_rec("Name a colour.", 1, r) for r in (0, 0)]
        + [_rec("Alpha", 1, 1)],
    )
    b = _run(
        tmp_path,
        "b",
        [_rec("  What is   2+2?\n", 2, r) for r in (0, 0)]
        + [_rec("What is 2+2?", 3, r) for r in (1, 0, 0, 0)]
        + [_rec("Name a colour.<pad>", 1, r) for r in (1, 1)]
        + [_rec("Beta", 1, 0)],
    )
    return a, b


def test_compare009_paired_differences_by_hand(tmp_path):
    """Two shared prompts (one written with other white space and a pad), each compared at its paired
    steps: "2+2" (A at 1, 2; B at 2, 3) at step 2 of both (gap 0): A 1.0, B 0.0, diff 1.0; "colour" at step
    1 of both: A 0, B 1, diff −1. The gap limit is 10 % of the longer span (B: 1…3): 0.3. Over training:
    step 1 −1 (colour), step 2 +1 (2+2: A 1.0 − B 0)."""
    a, b = _two_runs(tmp_path)
    p = prompts.pair("a", a, "b", b)
    assert (p.a_prompts, p.b_prompts, p.shared, p.left_out) == (3, 3, 2, 0) and p.notes == ()
    assert p.threshold == 0.5 and p.limit == pytest.approx(0.3)  # (0 + 1) / 2; 0.1 × 3
    t = p.table
    assert t.get_column("preview").to_list() == ["Name a colour.", "What is 2+2?"]
    assert t.select("a_step", "b_step", "gap", "a_reward", "b_reward", "diff").rows() == [
        (1, 1, 0, 0.0, 1.0, -1.0),
        (2, 2, 0, 1.0, 0.0, 1.0),
    ]
    assert t.select("a_n", "b_n").rows() == [(2, 2), (2, 2)]
    assert p.over_steps.select("step", "n_prompts", "diff_mean").rows() == [(1, 1, -1.0), (2, 1, 1.0)]


def test_compare010_solved_by_one_not_the_other(tmp_path):
    """τ = 0.5: A solves 2+2 (1.0 at step 2) and B does not (0.0 at step 2); B solves colour (1.0), A does
    not (0). With τ = 0, B's 0.0 solves 2+2 and A's 0 solves colour: neither has one of its own."""
    a, b = _two_runs(tmp_path)
    p = prompts.pair("a", a, "b", b)
    assert p.solved_by("a").get_column("preview").to_list() == ["What is 2+2?"]
    assert p.solved_by("b").get_column("preview").to_list() == ["Name a colour."]
    low = prompts.pair("a", a, "b", b, threshold=0.0)
    assert low.solved_by("a").height == 0 and low.solved_by("b").height == 0


def test_compare011_no_shared_prompt_is_a_note(tmp_path):
    """Runs without a common prompt give an empty table and one note saying so (not also that "the 0 shared
    prompts never come at the same step"), not an error."""
    a = _run(tmp_path, "a", [_rec("x", 1, 1.0)])
    b = _run(tmp_path, "b", [_rec("y", 1, 0.0)])
    p = prompts.pair("a", a, "b", b)
    assert p.table.height == 0 and p.over_steps.height == 0
    assert len(p.notes) == 1 and p.notes[0].kind == PROMPTS and "share no prompt" in p.notes[0].text


def test_compare012_prompt_responses_side_by_side(tmp_path):
    """The responses of a shared prompt at a step, best first, pads removed."""
    a, b = _two_runs(tmp_path)
    p = prompts.pair("a", a, "b", b)
    row = p.table.filter(pl.col("preview") == "What is 2+2?").row(0, named=True)
    got = prompts.prompt_responses(b, row["b_keys"], 3)
    assert got.get_column("reward").to_list() == [1.0, 0.0, 0.0, 0.0]
    assert set(got.get_column("response")) == {"r"}


def test_compare013_word_diff():
    """A replaced word is a delete then an insert; the pieces rebuild both texts exactly."""
    d = word_diff.word_diff("the cat sat", "the dog sat")
    assert d.segments == (("equal", "the "), ("delete", "cat"), ("insert", "dog"), ("equal", " sat"))
    rng = random.Random(5)
    words = ["a", "b", "c", " ", "  ", "\n", "é", "<think>"]
    for _ in range(50):
        x = "".join(rng.choice(words) for _ in range(rng.randint(0, 30)))
        y = "".join(rng.choice(words) for _ in range(rng.randint(0, 30)))
        segs = word_diff.word_diff(x, y, limit=rng.choice([5, 4000])).segments
        assert "".join(t for op, t in segs if op != "insert") == x
        assert "".join(t for op, t in segs if op != "delete") == y
    assert word_diff.word_diff("a " * 10, "b " * 10, limit=4).truncated


# ---- runs --------------------------------------------------------------------------------------------------


def test_compare014_load_runs_notes(tmp_path):
    """Unknown names and repeats are notes; known runs come back in the order asked."""
    _run(tmp_path, "a", [_rec("x", 1, 1.0)])
    _run(tmp_path, "b", [_rec("x", 1, 0.0)])
    board = Board(Settings(root=tmp_path / "root", cache_dir=tmp_path / "cache", refresh_seconds=1e6))
    runs, notes = load_runs(board, ["b", "../etc", "a", "b"], wait=30)
    assert [r.name for r in runs] == ["b", "a"]
    assert [n.kind for n in notes] == [RUN] and "Unknown run '../etc'" in notes[0].text


def test_compare015_diff_bars_and_opened_prompt(tmp_path):
    """The paired differences (−1 and 1) get one bar each; opening "2+2" gives A's and B's responses at
    their paired step 2 (best first) and the word diff of the two best."""
    a, b = _two_runs(tmp_path)
    p = prompts.pair("a", a, "b", b)
    bars, discrete = prompts.diff_bars(p.table)
    assert discrete and bars.select("lo", "count").rows() == [(-1.0, 1), (1.0, 1)]
    assert p.headline() == (
        "2 shared prompts (3 in a, 3 in b), each compared at the steps of the two runs closest to each other "
        "(at most 0.3 apart); solved: mean reward at the paired step ≥ 0.5."
    )
    match = p.table.filter(pl.col("preview") == "What is 2+2?").item(0, "match")
    got = prompts.open_prompt(p, a, b, match)
    assert (got.a_step, got.b_step) == (2, 2)
    assert [r["reward"] for r in got.a_rows] == [1.0, 1.0] and [r["reward"] for r in got.b_rows] == [0, 0]
    assert got.diff.segments == (("equal", "r"),)
    assert prompts.open_prompt(p, a, b, "0" * 32) is None


def test_compare016_default_trainer_key():
    """The trainer key charted first: loss when logged, else the TensorBoard tag, else the first key."""
    from data.compare.trainer import default_key

    assert default_key(["a", "kl", "loss"]) == "loss"
    assert default_key(["train/loss", "x"]) == "train/loss"
    assert default_key(["b", "a"]) == "b"
    assert default_key([]) is None


def test_compare017_scatter_keeps_the_largest_differences(tmp_path):
    """Past the scatter's limit, the prompts with the largest |difference| are drawn and the rest counted."""
    a, b = _schedules(tmp_path)
    p = prompts.pair("a", a, "b", b)
    rows, left = p.scatter_rows(limit=1)
    assert rows.get_column("preview").to_list() == ["p3"] and left == 2  # |−0.84| > |−0.78| > |−0.2|
    assert p.scatter_rows()[1] == 0


def test_compare018_reward_functions_summed_at_ingest_are_components(tmp_path):
    """TRL's completions table names its reward functions' columns after them (no ``reward_`` prefix); the
    columns the reward was summed from are components, each a curve of its per-step mean."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    run = tmp_path / "root" / "trl" / "completions"
    run.mkdir(parents=True)
    for step, (sent, fmt) in {1: ([1.0, 0.0], [0.5, 0.5]), 2: ([1.0, 1.0], [0.0, 1.0])}.items():
        table = pa.table(
            {
                "step": [step, step],
                "prompt": ["p", "q"],
                "completion": ["a", "b"],
                "sentiment": sent,
                "concise_format": fmt,
                "advantage": [0.1, -0.1],
            }
        )
        pq.write_table(table, run / f"completions_{step:05d}.parquet")
    store = open_store(ingest_run(run.parent, tmp_path / "cache", PADS).store_dir)
    assert curves.component_columns(store) == ["sentiment", "concise_format"]
    frame = curves.run_frame(store)
    assert {"component:sentiment", "component:concise_format"} <= set(curves.available(frame))
    ov = curves.overlay({"trl": frame}, "component:concise_format")
    assert ov.lines[0].frame.select("step", "y").rows() == [(1, 0.5), (2, 0.5)]
    ov = curves.overlay({"trl": frame}, "component:sentiment")
    assert ov.lines[0].frame.select("step", "y").rows() == [(1, 0.5), (2, 1.0)]


# ---- the per-step means ingest keeps (repetition, reward components) ---------------------------------------


def _means_scanned(store) -> pl.DataFrame:
    """The per-step means of the repetition and the components, from the responses (the scan: the
    definition the summary's means are held against)."""
    schema = store.schema()
    components = set(curves.component_columns(store))
    cols = [c for c in schema if c == "repetition" or c in components]
    cols = [c for c in cols if schema[c].is_numeric() and schema[c] != pl.Boolean]
    if not cols or store.steps().height == 0:
        return pl.DataFrame({"step": []}, schema={"step": pl.Int64})
    exprs = []
    for c in cols:
        x = pl.col(c).cast(pl.Float64)
        exprs.append(x.filter(x.is_finite()).mean().alias(c if c == "repetition" else curves.COMPONENT + c))
    return store.scan(["step", *cols]).group_by("step").agg(exprs).sort("step").collect()


def _read_nothing(monkeypatch) -> None:
    """Make a scan of the responses fail."""
    from data.store import RunStore

    monkeypatch.setattr(RunStore, "scan", lambda *a, **k: pytest.fail("scanned the responses"))


@pytest.mark.parametrize("run", [*FIXTURE_RUNS, None])
def test_compare019_run_means_come_from_the_summary(fixtures_dir, tmp_path, monkeypatch, run):
    """A run's per-step repetition and reward component means are read from the steps summary ingest
    keeps, with no scan of the responses, and equal the scan's (to 1e-12: the sums' order may differ in
    the last bit) on the fixtures and the demo."""
    src = fixture_or_demo(fixtures_dir, tmp_path / "root", run, steps=9)
    store = open_store(ingest_run(src, tmp_path / "cache", PADS, chunk_bytes=20_000).store_dir)
    scanned = _means_scanned(store)
    _read_nothing(monkeypatch)
    frame = curves.run_frame(store)
    assert frame.height == scanned.height > 0
    assert_frame_equal(frame.select(scanned.columns), scanned, check_exact=False, rel_tol=1e-12, abs_tol=0)
    comps = [c for c in frame.columns if c.startswith(curves.COMPONENT)]
    assert comps == [c for c in scanned.columns if c.startswith(curves.COMPONENT)]
    assert not [c for c in frame.columns if c.endswith("_finite_mean")]  # read under their keys only
    if run in ("trl-grpo-completions", "real-nemo-gym-math"):  # TRL's reward functions, NeMo Gym's
        assert comps and all(frame.get_column(c).drop_nulls().len() for c in comps), comps


def _acc(step: int, acc, rank: int) -> bytes:
    return (json.dumps(_rec(f"p{rank}", step, 1.0, rewards={"acc": acc})) + "\n").encode()


def test_compare020_component_means_over_commits_by_hand(tmp_path, monkeypatch):
    """A component's per-step mean (finite values; a null left out) kept by ingest, by hand: steps hidden
    by a commit mid-read, then a step spread over two commits, then a file dropped, each equal to one read
    of the same files, and none scanned from the responses."""
    run = tmp_path / "root" / "r"
    run.mkdir(parents=True)
    (run / "rank0.jsonl").write_bytes(_acc(1, 1.0, 0) + _acc(1, 0.0, 0) + _acc(2, 0.5, 0) + _acc(3, 0.0, 0))
    (run / "rank1.jsonl").write_bytes(_acc(1, None, 1) + _acc(2, 1.0, 1))

    def means(complete: bool = True) -> list[tuple]:
        store = open_store(ingest_run(run, tmp_path / "cache", PADS, complete=complete).store_dir)
        with monkeypatch.context() as m:
            _read_nothing(m)
            got = curves.run_frame(store).select("step", "component:rewards.acc").rows()
        if complete:
            whole = open_store(
                ingest_run(run, tmp_path / f"whole{len(list(tmp_path.iterdir()))}", PADS).store_dir
            )
            assert store.steps().sort("step").equals(whole.steps().sort("step"))
        return got

    assert means(complete=False) == [(1, 0.5)]  # steps 2 on hidden (rank1 may not have ended step 2)
    with open(run / "rank1.jsonl", "ab") as f:
        f.write(_acc(2, 0.25, 1) + _acc(3, 0.5, 1))
    # Step 2's rows were read by two commits.
    assert means() == [(1, 0.5), (2, pytest.approx((0.5 + 1.0 + 0.25) / 3, rel=1e-15)), (3, 0.25)]
    (run / "rank1.jsonl").unlink()
    assert means() == [(1, 0.5), (2, 0.5), (3, 0.0)]


def _schedules(tmp_path):
    """Two runs with different prompt schedules. A: steps 1…60 (span 60), reward step / 100; B: steps
    1…40, reward 1 − step / 100. "f" at every step of both; p1 at A 10, 50 and B 12, 40; p2 at A 30 and B
    20, 40; p3 at A 5 and B 11."""
    a_given = {"f": range(1, 61), "p1": (10, 50), "p2": (30,), "p3": (5,)}
    b_given = {"f": range(1, 41), "p1": (12, 40), "p2": (20, 40), "p3": (11,)}
    a = _run(tmp_path, "a", [_rec(p, s, s / 100) for p, steps in a_given.items() for s in steps])
    b = _run(tmp_path, "b", [_rec(p, s, 1 - s / 100) for p, steps in b_given.items() for s in steps])
    return a, b


def test_compare021_prompts_paired_at_comparable_steps(tmp_path):
    """Each prompt at the pair of steps with the smallest gap (a tie to the largest sum), by hand: f at
    (40, 40) (gap 0, the latest of 40 ties), p1 at (10, 12), p3 at (5, 11) (gap 6, equal to the limit:
    kept); p2's best pairs (30, 20) and (30, 40) are 10 apart, over the limit of 0.1 × 60 = 6: left out
    of every count, said in a sentence of its own. τ = (0.01 + 0.99) / 2 = 0.5: B solves all three."""
    a, b = _schedules(tmp_path)
    p = prompts.pair("a", a, "b", b)
    assert (p.limit, p.shared, p.left_out) == (6.0, 4, 1) and p.threshold == pytest.approx(0.5)
    rows = {r["preview"]: r for r in p.table.to_dicts()}
    assert set(rows) == {"f", "p1", "p3"}
    got = {k: (r["a_step"], r["b_step"], r["gap"]) for k, r in rows.items()}
    assert got == {"f": (40, 40, 0), "p1": (10, 12, 2), "p3": (5, 11, 6)}
    for k, (sa, sb, _) in got.items():
        assert rows[k]["a_reward"] == pytest.approx(sa / 100) and rows[k]["b_reward"] == pytest.approx(
            1 - sb / 100
        )
        assert rows[k]["diff"] == pytest.approx(sa / 100 - (1 - sb / 100))
    assert p.solved_by("a").height == 0
    assert p.solved_by("b").get_column("preview").to_list() == ["p3", "p1", "f"]  # B's largest lead first
    assert [n.text for n in p.notes] == [
        "1 of the 4 shared prompts are left out of the counts: a and b never gave them within 6 steps of each "
        "other (the gap limit, gap= in the URL)."
    ]
    wide = prompts.pair("a", a, "b", b, gap=10)  # a gap equal to the limit is kept; the tie to (30, 40)
    assert wide.left_out == 0 and wide.table.filter(pl.col("preview") == "p2").select(
        "a_step", "b_step"
    ).rows() == [(30, 40)]
    assert prompts.pair("a", a, "b", b, gap=0).table.get_column("preview").to_list() == ["f"]


def test_compare022_nearest_steps_against_every_pair():
    """The as-of pairing equals the definition, every pair of steps tried, on random schedules."""
    rng = random.Random(7)
    for _ in range(200):
        a = {m: sorted(rng.sample(range(0, 40), rng.randint(1, 6))) for m in ("x", "y", "z")}
        b = {m: sorted(rng.sample(range(0, 40), rng.randint(1, 6))) for m in ("x", "y", "w")}
        frame = lambda given, col: pl.DataFrame(  # noqa: E731
            [(m, s) for m, steps in given.items() for s in steps],
            schema={"match": pl.String, col: pl.Int64},
            orient="row",
        )
        got = paired_steps.nearest_steps(frame(a, "a_step"), frame(b, "b_step"))
        want = {
            m: min(((sa, sb) for sa in a[m] for sb in b[m]), key=lambda p: (abs(p[0] - p[1]), -(p[0] + p[1])))
            for m in set(a) & set(b)
        }
        assert {r[0]: (r[1], r[2]) for r in got.rows()} == want
        assert all(r[3] == abs(r[1] - r[2]) for r in got.rows())


def _by_hand(run_dir) -> dict[str, dict[int, list[float]]]:
    """A fixture run's rewards by normalised prompt text and step, read from its files without the board."""
    import re
    import unicodedata

    out: dict[str, dict[int, list[float]]] = {}
    for f in sorted(run_dir.glob("rank*.jsonl")):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            p = r["prompt"]
            for pad in PADS:
                p = p.replace(pad, "")
            p = re.sub(r"\s+", " ", unicodedata.normalize("NFC", p)).strip()
            out.setdefault(p, {}).setdefault(r["step"], []).append(r["reward"])
    return out


def test_compare023_fixture_pairing_equals_the_rule_by_hand(fixtures_dir, tmp_path):
    """On the real TRL PPO and GRPO runs (different prompt schedules), the pairs, the prompts left out and
    the solved counts equal those computed by hand from the files with the same rule: of 100 shared
    prompts, 75 have no pair of steps within 2.5 (10 % of 25 steps) and are left out."""
    ppo, grpo = (fixtures_dir / n for n in ("trl-ppo-small", "trl-grpo-small"))
    stores = [open_store(ingest_run(d, tmp_path / "cache", PADS).store_dir) for d in (ppo, grpo)]
    p = prompts.pair("ppo", stores[0], "grpo", stores[1])
    a, b = _by_hand(ppo), _by_hand(grpo)
    rewards = [x for d in (a, b) for per in d.values() for v in per.values() for x in v]
    tau = (min(rewards) + max(rewards)) / 2
    limit = 0.1 * max(max(s) - min(s) + 1 for s in ({s for v in d.values() for s in v} for d in (a, b)))
    kept = {}
    for text in set(a) & set(b):
        sa, sb = min(
            ((x, y) for x in a[text] for y in b[text]), key=lambda t: (abs(t[0] - t[1]), -(t[0] + t[1]))
        )
        if abs(sa - sb) <= limit:
            kept[text] = (sa, sb, sum(a[text][sa]) / len(a[text][sa]), sum(b[text][sb]) / len(b[text][sb]))
    assert (p.shared, p.left_out, p.limit, p.threshold) == (100, 75, limit, tau) == (100, 75, 2.5, tau)
    got = {r["preview"]: (r["a_step"], r["b_step"], r["a_reward"], r["b_reward"]) for r in p.table.to_dicts()}
    assert got.keys() == kept.keys()
    for text, (sa, sb, ra, rb) in kept.items():
        assert got[text][:2] == (sa, sb)
        assert got[text][2] == pytest.approx(ra, abs=1e-12) and got[text][3] == pytest.approx(rb, abs=1e-12)
    solved = lambda first, other: sum(1 for k in kept.values() if k[first] >= tau > k[other])  # noqa: E731
    assert (p.solved_by("a").height, p.solved_by("b").height) == (solved(2, 3), solved(3, 2)) == (2, 1)


def test_compare024_truncation_share_joins_the_curves(fixtures_dir, tmp_path):
    """Compare's curves gain the truncation share: per step, the share of responses that do not end with
    an end token once pads are dropped, equal to the count by hand from the real TRL files; a run whose
    responses never end with one (the poem run's texts) has no such curve and says why."""
    import shutil

    from data.compare.curves import MISSING, available, run_curve

    root = tmp_path / "root"
    for name in ("trl-grpo-small", "trl-ppo-small", "rlloggingboard-eval-poem"):
        shutil.copytree(fixtures_dir / name, root / name)  # a link out of the root would not be read
    board = Board(Settings(root=root, cache_dir=tmp_path / "cache", refresh_seconds=1e6))
    runs, _ = load_runs(board, ["trl-grpo-small", "trl-ppo-small", "rlloggingboard-eval-poem"], wait=60)
    assert [r.name for r in runs] == ["trl-grpo-small", "trl-ppo-small", "rlloggingboard-eval-poem"]
    for r in runs[:2]:
        cut: dict[int, list[bool]] = {}
        for f in sorted((fixtures_dir / r.name).glob("rank*.jsonl")):
            for line in f.read_text().splitlines():
                rec = json.loads(line)
                text = rec["response"]
                while text.endswith("<pad>"):
                    text = text[: -len("<pad>")]
                cut.setdefault(rec["step"], []).append(not text.endswith("<|endoftext|>"))
        curve = run_curve(r.frame, "truncated_share")
        assert dict(curve.select("step", "y").rows()) == {s: sum(v) / len(v) for s, v in cut.items()}
        assert "truncated_share" in available(r.frame)
    assert "truncated_share" not in available(runs[2].frame)
    assert "end token" in MISSING["truncated_share"]


def test_compare040_explained_variance_joins_the_curves(fixtures_dir, tmp_path):
    """Compare's curves gain the critic's explained variance (issue 35): the PPO run's, per step, equal to
    1 − Var(return − value) / Var(return) by hand with numpy from its files' own `returns`; the GRPO run has
    no values, so no such curve, and the label says whose returns."""
    import shutil

    import numpy as np

    from data.compare.curves import MISSING, available, metric_label, run_curve

    root = tmp_path / "root"
    for name in ("trl-grpo-small", "trl-ppo-small"):
        shutil.copytree(fixtures_dir / name, root / name)
    board = Board(Settings(root=root, cache_dir=tmp_path / "cache", refresh_seconds=1e6))
    runs, _ = load_runs(board, ["trl-grpo-small", "trl-ppo-small"], wait=60)
    pairs: dict[int, list] = {}
    for f in sorted((fixtures_dir / "trl-ppo-small").glob("rank*.jsonl")):
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            n = min(len(rec["values"]), len(rec["returns"]))
            pairs.setdefault(rec["step"], []).append((rec["values"][:n], rec["returns"][:n]))
    hand = {}
    for step, ps in pairs.items():
        v = np.concatenate([np.asarray(p[0], np.float64) for p in ps])
        r = np.concatenate([np.asarray(p[1], np.float64) for p in ps])
        hand[step] = 1.0 - np.var(r - v) / np.var(r)
    got = dict(run_curve(runs[1].frame, "explained_variance").select("step", "y").rows())
    assert got.keys() == hand.keys()
    assert all(got[s] == pytest.approx(hand[s], abs=1e-6) for s in hand)
    assert "explained_variance" in available(runs[1].frame)
    assert "explained_variance" not in available(runs[0].frame)
    assert MISSING["explained_variance"] == "no critic values (values)"
    assert (
        metric_label("explained_variance") == "explained variance (trainer returns where given, else γ = 1)"
    )


def test_compare041_reward_band_clipped_to_each_runs_range(tmp_path):
    """Compare's ±1 std reward band is cut to each run's observed reward range, with a note naming the run:
    rewards 0, 1 at step 1 (mean 0.5, std 0.707) and 3, 3 at step 2: the band's low edge at step 1 is 0, not
    −0.207; its high edge at step 2 stays 3 (std 0)."""
    store = _run(tmp_path, "a", [_rec("p", 1, 0.0), _rec("q", 1, 1.0), _rec("p", 2, 3.0), _rec("q", 2, 3.0)])
    frame = curves.run_frame(store)
    ov = curves.overlay({"a": frame}, "reward", band="std")
    got = ov.lines[0].frame.select("step", "lo", "hi").rows()
    assert got[0] == (1, 0.0, pytest.approx(0.5 + 0.5**0.5, abs=1e-5)) and got[1] == (2, 3.0, 3.0)
    assert [n.text for n in ov.notes] == ["a: its ±1 std band is clipped to its observed range 0 – 3."]
    assert curves.overlay({"a": frame}, "reward", band="p25-p75").notes == ()


def test_compare025_near_rows_pair_as_every_step():
    """The long run read in windows around the short run's steps (near_rows) gives, on random schedules
    and gap limits, the same paired steps, rewards and common-step rows as the long run read whole, and
    reads fewer steps when the short run's prompts recur near its own steps."""
    rng = random.Random(11)
    fewer = 0
    for _ in range(400):
        long_steps = sorted(rng.sample(range(0, 120), rng.randint(1, 100)))
        short_lo = rng.randint(-10, 100)
        short_steps = list(range(short_lo, short_lo + rng.randint(1, 6)))
        matches = [f"m{i}" for i in range(rng.randint(1, 5))]

        def rows(steps, p, matches=matches):
            out = [(m, s, rng.randint(1, 4), rng.choice([0.0, 0.5, 1.0])) for s in steps for m in matches]
            frame = pl.DataFrame(
                [x for x in out if rng.random() < p], schema=prompts._BY_STEP_SCHEMA, orient="row"
            )
            return frame.sort("match", "step")

        long_all = rows(long_steps, rng.choice([0.05, 0.2, 0.5, 1.0]))
        short = rows(short_steps, 0.5)
        limit = rng.choice([0.5, 1, 2, 3, 5, 10, 40, 1000])
        names = pl.DataFrame({"match": matches, "preview": matches, "keys": [[m] for m in matches]})
        read_steps: list[int] = []

        def read(at, todo, long_all=long_all, read_steps=read_steps):
            read_steps.extend(at)
            keep = pl.col("step").is_in(at) & pl.col("match").is_in(todo.get_column("match").implode())
            return long_all.filter(keep)

        got = paired_steps.near_rows(short, long_steps, limit, read, names)
        assert len(read_steps) == len(set(read_steps))  # no step read twice
        fewer += len(read_steps) < len(long_steps)
        runs = [
            prompts.pair_from(
                "s", prompts.RunPrompts(names, short), "l", prompts.RunPrompts(names, by), 0.5, limit
            )
            for by in (got, long_all)
        ]
        assert_frame_equal(runs[0].table, runs[1].table)
        assert_frame_equal(runs[0].over_steps, runs[1].over_steps)
        assert runs[0].left_out == runs[1].left_out
    assert fewer > 100


def test_compare042_repetition_title_names_each_runs_unit(tmp_path):
    """Compare's repetition chart says what a 3-gram is: token 3-grams for a run with token strings, word
    3-grams for one of English text alone, character 3-grams for Chinese text alone (data/signals.py's
    units); one unit in the title when the runs share it, each run's where they differ."""
    words = "the cat sat on the mat and the cat sat"
    tokens = {"response_tokens": words.split()}
    a = _run(tmp_path, "a", [_rec("p", s, 1.0, words, **tokens) for s in (1, 2)])
    a2 = _run(tmp_path, "a2", [_rec("p", s, 1.0, words, **tokens) for s in (1, 2)])
    b = _run(tmp_path, "b", [_rec("p", s, 1.0, words) for s in (1, 2)])
    c = _run(tmp_path, "c", [_rec("p", s, 1.0, "猫坐在垫子上猫坐在垫子上") for s in (1, 2)])
    frames = {n: curves.run_frame(s) for n, s in (("a", a), ("a2", a2), ("b", b), ("c", c))}
    same = curves.overlay({k: frames[k] for k in ("a", "a2")}, "repetition")
    assert same.label == "repetition (share of repeated token 3-grams)"
    differ = curves.overlay({k: frames[k] for k in ("a", "b", "c")}, "repetition")
    assert differ.label == (
        "repetition (share of repeated 3-grams) — a: token 3-grams; b: word 3-grams; c: character 3-grams"
    )
    assert len(differ.lines) == 3


def test_compare043_length_band_clipped_to_the_observed_range(tmp_path):
    """A step of lengths 1, 1, 1 and 9 tokens: mean 3, sample std √((3·2² + 6²)/3) = 4, so ±1 std is
    −1 … 7; the band is clipped to the run's observed lengths 1 … 9 (−1 → 1), and a note says so, as for the
    reward. Characters likewise for a run without tokens (lengths 2, 2, 2, 18: mean 6, std 8 → −2 clipped
    to 2)."""
    recs = [_rec("p", 1, 0.0, "x", response_tokens=["t"] * n) for n in (1, 1, 1, 9)]
    frame = curves.run_frame(_run(tmp_path, "a", recs))
    ov = curves.overlay({"a": frame}, "response_length", band="std")
    line = ov.lines[0].frame
    assert line.select("y", "lo", "hi").row(0) == pytest.approx((3.0, 1.0, 7.0))
    assert [n.text for n in ov.notes] == ["a: its ±1 std band is clipped to its observed range 1 – 9."]

    chars = [_rec("p", 1, 0.0, "y" * n) for n in (2, 2, 2, 18)]
    ov = curves.overlay({"b": curves.run_frame(_run(tmp_path, "b", chars))}, "response_chars", band="std")
    assert ov.lines[0].frame.select("y", "lo", "hi").row(0) == pytest.approx((6.0, 2.0, 14.0))
    assert len(ov.notes) == 1 and "observed range 2 – 18" in ov.notes[0].text


def test_compare044_section_asks_each_run_once_and_draws_the_same(tmp_path):
    """The curves section takes each run's metrics once (``have``) and each band's clip once: its charts are
    those drawn run by run without them. Run a has token log-probs and a clipped length band (lengths 1, 1,
    1, 9: ±1 std is −1 … 7, cut to 1 … 9), run b neither, and they are given in the order b, a, so that a
    run's metrics taken for the other would show (a KL line for b, none for a)."""
    from data.compare.sections import curves_section

    tok = {"logprobs": [-1.0], "ref_logprobs": [-1.5]}
    a = _run(tmp_path, "a", [_rec("p", 1, 0.0, "x", response_tokens=["t"] * n, **tok) for n in (1, 1, 1, 9)])
    b = _run(tmp_path, "b", [_rec("p", s, 0.5) for s in (1, 2)])
    frames = {"b": curves.run_frame(b), "a": curves.run_frame(a)}
    runs = [CompareRun(n, tmp_path / "root" / n, s, frames[n]) for n, s in (("b", b), ("a", a))]
    got = curves_section(runs, "std", 0.0, "step")
    keys = curves.metrics_of(frames)
    assert "kl_token_mean" in keys and [o.metric for o in got.overlays] == keys
    for ov in got.overlays:
        alone = curves.overlay(frames, ov.metric, band="std")
        assert (ov.label, ov.notes) == (alone.label, alone.notes)
        assert [line.run for line in ov.lines] == [line.run for line in alone.lines]
        for mine, theirs in zip(ov.lines, alone.lines, strict=True):
            assert_frame_equal(mine.frame, theirs.frame)
    kl = next(o for o in got.overlays if o.metric == "kl_token_mean")
    assert [line.run for line in kl.lines] == ["a"] and kl.notes[0].runs == ("b",)
    length = next(o for o in got.overlays if o.metric == "response_length")
    assert length.lines[0].frame.select("lo", "hi").row(0) == pytest.approx((1.0, 7.0))
    assert "clipped to its observed range 1 – 9" in length.notes[-1].text


def test_compare045_the_same_rewards_in_another_order_differ_by_zero():
    """Prompt p's mean reward at step 1 is the same six rewards in both runs, summed in another order: 0.375
    and 0.37499999999999994 (rounding: 0.1 + 0.2 + 0.7 + 0.9 + 0.3 + 0.05 in that order gives the second).
    Its paired difference and the mean over training read exactly 0, not 5.6e-17 (which the chart drew on an
    axis of 1e-17). Prompt q's means differ by 1e-6 (0.500001 − 0.5): a difference, kept."""
    assert sum([0.1, 0.2, 0.7, 0.9, 0.3, 0.05]) / 6 == 0.37499999999999994  # the rounding at stake
    names = pl.DataFrame({"match": ["p", "q"], "preview": ["p", "q"], "keys": [["p"], ["q"]]})

    def by_step(p_mean, q_mean):
        rows = [("p", 1, 6, p_mean), ("q", 1, 1, q_mean)]
        return pl.DataFrame(rows, schema=prompts._BY_STEP_SCHEMA, orient="row")

    a = prompts.RunPrompts(names, by_step(0.375, 0.500001))
    b = prompts.RunPrompts(names, by_step(0.37499999999999994, 0.5))
    paired = prompts.pair_from("a", a, "b", b, 0.5)
    diffs = dict(paired.table.select("match", "diff").rows())
    assert diffs["p"] == 0.0 and diffs["q"] == pytest.approx(1e-6, rel=1e-9)
    over = paired.over_steps.row(0, named=True)
    assert over["n_prompts"] == 2 and over["diff_mean"] == pytest.approx(0.5e-6, rel=1e-9)
    assert over["diff_p25"] == pytest.approx(0.25e-6, rel=1e-6)  # linear, between 0 and 1e-6
    # The rule itself: within 1e-12 of the larger mean is 0, beyond it a difference; nulls stay null.
    frame = pl.DataFrame({"x": [1.0, 1.0, -2.0, None, 0.0], "y": [1.0 + 1e-13, 1.0 + 2e-12, -2.0, 1.0, 0.0]})
    got = frame.select(prompts.difference("x", "y")).to_series().to_list()
    assert got[0] == 0.0 and got[1] == pytest.approx(-2e-12, rel=1e-3) and got[2:] == [0.0, None, 0.0]
