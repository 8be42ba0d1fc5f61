"""Per-response metrics computed at ingest (see :mod:`data.metrics`), straight from the list columns of a
chunk, and the texts without pads that previews and prompt keys are made of."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import polars as pl
import pyarrow as pa

from data.metrics.critic import RETURN_FIELD
from data.metrics.registry import COLUMNS, INFER_GAP_TAIL, token_aggregates
from data.metrics.token import inference_field, loss_mask_field


def strip_pads(expr: pl.Expr, pad_tokens: tuple[str, ...]) -> pl.Expr:
    """Text with every pad token removed (literal match)."""
    for tok in pad_tokens:
        expr = expr.str.replace_all(tok, "", literal=True)
    return expr


def strip_pad_text(text: str | None, pad_tokens: tuple[str, ...]) -> str | None:
    """:func:`strip_pads` of one Python text (None stays None), for a text shown on its own."""
    if text is None or not pad_tokens:
        return text
    return pl.select(strip_pads(pl.lit(text, dtype=pl.String), tuple(pad_tokens))).item()


def prompt_key_text(pad_tokens: tuple[str, ...]) -> pl.Expr:
    """The text that identifies a prompt for grouping: pads removed, surrounding whitespace stripped."""
    return strip_pads(pl.col("prompt"), pad_tokens).str.strip_chars()


def source_line() -> pl.Expr:
    """``source_line``: where a response is in the run's files, ``<file>:<line>`` (``rank1.jsonl:1526``),
    from the ``source`` and ``line`` columns: what people read and quote, while URLs carry the stable
    ``sample_id``."""
    return pl.concat_str([pl.col("source"), pl.lit(":"), pl.col("line").cast(pl.String)]).alias("source_line")


def source_line_text(source: str | None, line: int | None) -> str:
    """:func:`source_line` of one response."""
    return f"{source}:{line}"


# The aggregates of the token arrays (see data.metrics.registry), whole numbers for counts.
AGGREGATE_COLUMNS = {c: pl.Int64 if COLUMNS[c].fmt == "int" else pl.Float64 for c in token_aggregates()}


class _Flat(NamedTuple):
    """A list column as one flat array: each row's length (0 for a null list) and where its elements start."""

    lens: np.ndarray  # int64, one per row
    starts: np.ndarray  # int64, one per row
    values: np.ndarray  # the list's float type (null -> NaN; no copy without nulls) or, for token
    # strings, whether the token is not a pad; arithmetic on them is done in float64
    present: np.ndarray | None  # bool: the element is not null (None: no element is null)

    @property
    def segments(self) -> _Segments:
        return _Segments(self.lens, self.starts)

    def where_present(self, idx: np.ndarray | slice = slice(None)) -> np.ndarray | None:
        return None if self.present is None else self.present[idx]


def _starts(lens: np.ndarray) -> np.ndarray:
    starts = np.zeros(len(lens), np.int64)
    np.cumsum(lens[:-1], out=starts[1:])
    return starts


def _flat(df: pl.DataFrame, c: str, pad_tokens: tuple[str, ...] = ()) -> _Flat:
    if c not in df.columns:  # an absent field: every array null
        zeros = np.zeros(df.height, np.int64)
        return _Flat(zeros, zeros, np.zeros(0, bool if c == "response_tokens" else np.float64), None)
    s = df.get_column(c)
    lens = s.list.len().fill_null(0).cast(pl.Int64).to_numpy()
    flat = s.explode(empty_as_null=False, keep_nulls=False)
    present = flat.is_not_null().to_numpy() if flat.null_count() else None
    if c == "response_tokens":
        values = (~flat.is_in(list(pad_tokens))).fill_null(False).to_numpy()
    else:
        values = flat.to_numpy()
    return _Flat(lens, _starts(lens), values, present)


def _both(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    return b if a is None else a if b is None else a & b


class _Segments(NamedTuple):
    """Consecutive runs of a flat array, one per row (possibly empty), summed with :meth:`sum`."""

    lens: np.ndarray
    starts: np.ndarray

    def sum(self, values: np.ndarray, keep: np.ndarray | None = None) -> np.ndarray:
        """Per row: the sum of ``values`` where ``keep`` (everywhere when None); 0 for a row with none.
        Booleans are counted."""
        if keep is not None and not keep.all():
            values = np.where(keep, values, False if values.dtype == bool else 0.0)
        out = np.zeros(len(self.lens), np.int64 if values.dtype == bool else np.float64)
        full = self.lens > 0
        if full.any():  # each non-empty run ends where the next one starts
            out[full] = np.add.reduceat(values, self.starts[full], dtype=out.dtype)
        return out


def _pair(a: _Flat, b: _Flat) -> tuple[_Segments, np.ndarray | slice, np.ndarray | slice]:
    """The positions both arrays of a row have (aligned from the first, each pair cut to its shorter
    array): their segments, and the index of each into ``a`` and into ``b``."""
    if np.array_equal(a.lens, b.lens):  # the common case: the same layout
        return a.segments, slice(None), slice(None)
    n = np.minimum(a.lens, b.lens)
    first = _starts(n)
    rows = np.repeat(np.arange(len(n)), n)
    pos = np.arange(len(rows)) - first[rows]
    return _Segments(n, first), a.starts[rows] + pos, b.starts[rows] + pos


def _suffix_sums(f: _Flat) -> np.ndarray:
    """Per element: the sum of it and the elements after it in its row, nulls counted as 0 (a return with
    gamma = 1), summed from the end of each row as the definition does. Each row is summed on its own, so a
    response's returns do not depend on the rows read with it: a run read in other chunks (a live run read
    step by step, or by several processes: ``ingest --ray``) gets the same bits. A sum over the whole chunk
    (its running total minus the part before each element) differed in the last bits with the chunk.

    One step per position from the rows' ends: the rows at least ``k`` long, longest first, add the sum
    after their ``k``-th last element to it (as many steps as the longest row; ~1 ms a chunk of 2,000
    responses of 135 tokens, 0.1 s for one of 32,000 tokens)."""
    out = np.array(f.values if f.present is None else np.where(f.present, f.values, 0.0), dtype=np.float64)
    if not len(out):
        return out
    order = np.argsort(-f.lens, kind="stable")
    lens = f.lens[order]
    ends = (f.starts + f.lens)[order]
    longest = int(lens[0])
    # rows[k]: how many rows are at least k long (they come first in ``order``)
    rows = np.searchsorted(-lens, -np.arange(longest + 1), side="right")
    for k in range(2, longest + 1):
        at = ends[: rows[k]] - k
        out[at] += out[at + 1]
    return out


def file_returns(df: pl.DataFrame) -> bool:
    """Whether a chunk has the trainer's own returns as a list of numbers (:data:`RETURN_FIELD`)."""
    dtype = df.schema.get(RETURN_FIELD)
    return isinstance(dtype, pl.List) and dtype.inner.is_numeric()


def _returns(df: pl.DataFrame, tr: _Flat) -> tuple[_Flat, np.ndarray]:
    """Each row's returns as one flat array, and per row whether they are the file's own: the trainer's
    ``returns`` where the row has a value there (a non-null element), else the suffix sums of its token
    rewards (γ = 1; a position without a token reward has no return)."""
    gamma1 = _Flat(tr.lens, tr.starts, _suffix_sums(tr), tr.present)
    if not file_returns(df):
        return gamma1, np.zeros(df.height, bool)
    rf = _flat(df, RETURN_FIELD)
    given = rf.segments.sum(np.ones(len(rf.values), bool), rf.present) > 0
    lens = np.where(given, rf.lens, tr.lens)
    starts = _starts(lens)
    rows = np.repeat(np.arange(len(lens)), lens)
    pos = np.arange(len(rows)) - starts[rows]
    mine = given[rows]
    # One element more at each array's end: where a row takes the other array (its index lands there).
    fv = np.append(rf.values.astype(np.float64), 0.0)
    gv = np.append(gamma1.values, 0.0)
    values = np.where(
        mine,
        fv[np.where(mine, rf.starts[rows] + pos, len(fv) - 1)],
        gv[np.where(mine, len(gv) - 1, tr.starts[rows] + pos)],
    )
    present = None
    if rf.present is not None or tr.present is not None:
        fp = np.append(np.ones(len(rf.values), bool) if rf.present is None else rf.present, True)
        tp = np.append(np.ones(len(tr.values), bool) if tr.present is None else tr.present, True)
        present = np.where(
            mine,
            fp[np.where(mine, rf.starts[rows] + pos, len(fp) - 1)],
            tp[np.where(mine, len(tp) - 1, tr.starts[rows] + pos)],
        )
    return _Flat(lens, starts, values, present), given


def _nulls_where(values: np.ndarray, mask: np.ndarray) -> pa.Array:
    return pa.array(values, mask=mask)


def _reduce(seg: _Segments, values: np.ndarray, ufunc: np.ufunc, fill) -> np.ndarray:
    """Per row: ``ufunc.reduce`` of its run of ``values`` (``fill`` for an empty row)."""
    out = np.full(len(seg.lens), fill, values.dtype)
    full = seg.lens > 0
    if full.any():
        out[full] = ufunc.reduceat(values, seg.starts[full])
    return out


def _own(df: pl.DataFrame, name: str | None) -> str | None:
    return name if name is not None and isinstance(df.schema[name], pl.List) else None


class GapPositions(NamedTuple):
    """The inference–trainer gap of a frame's responses as flat arrays over the positions both log-probs
    cover (aligned from the first): ``seg`` (each row's run of them), ``pos`` (the position in its response,
    from 0), ``d`` (Δ = trainer − inference log-prob) and ``ok`` (Δ finite and the loss mask keeping it)."""

    seg: _Segments
    pos: np.ndarray
    d: np.ndarray
    ok: np.ndarray


def gap_positions(df: pl.DataFrame) -> GapPositions:
    """:class:`GapPositions` of ``df``'s rows from its ``logprobs``, the first of the inference engine's
    log-prob fields it has (:func:`data.metrics.token.inference_field`) and its loss mask
    (:func:`~data.metrics.token.loss_mask_field`: where a response has one, a position is kept when its mask
    is present and not 0), as :func:`data.metrics.token.token_metrics` defines ``gap_valid``."""
    lp = _flat(df, "logprobs")
    inf_name = _own(df, inference_field(df.columns))
    inf = _flat(df, inf_name) if inf_name else _flat(df, "")
    seg, ia, ib = _pair(lp, inf)
    with np.errstate(all="ignore"):
        d = np.subtract(lp.values[ia], inf.values[ib], dtype=np.float64)
    ok = np.isfinite(d)
    rows = np.repeat(np.arange(df.height), seg.lens)
    pos = np.arange(len(rows)) - seg.starts[rows]
    mask_name = _own(df, loss_mask_field(df.columns))
    if mask_name is not None:
        m = _flat(df, mask_name)
        has = (m.segments.sum(np.ones(len(m.values), bool), m.present) > 0)[rows]
        inside = pos < m.lens[rows]
        at = np.where(inside, m.starts[rows] + pos, 0)
        kept = inside & (m.values[at] != 0) if len(m.values) else np.zeros(len(pos), bool)
        if m.present is not None and len(m.values):
            kept &= m.present[at]
        ok &= ~has | kept
    return GapPositions(seg, pos, d, ok)


def _gap_aggregates(df: pl.DataFrame) -> dict[str, pa.Array]:
    """The ``infer_gap_*`` aggregates of :func:`data.metrics.token.response_token_aggregates` on the list
    columns (see :func:`gap_positions`)."""
    seg, pos, d, ok = gap_positions(df)
    absd = np.abs(d)
    tail = ok & (absd > INFER_GAP_TAIL)
    n = seg.sum(ok)
    n_tail = seg.sum(tail)
    none, no_tail = n == 0, n_tail == 0
    first = _reduce(seg, np.where(tail, pos, np.iinfo(np.int64).max), np.minimum, 0)
    return {
        "infer_gap_n": _nulls_where(n, none),
        "infer_gap_tail_n": _nulls_where(n_tail, none),
        "infer_gap_abs_mean": _nulls_where(seg.sum(absd, ok) / np.maximum(n, 1), none),
        "infer_gap_abs_max": _nulls_where(_reduce(seg, np.where(ok, absd, -np.inf), np.maximum, 0.0), none),
        "infer_gap_tail_share": _nulls_where(n_tail / np.maximum(n, 1), none),
        "infer_gap_first_tail": _nulls_where(first, no_tail),
        "infer_gap_mean": _nulls_where(seg.sum(d, ok) / np.maximum(n, 1), none),
        "infer_gap_max": _nulls_where(_reduce(seg, np.where(ok, d, -np.inf), np.maximum, 0.0), none),
    }


def response_list_aggregates(df: pl.DataFrame, pad_tokens: tuple[str, ...]) -> pl.DataFrame:
    """:func:`response_token_aggregates` computed on the list columns directly, without one row per token.

    Same definitions and values (a test compares the two on random arrays); ingest uses this one because
    exploding every token and grouping them again costs about four times as much. Each list column is taken
    as one flat array, positions are matched as in :func:`explode_tokens` (aligned from the first; a pair
    of arrays is cut to its shorter one), and each response's sums are sums over its run of the flat
    array. Returns the columns of ``AGGREGATE_COLUMNS`` for the rows of ``df``, in order; null for a
    response without token arrays.
    """
    lp, ref, val, tr = (_flat(df, c) for c in ("logprobs", "ref_logprobs", "values", "token_rewards"))
    tok = _flat(df, "response_tokens", pad_tokens)
    with np.errstate(all="ignore"):
        # Log-ratio and k3 (the formula of _k3, on arrays) where both log-probs are present and finite (k3
        # is not finite where the log-ratio is not). In place: each fresh array of this size costs its page
        # faults.
        seg, ia, ib = _pair(lp, ref)
        lr = np.subtract(lp.values[ia], ref.values[ib], dtype=np.float64)
        kl = np.negative(lr)
        np.exp(kl, out=kl)
        kl -= 1.0
        kl += lr
        valid = _both(_both(lp.where_present(ia), ref.where_present(ib)), np.isfinite(kl))
        n_kl = seg.sum(valid)
        lr_sum, kl_sum = seg.sum(lr, valid), seg.sum(kl, valid)
        # Value error against the return (the file's returns, else the suffix sum of the token rewards)
        # where both are present, and the sums a step pools its critic health from.
        ret, given = _returns(df, tr)
        seg_v, iv, it = _pair(val, ret)
        r = np.asarray(ret.values[it], dtype=np.float64)
        ve = np.subtract(val.values[iv], r, dtype=np.float64)
        ve_ok = _both(_both(val.where_present(iv), ret.where_present(it)), np.isfinite(ve))
        n_ve = seg_v.sum(ve_ok)
        critic = {
            "critic_n": n_ve,
            "critic_file_n": np.where(given, n_ve, 0),
            "return_sum": seg_v.sum(r, ve_ok),
            "return_sq_sum": seg_v.sum(r * r, ve_ok),
            "value_error_sum": seg_v.sum(ve, ve_ok),
            "value_error_sq_sum": seg_v.sum(ve * ve, ve_ok),
        }
        ve_sum = critic["value_error_sum"]
        ve_abs = critic["value_error_abs_sum"] = seg_v.sum(np.abs(ve, out=ve), ve_ok)
        n_tr = tr.segments.sum(np.ones(len(tr.values), bool), tr.present)
        tr_sum = tr.segments.sum(tr.values, tr.present)
        # Length: tokens present and not pads; for a response without token strings, its log-probs.
        n_tok = tok.segments.sum(np.ones(len(tok.values), bool), tok.present)
        n_kept = tok.segments.sum(tok.values, tok.present)
        n_lp = lp.segments.sum(np.ones(len(lp.values), bool), lp.present)
        length = np.where(n_tok > 0, n_kept, n_lp)
        lr_mean, kl_mean = lr_sum / n_kl, kl_sum / n_kl
        ve_mean, ve_abs_mean = ve_sum / n_ve, ve_abs / n_ve
    none = np.maximum.reduce([f.lens for f in (lp, ref, val, tr, tok)]) == 0
    return pl.from_arrow(
        pa.table(
            {
                "response_length": _nulls_where(length, none),
                "n_kl_tokens": _nulls_where(n_kl, none),
                "log_ratio_sum": _nulls_where(lr_sum, none),
                "kl_sum": _nulls_where(kl_sum, none),
                "log_ratio_mean": _nulls_where(lr_mean, n_kl == 0),
                "kl_mean": _nulls_where(kl_mean, n_kl == 0),
                "value_error_mean": _nulls_where(ve_mean, n_ve == 0),
                "value_error_abs_mean": _nulls_where(ve_abs_mean, n_ve == 0),
                "token_reward_sum": _nulls_where(tr_sum, n_tr == 0),
                **{k: _nulls_where(v, n_ve == 0) for k, v in critic.items()},
                **_gap_aggregates(df),
            }
        )
    ).cast(AGGREGATE_COLUMNS)


CLEAN_RESPONSE = "__response_clean"
# The model's own text of a response given as turns, where ingest set it (data.schema.chat.RESPONSE_OWN):
# its length, repetition and preview are counted on it rather than on the tool results between its turns.
RESPONSE_OWN = "__response_own"
# The response's length in tokens where a dialect knows it without the tokens (data.schema.chat.RESPONSE_LENGTH).
RESPONSE_LENGTH = "__response_length"


def derive_response_metrics(
    df: pl.DataFrame, pad_tokens: tuple[str, ...], keep_clean: bool = False
) -> pl.DataFrame:
    """Add the per-response metric columns to a conformed chunk (with ``keep_clean``, also the response
    text without pads as ``CLEAN_RESPONSE``, for the caller to use and drop): of the model's own text
    (``RESPONSE_OWN``) where a multi-turn response has one."""
    agg = response_list_aggregates(df, pad_tokens)
    if (
        RESPONSE_LENGTH in df.columns
    ):  # a length the file gives (AReaL: seqlen - prompt_len), where no tokens do
        given = df.get_column(RESPONSE_LENGTH).cast(agg.schema["response_length"])
        agg = agg.with_columns(pl.coalesce(pl.col("response_length"), given).alias("response_length"))
        df = df.drop(RESPONSE_LENGTH)
    own = pl.coalesce(RESPONSE_OWN, "response") if RESPONSE_OWN in df.columns else pl.col("response")
    out = pl.concat([df, agg], how="horizontal").with_columns(
        strip_pads(own, pad_tokens).alias(CLEAN_RESPONSE)
    )
    out = out.with_columns(
        (pl.col("reward") - pl.col("ref_reward")).alias("reward_gain"),
        pl.col(CLEAN_RESPONSE).str.len_chars().cast(pl.Int64).alias("response_chars"),
    )
    return out if keep_clean else out.drop(CLEAN_RESPONSE)
