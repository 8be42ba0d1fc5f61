"""Ingest of every real fixture under ../shared/fixtures, checked against the trainers' own logs."""

from __future__ import annotations

import json

import pytest

from data.config import DEFAULT_PAD_TOKENS
from data.ingest import ingest_run
from data.store import open_store

EXPECTED = {  # from ../shared/fixtures/README.md
    "rlloggingboard-eval-poem": {"samples": 3000, "steps": 24, "files": 1},
    "trl-ppo-small": {"samples": 400, "steps": 25, "files": 2},
    "trl-grpo-small": {"samples": 400, "steps": 25, "files": 2},
}


@pytest.fixture(scope="module")
def stores(fixtures_dir, tmp_path_factory):
    cache = tmp_path_factory.mktemp("fixture-cache")
    out = {}
    for name in EXPECTED:  # the runs in this project's contract; trainers' own dumps have their own tests
        res = ingest_run(fixtures_dir / name, cache, DEFAULT_PAD_TOKENS)
        out[name] = (res, open_store(res.store_dir))
    return out


def test_fixtures001_every_fixture_ingests_without_bad_lines(stores):
    """Each fixture run loads whole: sample, step and file counts as documented, no unusable line."""
    assert set(stores) == set(EXPECTED)
    for name, (res, _) in stores.items():
        assert res.bad_lines == 0, name
        assert {k: getattr(res, k) for k in ("samples", "steps", "files")} == EXPECTED[name], name


def test_fixtures002_poem_steps_and_last_partial_step(stores):
    """Steps 0..2300 by 100; the last step has 56 samples; no token fields, so no KL."""
    _, store = stores["rlloggingboard-eval-poem"]
    st = store.steps()
    assert st.get_column("step").to_list() == list(range(0, 2400, 100))
    assert st.get_column("n").to_list()[-1] == 56
    assert st.get_column("kl_token_mean").null_count() == st.height
    assert store.scalars().get_column("prompt_key").n_unique() == 128


def _history(fixtures_dir, run):
    return {
        e["step"]: e
        for e in json.loads((fixtures_dir / run / "trl_log_history.json").read_text())
        if "step" in e
    }


def test_fixtures003_ppo_matches_trl_objective_kl_and_scores(stores, fixtures_dir):
    """PPO: mean per-response log-ratio sum = TRL objective/kl; mean reward = objective/scores;
    mean (token reward sum - reward) = objective/non_score_reward, for every step."""
    _, store = stores["trl-ppo-small"]
    hist = _history(fixtures_dir, "trl-ppo-small")
    st = {r["step"]: r for r in store.steps().iter_rows(named=True)}
    sc = store.scalars()
    for step, h in hist.items():
        assert st[step]["log_ratio_sum_mean"] == pytest.approx(h["objective/kl"], abs=1e-4)
        assert st[step]["reward_mean"] == pytest.approx(h["objective/scores"], abs=1e-6)
        rows = sc.filter(sc["step"] == step)
        non_score = (rows["token_reward_sum"] - rows["reward"]).mean()
        assert non_score == pytest.approx(h["objective/non_score_reward"], abs=1e-5)


def test_fixtures004_grpo_matches_trl_k3_kl(stores, fixtures_dir):
    """GRPO: the token mean of k3 over the step = TRL's logged kl; mean reward = TRL's reward."""
    _, store = stores["trl-grpo-small"]
    hist = _history(fixtures_dir, "trl-grpo-small")
    st = {r["step"]: r for r in store.steps().iter_rows(named=True)}
    for step, h in hist.items():
        if "kl" in h:
            assert st[step]["kl_token_mean"] == pytest.approx(h["kl"], rel=1e-4, abs=1e-7)
        if "reward" in h:
            assert st[step]["reward_mean"] == pytest.approx(h["reward"], abs=1e-6)


def test_fixtures005_ppo_trailing_pad_reward_kept(stores):
    """The sequence reward that TRL puts on the trailing <pad> stays in the response's token rewards."""
    _, store = stores["trl-ppo-small"]
    sc = store.scalars()
    # TRL: token_reward_t = -0.04 * (logprob_t - ref_logprob_t), plus the score on the last position,
    # so over a response: sum(token_rewards) = reward - 0.04 * log_ratio_sum.
    expected = sc["reward"] - 0.04 * sc["log_ratio_sum"]
    assert (sc["token_reward_sum"] - expected).abs().max() < 1e-5
    s = store.sample(sc.sort("source", "line").item(0, "sample_id"))
    assert s["response_tokens"][-1] == "<pad>" and s["token_rewards"][-1] == s["reward"]
