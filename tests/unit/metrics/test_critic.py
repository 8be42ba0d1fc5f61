"""Critic health per step (explained variance, mean |value − return|), pooled over every position, checked
against values computed by hand with numpy from the real TRL PPO run's files, and the return's source."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from data.config import DEFAULT_PAD_TOKENS
from data.ingest.run import ingest_run
from data.metrics.critic import return_label, return_source
from data.metrics.response import response_list_aggregates
from data.metrics.step import CRITIC_SUMS, critic_health
from data.metrics.token import explode_tokens, token_metrics
from data.store.reader import open_store

PPO = "trl-ppo-small"


@pytest.fixture(scope="module")
def ppo_store(fixtures_dir, tmp_path_factory):
    res = ingest_run(fixtures_dir / PPO, tmp_path_factory.mktemp("critic-cache"), DEFAULT_PAD_TOKENS)
    return open_store(res.store_dir)


def _by_hand(fixtures_dir, returns_of) -> dict[int, tuple[float, float]]:
    """Per step, (explained variance, mean |value − return|) over every position where both a value and a
    return exist, computed with numpy from the rank files; ``returns_of(record)`` gives a record's returns."""
    pairs: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
    for f in sorted((fixtures_dir / PPO).glob("rank*.jsonl")):
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            v = np.asarray(rec["values"], np.float64)
            r = np.asarray(returns_of(rec), np.float64)
            n = min(len(v), len(r))
            pairs.setdefault(rec["step"], []).append((v[:n], r[:n]))
    out = {}
    for step, ps in pairs.items():
        v = np.concatenate([p[0] for p in ps])
        r = np.concatenate([p[1] for p in ps])
        out[step] = (1.0 - np.var(r - v) / np.var(r), float(np.mean(np.abs(v - r))))
    return out


def _curves(store) -> dict[int, dict]:
    steps = store.steps().with_columns(critic_health())
    return {r["step"]: r for r in steps.iter_rows(named=True)}


def test_critic001_ppo_explained_variance_by_hand(ppo_store, fixtures_dir):
    """Done-when of issue 35: on the real TRL PPO run, every step's explained variance and mean |value − return|
    equal numpy's from the file's own `returns` (TRL trl/experimental/ppo/ppo_trainer.py:796, `returns =
    advantages + values`), to 1e-6; and every position counted came with the file's returns."""
    hand = _by_hand(fixtures_dir, lambda rec: rec["returns"])
    got = _curves(ppo_store)
    assert sorted(got) == sorted(hand) == list(range(1, 26))
    for step, (ev, mae) in hand.items():
        assert got[step]["explained_variance"] == pytest.approx(ev, abs=1e-6), step
        assert got[step]["value_error_abs_pooled"] == pytest.approx(mae, abs=1e-6), step
        assert got[step]["critic_file_n"] == got[step]["critic_n"] > 0
        assert return_source(got[step]["critic_file_n"], got[step]["critic_n"]) == "file"
    # Not trivial values: the random value head explains less than nothing at first, a quarter at best later,
    # and its mean error falls from 0.89 at step 1 to 0.26 at step 25.
    assert hand[1][0] < -0.2 and 0.25 < max(ev for ev, _ in hand.values()) < 0.26
    assert hand[1][1] > 3 * hand[25][1]


def test_critic002_gamma1_returns_without_the_field(fixtures_dir, tmp_path):
    """The same run without its `returns` field: the return is Σ_{k≥t} token_reward_k (γ = 1), the
    explained variance equals numpy's from those sums, and the label says 'γ = 1 returns'."""
    run = tmp_path / "root" / "ppo-no-returns"
    run.mkdir(parents=True)
    for f in (fixtures_dir / PPO).glob("rank*.jsonl"):
        lines = [json.loads(x) for x in f.read_text().splitlines()]
        (run / f.name).write_text(
            "".join(json.dumps({k: v for k, v in r.items() if k != "returns"}) + "\n" for r in lines)
        )
    store = open_store(ingest_run(run, tmp_path / "cache", DEFAULT_PAD_TOKENS).store_dir)
    hand = _by_hand(
        fixtures_dir, lambda rec: np.cumsum(np.asarray(rec["token_rewards"], np.float64)[::-1])[::-1]
    )
    got = _curves(store)
    for step, (ev, mae) in hand.items():
        assert got[step]["explained_variance"] == pytest.approx(ev, abs=1e-6), step
        assert got[step]["value_error_abs_pooled"] == pytest.approx(mae, abs=1e-6), step
        assert got[step]["critic_file_n"] == 0
    assert return_label("explained_variance", return_source(0, 10)) == "explained variance (γ = 1 returns)"
    assert return_label("explained_variance", return_source(10, 10)) == "explained variance (trainer returns)"


def test_critic003_small_case_by_hand():
    """Two responses, one with the file's returns and one without, pooled by hand: values (1, 2) against
    returns (2, 2) and values (0, 1, 1) against γ = 1 returns of token rewards (0, 0, 3) = (3, 3, 3).
    e = (−1, 0, −3, −2, −2), r = (2, 2, 3, 3, 3): Var(e) = 1.04, Var(r) = 0.24, EV = 1 − 1.04 / 0.24."""
    df = pl.DataFrame(
        {
            "row": [0, 1],
            "values": [[1.0, 2.0], [0.0, 1.0, 1.0]],
            "token_rewards": [[5.0, 5.0], [0.0, 0.0, 3.0]],
            "returns": [[2.0, 2.0], None],
            "step": [1, 1],
        }
    )
    agg = response_list_aggregates(df, ())
    assert agg.get_column("value_error_abs_mean").to_list() == [0.5, pytest.approx(7 / 3)]
    assert agg.get_column("critic_file_n").to_list() == [2, 0]
    sums = pl.concat([df, agg], how="horizontal").group_by("step").agg(pl.col(c).sum() for c in CRITIC_SUMS)
    got = sums.with_columns(critic_health()).row(0, named=True)
    assert got["explained_variance"] == pytest.approx(1 - 1.04 / 0.24)
    assert got["value_error_abs_pooled"] == pytest.approx(8 / 5)
    assert return_source(got["critic_file_n"], got["critic_n"]) == "mixed"
    # The per-token definition takes the same returns: the token page's value error.
    long = token_metrics(explode_tokens(df, (), ["returns"]))
    assert long.get_column("return").to_list() == [2.0, 2.0, 3.0, 3.0, 3.0]
    assert long.get_column("value_error").to_list() == [-1.0, 0.0, -3.0, -2.0, -2.0]


def test_critic004_token_page_uses_and_names_the_trainer_returns(fixtures_dir):
    """The token page of a real TRL PPO response: each position's return is the file's own `returns`, its
    value error value − that return, and both labels say 'trainer returns'; without the field they say γ = 1."""
    from data.token_frames import file_fields, metric_label, token_frame
    from data.tokens import metric_labels

    rec = json.loads((fixtures_dir / PPO / "rank0.jsonl").read_text().splitlines()[3])
    row = pl.DataFrame([rec])
    fields = file_fields(row)
    assert "returns" in fields
    t = token_frame(row, DEFAULT_PAD_TOKENS, fields)
    n = len(rec["returns"])
    assert t.get_column("return").to_list()[:n] == pytest.approx(rec["returns"])
    ve = [v - r for v, r in zip(rec["values"], rec["returns"], strict=False)]
    assert t.get_column("value_error").to_list()[: len(ve)] == pytest.approx(ve)
    assert metric_labels(fields)["return"] == "return (trainer returns)"
    assert metric_label("value_error", fields) == "value error (value − return) (trainer returns)"
    assert metric_labels(())["return"] == "return (γ = 1 returns)"
