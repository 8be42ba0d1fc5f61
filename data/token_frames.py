"""One response's tokens as frames: the per-token metrics a token can be coloured by and the fields each
needs, positions aligned from the first token with byte-level markers decoded, the pad visibility rule,
colour-scale ranges, top-k tokens and a response's neighbours in its step (pure functions on Polars
frames; :mod:`data.tokens` builds the page's view from them)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl

from data.metrics import METRICS, label
from data.metrics.critic import RETURN_FIELD, return_label
from data.metrics.token import (
    INFERENCE_LOGPROB_FIELDS,
    TOKEN_COLUMNS,
    dropped_expr,
    explode_tokens,
    file_column,
    inference_field,
    token_metrics,
)
from data.schema import trainer_token_fields

# Metrics a token can be coloured by, in the order of the metric picker.
STRIP_METRICS = (
    "token_reward",
    "value",
    "prob",
    "ref_prob",
    "log_ratio",
    "kl",
    "infer_gap",
    "imp_ratio",
    "mismatch_kl",
    "value_error",
)
# The metrics of the trainer's log-prob against the inference engine's: they also need one of
# INFERENCE_LOGPROB_FIELDS among the response's fields of the trainer's own.
INFERENCE_METRICS = ("infer_gap", "imp_ratio", "mismatch_kl")
# The file fields each per-token metric needs (the inference–trainer gap also needs an inference engine's
# log-probs: one of INFERENCE_LOGPROB_FIELDS among the response's fields of the trainer's own).
METRIC_FIELDS: dict[str, tuple[str, ...]] = {
    "token_reward": ("token_rewards",),
    "value": ("values",),
    "prob": ("logprobs",),
    "ref_prob": ("ref_logprobs",),
    "logprob": ("logprobs",),
    "ref_logprob": ("ref_logprobs",),
    "log_ratio": ("logprobs", "ref_logprobs"),
    "kl": ("logprobs", "ref_logprobs"),
    "infer_gap": ("logprobs",),
    "imp_ratio": ("logprobs",),
    "mismatch_kl": ("logprobs",),
    "return": ("token_rewards",),
    "value_error": ("values", "token_rewards"),
}
# Every metric shown in a token's hover text, in this order.
HOVER_METRICS = (
    "token_reward",
    "value",
    "return",
    "value_error",
    "prob",
    "ref_prob",
    "logprob",
    "ref_logprob",
    "log_ratio",
    "kl",
    "infer_gap",
    "imp_ratio",
    "mismatch_kl",
)
# Byte-level BPE glyphs (GPT-2 `Ġ` space, `Ċ` newline, `ĉ` tab) and SentencePiece's `▁` space.
MARKERS = {"Ġ": " ", "▁": " ", "Ċ": "\n", "ĉ": "\t"}
# Shown for a position that has values but no token string (``response_tokens`` shorter or absent).
NO_TOKEN = "□"
# A token given as its id (a file of token ids read without a tokenizer.json) is shown as ⟨id⟩, so that
# ids never run together on the strip ("100010011002").
ID_OPEN, ID_CLOSE = "\u27e8", "\u27e9"
_ID = r"^-?\d+$"
TOP_K = 10
# Narrowest half-width of a colour scale: a response whose log-probs equal the reference's up to float noise
# (PPO's first step) stays white instead of painting 1e-13 as the darkest colour. KL 5e-7 is the k3 of a
# log-ratio of 1e-3.
# The trainer's and the inference engine's log-probs agree to that float noise too when both run the same
# kernels.
MIN_SCALE = {"log_ratio": 1e-3, "kl": 5e-7, "infer_gap": 1e-3, "mismatch_kl": 5e-7}
# What the inference–trainer gap needs besides logprobs, as the page says it.
INFERENCE_NEEDS = "the inference engine's log-probs (" + ", ".join(INFERENCE_LOGPROB_FIELDS) + ")"


@dataclass(frozen=True)
class Neighbours:
    """Where a response sits among the responses of its step, ordered by (source file, line)."""

    step: int | None
    index: int  # 0-based position in the step; -1 when unknown
    count: int
    prev_id: str | None
    next_id: str | None


@dataclass(frozen=True)
class TokenView:
    """One response ready to show.

    ``info``: the response's scalar columns and texts (``prompt``, ``response``, ``ref_response``, ``reward``,
    ``ref_reward``, ``reward_gain``, ``kl_mean``, ``kl_sum``, ``step``, ``source``, ``line``, ...).
    ``tokens``: one row per position (see :func:`token_frame`). ``fields``: the token-level fields this
    response has (non-empty lists). ``nav``: its neighbours in the step.
    """

    info: dict
    tokens: pl.DataFrame
    fields: frozenset[str]
    nav: Neighbours
    # Per-token fields of the trainer's own that this response has (TRL's PPO `advantages`, `returns`), as
    # the file has them; in ``tokens`` as ``file_column(name)``.
    file_fields: tuple[str, ...] = ()
    # Those left out for being longer than the response's tokens: (name, values, tokens).
    overlong: tuple[tuple[str, int, int], ...] = ()
    # The loss mask among them (see data.metrics.token.DROPPED_AT), whose dropped positions the strip
    # marks (``masked`` in ``tokens``); None without one.
    mask_field: str | None = None
    # Whether the response's tokens are token ids (shown as ⟨id⟩, see :func:`tokens_are_ids`).
    token_ids: bool = False


# ---- pure functions ----------------------------------------------------------------------------------


def decode_token(token: str | None) -> str:
    """Display text of one token: byte-level markers become spaces / newlines / tabs; None -> ``□``."""
    if token is None:
        return NO_TOKEN
    for k, v in MARKERS.items():
        token = token.replace(k, v)
    return token


def decode_expr(col: str = "token") -> pl.Expr:
    """:func:`decode_token` as a Polars expression (null -> ``□``)."""
    return pl.col(col).str.replace_many(list(MARKERS), list(MARKERS.values())).fill_null(NO_TOKEN)


def present_fields(row: dict) -> frozenset[str]:
    """The token-level fields (``response_tokens``, ``logprobs``, ...) that are non-empty lists in ``row``."""
    return frozenset(c for c in TOKEN_COLUMNS if isinstance(row.get(c), list | pl.Series) and len(row[c]) > 0)


FILE_PREFIX = file_column("")  # of a metric that names a per-token field of the trainer's own


def metric_available(metric: str, fields: frozenset[str], file_fields: tuple[str, ...] = ()) -> bool:
    """Whether a per-token metric can be computed from the fields a response has (for a field of the
    trainer's own, ``file_column(name)``: whether the response has it)."""
    if is_file_metric(metric):
        return file_field_of(metric) in file_fields
    if metric in INFERENCE_METRICS and inference_field(file_fields) is None:
        return False
    return all(f in fields for f in METRIC_FIELDS.get(metric, ()))


def metric_needs(metric: str) -> str:
    """What a per-token metric of the contract's needs, as the page says it (``logprobs, ref_logprobs``)."""
    needs = ", ".join(METRIC_FIELDS[metric])
    return f"{needs} and {INFERENCE_NEEDS}" if metric in INFERENCE_METRICS else needs


def file_field_of(metric: str | None) -> str | None:
    """The per-token field of the trainer's own that a metric names (``file_column(name)``), else None."""
    if isinstance(metric, str) and metric.startswith(FILE_PREFIX) and len(metric) > len(FILE_PREFIX):
        return metric[len(FILE_PREFIX) :]
    return None


def is_file_metric(metric: str | None) -> bool:
    """Whether a metric names a per-token field of the trainer's own (``file_column(name)``)."""
    return file_field_of(metric) is not None


def metric_signed(metric: str) -> bool:
    """Whether a metric of the token page takes both signs (a diverging scale centred at 0): the registry's
    sign, and signed for a field of the trainer's own (advantages, returns)."""
    return METRICS[metric].signed if metric in METRICS else True


def metric_label(metric: str, file_fields=()) -> str:
    """The label of a metric of the token page, a field of the trainer's own included; the return and the
    value error say which returns (the file's ``returns`` among ``file_fields``, else γ = 1)."""
    name = file_field_of(metric)
    if name is not None:
        return file_label(name)
    if metric in ("return", "value_error"):
        return return_label(metric, "file" if RETURN_FIELD in file_fields else "gamma1")
    return label(metric)


def pad_shown_expr() -> pl.Expr:
    """True where a pad position must stay visible: it carries a non-zero token reward or value.

    (TRL's PPO puts the sequence reward on a trailing ``<pad>``.) Missing values count as zero.
    """
    carries = (pl.col("token_reward").fill_null(0.0) != 0.0) | (pl.col("value").fill_null(0.0) != 0.0)
    return pl.col("is_pad") & carries


def hover_metrics(fields: frozenset[str], file_fields: tuple[str, ...] = ()) -> list[str]:
    """The metrics a token's hover text shows: every one of :data:`HOVER_METRICS` the fields allow."""
    return [m for m in HOVER_METRICS if metric_available(m, fields, file_fields)]


# How many values more than the response's token arrays a per-token field of the trainer may have and still
# be drawn against its tokens (TRL's PPO writes one more entry in some arrays than in others).
ALIGN_SLACK = 1


def _sort_file_fields(row: pl.DataFrame) -> tuple[tuple[str, ...], tuple[tuple[str, int, int], ...]]:
    """:func:`file_fields` and :func:`overlong_file_fields` of a one-row response frame, from one look at
    the lengths of its lists."""
    one = row.head(1)
    lengths = {c: one.get_column(c).list.len().item() for c in trainer_token_fields(one, with_values=True)}
    tokens = max(
        (one.get_column(c).list.len().item() or 0 for c in TOKEN_COLUMNS if c in one.columns), default=0
    )
    fit = tuple(c for c, n in lengths.items() if not tokens or n <= tokens + ALIGN_SLACK)
    return fit, tuple((c, n, tokens) for c, n in lengths.items() if c not in fit)


def file_fields(row: pl.DataFrame) -> tuple[str, ...]:
    """The per-token fields of the trainer's own that a one-row response frame has a value of and that fit
    its tokens: not longer than its token arrays by more than ``ALIGN_SLACK`` (a field over the prompt and
    the response, such as ``input_ids`` or ``attention_mask``, would be drawn against the wrong tokens; see
    :func:`overlong_file_fields`). With no token array of the contract's, all of them."""
    return _sort_file_fields(row)[0]


def overlong_file_fields(row: pl.DataFrame) -> tuple[tuple[str, int, int], ...]:
    """``(name, values, tokens)`` of each per-token field of the trainer's own that :func:`file_fields`
    leaves out for being longer than the response's token arrays."""
    return _sort_file_fields(row)[1]


def file_label(name: str) -> str:
    """How a per-token field of the trainer's own is named on the page: shown as the file has it."""
    return f"{name} (from the file)"


def tokens_are_ids(tokens: pl.Series) -> bool:
    """Whether a response's token strings are token ids: every one a whole number, and at least one. The
    dialects of files that give ids (NeMo-RL, Atropos, prime-rl, miles) write them as their numbers where no
    tokenizer.json names them; a text token is a number alone too rarely for a whole response to be numbers."""
    given = tokens.drop_nulls()
    return given.len() > 0 and bool(given.str.contains(_ID).all())


def token_frame(
    row: pl.DataFrame, pad_tokens: tuple[str, ...], fields_of_file: tuple[str, ...] | None = None
) -> pl.DataFrame:
    """One row per position of a one-row response frame, sorted by ``pos``.

    Columns: ``pos, token, text, is_pad, keep, masked, logprob, ref_logprob, value, token_reward, log_ratio, kl, prob,
    ref_prob, return, value_error, kl_valid``, and ``file_column(name)`` for each of :func:`file_fields`
    (``fields_of_file``: those, when already known). Arrays of unequal lengths are aligned from the first
    token (a position beyond a shorter array is null there, never shifted). ``keep`` is False for a pad
    position hidden by default (see :func:`pad_shown_expr`); ``masked`` True where the response's loss mask
    drops the position (see :func:`data.metrics.token.dropped_expr`). ``text`` is ``⟨id⟩`` for tokens given
    as ids (:func:`tokens_are_ids`). A response without token fields has no rows.
    """
    one = row.head(1).with_columns(pl.lit(0, dtype=pl.Int64).alias("row"))
    if fields_of_file is None:
        fields_of_file = file_fields(one)
    long = token_metrics(explode_tokens(one, pad_tokens, fields_of_file)).drop("row").sort("pos")
    text = decode_expr("token")
    if tokens_are_ids(long.get_column("token")):
        text = (
            pl.when(pl.col("token").is_null())
            .then(text)
            .otherwise(pl.concat_str(pl.lit(ID_OPEN), "token", pl.lit(ID_CLOSE)))
        )
    return long.with_columns(
        text.alias("text"),
        (~pl.col("is_pad") | pad_shown_expr()).alias("keep"),
        dropped_expr(fields_of_file).alias("masked"),
    )


def visible_tokens(tokens: pl.DataFrame, show_pads: bool) -> pl.DataFrame:
    """The positions shown in the strip and charts: all of them with ``show_pads``, else those with ``keep``."""
    return tokens if show_pads else tokens.filter(pl.col("keep"))


def positions_near(tokens: pl.DataFrame, x0: float, x1: float) -> pl.DataFrame:
    """The rows of ``tokens`` a chart zoomed to positions ``x0..x1`` draws: those in the range and as wide
    again on each side (a pan shows drawn points before the next detail arrives)."""
    width = x1 - x0
    return tokens.filter(pl.col("pos").is_between(x0 - width, x1 + width))


def strip_signed(metric: str, values: pl.Series) -> bool:
    """Whether the strip colours ``metric`` on a diverging scale: the registry's sign for the contract's
    metrics; for a field of the trainer's own, whether any finite value shown is below 0 (entropies, a loss
    mask, a probability ratio get a sequential scale from 0; advantages of both signs a diverging one)."""
    if not is_file_metric(metric):
        return metric_signed(metric)
    s = values.cast(pl.Float64).drop_nulls()
    return bool((s.filter(s.is_finite()) < 0).any())


def scale_range(metric: str, values: pl.Series | list, signed: bool | None = None) -> tuple[float, float]:
    """Colour-scale range of a metric over the finite ``values`` shown (``signed``: as
    :func:`strip_signed` says, else the metric's sign).

    Signed metrics: symmetric ``(-m, m)`` with ``m = max |v|`` (centred at 0); probabilities: ``(0, 1)``;
    other unsigned metrics (KL): ``(0, max)``. A degenerate range (no values, all zero) becomes width 1;
    log-ratio and KL scales are never narrower than :data:`MIN_SCALE`.
    """
    if metric in ("prob", "ref_prob"):
        return 0.0, 1.0
    s = pl.Series("v", values, dtype=pl.Float64) if not isinstance(values, pl.Series) else values
    s = s.cast(pl.Float64).drop_nulls()
    s = s.filter(s.is_finite())
    signed = metric_signed(metric) if signed is None else signed
    if signed:
        m = float(s.abs().max()) if s.len() else 0.0
        m = m if m > 0 and math.isfinite(m) else 1.0
        m = max(m, MIN_SCALE.get(metric, 0.0))
        return -m, m
    hi = float(s.max()) if s.len() else 0.0
    hi = hi if hi > 0 and math.isfinite(hi) else 1.0
    return 0.0, max(hi, MIN_SCALE.get(metric, 0.0))


def top_tokens(tokens: pl.DataFrame, by: str, k: int = TOP_K) -> pl.DataFrame:
    """The ``k`` positions with the largest ``|by|`` (finite values only), ties by position.

    Columns: ``pos, token, text, is_pad, logprob, ref_logprob, log_ratio, kl``.
    """
    cols = ["pos", "token", "text", "is_pad", "logprob", "ref_logprob", "log_ratio", "kl"]
    if tokens.height == 0 or by not in tokens.columns:
        return tokens.select(c for c in cols if c in tokens.columns).head(0)
    v = pl.col(by)
    return (
        tokens.filter(v.is_not_null() & v.is_finite())
        .with_columns(v.abs().alias("__key"))
        .sort(["__key", "pos"], descending=[True, False])
        .head(k)
        .select(cols)
    )


def neighbours(scalars: pl.DataFrame | pl.LazyFrame, sample: str, step: int | None) -> Neighbours:
    """Previous / next response of ``sample`` within its step, by (source file, line); ``scalars``: the
    run's responses (a frame, or a lazy scan of the step)."""
    if step is None or "step" not in scalars.collect_schema().names():
        return Neighbours(step, -1, 0, None, None)
    ids = (
        scalars.lazy()
        .filter(pl.col("step") == step)
        .select("sample_id", "source", "line")
        .sort("source", "line", maintain_order=True)  # a line of several responses: in their order
        .collect()
        .get_column("sample_id")
        .to_list()
    )
    try:
        i = ids.index(sample)
    except ValueError:
        return Neighbours(step, -1, len(ids), None, None)
    return Neighbours(
        step,
        i,
        len(ids),
        ids[i - 1] if i > 0 else None,
        ids[i + 1] if i + 1 < len(ids) else None,
    )
