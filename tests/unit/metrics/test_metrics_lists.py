"""The list-based per-response aggregates used at ingest equal the per-token definition on random arrays."""

from __future__ import annotations

import math
import random

import polars as pl
import pytest

from data.metrics.response import AGGREGATE_COLUMNS, response_list_aggregates
from data.metrics.token import (
    INFERENCE_LOGPROB_FIELDS,
    LOSS_MASK_FIELDS,
    explode_tokens,
    response_token_aggregates,
    token_metrics,
)

PADS = ("<pad>", "<|endoftext|>")
F32 = pl.List(pl.Float32)
SPECIAL = [math.nan, math.inf, -math.inf, None, -800.0, 800.0]


def _array(rng: random.Random, n: int, specials: bool) -> list | None:
    if rng.random() < 0.1:
        return None
    out = [round(rng.uniform(-6, 0.5), 3) for _ in range(n)]
    if specials and out and rng.random() < 0.3:
        out[rng.randrange(len(out))] = rng.choice(SPECIAL)
    return out


def _random_frame(seed: int, rows: int = 300, specials: bool = True, returns: bool = False) -> pl.DataFrame:
    rng = random.Random(seed)
    lists = ("logprobs", "ref_logprobs", "values", "token_rewards") + (("returns",) if returns else ())
    cols: dict[str, list] = {c: [] for c in ("response_tokens", *lists)}
    for _ in range(rows):
        n = rng.choice([0, 1, 2, 5, 17])
        uneven = rng.random() < 0.3  # arrays of different lengths (e.g. PPO's trailing pad entry)
        toks = [
            rng.choice(["a", "Ġb", "<pad>", "<|endoftext|>", None])
            for _ in range(n + (uneven and rng.random() < 0.5))
        ]
        cols["response_tokens"].append(None if rng.random() < 0.15 else toks)
        for c in lists:
            cols[c].append(_array(rng, max(0, n + (rng.choice([-1, 1]) if uneven else 0)), specials))
        if returns and not cols["values"][-1]:  # a trainer writes its returns beside its values
            cols["returns"][-1] = None
    return (
        pl.DataFrame(cols, schema_overrides={c: F32 for c in cols if c != "response_tokens"})
        .with_row_index("row")
        .with_columns(pl.col("row").cast(pl.Int64))
    )


def _reference(df: pl.DataFrame) -> pl.DataFrame:
    extras = [c for c in (*INFERENCE_LOGPROB_FIELDS, *LOSS_MASK_FIELDS, "returns") if c in df.columns]
    agg = response_token_aggregates(token_metrics(explode_tokens(df, PADS, extras)))
    return df.select("row").join(agg, on="row", how="left", maintain_order="left").drop("row")


def _assert_same(df: pl.DataFrame) -> None:
    fast = response_list_aggregates(df, PADS)
    ref = _reference(df)
    assert fast.columns == list(AGGREGATE_COLUMNS)
    assert fast.height == df.height
    for c in AGGREGATE_COLUMNS:
        for i, (a, b) in enumerate(
            zip(fast.get_column(c).to_list(), ref.get_column(c).to_list(), strict=True)
        ):
            if a is None or b is None:
                assert a is None and b is None, (c, i, a, b, df.row(i, named=True))
            else:
                assert a == pytest.approx(b, rel=1e-9, abs=1e-9, nan_ok=True), (c, i, df.row(i, named=True))


@pytest.mark.parametrize("seed", range(6))
def test_metrics_lists001_same_as_per_token_definition(seed):
    """Random arrays with NaN, infinities, nulls, pads, empty and unequal lengths: every aggregate agrees."""
    _assert_same(_random_frame(seed))


@pytest.mark.parametrize("seed", range(3))
def test_metrics_lists005_trainer_returns_same_as_definition(seed):
    """With the trainer's own `returns` (absent, null or of another length in some rows): the value error and
    the critic's sums agree with the per-token definition, which takes the file's returns where a row has one."""
    _assert_same(_random_frame(100 + seed, returns=True))


def test_metrics_lists002_missing_columns_and_all_null():
    """Frames without some token columns, or where every array is null, agree too."""
    df = _random_frame(7, 50)
    _assert_same(df.select("row", "logprobs", "ref_logprobs"))
    _assert_same(df.select("row", "response_tokens"))
    _assert_same(df.select("row", "values", "token_rewards"))
    # Pairs of equal lengths everywhere (no cut needed), as in most real files.
    lens = [pl.col(c).list.len() for c in ("logprobs", "ref_logprobs", "values", "token_rewards")]
    even = _random_frame(8).filter((lens[0] == lens[1]).fill_null(True), (lens[2] == lens[3]).fill_null(True))
    assert even.height > 50
    _assert_same(even)
    none = df.with_columns(
        pl.lit(None, dtype=F32).alias(c) for c in ("logprobs", "ref_logprobs", "values", "token_rewards")
    )
    _assert_same(none.with_columns(pl.lit(None, dtype=pl.List(pl.String)).alias("response_tokens")))


@pytest.mark.parametrize("seed", range(3))
def test_metrics_lists004_returns_of_a_row_whatever_rows_come_with_it(seed):
    """Returns are summed row by row: over 3,000 rows, with and without nulls, they agree with the
    definition, and a response's aggregates are the same to the last bit whether its chunk holds the other
    rows or not (a run read in other chunks, or by Ray tasks, stores the same numbers)."""
    df = _random_frame(100 + seed, 3000, specials=False)
    assert (
        df.select(pl.col("token_rewards").list.eval(pl.element().is_nan()).list.any().any()).item() is False
    )
    _assert_same(df)
    nulls = pl.col("token_rewards").list.eval(pl.when(pl.element() > -1).then(pl.element()))
    _assert_same(df.with_columns(nulls))
    # Float64 values that are not sums of a few float32 ones (JSON numbers): the rounding would show.
    thirds = df.with_columns(
        pl.col(c).list.eval(pl.element().cast(pl.Float64) / 3 + 10) for c in ("values", "token_rewards")
    )
    whole = response_list_aggregates(thirds, PADS)
    halves = [
        response_list_aggregates(thirds.slice(0, 1234), PADS),
        response_list_aggregates(thirds.slice(1234), PADS),
    ]
    assert whole.equals(pl.concat(halves))


def test_metrics_lists003_ppo_trailing_pad_by_hand():
    """The hand-computed PPO example (reward on the trailing pad) through the list path."""
    df = pl.DataFrame(
        {
            "response_tokens": [["Ġhi", "Ġthere", "<|endoftext|>", "<pad>"]],
            "logprobs": [[-1.0, -2.0, -0.5]],
            "ref_logprobs": [[-1.0, -2.5, -0.5]],
            "values": [[0.5, 0.75, 1.0, 1.25]],
            "token_rewards": [[0.0, -0.02, 0.0, 1.0]],
        },
        schema_overrides={c: F32 for c in ("logprobs", "ref_logprobs", "values", "token_rewards")},
    )
    agg = response_list_aggregates(df, PADS).row(0, named=True)
    assert agg["response_length"] == 2
    assert agg["n_kl_tokens"] == 3
    assert agg["log_ratio_sum"] == pytest.approx(0.5)
    assert agg["kl_sum"] == pytest.approx(math.exp(-0.5) - 1 + 0.5)
    assert agg["token_reward_sum"] == pytest.approx(0.98)
    assert agg["value_error_mean"] == pytest.approx((-0.48 - 0.23 + 0.0 + 0.25) / 4)
    assert agg["value_error_abs_mean"] == pytest.approx((0.48 + 0.23 + 0.0 + 0.25) / 4)


def _with_gap(df: pl.DataFrame, seed: int, inference: str, mask: str | None) -> pl.DataFrame:
    """``df`` with an inference engine's log-probs near the trainer's (some far: the tail) and a loss mask."""
    rng = random.Random(seed)
    gen, masks = [], []
    for lp in df.get_column("logprobs").to_list():
        if not lp or rng.random() < 0.1:  # (a response of the trainer's own arrays only has no length here)
            gen.append(None)
            masks.append(None)
            continue
        else:
            n = len(lp) + rng.choice([0, 0, 0, -1, 1])
            far = [rng.choice([0.0, 0.0, 0.05, -0.3, 0.8, -1.5]) for _ in range(max(n, 0))]
            gen.append(
                [(x if x is not None else -1.0) - g for x, g in zip(lp + [-2.0] * n, far, strict=False)]
            )
            if rng.random() < 0.2 and gen[-1]:
                gen[-1][rng.randrange(len(gen[-1]))] = rng.choice([None, math.nan, math.inf])
        k = len(lp) + rng.choice([0, 0, -1, 1])
        masks.append(
            None if rng.random() < 0.3 else [rng.choice([1, 1, 1, 0, None]) for _ in range(max(k, 0))]
        )
    out = df.with_columns(pl.Series(inference, gen, F32))
    return out.with_columns(pl.Series(mask, masks, pl.List(pl.Int64))) if mask else out


@pytest.mark.parametrize(
    "seed,inference,mask",
    [
        (20, "generation_logprobs", None),
        (21, "rollout_log_probs", "response_mask"),
        (22, "inference_logprobs", "loss_mask"),
        (23, "generation_logprobs", "action_mask"),
    ],
)
def test_metrics_lists005_inference_gap_same_as_per_token_definition(seed, inference, mask):
    """The infer_gap_* aggregates (count, tail count, mean / max |Δ|, tail share, first tail position, mean
    and max Δ) agree with the per-token definition: unequal lengths, NaN, infinities, nulls in the inference
    log-probs and in the loss mask, responses with and without a mask."""
    df = _with_gap(_random_frame(seed, specials=False), seed, inference, mask)
    fast = response_list_aggregates(df, PADS)
    assert fast.get_column("infer_gap_n").drop_nulls().len() > 100
    assert fast.get_column("infer_gap_first_tail").drop_nulls().len() > 20
    _assert_same(df)
