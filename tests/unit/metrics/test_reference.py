"""Responses against their reference (win, tie, loss): one definition, one rule for NaN, on the reward
page's per-step summary and on the prompts page's per-prompt row alike."""

from __future__ import annotations

import json

import polars as pl
import pytest

from data import prompts
from data.ingest import ingest_run
from data.store import open_store

PADS = ("<pad>",)


def _store(tmp_path, rewards: list[float], ref: float):
    """One prompt at one step, one response per reward, each against a reference reward ``ref``."""
    run = tmp_path / "runs" / "run"
    run.mkdir(parents=True)
    rows = [
        {"prompt": "p", "response": f"r{i}", "reward": r, "ref_reward": ref, "step": 1}
        for i, r in enumerate(rewards)
    ]
    (run / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))  # NaN as the NaN literal
    return open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)


def test_reference001_a_nan_reward_is_no_comparison(tmp_path):
    """Rewards [NaN, 0, 1] against a reference of 0.5: one win out of two comparisons on both pages (the
    reward page counted the NaN as a win, 0.667, since Polars orders NaN above every number)."""
    store = _store(tmp_path, [float("nan"), 0.0, 1.0], 0.5)
    step = store.steps().row(0, named=True)
    prompt = prompts.prompt_table(store).row(0, named=True)
    assert (step["n_both"], step["win_rate"]) == (2, pytest.approx(0.5))
    assert step["loss_rate"] == pytest.approx(0.5)
    assert (prompt["n_both"], prompt["wins"], prompt["win_rate"]) == (2, 1, pytest.approx(0.5))


def test_reference002_infinite_rewards_are_no_comparison(tmp_path):
    """An infinite reward or reference reward is not compared either (as the gain leaves it out)."""
    store = _store(tmp_path, [float("inf"), float("-inf"), 2.0, 0.0, 0.0], 1.0)
    step = store.steps().row(0, named=True)
    prompt = prompts.prompt_table(store).filter(pl.col("n_both") > 0).row(0, named=True)
    assert (step["n_both"], step["win_rate"], step["loss_rate"]) == (
        3,
        pytest.approx(1 / 3),
        pytest.approx(2 / 3),
    )
    assert (prompt["n_both"], prompt["win_rate"]) == (3, pytest.approx(1 / 3))


def test_reference003_tie_rate_beside_win_rate(tmp_path):
    """Rewards [0.5, 0.5, 1, 0, NaN] against 0.5: of the four compared, two tie, one wins, one loses; the
    step summary and the prompt's row give the share of ties beside the win rate, and the three rates
    add up to 1."""
    store = _store(tmp_path, [0.5, 0.5, 1.0, 0.0, float("nan")], 0.5)
    step = store.steps().row(0, named=True)
    prompt = prompts.prompt_table(store).row(0, named=True)
    assert (step["win_rate"], step["tie_rate"], step["loss_rate"]) == (0.25, 0.5, 0.25)
    assert (prompt["n_both"], prompt["wins"], prompt["ties"]) == (4, 1, 2)
    assert (prompt["win_rate"], prompt["tie_rate"]) == (0.25, 0.5)
