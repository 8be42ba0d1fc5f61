"""GRPO first (issue 35, item 4) on the real TRL GRPO fixture (``../shared/fixtures/trl-grpo-small``: TRL
1.16.0's GRPOTrainer, 4 prompts × 4 completions a step, rank files split each group 2/2; see its README):
which response the token page opens by itself, the group of a response side by side, the learning-signal
column, the responses page's columns and its "ended only" filter, each against the file read by hand."""

from __future__ import annotations

import json
import math

import pytest

from data.config import DEFAULT_PAD_TOKENS
from data.ingest import ingest_run
from data.store import open_store, sample_id

RUN = "trl-grpo-small"


@pytest.fixture(scope="module")
def grpo(fixtures_dir, tmp_path_factory):
    """The fixture's store and its records as the files hold them (``file``, ``line`` added)."""
    src = fixtures_dir / RUN
    if not src.is_dir():
        pytest.skip(f"fixture {RUN} is not in {fixtures_dir}")
    store = open_store(ingest_run(src, tmp_path_factory.mktemp("cache"), DEFAULT_PAD_TOKENS).store_dir)
    records = []
    for name in ("rank0.jsonl", "rank1.jsonl"):
        with open(src / name, encoding="utf-8") as f:
            for i, line in enumerate(f, start=1):
                records.append({**json.loads(line), "file": name, "line": i})
    return store, records


def k3_sum(rec: dict) -> float:
    """Σ_t exp(r_t) − 1 − r_t, r_t = ref_logprob_t − logprob_t (docs/metrics.md), by hand."""
    return sum(
        math.exp(r - p) - 1 - (r - p) for p, r in zip(rec["logprobs"], rec["ref_logprobs"], strict=False)
    )


def test_grpo001_token_page_opens_the_steps_largest_kl(grpo):
    """With no response named, the token page opens the step's response of the largest KL sum (the navbar
    carries the step): at step 25 and step 3, the record whose k3 sum computed by hand is largest, not the
    run's first response; the run's last step when no step is given."""
    from data.tokens import default_sample, first_sample

    store, records = grpo
    for step in (3, 25):
        recs = [r for r in records if r["step"] == step]
        top = max(recs, key=k3_sum)
        assert sorted(k3_sum(r) for r in recs)[-2] < k3_sum(top)  # no tie: the answer is one record
        assert default_sample(store, step) == sample_id(top["file"], top["line"])
    assert first_sample(store) == sample_id("rank0.jsonl", 1)
    assert default_sample(store, 3) != first_sample(store)


class _Board:
    """What :func:`data.views.tokens.resolve` asks of the app's board: the runs, a store, the settings."""

    def __init__(self, store):
        self._store = store
        self.settings = type("S", (), {"pad_tokens": DEFAULT_PAD_TOKENS})()

    def runs(self):
        return [RUN]

    def store(self, run, wait):
        return self._store


def test_grpo002_token_url_with_a_step_resolves_and_says_so(grpo):
    """``/tokens?run=R&step=S`` (what the navbar's Tokens link opens from a page at step S) shows step S's
    largest-KL response and says so; a step the run lacks goes by the one step rule (the step before);
    ``step`` round-trips in the URL and a bad one is noticed."""
    from data.tokens import default_note, default_sample
    from data.views.tokens import TokensState, resolve

    store, _ = grpo
    state, notes = TokensState.from_query({"run": [RUN], "step": ["7"]})
    assert notes == [] and state.to_query() == f"?run={RUN}&step=7"
    shown, view, problem = resolve(state, _Board(store), 1.0)
    assert problem is None and shown.sample == default_sample(store, 7) and view.info["step"] == 7
    assert default_note(view) == (
        "No response chosen: showing the response of step 7 with the largest KL sum (k3)."
    )
    shown, _, _ = resolve(TokensState(run=RUN, step=99), _Board(store), 1.0)
    assert shown.sample == default_sample(store, 25)
    shown, _, _ = resolve(TokensState(run=RUN), _Board(store), 1.0)
    assert shown.sample == default_sample(store, 25)
    _, notes = TokensState.from_query({"run": [RUN], "step": ["x"]})
    assert notes == ["Ignored step='x': not a whole number."]


def _keys(store):
    """``part, row, sample_id`` of every response of ``store``."""
    return store.scan(["part", "row", "sample_id"]).collect()


def test_grpo003_ends_of_rows_agree_with_the_trainer(grpo, fixtures_dir):
    """How each of the 400 responses ended (``row_ends``, the ``truncated`` filter's definition) equals TRL's
    own ``ends_with_eos`` of the file (369 ended, 31 cut: the README), row for row; the token page's badge
    says "truncated" of a cut response and "ended" of the others. A run whose texts carry no end token at
    all (the poem fixture has no token strings and no end tokens) cannot tell: null, no badge."""
    from data.config import DEFAULT_END_TOKENS
    from data.signals import ENDS, row_ends
    from data.tokens import token_view, view_end

    store, records = grpo
    keys = _keys(store)
    ends = row_ends(store, keys.select("part", "row"), DEFAULT_PAD_TOKENS, DEFAULT_END_TOKENS)
    got = dict(zip(keys.get_column("sample_id"), ends.get_column(ENDS), strict=True))
    want = {sample_id(r["file"], r["line"]): r["ends_with_eos"] for r in records}
    assert got == want and sum(want.values()) == 369
    cut = next(r for r in records if not r["ends_with_eos"])
    done = next(r for r in records if r["ends_with_eos"])
    for rec, label in ((cut, "truncated"), (done, "ended")):
        view = token_view(store, sample_id(rec["file"], rec["line"]), DEFAULT_PAD_TOKENS)
        assert view_end(store, view, DEFAULT_PAD_TOKENS, DEFAULT_END_TOKENS) == label
    poem = fixtures_dir / "rlloggingboard-eval-poem"
    other = open_store(ingest_run(poem, store.dir.parent / "poem", DEFAULT_PAD_TOKENS).store_dir)
    k = _keys(other).head(3).select("part", "row")
    assert row_ends(other, k, DEFAULT_PAD_TOKENS, DEFAULT_END_TOKENS).get_column(ENDS).to_list() == [None] * 3


def test_grpo004_learning_signal_of_each_group_by_hand(grpo):
    """The learning-signal column (``data.metrics.group.learning_signal``) of every response is whether the
    rewards of its group (step, group_id) in the files differ: the 11 groups of 4 equal rewards (the README's
    44 records of advantage exactly 0) have none; the prompt grid's column says so in words for each row."""
    import polars as pl

    from components.prompt_views import SIGNAL_TEXT, Column, history_rows
    from data.metrics import label
    from data.metrics.group import with_advantage
    from data.prompts import history

    store, records = grpo
    rewards: dict = {}
    for r in records:
        rewards.setdefault((r["step"], r["group_id"]), []).append(r["reward"])
    want = {sample_id(r["file"], r["line"]): len(set(rewards[r["step"], r["group_id"]])) > 1 for r in records}
    flat_ids = {k for k, v in want.items() if not v}
    assert len(flat_ids) == 24 and sum(r["advantage"] == 0 for r in records) == 44
    assert all(r["advantage"] == 0 for r in records if sample_id(r["file"], r["line"]) in flat_ids)
    rows = with_advantage(store.scan(["sample_id", "step", "reward", "prompt_key", "group_id"]), True)
    got = dict(rows.select("sample_id", "learning_signal").collect().iter_rows())
    assert got == want
    flat = next(r for r in records if not want[sample_id(r["file"], r["line"])])
    key = (
        store.scan(["sample_id", "prompt_key"])
        .filter(pl.col("sample_id") == sample_id(flat["file"], flat["line"]))
        .collect()
        .item(0, "prompt_key")
    )
    hist = history(store, key)
    cols = [Column("learning_signal", label("learning_signal"), "text")]
    cells = history_rows(hist.to_dicts(), cols, [""] * hist.height)
    assert {c["learning_signal"] for c in cells} == {SIGNAL_TEXT[False]}
