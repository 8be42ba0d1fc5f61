"""The reward page's critic-health panel on the real TRL runs: its traces' names say which returns they
used, the trainer's value loss is overlaid from its own log, a point opens the step by value error, and a
run without values says so."""

from __future__ import annotations

import json

import pytest

from data.config import DEFAULT_PAD_TOKENS
from data.critic_curves import critic_panel, run_critic_panel
from data.ingest.run import ingest_run
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
