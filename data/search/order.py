"""A filter's matches in an order: their summary (count and mean reward), the cached head of the order and
the whole order, the first block of a search over every step at once and its count in the background, and
where one response sits in an order."""

from __future__ import annotations

import math
import os
import sqlite3
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from data.cache import StoreKey, results, shared
from data.config import DEFAULT_SEARCH_SECONDS
from data.derived import text as text_index
from data.derived import topk
from data.queries import QueryError, ResponseFilter, check_regex, sort_rows
from data.search.engine import Job, engine
from data.search.texts import KEYS, fast_case
from data.signals import ended_rows, truncated_rows
from data.store import RunStore
from data.views.responses import ResponsesView


@dataclass(frozen=True)
class Order:
    """The summary of a filter's matches: how many, the responses in scope (the step's, or the run's for
    all steps) before the filter, and the mean of the matches' finite rewards (None without one)."""

    count: int
    scope: int
    mean_reward: float | None


# The first HEAD_ROWS matches of an order are kept per (store version, filter, sort): the grid's first blocks
# (100 rows each) never sort again. A block beyond needs the whole order (sorted once, then kept on disk).
HEAD_ROWS = 2000


def matching(
    store: RunStore,
    flt: ResponseFilter,
    columns: Iterable[str] = (),
    seconds: float = DEFAULT_SEARCH_SECONDS,
    steps: tuple[int, int] | None = None,
    hits: pl.DataFrame | None = None,
    files: Collection[str] | None = None,
) -> pl.LazyFrame:
    """Lazy ``columns`` (and ``part, row``) of the responses shown that match ``flt``, in file order: only
    the files of the filter's step (or of ``lo <= step <= hi``, ``steps``) are read. A text search runs
    first (raises SearchStopped / QueryError), unless its ``hits`` (:func:`text_hits`) are given. ``files``:
    only those of ``scalars/`` (see :meth:`data.store.reader.RunStore.scan`)."""
    cond = flt.scalar_expr()
    # The columns the filter reads (a computed range, such as the length, reads those it is made of).
    used = cond.meta.root_names()
    cols = list(dict.fromkeys([*columns, *used, "part", "row"]))
    names = store.schema()
    lf = store.scan(cols, step=flt.step, steps=steps, files=files)
    absent = [c for c in dict.fromkeys(used) if c not in names]
    if absent:  # a column no part has: null, as a whole-run frame would have had it missing
        lf = lf.with_columns(pl.lit(None, pl.Float64).alias(c) for c in absent)
    lf = lf.filter(cond)
    if flt.q:
        hits = engine().hits(StoreKey(store), flt.q, flt.step, seconds) if hits is None else hits
        lf = lf.join(hits.lazy(), on=["part", "row"], how="semi")
    if flt.truncated:
        cut = truncated_rows(store, *flt.truncated, flt.step)
        lf = lf.join(cut.lazy(), on=["part", "row"], how="semi")
    if flt.ended:
        done = ended_rows(store, *flt.ended, flt.step)
        lf = lf.join(done.lazy(), on=["part", "row"], how="semi")
    return lf.select(c for c in dict.fromkeys([*columns, "part", "row"]) if c in names)


def _sorted_keys(store: RunStore, flt: ResponseFilter, sort: str, descending: bool, seconds: float):
    """The ``part, row`` of the matches sorted by ``sort`` (ties by sample id), lazily."""
    lf = matching(store, flt, [sort, "sample_id"], seconds)
    return sort_rows(lf, sort, descending).select(pl.col(c).cast(t) for c, t in KEYS.items())


# The columns of the steps summary :func:`all_steps_reward` reads.
ORDER_COLUMNS = ("n", "reward_finite_n", "reward_finite_sum")


def _all_steps(store: RunStore) -> Order | None:
    """:func:`all_steps_reward` of the store's steps summary, reading only its :data:`ORDER_COLUMNS` (the
    whole summary is 65 columns of every step: 1.4 MB at 5,000 steps, read at each count poll)."""
    return all_steps_reward(store.steps_columns(ORDER_COLUMNS))


def all_steps_reward(steps: pl.DataFrame) -> Order | None:
    """The :class:`Order` of the unfiltered view of every step, from the steps summary ``steps`` (see
    :func:`data.metrics.step.step_summary`) instead of every row: the responses are the steps' ``n``, and
    the mean reward is the steps' sums of finite rewards over their count, added with :func:`math.fsum`
    (so it does not depend on the order of the steps; a scan of every row may differ from it in the last
    bits). None for a summary written before it had those sums (a step summarised without them)."""
    if any(c not in steps.columns for c in ORDER_COLUMNS):
        return None
    if steps.select(pl.any_horizontal(pl.col(c).is_null() for c in ORDER_COLUMNS).any()).item():
        return None
    n = int(steps.get_column("n").sum())
    finite = int(steps.get_column("reward_finite_n").sum())
    sums = steps.get_column("reward_finite_sum").to_list()
    mean = math.fsum(sums) / finite if finite else None
    return Order(n, n, mean)


@shared(64)
def _summary(key: StoreKey, flt: ResponseFilter, seconds: float) -> Order:
    store = key.store
    if flt.step is None and flt.is_default():
        got = _all_steps(store)
        if got is not None:
            return got
    scope = store.scan(["step"], step=flt.step).select(pl.len()).collect().item()
    r = pl.col("reward")
    got = (
        matching(store, flt, ["reward"], seconds)
        .select(pl.len().alias("n"), r.filter(r.is_finite()).mean().alias("mean"))
        .collect()
    )
    n, mean = got.row(0)
    return Order(int(n), int(scope), None if mean is None else float(mean))


@shared(64)
def _head(key: StoreKey, flt: ResponseFilter, sort: str, descending: bool, seconds: float) -> pl.DataFrame:
    fast = fast_keys(key.store, flt, sort, descending, 0, HEAD_ROWS, seconds)
    if fast is not None:
        return fast[0]
    if flt.step is None and flt.is_default():
        # Every step, unfiltered: the first rows of each sort kept at ingest (see data.ingest.topk).
        head = topk.head(key.store, sort, descending, HEAD_ROWS)
        if head is not None:
            return head
    head = pruned_head(key.store, flt, sort, descending, HEAD_ROWS, seconds)
    if head is not None:
        return head
    return _sorted_keys(key.store, flt, sort, descending, seconds).head(HEAD_ROWS).collect()


def pruned_head(
    store: RunStore, flt: ResponseFilter, sort: str, descending: bool, k: int, seconds: float
) -> pl.DataFrame | None:
    """The first ``k`` of :func:`_sorted_keys` (``part, row``), read in two passes over the files of
    ``scalars/`` ordered by their best value of ``sort`` (the files' bounds, see
    :class:`data.store.index.FileFacts`): the best files until they hold ``k`` rows, whose ``k``-th value
    ``kth`` the true ``k``-th is no worse than; then, of the other files, only those whose bound reaches
    ``kth``, and of their rows only those that reach it (ties included: they could come first by sample id).
    Every row left out comes after ``kth`` and so after the first ``k`` (with fewer than ``k`` values in
    the best files, every row is read). None where the bounds cannot tell: a file without bounds, one
    holding NaN in ``sort`` (NaN sorts before every number), or a filter on texts.

    The rows read are sorted together as :func:`_sorted_keys` sorts them, so the order is the same."""
    if flt.q or flt.truncated or flt.ended:
        return None
    segments = store.segments(flt.step)
    bound: dict[str, float | None] = {}
    rows_in: dict[str, int] = {}
    for seg in segments:
        if seg.bounds is None:
            return None
        rows_in[seg.file] = rows_in.get(seg.file, 0) + sum(r.rows for r in seg.ranges)
        if sort not in dict(seg.schema):
            bound[seg.file] = None  # nulls only: after every value
            continue
        b = seg.bounds.get(sort)
        if b is None or b[2]:
            return None
        bound[seg.file] = b[1] if descending else b[0]
    every = list(dict.fromkeys(seg.file for seg in segments))
    if not all(os.path.exists(store.dir / "scalars" / f) for f in every):
        return None  # a later commit collected a file of this state: the full sort reads the new one
    files = sorted((f for f in every if bound[f] is not None), key=bound.get, reverse=descending)
    first, n = [], 0
    for f in files:  # the best files, until they hold k rows (of any filter: read and see)
        if n >= k:
            break
        first.append(f)
        n += rows_in[f]
    best = matching(store, flt, [sort, "sample_id"], seconds, files=set(first)).collect()
    best = sort_rows(best.lazy(), sort, descending).head(k).collect()
    kth = best.item(k - 1, sort) if best.height >= k else None
    rest = [f for f in every if f not in set(first)]
    if kth is not None:  # else fewer than k values there: every other row is read
        rest = [f for f in files[len(first) :] if (bound[f] >= kth if descending else bound[f] <= kth)]
    if rest:
        more = matching(store, flt, [sort, "sample_id"], seconds, files=set(rest))
        if kth is not None:
            more = more.filter(pl.col(sort) >= kth if descending else pl.col(sort) <= kth)
        both = pl.concat([best, more.collect()], how="vertical_relaxed")
        best = sort_rows(both.lazy(), sort, descending).head(k).collect()
    return best.select(pl.col(c).cast(t) for c, t in KEYS.items())


@shared(0)
def _whole_order(
    key: StoreKey, flt: ResponseFilter, sort: str, descending: bool, seconds: float
) -> pl.DataFrame:
    # Not kept in the process: read from the results cache (~8 bytes a match) at each block beyond the head.
    return _sorted_keys(key.store, flt, sort, descending, seconds).collect()


# ---- a search over every step: the first block at once, the count in the background -----------------------
#
# A search over every step reads every text to count its matches (and their mean reward), which grows with
# the run. The page does not wait for it: the first blocks of its default order (reward, best first) come
# from the run's first rows in that order, kept with their texts at ingest (see
# :data:`data.derived.text.TOP_KEY`): the matches among them are exactly the first matches of the whole
# run. The count runs in a background thread (:func:`count_or_progress`), which the page polls.


def fast_keys(
    store: RunStore, flt: ResponseFilter, sort: str, descending: bool, start: int, end: int, seconds: float
) -> tuple[pl.DataFrame, int | None] | None:
    """``(part, row of matches start:end, the count when known)`` of a search over every step in the
    default order, without reading every text; None where the top of the order cannot tell (another
    filter or order, a block beyond the matches it holds, a store without it)."""
    if not fast_case(flt, sort, descending):
        return None
    check_regex(flt.q)
    got = engine().fast_first(StoreKey(store), flt.q, seconds)
    if got is None:
        return None
    keys, whole = got
    if not whole and end > keys.height:
        return None
    return keys.slice(start, max(0, end - start)), (keys.height if whole else None)


@dataclass(frozen=True)
class Counting:
    """A count under way: ``done`` of ``of`` files of the text index read; ``scope``: the responses."""

    done: int
    of: int
    scope: int

    @property
    def share(self) -> float:
        return self.done / self.of if self.of else 0.0


def background_case(flt: ResponseFilter) -> bool:
    """Whether the count of ``flt`` runs in the background: a search over every step."""
    return bool(flt.q) and flt.step is None


def count_or_progress(
    store: RunStore, flt: ResponseFilter, seconds: float = DEFAULT_SEARCH_SECONDS
) -> Order | Counting:
    """The :class:`Order` of ``flt`` when known; for a search over every step not counted yet, a
    :class:`Counting` while a background thread counts (started here, once per process; not where another
    worker notes it is counting). Raises QueryError (SearchStopped) as :func:`ordered` does, once the count
    has failed."""
    if not background_case(flt) or store.schema().get("step") is None:
        return ordered(store, flt, text_index.TOP_SORT, True, seconds)
    check_regex(flt.q)
    key = StoreKey(store)
    memo = (key, flt, seconds)
    got = _summary.peek(key, flt, seconds)
    if got is not None:
        return got
    job = engine().job(memo)
    if job is not None and not job.thread.is_alive():
        engine().drop_job(memo)
        if job.error is not None:
            raise job.error
        if job.result is not None:
            return job.result
    scope = _scope(store)
    local = engine().progress(key, flt.q)
    if job is None:
        other = _progress_elsewhere(key, flt.q) if local is None else None
        if other is not None:
            return Counting(other[0], other[1], scope)
        # (A search of this process under way for another view: the count waits for it, not again.)
        _start_count(key, flt, seconds)
    done, of = local or (0, 1)
    return Counting(done, of, scope)


def _scope(store: RunStore) -> int:
    got = _all_steps(store)
    if got is not None:
        return got.scope
    return int(store.scan(["step"]).select(pl.len()).collect().item())


def _progress_elsewhere(key: StoreKey, pattern: str) -> tuple[int, int] | None:
    disk = results(Path(key.store.dir).parent)
    if disk is None:
        return None
    try:
        note = disk.get(("search-progress", *key.key, pattern), default=None, retry=True)
    except (OSError, sqlite3.Error, EOFError, ValueError):
        return None
    # This process's own note is of a search it has finished since (its progress is in its engine's).
    return None if note is None or note[2] == os.getpid() else note[:2]


def _start_count(key: StoreKey, flt: ResponseFilter, seconds: float) -> Job:
    def count(job: Job) -> None:
        try:
            if fast_case(flt, text_index.TOP_SORT, True):
                # The grid's first block first: the count would take the CPU and a search helper from it.
                try:
                    engine().fast_first(key, flt.q, seconds)
                except QueryError:
                    pass  # the grid reports it; the count is the whole search's own
            job.result = _summary(key, flt, seconds)
        except QueryError as e:
            job.error = e

    return engine().start_job((key, flt, seconds), count)


def ordered(
    store: RunStore,
    flt: ResponseFilter,
    sort: str | None = None,
    descending: bool = True,
    seconds: float = DEFAULT_SEARCH_SECONDS,
) -> Order:
    """The cached :class:`Order` summary of ``flt`` (``sort`` does not change it); raises QueryError
    (:class:`data.queries.SearchStopped` for a text search that took more than ``seconds``)."""
    if flt.q:
        check_regex(flt.q)
    if store.schema().get("step") is None:
        return Order(0, 0, None)
    return _summary(StoreKey(store), flt, seconds)


def order_keys(
    store: RunStore,
    flt: ResponseFilter,
    sort: str,
    descending: bool,
    start: int,
    end: int,
    seconds: float = DEFAULT_SEARCH_SECONDS,
) -> pl.DataFrame:
    """``part, row`` of matches ``start:end`` of ``flt`` sorted by ``sort`` (ties by ``sample_id``)."""
    if flt.q:
        check_regex(flt.q)
    start, end = max(0, start), max(0, end)
    if end <= start or store.schema().get("step") is None:
        return pl.DataFrame(schema=KEYS)
    key = StoreKey(store)
    keys = (
        _head(key, flt, sort, descending, seconds)
        if end <= HEAD_ROWS
        else _whole_order(key, flt, sort, descending, seconds)
    )
    return keys.slice(start, end - start)


@dataclass(frozen=True)
class Walk:
    """Where one response sits among the rows of a responses view, in the view's order: ``index`` (from 0)
    of ``count``, and the sample ids before and after it (None at either end)."""

    index: int
    count: int
    prev_id: str | None
    next_id: str | None


def walk(
    store: RunStore,
    view: ResponsesView,
    steps: list[int],
    sample: str,
    seconds: float = DEFAULT_SEARCH_SECONDS,
    ends: tuple[tuple[str, ...], tuple[str, ...]] = ((), ()),
) -> Walk | None:
    """Where ``sample`` sits among the rows of ``view`` (its filter and sort, exactly the grid's order;
    ``ends``: the pad and end tokens of a truncation filter); None when it is not one of them, or the
    view's search cannot run (refused or stopped)."""
    loc = store.lookup(sample)
    if loc is None:
        return None
    flt = view.response_filter(steps, ends)
    key, sort = StoreKey(store), view.sort
    try:
        count = ordered(store, flt, sort, view.descending, seconds).count
        # The grid's first blocks come from the cached head of the order; a row beyond, from the whole order.
        keys = _head(key, flt, sort, view.descending, seconds)
        k = _position(keys, loc)
        if k is None and count > keys.height:
            keys = _whole_order(key, flt, sort, view.descending, seconds)
            k = _position(keys, loc)
    except QueryError:
        return None
    if k is None:
        return None
    lo = max(0, k - 1)
    near = store.read_keys(keys.slice(lo, k + 2 - lo), ["sample_id"]).get_column("sample_id").to_list()

    def id_at(j: int) -> str | None:
        return near[j - lo] if 0 <= j < count and 0 <= j - lo < len(near) else None

    return Walk(k, count, id_at(k - 1), id_at(k + 1))


def _position(keys: pl.DataFrame, loc: tuple[int, int]) -> int | None:
    """Where the response at ``(part, row)`` is in ``keys`` (``part, row`` in an order), or None."""
    at = (
        keys.with_row_index("__k")
        .filter((pl.col("part") == loc[0]) & (pl.col("row") == loc[1]))
        .get_column("__k")
    )
    return int(at[0]) if at.len() else None
