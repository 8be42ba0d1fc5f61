"""Query builders over a run's store: filters, sorting, histogram bins, curves.

Each builder is a small pure function ``LazyFrame -> LazyFrame`` (or returns an expression); callers
collect once. Everything that is shown ordered is sorted explicitly (Polars does not keep order).
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass, fields

import numpy as np
import polars as pl

from data import bounded
from data.config import REGEX_SIZE_LIMIT
from data.derived.cells import MAX_DISCRETE_VALUES as MAX_DISCRETE_VALUES
from data.derived.cells import _nice, lattice_edges
from data.derived.topk import sort_rows as sort_rows
from data.metrics.registry import range_columns

# Ranges a user can filter on: URL prefix -> column (see data.metrics.registry). Every range is
# half-open: min <= x < max.
RANGE_COLUMNS = range_columns()
# Range metrics computed when read (see data.metrics.registry): their expression over the scalars.
COMPUTED = {"length": pl.coalesce("response_length", "response_chars")}


class QueryError(ValueError):
    """A user-supplied query that cannot run (e.g. an invalid regular expression); the text is shown as is."""


class SearchStopped(QueryError):
    """A text search that did not finish within its time: it was stopped, and nothing it found is used."""


STOPPED_HINT = "narrow it to one step, or make the pattern simpler"


@dataclass(frozen=True)
class ResponseFilter:
    """Which responses of a run to show. ``step=None`` means all steps.

    Numeric ranges are half-open ``min <= x < max`` (either bound optional), exactly the intervals of the
    reward page's histogram bars; ``q`` is a regular expression (Rust regex syntax, ``(?i)`` for
    case-insensitive) matched against prompt and response; ``loses_only`` keeps responses whose reward is
    below their reference reward; ``truncated`` (the ``(pad tokens, end tokens)`` of its definition) keeps
    the responses that do not end with an end token (see
    :func:`data.metrics.degeneration.ends_with_end_token`; applied where texts are read, as ``q`` is);
    ``ended`` (the same pair) those that do.
    ``tok`` keeps the responses holding a token whose string, as the file gives it (``Ġ.``), matches that
    regular expression and whose per-token ``tok_metric`` is within ``tok_min <= x <= tok_max`` (bounds
    inclusive, either optional; see :mod:`data.search.tokens`). ``samples`` keeps only the responses of
    those sample ids (an annotation's label, see :mod:`data.annotations`).
    """

    step: int | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    gain_min: float | None = None
    gain_max: float | None = None
    kl_min: float | None = None
    kl_max: float | None = None
    len_min: float | None = None
    len_max: float | None = None
    ref_min: float | None = None
    ref_max: float | None = None
    gap_min: float | None = None
    gap_max: float | None = None
    tail_min: float | None = None
    tail_max: float | None = None
    kl_sum_min: float | None = None
    kl_sum_max: float | None = None
    log_ratio_min: float | None = None
    log_ratio_max: float | None = None
    log_ratio_sum_min: float | None = None
    log_ratio_sum_max: float | None = None
    value_error_abs_min: float | None = None
    value_error_abs_max: float | None = None
    value_error_min: float | None = None
    value_error_max: float | None = None
    token_reward_min: float | None = None
    token_reward_max: float | None = None
    repetition_min: float | None = None
    repetition_max: float | None = None
    step_min: float | None = None
    step_max: float | None = None
    q: str | None = None
    loses_only: bool = False
    truncated: tuple[tuple[str, ...], tuple[str, ...]] | None = None
    ended: tuple[tuple[str, ...], tuple[str, ...]] | None = None
    tok: str | None = None
    tok_metric: str = "kl"
    tok_min: float | None = None
    tok_max: float | None = None
    samples: tuple[str, ...] | None = None

    def ranges(self):
        for prefix, col in RANGE_COLUMNS.items():
            yield col, getattr(self, f"{prefix}_min"), getattr(self, f"{prefix}_max")

    def scalar_expr(self) -> pl.Expr:
        """Predicate over the scalars table for everything except the text search."""
        cond = pl.lit(True)
        if self.step is not None:
            cond &= pl.col("step") == self.step
        for col, lo, hi in self.ranges():
            value = COMPUTED.get(col, pl.col(col))
            if lo is not None or hi is not None:
                # NaN and infinities are in no histogram bar, so no range holds them.
                cond &= value.is_finite()
            if lo is not None:
                cond &= value >= lo
            if hi is not None:
                cond &= value < hi
        if self.loses_only:
            cond &= pl.col("reward") < pl.col("ref_reward")
        if self.samples is not None:
            cond &= pl.col("sample_id").is_in(list(self.samples))
        return cond

    def step_span(self) -> tuple[int | None, int | None] | None:
        """The steps ``lo <= step <= hi`` the ``step_min`` / ``step_max`` range holds (None: no bound), for a
        scan to open only the files that can hold them; None without that range."""
        if self.step_min is None and self.step_max is None:
            return None
        lo = None if self.step_min is None else math.ceil(self.step_min)
        hi = None if self.step_max is None else math.ceil(self.step_max) - 1
        return lo, hi

    def is_default(self) -> bool:
        return all(getattr(self, f.name) == f.default for f in fields(self) if f.name != "step")


def check_regex(pattern: str) -> None:
    """Raise :class:`QueryError` with a readable message when ``pattern`` is not a valid regex."""
    try:
        pl.Series([""], dtype=pl.String).str.contains(pattern)
    except Exception as e:  # noqa: BLE001 - Polars raises ComputeError with the regex parser's message
        msg = str(e).strip().splitlines()
        # Polars appends the failing expression after the parser's "error: ..." line: show the latter.
        reason = [m.strip()[len("error:") :].strip() for m in msg if m.strip().startswith("error:")]
        detail = reason[0] if reason else (msg[-1] if msg else str(e))
        if "exceeds size limit" in str(e):
            limit = int(os.environ.get(REGEX_SIZE_LIMIT[0], REGEX_SIZE_LIMIT[1]))
            raise QueryError(
                f"regular expression {pattern!r} refused: compiled, it is larger than {limit // 1024} KiB "
                "(the limit that keeps a search's cost bounded); use fewer or smaller repetitions"
            ) from None
        raise QueryError(f"invalid regular expression {pattern!r}: {detail}") from None


@functools.lru_cache(maxsize=256)
def regex_error(pattern: str) -> str | None:
    """The readable error of an invalid regular expression, None when it is valid (kept per pattern: a
    grid block's rows ask for it once each)."""
    try:
        check_regex(pattern)
    except QueryError as e:
        return str(e)
    return None


def search(lf: pl.LazyFrame, pattern: str, seconds: float) -> pl.DataFrame:
    """Collect ``lf``, a query that matches the user's regular expression ``pattern`` against texts, with a
    bounded cost (in a helper process, see :mod:`data.bounded`); raises :class:`SearchStopped` after
    ``seconds`` and :class:`QueryError` for a pattern Polars refuses."""
    check_regex(pattern)
    try:
        return bounded.collect(lf, seconds)
    except bounded.Stopped:
        raise SearchStopped(
            f"the search for {pattern!r} was stopped after {seconds:g} s: {STOPPED_HINT}"
        ) from None
    except bounded.Failed as e:
        raise QueryError(f"the search for {pattern!r} failed: {str(e).strip().splitlines()[0]}") from None


# Around each match while a text is split into matched and unmatched pieces: Unicode noncharacters, which
# no text should hold (a text that does is shown without highlights rather than split wrongly).
_MATCH_OPEN, _MATCH_CLOSE = "\ufdd0", "\ufdd1"


def match_pieces(text: str | None, pattern: str | None) -> list[tuple[str, bool]]:
    """``text`` as consecutive ``(piece, matched)`` pairs: the matches of ``pattern`` marked, exactly those
    of the text search (Polars' Rust regex: leftmost-first, non-overlapping, as ``str.contains`` finds
    them; empty matches mark nothing). One unmatched piece without a valid pattern; ``[]`` for no text.
    The pieces are text for the page to show as text (e.g. ``html.Mark``), never markup."""
    return match_pieces_many([text], pattern)[0]


def match_pieces_many(texts: list[str | None], pattern: str | None) -> list[list[tuple[str, bool]]]:
    """:func:`match_pieces` of each of ``texts``, the pattern checked once and applied to all at once (a
    grid block's 100 rows' previews: one regex pass, not two Polars calls a text)."""
    if not pattern or regex_error(pattern) is not None:
        return [[(t, False)] if t else [] for t in texts]
    # A text holding the marks themselves is shown without highlights rather than split wrongly.
    plain = [bool(t) and (_MATCH_OPEN in t or _MATCH_CLOSE in t) for t in texts]
    marked = (
        pl.Series([None if p else t for t, p in zip(texts, plain, strict=True)], dtype=pl.String)
        .str.replace_all(pattern, f"{_MATCH_OPEN}${{0}}{_MATCH_CLOSE}")
        .to_list()
    )
    out = []
    for text, p, m in zip(texts, plain, marked, strict=True):
        if not text:
            out.append([])
        elif p:
            out.append([(text, False)])
        else:
            out.append(_split_marked(m))
    return out


def _split_marked(marked: str) -> list[tuple[str, bool]]:
    """A text whose matches are between the marks, as ``(piece, matched)`` pairs."""
    out: list[tuple[str, bool]] = []
    first, *rest = marked.split(_MATCH_OPEN)
    pieces = [(first, False)]
    for chunk in rest:
        hit, _, after = chunk.partition(_MATCH_CLOSE)
        pieces += [(hit, True), (after, False)]
    for piece, hit in pieces:
        if not piece:
            continue
        if out and out[-1][1] == hit:  # adjacent matches read as one highlight
            out[-1] = (out[-1][0] + piece, hit)
        else:
            out.append((piece, hit))
    return out


def text_match(parts: pl.LazyFrame, pattern: str, step: int | None, seconds: float) -> pl.DataFrame:
    """``sample_id`` of responses whose prompt or response matches ``pattern``, found within ``seconds``
    (see :func:`search`)."""
    lf = parts.select("sample_id", "step", "prompt", "response")
    if step is not None:
        lf = lf.filter(pl.col("step") == step)
    hit = pl.col("prompt").str.contains(pattern) | pl.col("response").str.contains(pattern)
    return search(lf.filter(hit).select("sample_id"), pattern, seconds)


# ---- histograms ----------------------------------------------------------------------------------------


def histogram_edges(lo: float | None, hi: float | None, target_bins: int = 24) -> list[float]:
    """Bin edges over ``[lo, hi]`` with a 'nice' width; the same edges for every step of a run.

    Bars are centred on multiples of the width (edges at odd multiples of half of it): rewards pile up on
    round numbers (0, 1, -1), and a value on an edge would be drawn half a bar beside itself. Edges are
    rounded decimals (``0.25``, not ``0.25000000000000006``) so a URL can carry them exactly. Bar k covers
    ``edges[k] <= x < edges[k+1]``; the last bar also takes ``x == edges[-1]``. With one distinct value
    there is one bar ``[v, v]``.
    """
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        return [float(lo), float(lo)]
    return lattice_edges(lo, hi, _nice((hi - lo) / target_bins))


# ... provided no two values are closer than this share of their range: each bar is drawn 0.8 of the
# closest gap wide, and a thinner one could not be seen or clicked. Such values get even bins.
MIN_DISCRETE_GAP = 1 / 48


@dataclass(frozen=True)
class Bins:
    """A run's histogram bars: bar k covers ``edges[k] <= x < edges[k+1]`` (the last one also takes
    ``x == edges[-1]``; the bounds of :func:`bar_interval`). ``discrete``: the run has few distinct values
    and bar k holds exactly one of them, ``edges[k]`` (the top edge is past the largest value)."""

    edges: tuple[float, ...] = ()
    discrete: bool = False


def distinct_values(lf: pl.LazyFrame, columns: tuple[str, ...], limit: int) -> list[float] | None:
    """The sorted distinct finite values of ``columns`` together, or None when there are more than
    ``limit`` (or none at all). Absent columns are skipped; -0.0 counts as 0.0."""
    names = lf.collect_schema().names()
    parts = [lf.select((pl.col(c).cast(pl.Float64) + 0.0).alias("v")) for c in columns if c in names]
    if not parts:
        return None
    values = pl.concat(parts).filter(pl.col("v").is_finite()).unique().head(limit + 1).collect()
    if values.height == 0 or values.height > limit:
        return None
    return sorted(values.get_column("v").to_list())


def more_distinct_than(lf: pl.LazyFrame, columns: tuple[str, ...], limit: int) -> bool:
    """Whether ``columns`` together hold more than ``limit`` distinct finite values (as counted by
    :func:`distinct_values`, which then gives None)."""
    names = lf.collect_schema().names()
    parts = [lf.select((pl.col(c).cast(pl.Float64) + 0.0).alias("v")) for c in columns if c in names]
    if not parts:
        return False
    values = pl.concat(parts).filter(pl.col("v").is_finite()).unique().head(limit + 1).collect()
    return values.height > limit


def discrete_edges(values: list[float]) -> list[float] | None:
    """Edges with one bar per value for sorted distinct ``values``: ``[v1, ..., vk, vk + gap]`` (gap: the
    closest two values), so bar k is ``[v_k, v_k+1)`` and holds ``v_k`` alone. One value gives ``[v, v]``.
    None when two values are closer than :data:`MIN_DISCRETE_GAP` of the range (bars too thin to see)."""
    if not values:
        return None
    if len(values) == 1:
        return [values[0], values[0]]
    gap = min(b - a for a, b in zip(values, values[1:], strict=False))
    if gap < (values[-1] - values[0]) * MIN_DISCRETE_GAP:
        return None
    return [*values, values[-1] + gap]


def bin_index(col: str, edges: list[float]) -> pl.Expr:
    """Index of the bar holding ``col`` for :func:`histogram_edges`: the number of inner edges <= x, by
    binary search (one comparison per edge is ~5x slower on a whole run); null for non-finite values."""
    c = pl.col(col)
    if len(edges) <= 2:
        return pl.when(c.is_finite()).then(pl.lit(0, dtype=pl.Int32))
    inner = pl.lit(pl.Series(edges[1:-1], dtype=pl.Float64))
    return pl.when(c.is_finite()).then(inner.search_sorted(c.cast(pl.Float64), side="right").cast(pl.Int32))


def bar_indices(values: np.ndarray, edges: list[float]) -> np.ndarray:
    """:func:`bin_index` of finite ``values`` in numpy: the same binary search over the inner edges."""
    return np.searchsorted(np.asarray(edges[1:-1], dtype=np.float64), values, side="right")


def bar_interval(edges: list[float], k: int) -> tuple[float, float | None]:
    """The filter bounds of bar ``k``: ``(min, max)``, with ``max=None`` for the last bar (x >= min)."""
    last = k == len(edges) - 2 or len(edges) == 2
    return edges[k], (None if last else edges[k + 1])


def histogram(lf: pl.LazyFrame, col: str, edges: list[float]) -> pl.LazyFrame:
    """Counts per bar: ``bin, lo, hi, count`` for every bar (zero counts included), sorted by ``bin``."""
    counts = (
        lf.select(bin_index(col, edges).alias("bin"))
        .drop_nulls()
        .group_by("bin")
        .agg(pl.len().alias("count"))
    )
    return every_bar(counts, edges)


def every_bar(counts: pl.LazyFrame, edges: list[float]) -> pl.LazyFrame:
    """``bin, lo, hi, count`` of every bar of ``edges`` from ``bin, count`` (zero where absent), sorted by
    ``bin``: :func:`histogram`'s frame, whatever counted the bars."""
    nbars = max(len(edges) - 1, 0)
    bars = pl.LazyFrame(
        {"bin": list(range(nbars)), "lo": edges[:-1], "hi": edges[1:]},
        schema={"bin": pl.Int32, "lo": pl.Float64, "hi": pl.Float64},
    )
    return (
        bars.join(counts, on="bin", how="left")
        .with_columns(pl.col("count").fill_null(0).cast(pl.Int64))
        .sort("bin")
    )


def step_histograms(lf: pl.LazyFrame, col: str, edges: list[float]) -> pl.LazyFrame:
    """Counts per (step, bar) and the share of the step in each bar, for a steps x bins heatmap."""
    return (
        lf.select("step", bin_index(col, edges).alias("bin"))
        .drop_nulls()
        .group_by("step", "bin")
        .agg(pl.len().alias("count"))
        .with_columns((pl.col("count") / pl.col("count").sum().over("step")).alias("share"))
        .sort("step", "bin")
    )
