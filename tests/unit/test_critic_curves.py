"""The reward page's critic-health panel on the real TRL runs: its traces' names say which returns they
used, the trainer's value loss is overlaid from its own log, a point opens the step by value error, and a
run without values says so."""

from __future__ import annotations

import json

import pytest

from data.config import DEFAULT_PAD_TOKENS
from data.critic_curves import critic_panel, run_critic_panel
from data.ingest.run import ingest_run
from data.metrics import METRICS, label
from data.responses import table_spec
from data.store.reader import open_store
from data.trainer_logs import trainer_scalars
from data.views import links


@pytest.fixture(scope="module")
def stores(fixtures_dir, tmp_path_factory):
    cache = tmp_path_factory.mktemp("critic-curves")
    return {
        name: open_store(ingest_run(fixtures_dir / name, cache, DEFAULT_PAD_TOKENS).store_dir)
        for name in ("trl-ppo-small", "trl-grpo-small")
    }


def test_critic_curves001_ppo_panel_names_and_value_loss(stores, fixtures_dir):
    """PPO: 'explained variance (trainer returns)' and 'mean |value − return| (trainer returns)', one point
    per step, and TRL's own loss/value_avg at each step, equal to its trainer_log_history.json."""
    run = fixtures_dir / "trl-ppo-small"
    panel = critic_panel(stores["trl-ppo-small"].steps(), trainer_scalars(run))
    names = [s.label for s in panel.series]
    assert names == [
        "explained variance (trainer returns)",
        "mean |value − return| (trainer returns)",
        "trainer's value loss (loss/value_avg)",
    ]
    assert all(s.frame.height == 25 for s in panel.series)
    logged = {e["step"]: e["loss/value_avg"] for e in json.loads((run / "trl_log_history.json").read_text())}
    drawn = dict(panel.series[2].frame.iter_rows())
    assert drawn == pytest.approx(logged)
    assert run_critic_panel(stores["trl-ppo-small"], None).series[-1].key == "value_error_abs_pooled"


def test_critic_curves002_grpo_has_no_critic(stores, fixtures_dir):
    """GRPO has no values: no series, and the note says why."""
    panel = critic_panel(stores["trl-grpo-small"].steps(), trainer_scalars(fixtures_dir / "trl-grpo-small"))
    assert panel.series == () and "No critic values" in panel.note


def test_critic_curves003_a_point_opens_the_step_by_value_error():
    """A point of any critic trace opens the step's responses, the largest value error first."""
    for key in ("explained_variance", "value_error_abs_pooled", "value_loss"):
        href = links.signal_responses("ppo", 7, key)
        assert href == "/responses?run=ppo&step=7&sort=value_error_abs_mean", href


def test_critic_curves004_table_headers_name_their_returns(stores, tmp_path):
    """The responses table's value-error columns say which returns they used, in the header and the tooltip:
    the TRL PPO file's own ``returns`` (trl/experimental/ppo/ppo_trainer.py, ``returns = advantages +
    values``), γ = 1 for a file with values and token rewards only; a run without values has no such column."""
    ppo = {c: (h, t) for c, h, t in table_spec(stores["trl-ppo-small"]).columns}
    assert ppo["value_error_abs_mean"][0] == "value error mean |value − return| (trainer returns)"
    assert "the trainer's own returns field" in ppo["value_error_abs_mean"][1]
    assert ppo["reward"] == (label("reward"), METRICS["reward"].description)  # the others as they were

    run = tmp_path / "gamma1"
    run.mkdir()
    line = {"prompt": "p", "response": "a b", "reward": 1.0, "response_tokens": ["a", "b"],
            "logprobs": [-0.5, -0.25], "values": [0.5, 0.75], "token_rewards": [0.0, 1.0]}  # fmt: skip
    (run / "r.jsonl").write_text("".join(json.dumps({**line, "step": s}) + "\n" for s in (1, 2)))
    store = open_store(ingest_run(run, tmp_path / "cache", DEFAULT_PAD_TOKENS).store_dir)
    gamma1 = {c: (h, t) for c, h, t in table_spec(store).columns}
    assert gamma1["value_error_abs_mean"][0] == "value error mean |value − return| (γ = 1 returns)"
    assert "Σ_{k≥t} token_reward_k (γ = 1)" in gamma1["value_error_abs_mean"][1]

    grpo = {c for c, _, _ in table_spec(stores["trl-grpo-small"]).columns}
    assert not grpo & {"value_error_abs_mean", "value_error_mean"}
