"""Token-view data (data/tokens.py): marker decoding, alignment of unequal arrays, the pad rule (PPO's
trailing pad carrying the reward), per-token metrics, colour-scale ranges, top-k, navigation, the strip's
metric and picker. (The URL state: tests/unit/views/test_tokens_view.py.)"""

from __future__ import annotations

import math

import polars as pl
import pytest

from data.config import DEFAULT_PAD_TOKENS
from data.tokens import (
    MIN_SCALE,
    NO_TOKEN,
    decode_expr,
    decode_token,
    file_fields,
    file_label,
    hover_metrics,
    metric_available,
    neighbours,
    overlong_file_fields,
    present_fields,
    scale_range,
    strip_pad_text,
    token_frame,
    token_view,
    top_tokens,
    visible_tokens,
)
from data.views.codec import parse_search
from data.views.tokens import TokensState

LIST_SCHEMA = {
    "response_tokens": pl.List(pl.String),
    "logprobs": pl.List(pl.Float32),
    "ref_logprobs": pl.List(pl.Float32),
    "values": pl.List(pl.Float32),
    "token_rewards": pl.List(pl.Float32),
}


def one_row(**lists) -> pl.DataFrame:
    """A one-row response frame like ``RunStore.read_rows`` returns (absent lists are null)."""
    data = {"row": [7], "prompt": ["p"], "response": ["r"], "reward": [1.0]}
    for c, dtype in LIST_SCHEMA.items():
        data[c] = pl.Series(c, [lists.get(c)], dtype=dtype)
    return pl.DataFrame(data)


def approx_list(values, expected):
    assert len(values) == len(expected)
    for v, e in zip(values, expected, strict=True):
        if e is None:
            assert v is None
        else:
            assert v == pytest.approx(e, rel=1e-6, abs=1e-7)


def test_tokens001_byte_level_markers_decoded():
    """Ġ and ▁ become spaces, Ċ a newline, ĉ a tab; a missing token shows as □; other text is untouched."""
    assert decode_token("Ġis") == " is"
    assert decode_token("▁the") == " the"
    assert decode_token("ĊĊ") == "\n\n"
    assert decode_token("ĉx") == "\tx"
    assert decode_token("<script>") == "<script>"
    assert decode_token(None) == NO_TOKEN
    df = pl.DataFrame({"token": ["ĠaĊb", "▁c", None, "**bold**"]})
    assert df.select(decode_expr()).to_series().to_list() == [" a\nb", " c", NO_TOKEN, "**bold**"]


def test_tokens002_unequal_lengths_aligned_from_first_token():
    """3 tokens, 2 log-probs, 4 values: 4 positions; a shorter array is empty past its end, never shifted."""
    row = one_row(
        response_tokens=["Ġa", "Ġb", "Ġc"],
        logprobs=[-1.0, -2.0],
        ref_logprobs=[-1.5, -2.0],
        values=[0.1, 0.2, 0.3, 0.4],
    )
    t = token_frame(row, DEFAULT_PAD_TOKENS)
    assert t.get_column("pos").to_list() == [0, 1, 2, 3]
    assert t.get_column("token").to_list() == ["Ġa", "Ġb", "Ġc", None]
    assert t.get_column("text").to_list() == [" a", " b", " c", NO_TOKEN]
    approx_list(t.get_column("logprob").to_list(), [-1.0, -2.0, None, None])
    approx_list(t.get_column("value").to_list(), [0.1, 0.2, 0.3, 0.4])
    assert t.get_column("token_reward").null_count() == 4
    # log-ratio and KL only where both log-probs exist
    approx_list(t.get_column("log_ratio").to_list(), [0.5, 0.0, None, None])


def test_tokens003_ppo_trailing_pad_carries_the_reward():
    """TRL PPO: tokens/values/token_rewards one longer than log-probs; the trailing <pad> holds the reward
    and stays visible with pads hidden, while the returns sum it from every position."""
    row = one_row(
        response_tokens=["Ġhi", "Ġ.", "<|endoftext|>", "<pad>"],
        logprobs=[-1.0, -0.5, -0.25],
        ref_logprobs=[-1.0, -1.0, -0.25],
        values=[0.5, 0.5, 0.0, 0.0],
        token_rewards=[0.0, -0.02, 0.0, 1.0],
    )
    t = token_frame(row, DEFAULT_PAD_TOKENS)
    assert t.get_column("is_pad").to_list() == [False, False, True, True]
    # eos: a pad-list token with no reward and value 0 -> hidden; the trailing pad carries 1.0 -> kept
    assert t.get_column("keep").to_list() == [True, True, False, True]
    shown = visible_tokens(t, show_pads=False)
    assert shown.get_column("pos").to_list() == [0, 1, 3]
    assert shown.filter(pl.col("pos") == 3).item(0, "token_reward") == pytest.approx(1.0)
    approx_list(t.get_column("return").to_list(), [0.98, 0.98, 1.0, 1.0])
    assert t.filter(pl.col("pos") == 3).item(0, "kl") is None
    assert visible_tokens(t, show_pads=True).height == 4


def test_tokens004_pad_hidden_unless_it_carries_reward_or_value():
    """Pads with zero/missing reward and value are hidden by default; a non-zero value keeps one visible."""
    row = one_row(
        response_tokens=["<pad>", "<pad>", "Ġx", "<PAD>", "<pad>"],
        values=[0.0, 0.3, 0.1, None, 0.0],
        token_rewards=[0.0, 0.0, 0.0, 0.0, None],
    )
    t = token_frame(row, DEFAULT_PAD_TOKENS)
    assert t.get_column("keep").to_list() == [False, True, True, False, False]
    assert visible_tokens(t, False).get_column("pos").to_list() == [1, 2]
    assert visible_tokens(t, True).get_column("pos").to_list() == [0, 1, 2, 3, 4]


def test_tokens005_per_token_metrics_by_hand():
    """log-ratio, k3 KL, probabilities, return (γ = 1) and value error against values computed by hand."""
    row = one_row(
        response_tokens=["Ġa", "Ġb"],
        logprobs=[-1.0, -0.5],
        ref_logprobs=[-2.0, -0.5],
        values=[1.0, 2.0],
        token_rewards=[0.5, 1.5],
    )
    t = token_frame(row, DEFAULT_PAD_TOKENS)
    # r = ref - logprob = -1 -> kl = e^-1 - 1 + 1 = e^-1
    approx_list(t.get_column("log_ratio").to_list(), [1.0, 0.0])
    approx_list(t.get_column("kl").to_list(), [math.exp(-1.0), 0.0])
    approx_list(t.get_column("prob").to_list(), [math.exp(-1.0), math.exp(-0.5)])
    approx_list(t.get_column("ref_prob").to_list(), [math.exp(-2.0), math.exp(-0.5)])
    approx_list(t.get_column("return").to_list(), [2.0, 1.5])
    approx_list(t.get_column("value_error").to_list(), [-1.0, 0.5])


def test_tokens006_scale_ranges():
    """Signed: symmetric max-abs around 0; probabilities [0, 1]; KL [0, max]; NaN/null ignored; floors."""
    assert scale_range("log_ratio", [-0.5, 0.2, None, float("nan")]) == (-0.5, 0.5)
    assert scale_range("token_reward", [0.1, 3.0]) == (-3.0, 3.0)
    assert scale_range("value_error", [-4.0, 1.0, float("inf")]) == (-4.0, 4.0)
    assert scale_range("prob", [0.1, 0.2]) == (0.0, 1.0)
    assert scale_range("ref_prob", []) == (0.0, 1.0)
    assert scale_range("kl", [0.0, 0.3, 2.0, None]) == (0.0, 2.0)
    # degenerate ranges get width 1; log-ratio / KL never narrower than float noise allows
    assert scale_range("value", []) == (-1.0, 1.0)
    assert scale_range("value", [0.0, 0.0]) == (-1.0, 1.0)
    assert scale_range("kl", [0.0]) == (0.0, 1.0)
    assert scale_range("log_ratio", [1e-9, -2e-9]) == (-MIN_SCALE["log_ratio"], MIN_SCALE["log_ratio"])
    assert scale_range("kl", [4.5e-13]) == (0.0, MIN_SCALE["kl"])


def test_tokens007_top_tokens_by_abs_value():
    """Largest |log-ratio| first, ties by position; null and non-finite values are left out."""
    df = pl.DataFrame(
        {
            "pos": [0, 1, 2, 3, 4, 5],
            "token": ["a", "b", "c", "d", "e", "f"],
            "text": ["a", "b", "c", "d", "e", "f"],
            "is_pad": [False] * 6,
            "logprob": [0.0] * 6,
            "ref_logprob": [0.0] * 6,
            "log_ratio": [0.1, -2.0, 2.0, None, float("nan"), 0.5],
            "kl": [0.0, 1.0, 3.0, None, None, 0.2],
        }
    )
    assert top_tokens(df, "log_ratio", k=3).get_column("pos").to_list() == [1, 2, 5]
    assert top_tokens(df, "kl", k=10).get_column("pos").to_list() == [2, 1, 5, 0]
    assert top_tokens(df.head(0), "kl").height == 0


def test_tokens008_neighbours_in_step_by_file_and_line():
    """Previous / next response of the same step in (source, line) order, whatever the frame's order."""
    scalars = pl.DataFrame(
        {
            "sample_id": ["b-2", "a-9", "a-1", "x-1", "b-1"],
            "source": ["rank1", "rank0", "rank0", "rank0", "rank1"],
            "line": [2, 9, 1, 5, 1],
            "step": [1, 1, 1, 2, 1],
        }
    )
    n = neighbours(scalars, "a-9", 1)
    assert (n.index, n.count, n.prev_id, n.next_id) == (1, 4, "a-1", "b-1")
    first = neighbours(scalars, "a-1", 1)
    assert (first.prev_id, first.next_id) == (None, "a-9")
    last = neighbours(scalars, "b-2", 1)
    assert (last.index, last.next_id) == (3, None)
    assert neighbours(scalars, "x-1", 2).count == 1
    assert neighbours(scalars, "zz", 1).index == -1


def test_tokens010_fields_and_metric_availability():
    """Only non-empty lists count as present; each metric needs its source fields."""
    row = {"response_tokens": ["a"], "logprobs": [-1.0], "ref_logprobs": [], "values": None}
    fields = present_fields(row)
    assert fields == frozenset({"response_tokens", "logprobs"})
    assert metric_available("prob", fields) and not metric_available("kl", fields)
    assert not metric_available("value_error", frozenset({"values"}))
    assert hover_metrics(frozenset({"token_rewards"})) == ["token_reward", "return"]


def test_tokens011_no_token_fields_gives_no_positions():
    """An evaluation dump (no token-level field at all) has no positions, and no fields."""
    row = one_row()
    assert token_frame(row, DEFAULT_PAD_TOKENS).height == 0
    assert present_fields(row.row(0, named=True)) == frozenset()


def test_tokens012_pad_text_stripped():
    """Texts lose every pad token when pads are hidden."""
    assert strip_pad_text(" hi .<|endoftext|><pad>", DEFAULT_PAD_TOKENS) == " hi ."
    assert strip_pad_text(None, DEFAULT_PAD_TOKENS) is None


def test_tokens013_token_view_of_the_ppo_fixture(fixtures_dir, tmp_path):
    """First PPO record: 9 positions, the trailing <pad> keeps reward 1.0; unknown ids give None; cached."""
    from data.ingest import ingest_run
    from data.store import open_store, sample_id

    res = ingest_run(fixtures_dir / "trl-ppo-small", tmp_path, DEFAULT_PAD_TOKENS)
    store = open_store(res.store_dir)
    sid = sample_id("rank0.jsonl", 1)
    view = token_view(store, sid, DEFAULT_PAD_TOKENS)
    assert view.tokens.height == 9
    assert view.fields == frozenset(
        {"response_tokens", "logprobs", "ref_logprobs", "values", "token_rewards"}
    )
    pad = view.tokens.filter(pl.col("pos") == 8).row(0, named=True)
    assert (pad["token"], pad["keep"], pad["token_reward"], pad["logprob"]) == ("<pad>", True, 1.0, None)
    assert view.info["reward"] == 1.0 and view.info["prompt"] == "we thought the concert"
    # TRL's own per-token fields: 8 advantages and 9 returns, aligned from the first token, as in the file.
    assert view.file_fields == ("advantages", "returns") and "advantages" not in view.info
    adv = view.tokens.get_column("file:advantages").to_list()
    assert adv[0] == pytest.approx(-0.6926082372665405, rel=1e-7) and adv[8] is None
    assert view.tokens.get_column("file:returns").to_list()[8] == pytest.approx(1.0, rel=1e-7)
    assert (view.nav.step, view.nav.index, view.nav.count, view.nav.prev_id) == (1, 0, 16, None)
    assert token_view(open_store(res.store_dir), sid, DEFAULT_PAD_TOKENS) is view
    assert token_view(store, "nope-1", DEFAULT_PAD_TOKENS) is None


def test_tokens014_trainer_fields_aligned_and_named_apart():
    """A per-token field of the trainer's own is aligned from the first token like the contract's arrays,
    longer than them it adds positions, and a name like a metric's (`kl`) stays apart from the metric."""
    row = one_row(response_tokens=["Ġa", "Ġb"], logprobs=[-1.0, -2.0], ref_logprobs=[-1.0, -1.0])
    row = row.with_columns(
        pl.Series("kl", [[0.5, 0.25, 0.125]], dtype=pl.List(pl.Float32)),
        pl.Series("empty", [[]], dtype=pl.List(pl.Float32)),
    )
    assert file_fields(row) == ("kl",)
    t = token_frame(row, DEFAULT_PAD_TOKENS)
    assert t.get_column("pos").to_list() == [0, 1, 2]
    assert t.get_column("file:kl").to_list() == [0.5, 0.25, 0.125]
    approx_list(t.get_column("kl").to_list(), [0.0, math.exp(1.0) - 2.0, None])  # k3 of log-ratio -1
    assert file_label("kl") == "kl (from the file)"


def test_tokens015_colour_by_a_field_of_the_trainer():
    """metric=file:<name> is taken from the URL and round-trips; whether it applies is the response's
    matter (its per-token fields of the trainer); `file:` alone is a bad metric; labels say the source."""
    from data.tokens import is_file_metric, metric_label

    state, notes = TokensState.from_query({"metric": "file:advantages"})
    assert state.metric == "file:advantages" and notes == []
    assert TokensState.from_query(parse_search(state.to_query()))[0] == state
    state, notes = TokensState.from_query({"metric": "file:"})
    assert state.metric == "kl" and len(notes) == 1
    fields = frozenset({"logprobs", "ref_logprobs"})
    assert metric_available("file:advantages", fields, ("advantages", "returns"))
    assert not metric_available("file:advantages", fields, ("returns",))
    assert metric_available("kl", fields, ()) and not is_file_metric("kl") and not is_file_metric(None)
    assert metric_label("file:advantages") == "advantages (from the file)" and metric_label("kl") == "KL (k3)"


def test_tokens016_fields_longer_than_the_response_are_left_out():
    """A per-token field of the trainer's with more values than the response's token arrays plus one (a
    batch's input_ids or attention_mask, over prompt and response) is not drawn against its tokens and is
    named with its length; one as long (a response mask) or one longer (as TRL's PPO arrays) is drawn."""
    row = one_row(response_tokens=["a", "b", "c"], logprobs=[-1.0, -2.0, -3.0])
    row = row.with_columns(
        pl.Series("input_ids", [[5, 6, 7, 8, 9, 1, 2, 3]], dtype=pl.List(pl.Float32)),
        pl.Series("response_mask", [[1, 1, 0]], dtype=pl.List(pl.Float32)),
        pl.Series("returns", [[0.5, 0.5, 0.5, 1.0]], dtype=pl.List(pl.Float32)),
        pl.Series("attention_mask", [[1, 1, 1, 1, 1]], dtype=pl.List(pl.Float32)),
    )
    assert file_fields(row) == ("response_mask", "returns")
    assert overlong_file_fields(row) == (("input_ids", 8, 3), ("attention_mask", 5, 3))
    t = token_frame(row, DEFAULT_PAD_TOKENS)
    assert t.height == 4 and "file:input_ids" not in t.columns
    assert t.get_column("file:response_mask").to_list() == [1.0, 1.0, 0.0, None]


def test_tokens017_strip_metric_falls_back_and_says_why():
    """A metric the response cannot give falls back to the first one it can, with the reason first; each
    missing field and each overlong field of the trainer's gets its note; none at all gives no metric."""
    from data.tokens import MISSING_NOTES, build_view, strip_metric

    scalars = pl.DataFrame({"sample_id": ["s"], "step": [1], "source": ["a"], "line": [1]})
    row = one_row(response_tokens=["a", "b"], logprobs=[-1.0, -2.0]).with_columns(
        pl.Series("input_ids", [[1.0, 2.0, 3.0, 4.0]], dtype=pl.List(pl.Float32))
    )
    view = build_view(row, scalars, DEFAULT_PAD_TOKENS)
    assert strip_metric(view, "prob")[0] == "prob"
    metric, notes = strip_metric(view, "kl")
    assert metric == "prob"
    assert (
        notes[0]
        == "KL (k3) needs logprobs, ref_logprobs, which this response does not have: coloured by probability (policy) instead."
    )
    assert MISSING_NOTES["values"] in notes and MISSING_NOTES["logprobs"] not in notes
    assert notes[-1].startswith("input_ids (from the file) has 4 values for 2 tokens")
    metric, notes = strip_metric(view, "file:input_ids")
    assert metric == "prob" and notes[0].startswith("input_ids (from the file) is longer than the response")
    bare = build_view(one_row(response_tokens=["a"]), scalars, DEFAULT_PAD_TOKENS)
    assert strip_metric(bare, "kl")[0] is None and strip_metric(bare, "kl")[1][0].endswith("does not have.")


def test_tokens018_metric_picker_options():
    """Every strip metric, disabled where the response lacks its fields, then the trainer's own fields; a
    field of the trainer's the URL names and the response lacks stays listed, disabled, saying why."""
    from data.tokens import metric_options

    opts = metric_options("kl", frozenset({"logprobs"}), ("advantages",))
    by = {o["value"]: o for o in opts}
    assert by["prob"]["disabled"] is False and by["kl"]["disabled"] is True
    assert by["kl"]["label"] == "KL (k3) (not in this response)"
    assert by["file:advantages"] == {"label": "advantages (from the file)", "value": "file:advantages"}
    gone = metric_options("file:input_ids", frozenset({"logprobs"}), (), frozenset({"input_ids"}))[-1]
    assert gone == {
        "label": "input_ids (from the file) (longer than the response)",
        "value": "file:input_ids",
        "disabled": True,
    }
    assert all(not o["disabled"] for o in metric_options("kl", None))  # no response: nothing to check


def _gap_row(trainer, inference, name="generation_logprobs", tokens=None) -> pl.DataFrame:
    """A response with the trainer's log-probs (the contract's logprobs) and an inference engine's beside."""
    row = one_row(response_tokens=tokens or [f"t{i}" for i in range(len(trainer))], logprobs=trainer)
    return row.with_columns(pl.Series(name, [inference], dtype=pl.List(pl.Float32)))


def test_tokens019_inference_trainer_gap_by_hand():
    """infer_gap = trainer − inference log-prob per token, signed; NaN / inf pass through as for the
    log-ratio and are skipped by the summary: mean |gap|, max |gap| and its position, and the share in the
    tail, |gap| > ln 2 (data.config.INFER_GAP_TAIL, the threshold of the per-response columns; 0.1 before);
    a loss mask's 0 leaves its position out."""
    from data.config import INFER_GAP_TAIL
    from data.metrics.token import infer_gap_summary

    nan, inf = float("nan"), float("inf")
    t = token_frame(
        _gap_row([-0.5, -1.25, -0.25, -1.5, -1.0, -2.0], [-0.5, -1.0, -0.25, -2.5, nan, -inf]),
        DEFAULT_PAD_TOKENS,
    )
    gap = t.get_column("infer_gap").to_list()
    assert gap[:4] == [0.0, -0.25, 0.0, 1.0]
    assert math.isnan(gap[4]) and gap[5] == inf
    # By hand over the 4 finite positions: |gap| = 0, 0.25, 0, 1; only 1 > ln 2 = 0.693.
    assert INFER_GAP_TAIL == math.log(2)
    assert infer_gap_summary(t) == {"n": 4, "mean_abs": 0.3125, "max_abs": 1.0, "max_pos": 3, "over": 0.25}
    masked = _gap_row([-0.5, -1.25, -0.25, -1.5], [-0.5, -1.0, -0.25, -2.5]).with_columns(
        pl.Series("loss_mask", [[1, 1, 1, 0]], dtype=pl.List(pl.Int64))
    )
    s = infer_gap_summary(token_frame(masked, DEFAULT_PAD_TOKENS))
    assert s == {"n": 3, "mean_abs": pytest.approx(0.25 / 3), "max_abs": 0.25, "max_pos": 1, "over": 0.0}
    plain = token_frame(one_row(logprobs=[-1.0, -2.0]), DEFAULT_PAD_TOKENS)
    assert plain.get_column("infer_gap").to_list() == [None, None] and infer_gap_summary(plain) is None


def test_tokens020_inference_field_names_of_real_trainers():
    """NeMo-RL's generation_logprobs, veRL / OpenRLHF's rollout_log_probs, prime-rl's inference_logprobs are
    each taken as the inference engine's log-probs (the first a response has, in that order); another
    field is not."""
    for name in ("generation_logprobs", "rollout_log_probs", "inference_logprobs"):
        t = token_frame(_gap_row([-1.0, -3.0], [-1.5, -2.0], name), DEFAULT_PAD_TOKENS)
        assert t.get_column("infer_gap").to_list() == [0.5, -1.0], name
    both = _gap_row([-1.0], [-1.5]).with_columns(
        pl.Series("rollout_log_probs", [[-3.0]], dtype=pl.List(pl.Float32))
    )
    assert token_frame(both, DEFAULT_PAD_TOKENS).get_column("infer_gap").to_list() == [0.5]
    other = token_frame(_gap_row([-1.0], [-1.5], "advantages"), DEFAULT_PAD_TOKENS)
    assert other.get_column("infer_gap").to_list() == [None]


def test_tokens021_gap_on_the_page_needs_both_sides():
    """The gap is a strip and hover metric only with logprobs and an inference field; its scale is symmetric
    about 0 and never narrower than MIN_SCALE; without the inference field the option is disabled saying
    why, the strip falls back saying what it needs, and the figures line is empty."""
    from data.tokens import build_view, infer_gap_figures, metric_options, strip_metric

    fields = frozenset({"response_tokens", "logprobs"})
    assert metric_available("infer_gap", fields, ("generation_logprobs",))
    assert not metric_available("infer_gap", fields, ("advantages",))
    assert not metric_available("infer_gap", frozenset({"response_tokens"}), ("generation_logprobs",))
    assert "infer_gap" in hover_metrics(fields, ("rollout_log_probs",)) and "infer_gap" not in hover_metrics(
        fields
    )
    assert scale_range("infer_gap", [0.25, -0.5, float("nan")]) == (-0.5, 0.5)
    assert scale_range("infer_gap", [1e-9, 0.0]) == (-MIN_SCALE["infer_gap"], MIN_SCALE["infer_gap"])
    by = {o["value"]: o for o in metric_options("kl", fields, ("advantages",))}
    assert by["infer_gap"] == {
        "label": "trainer − inference log-prob (no inference log-probs in this response)",
        "value": "infer_gap",
        "disabled": True,
    }
    by = {o["value"]: o for o in metric_options("kl", fields, ("generation_logprobs",))}
    assert by["infer_gap"]["disabled"] is False and by["infer_gap"]["label"] == "trainer − inference log-prob"

    scalars = pl.DataFrame({"sample_id": ["s"], "step": [1], "source": ["a"], "line": [1]})
    view = build_view(one_row(response_tokens=["a", "b"], logprobs=[-1.0, -2.0]), scalars, DEFAULT_PAD_TOKENS)
    metric, notes = strip_metric(view, "infer_gap")
    assert metric == "prob" and notes[0] == (
        "trainer − inference log-prob needs logprobs and the inference engine's log-probs (generation_logprobs, "
        "rollout_log_probs, inference_logprobs), which this response does not have: coloured by probability "
        "(policy) instead."
    )
    assert infer_gap_figures(view) == []
    view = build_view(_gap_row([-1.0, -2.0], [-1.0, -1.0], tokens=["Ġa", "Ġb"]), scalars, DEFAULT_PAD_TOKENS)
    assert strip_metric(view, "infer_gap")[0] == "infer_gap"
    assert infer_gap_figures(
        view
    ) == [  # the tail's threshold, ln 2, of the per-response columns (0.1 before)
        ("mean |gap|", 0.5, "num"),
        ("max |gap|", 1.0, "num"),
        ("at position", "1 (' b')", "text"),
        ("|gap| > ln 2", 0.5, "share"),
        ("tokens compared", 2, "int"),
    ]


def test_tokens022_strip_and_top_tables_of_the_page():
    """The strip's metric, notes, positions (pads hidden unless asked) and colour scale, as the page draws
    it; the top-token tables by |log-ratio| then KL, none for a response without what KL needs."""
    from data.tokens import TOP_K, build_view, scale_range, strip, strip_metric, top_tables, top_tokens

    scalars = pl.DataFrame({"sample_id": ["s"], "step": [1], "source": ["a"], "line": [1]})
    row = one_row(
        response_tokens=["Ġhi", "Ġ.", "<pad>"],
        logprobs=[-1.0, -0.5, -0.25],
        ref_logprobs=[-1.5, -0.5, -0.25],
    )
    view = build_view(row, scalars, DEFAULT_PAD_TOKENS)
    metric, notes, shown, scale = strip(view, "log_ratio", False)
    assert (metric, notes) == strip_metric(view, "log_ratio")
    assert shown.get_column("pos").to_list() == [0, 1]
    # Not clipped (no run scale), and linear: the log scale's linear part (the median |log-ratio|, 0.5)
    # covers its whole range.
    got = (scale.lo, scale.hi, scale.signed, scale.clip, scale.kind)
    assert got == (*scale_range("log_ratio", shown.get_column("log_ratio")), True, None, "linear")
    assert shown.get_column("strip_at").to_list() == [1.0, 0.5]  # log-ratio 0.5, 0 on -0.5..0.5
    assert strip(view, "log_ratio", True)[2].height == 3
    prob = strip(view, "prob", False)[3]
    assert (prob.lo, prob.hi, prob.signed, prob.clip, prob.kind) == (0.0, 1.0, False, None, "linear")
    tables = top_tables(view)
    assert [(by, title) for by, _, title in tables] == [
        ("log_ratio", f"Top {TOP_K} tokens by |log-ratio log π − log π_ref|"),
        ("kl", f"Top {TOP_K} tokens by KL (k3)"),
    ]
    assert tables[1][1].equals(top_tokens(view.tokens, "kl"))
    bare = build_view(one_row(response_tokens=["a"]), scalars, DEFAULT_PAD_TOKENS)
    assert strip(bare, "kl", False)[0] is None and strip(bare, "kl", False)[3] is None
    assert top_tables(bare) == []
