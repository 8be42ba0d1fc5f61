"""Responses page data: the table's columns and filters, the view a query resolves to, pages of rows, the
selected response's texts, the text index, and the plan of an ``/export`` (the view state itself is
:mod:`data.views.responses`).

Every query runs over the store's files, reading only the steps and columns it needs: the first blocks of
the grid come from a cached head of the *order* (the ``part, row`` of the first matches per store version,
filter and sort), deeper ones from the whole order, kept in the shared results cache once a user scrolls
there; a page's rows are then read from the row groups that hold them. A text search runs once per query.
The unfiltered view of every step reads its head and its first block from what ingest kept of each sort
(see :mod:`data.derived.topk`), not from the run's files.
"""

from __future__ import annotations

import math
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import polars as pl

from data import bounded
from data.cache import StoreKey, results, shared
from data.config import DEFAULT_EXPORT_SECONDS, DEFAULT_SEARCH_SECONDS
from data.curves import partial_step
from data.curves import run_steps as run_summary
from data.derived import text as text_index
from data.derived import topk
from data.metrics import METRICS, label
from data.metrics.registry import COLUMNS, PREVIEW_COLUMNS, length_column
from data.metrics.registry import table_columns as registry_table_columns
from data.metrics.response import source_line, source_line_text, strip_pad_text
from data.queries import (
    RANGE_COLUMNS,
    STOPPED_HINT,
    QueryError,
    ResponseFilter,
    SearchStopped,
    check_regex,
    match_pieces,
    match_pieces_many,
    regex_error,
    search,
    sort_rows,
)
from data.signals import can_tell_truncation, truncated_rows
from data.store import RunStore, UnknownRun
from data.views import paths
from data.views.codec import REGEX_FALLBACK, first
from data.views.paths import shown_run
from data.views.responses import RANGE_KEYS, ResponsesView

# Table columns in order (see data.metrics.registry); optional ones are shown only when the run has a value.
METRIC_COLUMNS = registry_table_columns()
ALWAYS_SHOWN = ("step", "reward")
# Keys of ``/export`` besides the view's (the selected sample is a page thing and is accepted, unused).
EXPORT_KEYS = ("format",)


# ---- columns ---------------------------------------------------------------------------------------------


@shared(32)
def _columns(key: StoreKey) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    names = key.store.schema()
    present = key.store.non_null_columns()
    metrics = [c for c in METRIC_COLUMNS if c in ALWAYS_SHOWN or c in present]
    # Characters only stand in for the length in tokens when a run has no token fields.
    if "response_length" in metrics:
        metrics.remove("response_chars")
    extras = [c for c in key.store.extra_columns() if c in names and c not in METRIC_COLUMNS]
    # Only shown columns: the grid's header is where a sort is chosen and seen. (A file's field never
    # takes the name of a bookkeeping column such as sample_id or part: ingest renames it.)
    sortable = [c for c in (*metrics, *extras) if c in names]
    return tuple(metrics), tuple(extras), tuple(sortable)


def table_columns(store: RunStore) -> tuple[list[str], list[str]]:
    """``(metric columns, extra columns)`` the table shows for this run, in order (previews come last)."""
    metrics, extras, _ = _columns(StoreKey(store))
    return list(metrics), list(extras)


def sortable_columns(store: RunStore) -> list[str]:
    """Columns a view may sort by: the metric and extra columns the table shows."""
    return list(_columns(StoreKey(store))[2])


def run_steps(store: RunStore) -> list[int]:
    """The run's steps, ascending."""
    return list(_steps(StoreKey(store)))


@shared(32)
def _steps(key: StoreKey) -> tuple[int, ...]:
    steps = key.store.steps()
    return tuple(int(s) for s in steps.get_column("step").to_list()) if steps.height else ()


# The metrics whose sign a table colours: a gain, a log-ratio, a value error; not the rewards themselves.
UNSIGNED_IN_TABLE = ("reward", "ref_reward")
# The columns that stay in view, left, whatever the horizontal scroll (a row click must never hide them).
PINNED = ("step", "reward")
# The labels of the selected response's texts panel.
TEXT_LABELS = ("reward", "ref_reward", "reward_gain")


@dataclass(frozen=True)
class TableSpec:
    """The responses table of a run: its value ``columns`` as ``(field, header, tooltip)`` in order, their
    Polars ``dtypes``, and the ``signed`` ones (coloured by sign)."""

    columns: tuple[tuple[str, str, str], ...]
    dtypes: dict
    signed: frozenset[str]
    pinned: tuple[str, ...] = PINNED  # kept in view on the left, beside the response's file:line
    id_chars: int = 16  # the longest file:line of the run, in characters
    preview_lines: int = 3  # lines a row gives its previews (see :func:`preview_lines`)


def table_spec(store: RunStore) -> TableSpec:
    """The :class:`TableSpec` of the run's responses table: its metric columns (registry labels and
    descriptions), then the files' extra fields."""
    longest, lines = _row_layout(StoreKey(store))
    metrics, extras = table_columns(store)
    schema = store.schema()
    cols = tuple(
        (c, label(c), METRICS[c].description if c in METRICS else "extra field of the files")
        for c in metrics + extras
    )
    signed = frozenset(
        c for c in metrics if c in METRICS and METRICS[c].signed and c not in UNSIGNED_IN_TABLE
    )
    pinned = tuple(c for c in PINNED if c in metrics)
    return TableSpec(cols, {c: schema[c] for c in metrics + extras}, signed, pinned, longest, lines)


@shared(32)
def _row_layout(key: StoreKey) -> tuple[int, int]:
    """``(id_chars, preview_lines)`` of the run's table, without reading the whole run: the longest
    file:line from the store's index (each part's source file and largest line), the previews' lines from
    the rows of the first and the last step (what a user sees first; a step's rows are read, not the run's)."""
    store = key.store
    index = store.index()
    longest = 0
    for part in store.part_ids():
        r, source = index.part_range(part), index.sources.get(part)
        if r is not None and source and r.line_max is not None:
            longest = max(longest, len(f"{source}:{r.line_max}"))
    steps = run_steps(store)
    names = store.schema()
    cols = [c for c in PREVIEW_COLUMNS if c in names]
    if not steps or not cols:
        return longest or 16, 1
    sample = pl.concat([store.scan(cols, step=s).collect() for s in dict.fromkeys((steps[0], steps[-1]))])
    return longest or 16, preview_lines(sample)


# Characters of a preview that one line of its column shows at least (a line is ~45 Latin letters wide
# at the narrowest; a CJK character counts as about two).
LINE_CHARS = 45


def preview_lines(scalars: pl.DataFrame) -> int:
    """How many lines a row of the responses table gives its text previews: 1 to 3, as many as the run's
    longer previews need (the 90th percentile of their lengths, :data:`LINE_CHARS` a line), so a run of
    short texts keeps compact rows."""
    cols = [c for c in PREVIEW_COLUMNS if c in scalars.columns]
    if not cols or scalars.height == 0:
        return 1
    widths = [
        # A character outside Latin, Greek and Cyrillic scripts (CJK) is about twice as wide.
        (pl.col(c).str.len_chars() + pl.col(c).str.count_matches(r"[^\x00-\u04ff]")).quantile(0.9)
        for c in cols
    ]
    longest = max((v or 0) for v in scalars.select(widths).row(0))
    return int(min(3, max(1, math.ceil(longest / LINE_CHARS))))


def range_filters(store: RunStore) -> list[tuple[str, str, bool]]:
    """``(key, label, available)`` of each range filter (URL ``<key>_min`` / ``_max``) in order; not
    available where the run has no value of its column (e.g. no tokens, no KL)."""
    present = set(table_columns(store)[0])
    # The length filter compares tokens, or characters where the run has no token arrays: labelled so.
    cols = {k: length_column(present) if c == "length" else c for k, c in RANGE_COLUMNS.items()}
    return [(key, label(cols[key]), cols[key] in present) for key in RANGE_KEYS]


def previews() -> list[tuple[str, str]]:
    """``(field, header)`` of the table's text previews: the prompt (its question, for chat messages) and
    the response, labelled from the registry."""
    return [(c, COLUMNS[c].label) for c in PREVIEW_COLUMNS]


def matches_note(q: str | None) -> str | None:
    """What the marks in a response's texts are: the matches of the search ``q`` (None without one)."""
    return (
        f"Marked: the matches of {q!r} in the prompt and the response (what the search reads)." if q else None
    )


def text_labels() -> dict[str, str]:
    """The labels of the rewards shown beside a response's texts."""
    return {k: label(k) for k in TEXT_LABELS}


def partial_note(store: RunStore, step: int | None) -> str | None:
    """'partial step: 56 responses, where …' when ``step`` is the run's partial last step (see
    :func:`data.metrics.step.partial_last_step`), else None."""
    partial = partial_step(store)
    return partial.text() if partial is not None and partial.step == step else None


def resolve(
    query: Mapping, board, wait: float
) -> tuple[ResponsesView, RunStore | None, list[int], list[str]]:
    """``(view, store, steps, notices)`` of a parsed query; store None (and the view checked against no
    run) for an unknown or unread run. A query that names no run is the first run's, as the page's layout
    shows it (:func:`data.views.paths.shown_run`). ``board``: the app's board."""
    run = shown_run(paths.RESPONSES, first(query, "run"), board.runs())
    store = None
    if run is not None:
        try:
            store = board.store(run, wait=wait)
        except UnknownRun:
            store = None
    if store is None:
        view, msgs = ResponsesView.from_query(query)
        return view, None, [], msgs
    view, steps, msgs = view_on(query, run, store, board.settings)
    return view, store, steps, msgs


def view_on(
    query: Mapping, run: str, store: RunStore, settings
) -> tuple[ResponsesView, list[int], list[str]]:
    """``(view, steps, notices)`` of a parsed query shown on ``run``'s ``store`` (the run set on the view,
    also where the URL names none): the page's layout and its callbacks read the same view."""
    steps = run_steps(store)
    view, msgs = ResponsesView.from_query(query, steps, sortable_columns(store))
    view, more = check_truncated(view, store, settings)
    return view.with_(run=run), steps, msgs + more


def check_truncated(view: ResponsesView, store: RunStore, settings) -> tuple[ResponsesView, list[str]]:
    """``view`` without its ``truncated`` filter, and a notice, on a run none of whose responses ends with
    an end token (see :func:`data.signals.can_tell_truncation`): there every response would count as
    cut. ``settings``: the board's (pad and end tokens)."""
    if view.truncated and not can_tell_truncation(store, settings.pad_tokens, settings.end_tokens):
        ends = ", ".join(settings.end_tokens)
        return view.with_(truncated=False), [
            f"Ignored truncated=1: no response of this run ends with an end token ({ends}), so a cut "
            "response cannot be told from one that ended (texts decoded without special tokens?)."
        ]
    return view, []


# ---- rows ------------------------------------------------------------------------------------------------


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
KEYS = {"part": pl.UInt32, "row": pl.UInt32}


# ---- text index: what a regex search scans (see data.derived.text) ------------------------------------

TEXT_INDEX_COLUMNS = text_index.COLUMNS
_WARMING: set[str] = set()  # text indexes being built in the background (one thread per store)
_WARMING_LOCK = threading.Lock()
# Store versions whose text index was found whole (their last few): a visit starts no thread for them.
_WARMED: OrderedDict[str, None] = OrderedDict()
_WARMED_KEPT = 64


def text_index_files(store: RunStore) -> list[Path]:
    """Per committed file of ``parts/``, its ``part, row, step, prompt, response`` as an uncompressed Arrow
    IPC file, as ingest wrote it in the store (see :func:`data.derived.text.index_files`)."""
    return text_index.index_files(store.dir, store.part_files())


def warm_text_index(store: RunStore) -> None:
    """Build the text index of ``store`` in a background thread (once at a time), so a first search is fast;
    only the search helper to start where ingest wrote it. Once a version's index was found whole, later
    visits do nothing: the look (a stat of each of a 2.56M run's 296 index files, beside the page's own
    callbacks) was made at every visit of the responses page."""
    key = store.version
    with _WARMING_LOCK:
        if key in _WARMING or key in _WARMED:
            return
        _WARMING.add(key)

    def build():
        try:
            bounded.warm()  # and a search helper, so that a first search need not start one
            whole = text_index_files(store) is not None
        finally:
            with _WARMING_LOCK:
                _WARMING.discard(key)
        if whole:
            with _WARMING_LOCK:
                _WARMED[key] = None
                while len(_WARMED) > _WARMED_KEPT:
                    _WARMED.popitem(last=False)

    threading.Thread(target=build, name=f"text-index-{store.dir.name}", daemon=True).start()


# Searches stopped at their deadline, by (store key, pattern, step): each grid block and the summary ask for
# the same search, and a search that just took all its time is not run again before STOPPED_SECONDS.
STOPPED_SECONDS = 60.0
_STOPPED: dict[tuple, tuple[float, str]] = {}
_STOPPED_LOCK = threading.Lock()


# Hits of text searches kept in the process, up to this many rows in all (8 bytes each: 32 MB): a broad
# pattern over a large run matches millions of responses. The page's summary and its first block ask for the
# same hits (at the same time, from a browser): the second waits for the first's search and reuses its hits,
# so that a run whose matches outgrow a small bound is not searched twice.
HITS_KEPT = 4_000_000
_SEARCHING: dict[tuple, threading.Lock] = {}  # searches under way, by memo (one at a time each)


def _text_hits(key: StoreKey, pattern: str, step: int | None, seconds: float) -> pl.DataFrame:
    """``(part, row)`` of the responses whose prompt or response matches (integers join faster than ids),
    found within ``seconds`` (raises :class:`data.queries.SearchStopped`)."""
    memo = (key, pattern, step, seconds)
    with _STOPPED_LOCK:
        hit = _HITS.get(memo)
        if hit is not None:
            _HITS.move_to_end(memo)
            return hit
        running = _SEARCHING.setdefault(memo, threading.Lock())
    with running:
        with _STOPPED_LOCK:
            hit = _HITS.get(memo)  # found by the search this one waited for
        if hit is not None:
            return hit
        try:
            hits = _search_texts(key, pattern, step, seconds)
            with _STOPPED_LOCK:
                if hits.height <= HITS_KEPT:
                    _HITS[memo] = hits
                    while len(_HITS) > 16 or sum(h.height for h in _HITS.values()) > HITS_KEPT:
                        _HITS.popitem(last=False)
        finally:
            with _STOPPED_LOCK:
                _SEARCHING.pop(memo, None)
    return hits


def text_hits(store: RunStore, pattern: str, step: int | None, seconds: float) -> pl.DataFrame:
    """``part, row`` of the responses (of ``step``, or of every step) whose prompt or response matches the
    regular expression ``pattern``, found within ``seconds`` (raises SearchStopped / QueryError)."""
    check_regex(pattern)
    return _text_hits(StoreKey(store), pattern, step, seconds)


def _clear_hits() -> None:
    with _STOPPED_LOCK:
        _HITS.clear()


_HITS: OrderedDict[tuple, pl.DataFrame] = OrderedDict()
_text_hits.cache_clear = _clear_hits


def _search_texts(key: StoreKey, pattern: str, step: int | None, seconds: float) -> pl.DataFrame:
    memo = (key, pattern, step)
    with _STOPPED_LOCK:
        when, message = _STOPPED.get(memo, (None, ""))
    if when is not None and time.monotonic() - when < STOPPED_SECONDS:
        raise SearchStopped(message)
    hit = pl.col("prompt").str.contains(pattern) | pl.col("response").str.contains(pattern)
    files = None
    if step is not None:
        # One step: the parts' row-group statistics skip every other step, so they are the faster source.
        lf = key.store.scan_parts(TEXT_INDEX_COLUMNS, steps=(step, step)).filter(pl.col("step") == step)
    else:
        files = text_index_files(key.store)
        lf = None if files else key.store.scan_parts().select(*TEXT_INDEX_COLUMNS)
    try:
        if files:
            found = _scan_chunks(key, pattern, [str(f) for f in files], hit, seconds)
        else:
            found = search(lf.filter(hit).select("part", "row"), pattern, seconds)
    except SearchStopped as e:
        with _STOPPED_LOCK:
            if len(_STOPPED) > 64:
                _STOPPED.clear()
            _STOPPED[memo] = (time.monotonic(), str(e))
        raise
    return found.select(pl.col("part").cast(pl.UInt32), pl.col("row").cast(pl.UInt32))


# A search over every step reads the text index this many files at a time (each in the search helper), so
# that the page can show how far it got and a worker holds only the keys of the matches.
CHUNK_FILES = 64
# Progress of the searches over every step under way in this process, by (store key, pattern): files read, of.
_PROGRESS: dict[tuple, tuple[int, int]] = {}


def _scan_chunks(key: StoreKey, pattern: str, files: list[str], hit: pl.Expr, seconds: float) -> pl.DataFrame:
    """``part, row`` of the rows of the index ``files`` that ``hit`` holds for, read CHUNK_FILES files at a
    time within ``seconds`` in all (raises SearchStopped), noting the progress (see :func:`search_progress`)."""
    deadline = time.monotonic() + seconds
    memo = (key, pattern)
    found = []
    stopped = f"the search for {pattern!r} was stopped after {seconds:g} s: {STOPPED_HINT}"
    try:
        for i in range(0, len(files), CHUNK_FILES):
            _note_progress(key, pattern, i, len(files))
            chunk = pl.scan_ipc(files[i : i + CHUNK_FILES]).filter(hit).select("part", "row")
            left = deadline - time.monotonic()
            if left <= 0:
                raise SearchStopped(stopped)
            try:
                found.append(search(chunk, pattern, left))
            except SearchStopped:
                raise SearchStopped(stopped) from None  # the whole search's time, not this chunk's
    finally:
        with _STOPPED_LOCK:
            _PROGRESS.pop(memo, None)
    return pl.concat(found) if found else pl.DataFrame(schema={"part": pl.Int64, "row": pl.Int64})


def _note_progress(key: StoreKey, pattern: str, done: int, of: int) -> None:
    with _STOPPED_LOCK:
        _PROGRESS[(key, pattern)] = (done, of)
    disk = results(Path(key.store.dir).parent)
    if disk is not None:  # other workers show it rather than search again (see count_or_progress)
        try:
            note = (done, of, os.getpid())
            disk.set(("search-progress", *key.key, pattern), note, expire=PROGRESS_FRESH, retry=True)
        except (OSError, sqlite3.Error):
            pass


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
        hits = _text_hits(StoreKey(store), flt.q, flt.step, seconds) if hits is None else hits
        lf = lf.join(hits.lazy(), on=["part", "row"], how="semi")
    if flt.truncated:
        cut = truncated_rows(store, *flt.truncated, flt.step)
        lf = lf.join(cut.lazy(), on=["part", "row"], how="semi")
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
        # Every step, unfiltered: the first rows of each sort kept at ingest (see data.derived.topk).
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
    if flt.q or flt.truncated:
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

# How long a worker trusts another worker's note of a search under way (refreshed at each chunk).
PROGRESS_FRESH = 10.0


def fast_case(flt: ResponseFilter, sort: str, descending: bool) -> bool:
    """Whether the first matches of ``flt`` in this order can come from the top of the reward order: a
    search over every step and nothing else, sorted by reward, best first."""
    return (
        bool(flt.q)
        and flt.step is None
        and sort == text_index.TOP_SORT
        and descending
        and replace(flt, q=None).is_default()
    )


@shared(64)
def _fast_head(key: StoreKey, pattern: str, seconds: float) -> tuple[pl.DataFrame, bool] | None:
    """``(part, row of the first matches of pattern in the default order, whether they are all)``, from the
    store's top file; None for a store without one (ingested before it was kept)."""
    store = key.store
    entry = text_index.top_entry(store.manifest)
    path = store.dir / entry["name"] if entry else None
    if path is None or not path.exists():
        return None
    # Only the rows shown: a file of parts/ written with others may hold rows of parts dropped since.
    lf = pl.scan_ipc(path).with_row_index("__i").filter(pl.col("part").is_in(list(store.part_ids())))
    if store.visible_below is not None:
        lf = lf.filter(pl.col("step") < store.visible_below)
    hit = pl.col("prompt").str.contains(pattern) | pl.col("response").str.contains(pattern)
    found = search(lf.filter(hit).select("__i", "part", "row"), pattern, seconds).sort("__i")
    keys = found.select(pl.col(c).cast(t) for c, t in KEYS.items())
    return keys, int(entry["rows"]) == int(entry["of"])


def _top_rows(store: RunStore, keys: pl.DataFrame, cols: list[str]) -> pl.DataFrame | None:
    """``cols`` of the rows ``keys`` (from :func:`fast_keys`) as the top file keeps them, with the types
    of :meth:`RunStore.schema` (as :meth:`RunStore.read_keys` gives them); None for a top file written
    before it kept them."""
    got = text_index.top_rows(store.dir, text_index.top_entry(store.manifest), keys, cols)
    if got is None:
        return None
    schema = store.schema()
    return got.select(pl.col(c).cast(schema[c]) if c in schema else pl.col(c) for c in cols)


_FAST_LOCKS: dict[tuple, threading.Lock] = {}


def fast_first(key: StoreKey, pattern: str, seconds: float) -> tuple[pl.DataFrame, bool] | None:
    """:func:`_fast_head`, computed once when several callers ask at once (the grid's block and the count,
    which waits for it before it starts)."""
    memo = (key, pattern, seconds)
    with _JOBS_LOCK:
        lock = _FAST_LOCKS.setdefault(memo, threading.Lock())
    try:
        with lock:
            return _fast_head(key, pattern, seconds)
    finally:
        with _JOBS_LOCK:
            if not lock.locked():
                _FAST_LOCKS.pop(memo, None)


def fast_keys(
    store: RunStore, flt: ResponseFilter, sort: str, descending: bool, start: int, end: int, seconds: float
) -> tuple[pl.DataFrame, int | None] | None:
    """``(part, row of matches start:end, the count when known)`` of a search over every step in the
    default order, without reading every text; None where the top of the order cannot tell (another
    filter or order, a block beyond the matches it holds, a store without it)."""
    if not fast_case(flt, sort, descending):
        return None
    check_regex(flt.q)
    got = fast_first(StoreKey(store), flt.q, seconds)
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


@dataclass
class _Job:
    thread: threading.Thread
    result: Order | None = None
    error: QueryError | None = None


_JOBS: dict[tuple, _Job] = {}  # background counts of this process, by (store key, filter, seconds)
_JOBS_LOCK = threading.Lock()


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
    with _JOBS_LOCK:
        job = _JOBS.get(memo)
    if job is not None and not job.thread.is_alive():
        with _JOBS_LOCK:
            _JOBS.pop(memo, None)
        if job.error is not None:
            raise job.error
        if job.result is not None:
            return job.result
    scope = _scope(store)
    with _STOPPED_LOCK:
        local = _PROGRESS.get((key, flt.q))
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
    # This process's own note is of a search it has finished since (its progress is in _PROGRESS).
    return None if note is None or note[2] == os.getpid() else note[:2]


def _start_count(key: StoreKey, flt: ResponseFilter, seconds: float) -> _Job:
    memo = (key, flt, seconds)
    with _JOBS_LOCK:
        job = _JOBS.get(memo)
        if job is not None:
            return job

        def count() -> None:
            try:
                if fast_case(flt, text_index.TOP_SORT, True):
                    # The grid's first block first: the count would take the CPU and a search helper from it.
                    try:
                        fast_first(key, flt.q, seconds)
                    except QueryError:
                        pass  # the grid reports it; the count is the whole search's own
                job.result = _summary(key, flt, seconds)
            except QueryError as e:
                job.error = e

        job = _Job(threading.Thread(target=count, name="search-count", daemon=True))
        _JOBS[memo] = job
        if len(_JOBS) > 64:  # finished ones nobody asked for again
            for m in [m for m, j in _JOBS.items() if not j.thread.is_alive()][:32]:
                _JOBS.pop(m, None)
    job.thread.start()
    return job


def clear_caches() -> None:
    """Forget every cached order, summary and search hit (tests and benchmarks time the work itself)."""
    for fn in (_summary, _head, _whole_order, _block, _text_hits, _fast_head):
        fn.cache_clear()


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


def page_rows(
    store: RunStore,
    flt: ResponseFilter,
    sort: str,
    descending: bool,
    start: int,
    end: int,
    seconds: float = DEFAULT_SEARCH_SECONDS,
) -> tuple[pl.DataFrame, int]:
    """Rows ``start:end`` of the ordered matches (``source_line``, ``sample_id``, the table's columns and
    previews) and the count.

    A block of the grid is cached per store version: its rows are read (from the row groups that hold
    them, over every part for all steps) once."""
    start, end = max(0, start), max(0, end)
    fast = fast_keys(store, flt, sort, descending, start, end, seconds)
    if fast is not None:
        count = fast[1]
        if count is None:
            got = _summary.peek(StoreKey(store), flt, seconds) if background_case(flt) else None
            count = got.count if got is not None else None
        return _block(StoreKey(store), flt, sort, descending, start, end, seconds), count
    order = ordered(store, flt, sort, descending, seconds)
    return _block(StoreKey(store), flt, sort, descending, start, end, seconds), order.count


@shared(64)
def _block(
    key: StoreKey, flt: ResponseFilter, sort: str, descending: bool, start: int, end: int, seconds: float
) -> pl.DataFrame:
    store = key.store
    fast = fast_keys(store, flt, sort, descending, start, end, seconds)
    if fast is not None:  # the first matches of a search, without its count
        keys = fast[0]
    else:
        count = _summary(key, flt, seconds).count
        keys = order_keys(store, flt, sort, descending, start, min(end, count), seconds)
    metrics, extras = table_columns(store)
    names = store.schema()
    cols = [c for c in ["sample_id", *metrics, *extras, *PREVIEW_COLUMNS] if c in names]
    want = list(dict.fromkeys(["source", "line", *cols]))
    rows = None
    if fast is not None:  # the first matches' columns, kept beside their texts at ingest
        rows = _top_rows(store, keys, want)
    elif start == 0 and flt.step is None and flt.is_default():  # the first block, kept at ingest
        rows = topk.first_rows(store, keys, want)
    if rows is None:
        rows = store.read_keys(keys, want)
    return rows.select(source_line(), *cols)


def mark_previews(rows: list[dict], q: str | None) -> list[dict]:
    """``rows`` (of :func:`page_rows`, as :func:`json_rows`) with ``<preview>_marks`` beside each text
    preview: the preview as :func:`~data.queries.match_pieces` of the search ``q``, ``[piece, matched]``
    pairs the grid shows as text, the matches highlighted. Within a preview, which is the start of its
    text, its own matches are marked. Unchanged without a search (or with one that cannot run)."""
    if not q or regex_error(q) is not None:
        return rows
    cells = [(row, c) for row in rows for c in PREVIEW_COLUMNS if c in row]
    for (row, c), pieces in zip(cells, match_pieces_many([row[c] for row, c in cells], q), strict=True):
        row[f"{c}_marks"] = [[p, hit] for p, hit in pieces]
    return rows


def json_rows(df: pl.DataFrame) -> list[dict]:
    """Rows as JSON-ready dicts: NaN and infinities become None (JSON has no such numbers)."""
    floats = [c for c, t in df.schema.items() if t.is_float()]
    if floats:
        df = df.with_columns(
            pl.when(pl.col(c).is_finite()).then(pl.col(c)).otherwise(None).alias(c) for c in floats
        )
    return df.to_dicts()


def sample_texts(
    store: RunStore, sample: str, pad_tokens: tuple[str, ...], q: str | None = None
) -> dict | None:
    """Prompt, response and reference response of one response (pad tokens removed) with its scalars,
    ``source_line`` (where it is in the run's files) and ``pieces``: each text as :func:`match_pieces` of
    the search ``q`` (the prompt and the response, which the search reads; the reference unmarked)."""
    row = store.sample(sample)
    if row is None:
        return None

    def clean(text):
        return strip_pad_text(text, tuple(pad_tokens))

    def num(v):
        return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else v

    texts = {k: clean(row.get(k)) for k in ("prompt", "response", "ref_response")}
    return {
        "sample_id": sample,
        "step": row.get("step"),
        **texts,
        "pieces": {k: match_pieces(t, q if k != "ref_response" else None) for k, t in texts.items()},
        "reward": num(row.get("reward")),
        "ref_reward": num(row.get("ref_reward")),
        "reward_gain": num(row.get("reward_gain")),
        "source": row.get("source"),
        "line": row.get("line"),
        "source_line": source_line_text(row.get("source"), row.get("line")),
    }


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


def match_share_by_step(store: RunStore, q: str, seconds: float = DEFAULT_SEARCH_SECONDS) -> pl.DataFrame:
    """Per step of the run: ``n`` responses, ``matches`` of the search ``q`` (prompt or response, as the
    responses page's search: the same bounded search, cached) and ``y`` = matches / n, the share whose
    point opens ``/responses?step=S&q=…``. Raises :class:`data.queries.QueryError` for a pattern that
    cannot run and :class:`data.queries.SearchStopped` for a search that took more than ``seconds``."""
    check_regex(q)
    key = StoreKey(store)
    hits = _text_hits(key, q, None, seconds)
    # Steps and counts from the cached per-step summary; each match's step read from the row groups that
    # hold the matches, one part at a time (the step column only: never the whole run's table).
    counts = run_summary(store).select(pl.col("step").cast(pl.Int64), pl.col("n").cast(pl.Int64))
    found = [pl.DataFrame(schema={"step": pl.Int64})]
    for (part,), grp in hits.group_by(["part"]):
        rows = grp.get_column("row").to_list()
        found.append(store.read_rows(int(part), rows, ["step"]).select(pl.col("step").cast(pl.Int64)))
    per_step = pl.concat(found).group_by("step").agg(pl.len().cast(pl.Int64).alias("matches"))
    return (
        counts.join(per_step, on="step", how="left")
        .with_columns(pl.col("matches").fill_null(0))
        .with_columns((pl.col("matches") / pl.col("n")).alias("y"))
        .sort("step")
    )


# ---- export ----------------------------------------------------------------------------------------------


class ExportError(Exception):
    """A request to ``/export`` that cannot be served: HTTP ``status`` and a short plain-text message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class ExportPlan:
    """What ``/export`` streams: the store, the view's filter and sort, the format and a file name."""

    store: RunStore
    flt: ResponseFilter
    sort: str
    descending: bool
    fmt: str
    filename: str
    seconds: float = DEFAULT_SEARCH_SECONDS  # a text search's time
    limit: float = DEFAULT_EXPORT_SECONDS  # the whole export's time


def _strict(notice: str) -> str:
    """A page notice ("Ignored x=…: why, fallback") as an export error ("bad parameter x=…: why")."""
    text = notice.removeprefix("Ignored ").split(": showing ")[0].removesuffix(REGEX_FALLBACK)
    text = text.rstrip(".") + "."
    kept = ("unknown parameter", "invalid regular", "regular expression")
    return text if text.startswith(kept) else "bad parameter " + text


def export_plan(board, query: Mapping, formats: Iterable[str]) -> ExportPlan:
    """Check an ``/export`` query (the responses page's keys plus ``format``) strictly.

    Unlike the page, nothing falls back: an unknown run raises ``ExportError(404)``, any bad or unknown
    parameter (including an invalid regex) ``ExportError(400)``, a run not read yet ``ExportError(503)``.
    """
    run = first(query, "run")
    if not run:
        raise ExportError(400, "missing parameter run=")
    try:
        board.run_dir(run)
    except UnknownRun:
        raise ExportError(404, f"unknown run {run!r}") from None
    store = board.store(run, wait=30.0)
    if store is None:
        raise ExportError(503, f"run {run!r} is still being read; try again in a moment")
    steps = run_steps(store)
    view, notices = ResponsesView.from_query(query, steps, sortable_columns(store), extra_keys=EXPORT_KEYS)
    view, more = check_truncated(view, store, board.settings)
    notices += more
    formats = list(formats)
    fmt = first(query, "format") or "csv"
    if fmt not in formats:
        notices.append(f"Ignored format={fmt!r}: expected one of {', '.join(formats)}.")
    if notices:
        raise ExportError(400, "\n".join(_strict(n) for n in notices))
    flt = view.response_filter(steps, (board.settings.pad_tokens, board.settings.end_tokens))
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in run)
    where = "all" if flt.step is None else f"step{flt.step}"
    return ExportPlan(
        store,
        flt,
        view.sort,
        view.descending,
        fmt,
        f"{safe}-{where}.{fmt}",
        board.settings.search_seconds,
        board.settings.export_seconds,
    )
