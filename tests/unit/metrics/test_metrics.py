"""Metrics of data/metrics/ against values worked out by hand."""

from __future__ import annotations

import math

import polars as pl
import pytest

from data.metrics.response import derive_response_metrics
from data.metrics.step import step_summary
from data.metrics.token import explode_tokens, response_token_aggregates, token_metrics

PADS = ("<pad>", "<|endoftext|>")
F32 = pl.List(pl.Float32)


def _frame(**cols) -> pl.DataFrame:
    n = len(next(iter(cols.values())))
    base = {
        "row": list(range(n)),
        "prompt": ["p"] * n,
        "response": ["r"] * n,
        "reward": [1.0] * n,
        "ref_reward": [0.5] * n,
    }
    base.update(cols)
    overrides = {c: F32 for c in ("logprobs", "ref_logprobs", "values", "token_rewards") if c in base}
    return pl.DataFrame(base, schema_overrides=overrides)


def k3(lp: float, ref: float) -> float:
    r = ref - lp
    return math.exp(r) - 1 - r


def test_metrics001_k3_and_log_ratio_by_hand():
    """log-ratio and k3 KL per token and their per-response sum/mean match a hand computation."""
    df = _frame(response_tokens=[["a", "b"]], logprobs=[[-1.0, -0.5]], ref_logprobs=[[-1.5, -0.5]])
    long = token_metrics(explode_tokens(df, PADS))
    assert long.get_column("log_ratio").to_list() == pytest.approx([0.5, 0.0])
    # r = -0.5: exp(-0.5) - 1 + 0.5 = 0.10653065971263342
    assert long.get_column("kl").to_list() == pytest.approx([0.10653065971263342, 0.0])
    agg = response_token_aggregates(long).row(0, named=True)
    assert agg["log_ratio_sum"] == pytest.approx(0.5)
    assert agg["log_ratio_mean"] == pytest.approx(0.25)
    assert agg["kl_sum"] == pytest.approx(0.10653065971263342)
    assert agg["kl_mean"] == pytest.approx(0.05326532985631671)
    assert agg["n_kl_tokens"] == 2


def test_metrics002_k3_is_never_negative():
    """k3 >= 0 for log-ratios of either sign."""
    df = _frame(logprobs=[[-3.0, -0.1, -2.0]], ref_logprobs=[[-0.1, -3.0, -2.0]])
    kl = token_metrics(explode_tokens(df, PADS)).get_column("kl").to_list()
    assert kl == pytest.approx([k3(-3.0, -0.1), k3(-0.1, -3.0), 0.0])
    assert min(kl) >= 0


def test_metrics003_ppo_reward_on_trailing_pad_is_kept():
    """TRL PPO: one more tokens/values/token_rewards entry than logprobs, reward on the trailing <pad>.

    The pad's reward is part of every return, the value error uses the pad's value, the pad is not
    counted in the length and not in the KL positions.
    """
    df = _frame(
        response_tokens=[["Ġhi", "Ġthere", "<|endoftext|>", "<pad>"]],
        logprobs=[[-1.0, -2.0, -0.5]],
        ref_logprobs=[[-1.0, -2.5, -0.5]],
        values=[[0.5, 0.75, 1.0, 1.25]],
        token_rewards=[[0.0, -0.02, 0.0, 1.0]],
    )
    long = token_metrics(explode_tokens(df, PADS))
    assert long.height == 4
    # return_t = sum_{k>=t} token_reward_k
    assert long.get_column("return").to_list() == pytest.approx([0.98, 0.98, 1.0, 1.0])
    assert long.get_column("value_error").to_list() == pytest.approx([0.5 - 0.98, 0.75 - 0.98, 0.0, 0.25])
    assert long.get_column("is_pad").to_list() == [False, False, True, True]
    agg = response_token_aggregates(long).row(0, named=True)
    assert agg["response_length"] == 2  # pads (<|endoftext|>, <pad>) excluded
    assert agg["n_kl_tokens"] == 3  # every position that has both log-probs
    assert agg["log_ratio_sum"] == pytest.approx(0.5)
    assert agg["token_reward_sum"] == pytest.approx(0.98)
    assert agg["value_error_mean"] == pytest.approx((-0.48 - 0.23 + 0.0 + 0.25) / 4)
    assert agg["value_error_abs_mean"] == pytest.approx((0.48 + 0.23 + 0.0 + 0.25) / 4)


def test_metrics004_unequal_lengths_align_from_first_token():
    """A shorter array leaves nulls at its end; nothing is shifted."""
    df = _frame(logprobs=[[-1.0, -2.0, -3.0]], ref_logprobs=[[-1.0]], values=[[0.1, 0.2]])
    long = explode_tokens(df, PADS)
    assert long.get_column("ref_logprob").to_list() == [-1.0, None, None]
    assert long.get_column("value").to_list() == pytest.approx([0.1, 0.2, None], nan_ok=True)
    agg = response_token_aggregates(token_metrics(long)).row(0, named=True)
    assert agg["n_kl_tokens"] == 1
    assert agg["response_length"] == 3  # no token strings: the log-prob positions


def test_metrics005_no_token_fields_gives_nulls_and_gain():
    """An evaluation dump without token fields: token metrics null, gain and characters still there."""
    df = pl.DataFrame(
        {"row": [0], "prompt": ["p"], "response": ["abc<pad><pad>"], "reward": [0.25], "ref_reward": [1.0]}
    ).with_columns(
        *(pl.lit(None, dtype=F32).alias(c) for c in ("logprobs", "ref_logprobs", "values", "token_rewards")),
        pl.lit(None, dtype=pl.List(pl.String)).alias("response_tokens"),
    )
    out = derive_response_metrics(df, PADS).row(0, named=True)
    assert out["reward_gain"] == pytest.approx(-0.75)
    assert out["response_chars"] == 3
    assert out["kl_mean"] is None and out["response_length"] is None


def test_metrics006_step_summary_by_hand():
    """Win rate, token-mean KL and quantiles of a two-step table computed by hand."""
    scalars = pl.DataFrame(
        {
            "step": [2, 1, 1, 2, 1],
            "reward": [1.0, 0.0, 2.0, 3.0, 1.0],
            "ref_reward": [2.0, 1.0, 1.0, None, 1.0],
            "reward_gain": [-1.0, -1.0, 1.0, None, 0.0],
            "kl_sum": [1.0, 0.0, 0.5, 3.0, 0.5],
            "n_kl_tokens": [2, 1, 1, 2, 2],
            "log_ratio_sum": [0.5, 0.0, 0.1, 1.0, 0.2],
            "kl_mean": [0.5, 0.0, 0.5, 1.5, 0.25],
            "response_length": [2, 1, 1, 2, 2],
            "response_chars": [10, 5, 5, 10, 10],
            "value_error_abs_mean": [None] * 5,
            "value_error_mean": [None] * 5,
        }
    )
    st = step_summary(scalars.lazy()).collect()
    assert st.get_column("step").to_list() == [1, 2]
    s1, s2 = st.row(0, named=True), st.row(1, named=True)
    assert s1["n"] == 3 and s2["n"] == 2
    assert s1["reward_mean"] == pytest.approx(1.0)
    assert s1["win_rate"] == pytest.approx(1 / 3)  # only 2.0 > 1.0
    assert s1["loss_rate"] == pytest.approx(1 / 3)
    assert s2["win_rate"] == pytest.approx(0.0)  # the response without ref_reward is not counted
    assert s2["n_both"] == 1
    assert s1["kl_token_mean"] == pytest.approx(1.0 / 4)  # (0 + 0.5 + 0.5) / (1 + 1 + 2)
    assert s2["kl_token_mean"] == pytest.approx(4.0 / 4)
    assert s1["reward_p50"] == pytest.approx(1.0)
    assert s1["reward_p25"] == pytest.approx(0.5)  # linear interpolation between 0 and 1
    assert s1["response_chars_mean"] == pytest.approx(20 / 3)  # 5, 5, 10
    assert s1["response_chars_std"] == pytest.approx((50 / 3 / 2) ** 0.5)  # sample std: Σ(x - x̄)² / (n - 1)
    assert s2["response_chars_p05"] == pytest.approx(10.0)


def test_metrics007_ranges_exclude_nan_and_infinity():
    """A range filter never holds NaN or an infinite value (they are in no histogram bar)."""
    from data.queries import ResponseFilter

    df = pl.DataFrame(
        {
            "step": [1] * 4,
            "reward": [0.5, float("nan"), float("inf"), 2.0],
            "reward_gain": [None] * 4,
            "kl_mean": [None] * 4,
            "response_length": [None] * 4,
        },
        schema_overrides={"reward_gain": pl.Float64, "kl_mean": pl.Float64, "response_length": pl.Int64},
    )
    kept = df.filter(ResponseFilter(step=1, reward_min=0.0).scalar_expr()).get_column("reward").to_list()
    assert kept == [0.5, 2.0]
    assert df.filter(ResponseFilter(step=1).scalar_expr()).height == 4


def test_metrics030_partial_last_step_by_hand():
    """The last step is partial when it holds fewer responses than every other step: 56 against 128 (the
    poem run's 2300); not with an equal count, one smaller step in the middle, or a single step."""
    from data.metrics.step import PartialStep, partial_last_step

    steps = pl.DataFrame({"step": [2300, 0, 100], "n": [56, 128, 128]})  # unsorted on purpose
    partial = partial_last_step(steps)
    assert partial == PartialStep(2300, 56, 128, 128)
    assert partial.text() == "partial step: 56 responses, where the run's other steps have 128"
    varied = partial_last_step(pl.DataFrame({"step": [1, 2, 3], "n": [120, 128, 100]}))
    assert varied.detail() == "100 responses, where the run's other steps have 120–128"
    assert partial_last_step(pl.DataFrame({"step": [1, 2, 3], "n": [128, 128, 128]})) is None
    assert partial_last_step(pl.DataFrame({"step": [1, 2, 3], "n": [128, 120, 120]})) is None
    assert partial_last_step(pl.DataFrame({"step": [1, 2, 3], "n": [128, 60, 64]})) is None
    assert partial_last_step(pl.DataFrame({"step": [7], "n": [3]})) is None
