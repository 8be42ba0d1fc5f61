"""Token-view data for one response: what the token page shows of it (the strip's metric or its fallback
and why parts are hidden, the picker's options, the texts and key figures) and the view itself, read from
one row group of the store and cached per ``(store.version, sample)`` (:func:`token_view`).

The frames and pure functions it is built from (positions, metrics, pads, scales, top-k tokens) are
:mod:`data.token_frames`, whose names this module also exports.
"""

from __future__ import annotations

import polars as pl

from data.cache import StoreKey, shared
from data.config import INFER_GAP_TAIL_TEXT
from data.infer_gap import touched_text, with_touched
from data.metrics import METRICS, label
from data.metrics.response import strip_pad_text
from data.metrics.token import (
    DROPPED_AT,
    INFERENCE_LOGPROB_FIELDS,
    TOKEN_COLUMNS,
    dropped_field,
    file_column,
    infer_gap_summary,
)
from data.run_context import steps_of
from data.signals import END_LABELS, ENDS, row_ends
from data.strip_scale import STRIP_AT, StripScale, strip_scale
from data.token_frames import (
    HOVER_METRICS,
    INFERENCE_METRICS,
    MARKERS,
    METRIC_FIELDS,
    MIN_SCALE,
    NO_TOKEN,
    STRIP_METRICS,
    TOP_K,
    Neighbours,
    TokenView,
    _sort_file_fields,
    decode_expr,
    decode_token,
    file_field_of,
    file_fields,
    file_label,
    hover_metrics,
    is_file_metric,
    metric_available,
    metric_label,
    metric_needs,
    metric_signed,
    neighbours,
    overlong_file_fields,
    pad_shown_expr,
    positions_near,
    present_fields,
    scale_range,
    strip_signed,
    token_frame,
    tokens_are_ids,
    top_tokens,
    visible_tokens,
)
from data.token_scale import RunScale

# ---- what the page shows of one response ---------------------------------------------------------------

# Why a part of the token page is hidden, per missing field.
MISSING_NOTES = {
    "logprobs": "No logprobs in this response: probabilities, log-ratio, KL and the log-prob chart are hidden.",
    "ref_logprobs": "No ref_logprobs in this response: reference probability, log-ratio and KL are hidden.",
    "values": "No values (no critic, e.g. GRPO) in this response: critic value, value error and the critic chart are hidden.",
    "token_rewards": "No token_rewards in this response: token reward, return, value error and their charts are hidden.",
    "response_tokens": "No response_tokens in this response: positions are shown as □.",
}
NO_TOKEN_FIELDS = (
    "This response has no token-level fields (response_tokens, logprobs, ref_logprobs, values, "
    "token_rewards): the token strip, charts and top-token tables are hidden."
)
# The response's key figures, in this order.
KEY_FIGURES = ("reward", "ref_reward", "reward_gain", "kl_mean", "kl_sum", "response_length")


def metric_labels(file_fields=()) -> dict[str, str]:
    """The labels of every metric a token's hover text may show (:data:`HOVER_METRICS`) for a response whose
    fields of the trainer's own are ``file_fields`` (see :func:`data.token_frames.metric_label`)."""
    return {k: metric_label(k, file_fields) for k in HOVER_METRICS}


def file_field_columns(names) -> list[tuple[str, str]]:
    """``(column, label)`` of per-token fields of the trainer's own, as the page's figures and hover take them."""
    return [(file_column(f), file_label(f)) for f in names]


def hover_columns(view: TokenView) -> list[tuple[str, str]]:
    """``(column, label)`` of what a token's hover text shows: the metrics its fields allow, then the
    trainer's own fields."""
    return [
        (m, metric_label(m, view.file_fields)) for m in hover_metrics(view.fields, view.file_fields)
    ] + file_field_columns(view.file_fields)


def metric_options(
    metric: str,
    fields: frozenset[str] | None,
    file_fields: tuple[str, ...] = (),
    overlong: frozenset[str] = frozenset(),
) -> list[dict]:
    """The metric picker's options (``label``, ``value``, ``disabled``): every strip metric, disabled (and
    saying so) where the response's ``fields`` lack what it needs (all enabled for ``fields`` None), then
    the trainer's own fields; a field of the trainer's that ``metric`` names and the response lacks (or
    has longer than its tokens: ``overlong``) stays listed, disabled, saying why."""
    options = [
        {
            "label": metric_label(m, file_fields)
            if fields is None or metric_available(m, fields, file_fields)
            else f"{metric_label(m, file_fields)} ({_lacks(m, fields)})",
            "value": m,
            "disabled": fields is not None and not metric_available(m, fields, file_fields),
        }
        for m in STRIP_METRICS
    ]
    options += [{"label": text, "value": col} for col, text in file_field_columns(file_fields)]
    if is_file_metric(metric) and metric not in {o["value"] for o in options}:
        why = "longer than the response" if file_field_of(metric) in overlong else "not in this response"
        options.append({"label": f"{metric_label(metric)} ({why})", "value": metric, "disabled": True})
    return options


def _lacks(metric: str, fields: frozenset[str]) -> str:
    """Why a strip metric is not in a response whose contract fields are ``fields``, as its option says."""
    if metric in INFERENCE_METRICS and metric_available(metric, fields, INFERENCE_LOGPROB_FIELDS):
        return "no inference log-probs in this response"
    return "not in this response"


def strip_metric(view: TokenView, metric: str) -> tuple[str | None, list[str]]:
    """The metric the strip is coloured by and the notes on what the response lacks.

    ``metric`` when the response has what it needs, else the first strip metric it allows (None when it
    allows none), with a first note saying why; then a note per missing token field and per field of the
    trainer's own left out for being longer than the response.
    """
    fields = view.fields
    notes = [MISSING_NOTES[f] for f in MISSING_NOTES if f not in fields]
    overlong = {name: (n, tokens) for name, n, tokens in view.overlong}
    notes += [
        f"{file_label(name)} has {n} values for {tokens} tokens: longer than the response, so it is not drawn "
        "(it likely covers the prompt too)."
        for name, (n, tokens) in overlong.items()
    ]
    if metric_available(metric, fields, view.file_fields):
        return metric, notes
    fallback = next((m for m in STRIP_METRICS if metric_available(m, fields, view.file_fields)), None)
    name = file_field_of(metric)
    if name in overlong:
        lack = f"{file_label(name)} is longer than the response"
    elif name is not None:
        lack = f"This response has no per-token field {name!r} of the trainer"
    else:
        lack = f"{label(metric)} needs {metric_needs(metric)}, which this response does not have"
    notes.insert(0, lack + (f": coloured by {label(fallback)} instead." if fallback else "."))
    return fallback, notes


def strip(
    view: TokenView,
    metric: str,
    show_pads: bool,
    correction: tuple[str, float] | None = None,
    run: RunScale | None = None,
) -> tuple[str | None, list[str], pl.DataFrame, StripScale | None]:
    """``(metric, notes, visible tokens, scale)`` the strip of ``view`` is drawn with: the metric and notes
    of :func:`strip_metric`, the positions :func:`visible_tokens` shows (with ``touched``, the positions a
    ``correction`` ``(rule, C)`` clips or masks, when given, and :data:`data.strip_scale.STRIP_AT`, each
    one's place on the colour scale), and the colour scale over them (None when no metric is allowed;
    see :func:`data.strip_scale.strip_scale`: the registry's kind, clipped at the run's quantile of the
    metric, ``run``, when the response goes past it)."""
    metric, lacks = strip_metric(view, metric)
    all_tokens = view.tokens if correction is None else with_touched(view.tokens, *correction)
    shown = visible_tokens(all_tokens, show_pads)
    if not metric:
        return metric, lacks, shown, None
    values = shown.get_column(metric)
    scale = strip_scale(metric, values, strip_signed(metric, values), run)
    return metric, lacks, shown.with_columns(scale.at_expr(metric).alias(STRIP_AT)), scale


def strip_keys(view: TokenView) -> list[tuple[str, str]]:
    """``(kind, text)`` of what the strip's legend says beside its colour scale: ``"masked"`` where the
    response's loss mask drops positions (hatched on the strip, whatever the metric), ``"ids"`` where its
    tokens are token ids (shown as ⟨id⟩)."""
    keys = []
    if view.mask_field is not None:
        n = int(view.tokens.get_column("masked").sum())
        dropped = DROPPED_AT[view.mask_field]
        keys.append(
            (
                "masked",
                f"hatched: dropped by the loss ({view.mask_field} = {dropped:g}), {n:,} of "
                f"{view.tokens.height:,} positions",
            )
        )
    if view.token_ids:
        keys.append(("ids", "token ids, as the file gives them (no tokenizer.json was given to name them)"))
    return keys


def top_tables(view: TokenView) -> list[tuple[str, pl.DataFrame, str]]:
    """``(by, rows, title)`` of the top-token tables: the :data:`TOP_K` positions by |log-ratio|, then by KL
    (see :func:`top_tokens`); none for a response without what KL needs."""
    if not metric_available("kl", view.fields):
        return []
    labels = metric_labels()
    return [
        ("log_ratio", top_tokens(view.tokens, "log_ratio"), f"Top {TOP_K} tokens by |{labels['log_ratio']}|"),
        ("kl", top_tokens(view.tokens, "kl"), f"Top {TOP_K} tokens by {labels['kl']}"),
    ]


def response_texts(view: TokenView, show_pads: bool, pad_tokens: tuple[str, ...]) -> list[tuple[str, str]]:
    """``(name, text)`` of the prompt, the response and the reference response (when there is one), pad
    tokens removed unless ``show_pads``."""
    info = view.info
    cols = [("prompt", info.get("prompt")), ("response", info.get("response"))]
    if info.get("ref_response") is not None:
        cols.append(("reference response", info.get("ref_response")))
    return [(name, (t if show_pads else strip_pad_text(t, pad_tokens)) or "") for name, t in cols]


def key_figures(view: TokenView) -> list[tuple[str, object, str]]:
    """``(label, value, format)`` of the response's :data:`KEY_FIGURES` (format: the registry's ``fmt``)."""
    return [(label(k), view.info.get(k), METRICS[k].fmt) for k in KEY_FIGURES]


def infer_gap_figures(
    view: TokenView, correction: tuple[str, float] | None = None
) -> list[tuple[str, object, str]]:
    """``(label, value, format)`` of the response's inference–trainer mismatch (see
    :func:`data.metrics.token.infer_gap_summary`; format as in :func:`key_figures`): mean and max |gap|,
    where the max is (position and token text), the share of tokens with |gap| over
    :data:`data.config.INFER_GAP_TAIL`, how many tokens have a gap. Empty when the response has none to show."""
    s = infer_gap_summary(view.tokens)
    if s is None:
        return []
    at = view.tokens.filter(pl.col("pos") == s["max_pos"])
    text = at.item(0, "text") if at.height else NO_TOKEN
    return [
        ("mean |gap|", s["mean_abs"], "num"),
        ("max |gap|", s["max_abs"], "num"),
        ("at position", f"{s['max_pos']:,} ({text!r})", "text"),
        (f"|gap| > {INFER_GAP_TAIL_TEXT}", s["over"], "share"),
        ("tokens compared", s["n"], "int"),
        *([(*touched_text(view.tokens, *correction), "text")] if correction else []),
    ]


# ---- store access (cached) ---------------------------------------------------------------------------


def build_view(
    row: pl.DataFrame, scalars: pl.DataFrame | pl.LazyFrame, pad_tokens: tuple[str, ...]
) -> TokenView:
    """A :class:`TokenView` from the one-row frame of a response and the run's scalars (for navigation: a
    frame, or a lazy scan of the response's step)."""
    lists = {c for c, t in row.schema.items() if isinstance(t, pl.List)}
    info = {k: v for k, v in row.row(0, named=True).items() if k not in TOKEN_COLUMNS and k not in lists}
    fields = present_fields(row.row(0, named=True))
    of_file, overlong = _sort_file_fields(row)
    tokens = token_frame(row, pad_tokens, of_file)
    nav = neighbours(scalars, info.get("sample_id"), info.get("step"))
    return TokenView(
        info=info,
        tokens=tokens,
        fields=fields,
        nav=nav,
        file_fields=of_file,
        overlong=overlong,
        mask_field=dropped_field(of_file),
        token_ids=tokens.height > 0 and tokens_are_ids(tokens.get_column("token")),
    )


@shared(32)
def _cached_view(key: StoreKey, sample: str, pad_tokens: tuple[str, ...]) -> TokenView | None:
    store = key.store
    loc = store.lookup(sample)
    if loc is None:
        return None
    part, r = loc
    row = store.read_rows(part, [r])
    if row.height == 0:
        return None
    step = row.item(0, "step") if "step" in row.columns else None
    return build_view(row, store.scan(["sample_id", "source", "line", "step"], step=step), pad_tokens)


def token_view(store, sample: str, pad_tokens: tuple[str, ...]) -> TokenView | None:
    """The :class:`TokenView` of ``sample`` (one row-group read), or None for an unknown sample id.

    Cached per ``(store folder, store.version, sample, pad_tokens)``.
    """
    return _cached_view(StoreKey(store), sample, tuple(pad_tokens))


def first_sample(store) -> str | None:
    """The first response of the run by (step, source, line)."""
    steps = steps_of(store)
    if not steps or "sample_id" not in store.schema():
        return None
    return default_sample(store, steps[0], by_kl=False)


def default_sample(store, step: int, by_kl: bool = True) -> str | None:
    """The response shown when the URL names none, of ``step``: the one of the largest KL sum (k3, finite;
    ties by file and line), the most informative to look at token by token; the step's first response
    by file and line when none of its responses has a KL (or ``by_kl`` is False). None for an empty step."""
    names = store.schema()
    if "sample_id" not in names:
        return None
    kl = by_kl and "kl_sum" in names
    lf = store.scan(["sample_id", "source", "line", *(["kl_sum"] if kl else [])], step=step)
    if kl:
        top = (
            lf.filter(pl.col("kl_sum").is_finite())
            .sort(["kl_sum", "source", "line"], descending=[True, False, False], maintain_order=True)
            .head(1)
            .collect()
        )
        if top.height:
            return top.item(0, "sample_id")
    df = lf.sort("source", "line", maintain_order=True).head(1).collect()
    return df.item(0, "sample_id") if df.height else None


def view_end(store, view: TokenView, pad_tokens: tuple[str, ...], end_tokens: tuple[str, ...]) -> str | None:
    """How the response of ``view`` ended: ``"ended"``, ``"truncated"`` (see :func:`data.signals.row_ends`,
    the definition of the responses page's filters) or None where that cannot be told."""
    info = view.info
    if info.get("part") is None or info.get("row") is None:
        return None
    keys = pl.DataFrame({"part": [int(info["part"])], "row": [int(info["row"])]})
    ended = row_ends(store, keys, pad_tokens, end_tokens).item(0, ENDS)
    return None if ended is None else END_LABELS[ended]


def default_note(view: TokenView) -> str:
    """What the page says of a response it chose itself (:func:`default_sample`): which and why."""
    info = view.info
    kl = info.get("kl_sum")
    if isinstance(kl, int | float) and kl == kl and abs(kl) != float("inf"):
        return (
            f"No response chosen: showing the response of step {info.get('step')} with the largest "
            f"{label('kl_sum')}."
        )
    return f"No response chosen: showing the first response of step {info.get('step')} (it has no KL)."


__all__ = [
    "HOVER_METRICS",
    "MARKERS",
    "METRIC_FIELDS",
    "MIN_SCALE",
    "NO_TOKEN",
    "STRIP_METRICS",
    "TOP_K",
    "Neighbours",
    "TokenView",
    "build_view",
    "decode_expr",
    "decode_token",
    "file_field_of",
    "file_fields",
    "file_label",
    "default_note",
    "default_sample",
    "first_sample",
    "view_end",
    "hover_metrics",
    "infer_gap_figures",
    "is_file_metric",
    "metric_available",
    "metric_label",
    "metric_needs",
    "metric_signed",
    "neighbours",
    "overlong_file_fields",
    "pad_shown_expr",
    "positions_near",
    "present_fields",
    "scale_range",
    "strip",
    "strip_keys",
    "strip_signed",
    "strip_pad_text",
    "token_frame",
    "token_view",
    "top_tables",
    "top_tokens",
    "visible_tokens",
]
