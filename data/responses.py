"""Responses page data: the table's columns and filters, the view a query resolves to, pages of rows, the
selected response's texts and the plan of an ``/export`` (the view state itself is
:mod:`data.views.responses`; the text search and the orders of the matches, :mod:`data.search`).

A page's rows are read from the row groups that hold them, in the order :mod:`data.search.order` keeps
(its cached head, or the whole order for a block beyond); a block of the grid is cached per store version.
The unfiltered view of every step reads its first block from what ingest kept of each sort (see
:mod:`data.derived.topk`), not from the run's files.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import polars as pl

from data import annotations
from data.cache import StoreKey, shared
from data.config import DEFAULT_EXPORT_SECONDS, DEFAULT_SEARCH_SECONDS
from data.curves import partial_step
from data.curves import run_steps as run_summary
from data.derived import ends, topk
from data.metrics import METRICS, label
from data.metrics.registry import COLUMNS, PREVIEW_COLUMNS, length_column
from data.metrics.registry import table_columns as registry_table_columns
from data.metrics.response import source_line, source_line_text, strip_pad_text
from data.queries import (
    RANGE_COLUMNS,
    ResponseFilter,
    check_regex,
    match_pieces,
    match_pieces_many,
    regex_error,
)
from data.run_context import RunContext, steps_of
from data.search.engine import engine
from data.search.order import _head, _summary, _whole_order, background_case, fast_keys, order_keys, ordered
from data.search.texts import _fast_head, _top_rows
from data.search.tokens import HIT_COLUMNS, HIT_SCHEMA, hit_columns, token_note, with_hits
from data.search.tokens import _hits as token_hits_cache
from data.signals import can_tell_truncation
from data.store import RunStore, UnknownRun
from data.table_labels import table_texts
from data.token_frames import metric_label
from data.views import paths
from data.views.codec import REGEX_FALLBACK, first
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


# The column of how a response ended (``ended`` / ``truncated``, see data.response_columns): read for the
# rows on screen only, so it is not sortable.
END = "end"
# The metrics whose sign a table colours: a gain, a log-ratio, a value error; not the rewards themselves.
UNSIGNED_IN_TABLE = ("reward", "ref_reward")
# The columns that stay in view, left, whatever the horizontal scroll (a row click must never hide them).
PINNED = ("step", "reward")
# The files' own fields coloured by sign where a run has them: a GRPO / RLOO advantage (above or below its
# group's mean).
SIGNED_FIELDS = ("advantage",)
# The labels of the selected response's texts panel.
TEXT_LABELS = ("reward", "ref_reward", "reward_gain")


@dataclass(frozen=True)
class TableSpec:
    """The responses table of a run: its value ``columns`` as ``(field, header, tooltip)`` in order, their
    Polars ``dtypes``, the ``signed`` ones (coloured by sign) and the ``unsortable`` ones (read for the
    rows on screen only: how a response ended, :data:`data.response_columns.END`)."""

    columns: tuple[tuple[str, str, str], ...]
    dtypes: dict
    signed: frozenset[str]
    pinned: tuple[str, ...] = PINNED  # kept in view on the left, beside the response's file:line
    id_chars: int = 16  # the longest file:line of the run, in characters
    preview_lines: int = 3  # lines a row gives its previews (see :func:`preview_lines`)
    unsortable: frozenset[str] = frozenset({END})


def table_spec(store: RunStore, token_metric: str | None = None) -> TableSpec:
    """The :class:`TableSpec` of the run's responses table: its metric columns (registry labels and
    descriptions), then the files' extra fields, then how each response ended (:data:`END`); with a token
    filter on ``token_metric``, where its token is and its value first (see
    :func:`data.search.tokens.hit_columns`)."""
    longest, lines = _row_layout(StoreKey(store))
    metrics, extras = table_columns(store)
    schema = store.schema()
    cols = table_texts(store, [*metrics, *extras, END])
    signed = frozenset(
        c for c in metrics if c in METRICS and METRICS[c].signed and c not in UNSIGNED_IN_TABLE
    ) | (set(SIGNED_FIELDS) & set(extras))
    pinned = tuple(c for c in PINNED if c in metrics)
    dtypes = {**{c: schema[c] for c in metrics + extras}, END: pl.String}
    if token_metric is None:
        return TableSpec(cols, dtypes, signed, pinned, longest, lines)
    cols = (*hit_columns(metric_label(token_metric)), *cols)
    dtypes = {**{c: HIT_SCHEMA[c] for c in HIT_COLUMNS}, **dtypes}
    return TableSpec(cols, dtypes, signed, pinned, longest, lines, frozenset({END, *HIT_COLUMNS}))


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
    steps = steps_of(store)
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


def summary_note(store: RunStore, view: ResponsesView, steps: Sequence[int], seconds: float) -> str | None:
    """The warning beside the summary line: a partial last step, a token filter cut off at its time limit."""
    notes = [
        partial_note(store, view.resolved_step(steps)),
        token_note(store, view.response_filter(steps), seconds),
    ]
    return " ".join(n for n in notes if n) or None


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
    shows it (:func:`data.service.open_run`). ``board``: the app's board."""
    ctx = board.open_run(first(query, "run"), paths.RESPONSES, wait)
    if ctx.store is None:
        view, msgs = ResponsesView.from_query(query)
        return view, None, [], msgs
    view, msgs = view_on(query, ctx, board.settings)
    return view, ctx.store, ctx.step_list, msgs


def view_on(query: Mapping, ctx: RunContext, settings) -> tuple[ResponsesView, list[str]]:
    """``(view, notices)`` of a parsed query shown on the run of ``ctx`` (the run set on the view, also
    where the URL names none): the page's layout and its callbacks read the same view."""
    metrics, extras = table_columns(ctx.store)
    columns = [*metrics, *extras, END]  # what the column chooser offers (data.response_columns.choices)
    view, msgs = ResponsesView.from_query(query, ctx, sortable_columns(ctx.store), columns=columns)
    view, more = check_truncated(view, ctx.store, settings)
    return annotations.with_labelled(view.with_(run=ctx.run), settings), msgs + more


def check_truncated(view: ResponsesView, store: RunStore, settings) -> tuple[ResponsesView, list[str]]:
    """``view`` without its ``truncated`` or ``ended`` filter, and a notice, on a run none of whose
    responses ends with an end token (see :func:`data.signals.can_tell_truncation`): there every response
    would count as cut. ``settings``: the board's (pad and end tokens)."""
    key = "truncated" if view.truncated else "ended" if view.ended else None
    if key and not can_tell_truncation(store, settings.pad_tokens, settings.end_tokens):
        ends = ", ".join(settings.end_tokens)
        return view.with_(truncated=False, ended=False), [
            f"Ignored {key}=1: no response of this run ends with an end token ({ends}), so a cut "
            "response cannot be told from one that ended (texts decoded without special tokens?)."
        ]
    return view, []


def clear_caches() -> None:
    """Forget every cached order, summary and search hit (tests and benchmarks time the work itself)."""
    for fn in (_summary, _head, _whole_order, _block, _fast_head, token_hits_cache):
        fn.cache_clear()
    engine().clear_hits()


def page_rows(
    store: RunStore,
    flt: ResponseFilter,
    sort: str,
    descending: bool,
    start: int,
    end: int,
    seconds: float = DEFAULT_SEARCH_SECONDS,
) -> tuple[pl.DataFrame, int]:
    """Rows ``start:end`` of the ordered matches (``source_line``, ``sample_id``, the table's columns,
    previews, how each ended where the store keeps it: ``ends_with_end``) and the count.

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
    want = list(dict.fromkeys(["source", "line", "part", "row", *cols]))
    # How each ended, read with its row; else part and row say where (data.response_columns.add_ends).
    end = [ends.COLUMN] if ends.COLUMN in names else []
    # The first matches of a search: kept beside their texts at ingest.
    rows = _top_rows(store, keys, want + end) if fast is not None else None
    if rows is None and start == 0 and flt.step is None and flt.is_default():  # the first block, kept too
        rows = topk.first_rows(store, keys, want + end)
    if rows is None:
        rows = store.read_keys(keys, want + end)
    where = [pl.col(c).cast(pl.Int64) for c in ("part", "row")]
    rows = rows.select(source_line(), *cols, *where, *(c for c in end if c in rows.columns))
    return with_hits(rows, keys, store, flt, seconds) if flt.tok else rows  # where its token is, its value


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
        "prompt_key": row.get("prompt_key"),
        "group_id": row.get("group_id"),
    }


def match_share_by_step(store: RunStore, q: str, seconds: float = DEFAULT_SEARCH_SECONDS) -> pl.DataFrame:
    """Per step of the run: ``n`` responses, ``matches`` of the search ``q`` (prompt or response, as the
    responses page's search: the same bounded search, cached) and ``y`` = matches / n, the share whose
    point opens ``/responses?step=S&q=…``. Raises :class:`data.queries.QueryError` for a pattern that
    cannot run and :class:`data.queries.SearchStopped` for a search that took more than ``seconds``."""
    check_regex(q)
    key = StoreKey(store)
    hits = engine().hits(key, q, None, seconds)
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
    notice: str | None = None  # a step the run lacks, resolved: the X-RLBoard-Notice header


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
    A step the run lacks is no error: it is resolved as on every page (``RunContext.step``), and the plan's
    ``notice`` says so (the ``X-RLBoard-Notice`` header).
    """
    run = first(query, "run")
    if not run:
        raise ExportError(400, "missing parameter run=")
    ctx = board.open_run(run, None, 30.0)
    if ctx.store is None:
        try:
            board.run_dir(run)
        except UnknownRun:
            raise ExportError(404, f"unknown run {run!r}") from None
        if board.status(run).error is not None:  # its ingest failed: why, and when it is tried again
            raise ExportError(503, board.failure_notices(run)[0])
        raise ExportError(503, f"run {run!r} is still being read; try again in a moment")
    steps = ctx.step_list
    view, notices = ResponsesView.from_query(query, ctx, sortable_columns(ctx.store), extra_keys=EXPORT_KEYS)
    view, more = check_truncated(annotations.with_labelled(view, board.settings), ctx.store, board.settings)
    step_notes = _step_notices(ctx, first(query, "step"))
    notices = [n for n in notices if n not in step_notes] + more
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
        ctx.store,
        flt,
        view.sort,
        view.descending,
        fmt,
        f"{safe}-{where}.{fmt}",
        board.settings.search_seconds,
        board.settings.export_seconds,
        " ".join(step_notes) or None,
    )


def _step_notices(ctx: RunContext, raw: str | None) -> list[str]:
    """The notice of the step ``raw`` asks for when the run lacks it (the export answers the step shown
    instead, and says so in a header)."""
    try:
        return ctx.step(int(raw))[1] if raw else []
    except ValueError:
        return []
