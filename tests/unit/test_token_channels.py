"""Per-token channels of a trainer's own on the token page (data/tokens.py, data/token_frames.py): the loss
mask's dropped positions marked whatever the metric, token ids shown as ⟨id⟩, and the strip's legend
saying both (issue 36 item 3, issue 34)."""

from __future__ import annotations

import math

import orjson
import polars as pl
import pytest

from components.token_strip import strip_data
from data.tokens import build_view, metric_options, strip_keys, token_frame, tokens_are_ids


def _row(tokens, **own) -> pl.DataFrame:
    data = {"sample_id": ["s"], "step": [0], "prompt": ["p"], "response": ["r"], "reward": [1.0]}
    data["response_tokens"] = pl.Series("response_tokens", [tokens], dtype=pl.List(pl.String))
    for name, values in own.items():
        data[name] = pl.Series(name, [values], dtype=pl.List(pl.Float64))
    return pl.DataFrame(data)


def _scalars() -> pl.DataFrame:
    return pl.DataFrame({"sample_id": ["s"], "source": ["f"], "line": [1], "step": [0]})


def test_channels001_miles_loss_mask_zero_is_masked():
    """miles' loss_mask (miles/utils/types.py Sample.loss_mask; 0 on a tool's result inside the response):
    the positions with 0 are masked, by hand: positions 2 and 3 of five."""
    row = _row(["a", "b", "c", "d", "e"], loss_mask=[1, 1, 0, 0, 1], rollout_log_probs=[-1, -2, -3, -4, -5])
    view = build_view(row, _scalars(), ())
    assert view.mask_field == "loss_mask"
    assert view.tokens.get_column("masked").to_list() == [False, False, True, True, False]
    kind, text = strip_keys(view)[0]
    assert kind == "masked" and "loss_mask = 0" in text and "2 of 5 positions" in text


def test_channels002_prime_rl_is_masked_one_is_masked():
    """prime-rl's is_masked (prime_rl/trainer/rl/annotations.py: true where the loss masked the token out,
    null where unannotated), kept as 1 / 0 by the dialect: 1 is masked, 0 and null are not."""
    row = _row(["a", "b", "c"], is_masked=[None, 1.0, 0.0])
    tokens = token_frame(row, ())
    assert tokens.get_column("masked").to_list() == [False, True, False]


def test_channels003_no_mask_no_marks():
    """A response without a loss mask marks nothing and its legend says nothing of one."""
    view = build_view(_row(["a", "b"], advantages=[0.5, 0.5]), _scalars(), ())
    assert view.mask_field is None
    assert not any(view.tokens.get_column("masked").to_list())
    assert strip_keys(view) == []


def test_channels004_token_ids_shown_apart():
    """Token ids without a tokenizer ("1000", "1001", "1002") are shown as ⟨1000⟩⟨1001⟩⟨1002⟩, never run
    together, and the legend says they are ids; a text token keeps its text."""
    view = build_view(_row(["1000", "1001", "1002"]), _scalars(), ())
    assert view.token_ids
    assert view.tokens.get_column("text").to_list() == ["⟨1000⟩", "⟨1001⟩", "⟨1002⟩"]
    assert view.tokens.get_column("token").to_list() == ["1000", "1001", "1002"]  # the raw token as given
    assert [k for k, _ in strip_keys(view)] == ["ids"]
    text = build_view(_row(["The", "Ġ100", "Ġcats"]), _scalars(), ())
    assert not text.token_ids
    assert text.tokens.get_column("text").to_list() == ["The", " 100", " cats"]
    assert not tokens_are_ids(pl.Series([None], dtype=pl.String))


def test_channels005_strip_data_carries_the_mask():
    """The strip's data marks each masked position (1) for the browser, whatever the metric coloured."""
    row = _row(["1", "2", "3"], loss_mask=[1, 0, 1], entropy=[0.1, 0.2, 0.3])
    tokens = build_view(row, _scalars(), ()).tokens
    data = orjson.loads(
        strip_data(tokens, "file:entropy", 0.0, 1.0, ((0, (0, 0, 0)), (1, (9, 9, 9))), "k", [])["json"]
    )
    assert data["masked"] == [0, 1, 0]
    assert data["text"] == ["⟨1⟩", "⟨2⟩", "⟨3⟩"]


def test_channels006_picker_lists_every_channel_by_its_name():
    """The metric picker lists every per-token field of the trainer's own the response has, by the name
    the file gives it: entropy, advantages, loss_mask, rollout_log_probs."""
    row = _row(
        ["a", "b"], entropy=[0.1, 0.2], advantages=[1, 1], loss_mask=[1, 0], rollout_log_probs=[-1, -2]
    )
    view = build_view(row, _scalars(), ())
    options = metric_options("kl", view.fields, view.file_fields)
    own = [o["label"] for o in options if o["value"].startswith("file:")]
    assert own == [
        f"{n} (from the file)" for n in ("entropy", "advantages", "loss_mask", "rollout_log_probs")
    ]


def test_channels007_importance_ratio_and_mismatch_kl_by_hand():
    """imp_ratio = exp(Δ) and mismatch_kl = exp(Δ) − Δ − 1 with Δ = trainer − inference log-prob (prime-rl's
    trainer/rl/loss.py compute_importance_ratio_and_mismatch_kl), by hand: Δ = ln 2 → 2 and 2 − ln 2 − 1
    = 0.30685…; Δ = 0 → 1 and 0; Δ = −ln 2 → 0.5 and 0.5 + ln 2 − 1 = 0.19315…; no inference log-prob → null."""
    row = _row(["a", "b", "c", "d"], generation_logprobs=[-1.0, -0.5, -0.25, None])
    row = row.with_columns(
        pl.Series(
            "logprobs", [[-1.0 + math.log(2), -0.5, -0.25 - math.log(2), -3.0]], dtype=pl.List(pl.Float64)
        )
    )
    view = build_view(row, _scalars(), ())
    got = view.tokens.select("imp_ratio", "mismatch_kl").rows()
    want = [(2.0, 1.0 - math.log(2)), (1.0, 0.0), (0.5, math.log(2) - 0.5), (None, None)]
    for (r, k), (wr, wk) in zip(got, want, strict=True):
        assert (r is None) == (wr is None) and (k is None) == (wk is None)
        if wr is not None:
            assert r == pytest.approx(wr, rel=1e-6) and k == pytest.approx(wk, rel=1e-5, abs=1e-7)
    options = {o["value"]: o for o in metric_options("mismatch_kl", view.fields, view.file_fields)}
    assert not options["mismatch_kl"]["disabled"] and not options["imp_ratio"]["disabled"]
    plain = build_view(
        _row(["a"], advantages=[1.0]).with_columns(pl.Series("logprobs", [[-1.0]])), _scalars(), ()
    )
    options = {o["value"]: o for o in metric_options("kl", plain.fields, plain.file_fields)}
    assert options["mismatch_kl"]["disabled"] and "no inference log-probs" in options["mismatch_kl"]["label"]


def test_channels008_trainers_field_scale_by_its_values():
    """A field of the trainer's own with no value below 0 (entropies 0.5, 2.0) is coloured on a sequential
    scale from 0 to its max, 0..2; one with both signs (advantages -1, 3) on a diverging one, -3..3."""
    from data.tokens import strip

    view = build_view(_row(["a", "b"], entropies=[0.5, 2.0], advantages=[-1.0, 3.0]), _scalars(), ())

    def scale(metric):
        s = strip(view, metric, False)[3]
        return s.lo, s.hi, s.signed, s.clip, s.kind

    assert scale("file:entropies") == (0.0, 2.0, False, None, "linear")  # not clipped: no run scale given
    assert scale("file:advantages") == (-3.0, 3.0, True, None, "linear")
