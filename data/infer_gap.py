"""The inference–trainer gap of a run (Δ_t = trainer − inference log-prob, ratio_t = exp(Δ_t); see
data/metrics/token.py): its per-step curves from the steps summary, and what a correction would do at a
threshold C, per step and on one response.

A correction's share of responses, and the sequence rule's share of tokens, are exact at any C from each
response's stored mean, max and largest |Δ| (every step). The truncated and masked rules' share of tokens
needs every Δ_t: it is counted from the token arrays on demand, exactly, for the steps nearest the one asked
whose positions fit :data:`data.config.GAP_PREVIEW_TOKENS` (a histogram of Δ written at ingest would be
exact only at its bin edges)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import polars as pl

from data.cache import StoreKey, shared
from data.config import GAP_PREVIEW_TOKENS
from data.metrics.response import gap_positions
from data.metrics.token import inference_field, loss_mask_field
from data.store import RunStore


@dataclass(frozen=True)
class Rule:
    """A correction of the gap: its URL key, name and formula as the page shows it beside the curves."""

    key: str
    name: str
    formula: str
    touches: str  # what it does to the tokens it touches


RULES = {
    r.key: r
    for r in (
        Rule("tis", "truncated IS", "w_t = min(ratio_t, C), ratio_t = exp(Δ_t)", "clipped: ratio_t > C"),
        Rule("mis", "masked IS", "w_t = ratio_t if 1/C ≤ ratio_t ≤ C, else 0", "masked: ratio_t ∉ [1/C, C]"),
        Rule(
            "seq",
            "sequence masking",
            "ρ = exp(mean_t Δ_t), the geometric mean of ratio_t; the response is dropped if ρ ∉ [1/C, C]",
            "masked: every token of a response with ρ ∉ [1/C, C]",
        ),
    )
}
DEFAULT_RULE, DEFAULT_C = "mis", 2.0
MAX_C = 1e6


def check_c(c: float) -> str | None:
    """Why ``c`` cannot be a correction's threshold (it must be a number with 1 < C ≤ 1e6), else None."""
    if not isinstance(c, int | float) or not math.isfinite(c) or not 1.0 < c <= MAX_C:
        return f"C must be a number above 1 and at most {MAX_C:g}"
    return None


# ---- curves of the gap (the steps summary) --------------------------------------------------------------

_STATS = ("mean", "std", "min", "max", "p05", "p25", "p50", "p75", "p95")  # data.metrics.step's distributions
CURVE_COLUMNS = (
    *(
        f"{c}_{s}"
        for c in ("infer_gap_abs_mean", "infer_gap_abs_max", "infer_gap_tail_share")
        for s in _STATS
    ),
    "infer_gap_tail_pooled",
    "infer_gap_n_total",
    "infer_gap_tail_n_total",
)


def gap_steps(store: RunStore) -> pl.DataFrame:
    """``step`` and :data:`CURVE_COLUMNS` of the steps summary for the steps with a gap, sorted by step:
    empty for a run without the inference engine's log-probs."""
    steps = store.steps_columns(["step", *CURVE_COLUMNS])
    if "infer_gap_n_total" not in steps.columns:
        return pl.DataFrame()
    return steps.filter(pl.col("infer_gap_n_total") > 0).sort("step")


# ---- what a correction would do ---------------------------------------------------------------------------


def _response_touched(rule: str, log_c: float) -> pl.Expr:
    """Whether a correction touches a response, from its stored infer_gap_max / _abs_max / _mean."""
    if rule == "tis":
        return pl.col("infer_gap_max") > log_c
    if rule == "mis":
        return pl.col("infer_gap_abs_max") > log_c
    return pl.col("infer_gap_mean").abs() > log_c


def response_shares(store: RunStore, rule: str, c: float) -> pl.DataFrame:
    """Per step (responses with a gap): ``responses``, ``responses_touched``, ``tokens`` (positions the gap
    counts) and, for the sequence rule, ``tokens_touched`` (every position of a dropped response): exact."""
    cols = ["step", "infer_gap_n", "infer_gap_max", "infer_gap_abs_max", "infer_gap_mean"]
    if not store.has_column("infer_gap_n"):
        return pl.DataFrame()
    touched = _response_touched(rule, math.log(c)).fill_null(False)
    n = pl.col("infer_gap_n")
    return (
        store.scan(cols)
        .filter(n.is_not_null() & (n > 0))
        .group_by("step")
        .agg(
            pl.len().alias("responses"),
            touched.sum().alias("responses_touched"),
            n.sum().alias("tokens"),
            n.filter(touched).sum().alias("seq_tokens_touched"),
        )
        .sort("step")
        .collect()
    )


def _gap_frames(store: RunStore, steps: list[int]) -> Iterator[pl.DataFrame]:
    """``step`` and the columns :func:`data.metrics.response.gap_positions` reads of the shown responses of
    ``steps``, one frame per file of ``parts/`` (only those steps' row groups are read)."""
    extras = store.token_extras()
    names = ["logprobs", *(x for x in (inference_field(extras), loss_mask_field(extras)) if x)]
    lo, hi = min(steps), max(steps)
    by_file: dict = {}
    rows = store.manifest.parts
    for p in [p for s in store.index().select(lo, hi) for p in s.parts]:
        if rows[str(p)]["rows"]:
            for path in store.part_files_of(p, (lo, hi)):
                by_file.setdefault(path, []).append(p)
    for path, parts in by_file.items():
        lf = pl.scan_parquet(path, missing_columns="insert", extra_columns="ignore")
        have = lf.collect_schema().names()
        if "step" not in have:
            continue
        cond = pl.col("step").is_in(steps)
        if store.shares_files():
            cond &= pl.col("part").is_in(parts)
        if store.visible_below is not None:
            cond &= pl.col("step") < store.visible_below
        yield lf.filter(cond).select("step", *(x for x in names if x in have)).collect()


def token_counts(store: RunStore, steps: list[int], rule: str, c: float) -> pl.DataFrame:
    """Per step of ``steps``: ``tokens`` (positions the gap counts) and ``tokens_touched`` (clipped by
    truncated IS: Δ_t > ln C; masked by masked IS: |Δ_t| > ln C), counted from the token arrays."""
    log_c = math.log(c)
    got: dict[int, list[int]] = {}
    for df in _gap_frames(store, steps) if steps else ():
        g = gap_positions(df)
        hit = g.ok & ((g.d > log_c) if rule == "tis" else (np.abs(g.d) > log_c))
        step_of = df.get_column("step").to_numpy()
        for s, n, t in zip(step_of, g.seg.sum(g.ok), g.seg.sum(hit), strict=True):
            acc = got.setdefault(int(s), [0, 0])
            acc[0] += int(n)
            acc[1] += int(t)
    return pl.DataFrame(
        {
            "step": list(got),
            "tokens": [v[0] for v in got.values()],
            "tokens_touched": [v[1] for v in got.values()],
        },
        schema={"step": pl.Int64, "tokens": pl.Int64, "tokens_touched": pl.Int64},
    ).sort("step")


def nearest_steps(tokens: pl.DataFrame, around: int | None, budget: int) -> list[int]:
    """The steps of ``tokens`` (``step``, ``tokens``) nearest ``around`` (the last step when None), in that
    order, whose tokens together fit ``budget`` (always the first)."""
    if tokens.height == 0:
        return []
    steps = tokens.get_column("step").to_list()
    at = steps[-1] if around is None else around
    order = sorted(
        zip(steps, tokens.get_column("tokens").to_list(), strict=True), key=lambda x: (abs(x[0] - at), x[0])
    )
    out, used = [], 0
    for s, n in order:
        if out and used + n > budget:
            break
        out.append(s)
        used += n
    return sorted(out)


@dataclass(frozen=True)
class Preview:
    """A correction's shares per step (``step``, ``responses``, ``responses_touched``, ``response_share``,
    ``tokens``, ``tokens_touched``, ``token_share``: null where not counted) and the steps whose token
    shares were counted from the token arrays (``counted``: every step for the sequence rule)."""

    rule: Rule
    c: float
    frame: pl.DataFrame
    counted: tuple[int, ...]
    all_steps: bool

    def note(self) -> str:
        """What the curves hold, and how each share was computed, for the panel."""
        if self.frame.height == 0:
            return ""
        head = "Responses' shares: exact at every step, from each response's stored Δ mean, max and max |Δ|."
        if self.rule.key == "seq":
            return head + " Tokens' shares: exact at every step (the dropped responses' positions)."
        if self.all_steps:
            return head + " Tokens' shares: counted from the token arrays at every step (exact)."
        lo, hi, k = self.counted[0], self.counted[-1], len(self.counted)
        where = (
            f"the {k:,} steps nearest the selected one ({lo:,}–{hi:,})"
            if k > 1
            else f"the selected step ({lo:,})"
        )
        return (
            head + f" Tokens' shares: counted from the token arrays (exact) at {where}, within "
            f"{GAP_PREVIEW_TOKENS:,} positions; not drawn at the other steps."
        )


def correction_preview(store: RunStore, rule: str, c: float, around: int | None) -> Preview:
    """:class:`Preview` of ``rule`` at ``c`` (see :data:`RULES`; ``around``: the selected step, for the
    steps whose token shares are counted). Cached on the store's version."""
    frame, counted = _preview(StoreKey(store), rule, float(c), around, GAP_PREVIEW_TOKENS)
    every = frame.height > 0 and len(counted) == frame.height
    return Preview(RULES[rule], float(c), frame, counted, every)


@shared(32)
def _preview(key: StoreKey, rule: str, c: float, around: int | None, budget: int):
    store = key.store
    resp = response_shares(store, rule, c)
    if resp.height == 0:
        return pl.DataFrame(), ()
    if rule == "seq":
        counted = tuple(resp.get_column("step").to_list())
        frame = resp.with_columns(pl.col("seq_tokens_touched").alias("tokens_touched"))
    else:
        steps = nearest_steps(resp.select("step", "tokens"), around, budget)
        counted = tuple(steps)
        tok = token_counts(store, steps, rule, c).select("step", "tokens_touched")
        frame = resp.join(tok, on="step", how="left")
    frame = frame.drop("seq_tokens_touched").with_columns(
        (pl.col("responses_touched") / pl.col("responses")).alias("response_share"),
        (pl.col("tokens_touched") / pl.col("tokens")).alias("token_share"),
    )
    return frame.sort("step"), counted


def touched_positions(tokens: pl.DataFrame, rule: str, c: float) -> list[int]:
    """The positions of one response's token frame (``pos``, ``infer_gap``, ``gap_valid``: see
    :func:`data.metrics.token.token_metrics`) that ``rule`` at ``c`` touches, in order."""
    if "infer_gap" not in tokens.columns or "gap_valid" not in tokens.columns:
        return []
    log_c = math.log(c)
    g = tokens.filter(pl.col("gap_valid").fill_null(False)).select("pos", "infer_gap")
    if g.height == 0:
        return []
    d = pl.col("infer_gap")
    if rule == "seq":
        mean = g.get_column("infer_gap").mean()
        return sorted(g.get_column("pos").to_list()) if abs(mean) > log_c else []
    hit = d > log_c if rule == "tis" else d.abs() > log_c
    return sorted(g.filter(hit).get_column("pos").to_list())


def with_touched(tokens: pl.DataFrame, rule: str, c: float) -> pl.DataFrame:
    """``tokens`` (a response's token frame) with ``touched``: whether ``rule`` at ``c`` clips or masks the
    position (see :func:`touched_positions`)."""
    at = touched_positions(tokens, rule, c)
    return tokens.with_columns(pl.col("pos").is_in(at).alias("touched"))


def touched_text(tokens: pl.DataFrame, rule: str, c: float) -> tuple[str, str]:
    """``(label, text)`` of what ``rule`` at ``c`` does to one response: "masked IS at C = 2", "2 of 5 tokens
    masked (wavy underline)" (of the positions the gap counts)."""
    r = RULES[rule]
    n = tokens.filter(pl.col("gap_valid").fill_null(False)).height if "gap_valid" in tokens.columns else 0
    k = len(touched_positions(tokens, rule, c))
    verb = "clipped" if rule == "tis" else "masked"
    return f"{r.name} at C = {c:g}", f"{k:,} of {n:,} tokens {verb} (wavy underline)"


def largest_gap_sample(store: RunStore, step: int | None, column: str = "infer_gap_abs_max") -> str | None:
    """The sample id of ``step``'s response with the largest ``column`` (a tie: the first sample id), or None."""
    if step is None or not store.has_column(column):
        return None
    top = (
        store.scan(["sample_id", column], step=step)
        .filter(pl.col(column).is_not_null())
        .sort([column, "sample_id"], descending=[True, False])
        .head(1)
        .collect()
    )
    return top.item(0, "sample_id") if top.height else None
