"""Responses page data: the view state of ``/responses`` (and ``/export``), its columns, and pages of rows.

A page of the grid is a slice of one cached *order* (positions into the in-memory scalars) per
(store version, filter, sort), so scrolling never re-sorts and a text search runs once per query.
"""

from __future__ import annotations

import functools
import math
import os
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path

import polars as pl

from data import bounded
from data.cache import StoreKey, shared
from data.config import DEFAULT_SEARCH_SECONDS
from data.live import LIVE_KEY
from data.metrics.registry import LENGTH_TOKENS, length_column
from data.metrics.response import strip_pad_text
from data.queries import QueryError, ResponseFilter, SearchStopped, check_regex, search, sort_rows
from data.store import RunStore
from data.store.layout import TEXT_INDEX, beside_store
from data.views.codec import encode, first, get_bool, get_choice, get_float, key_notices

ALL_STEPS = "all"
DEFAULT_SORT = "reward"
DEFAULT_ORDER = "desc"
ORDERS = ("desc", "asc")
RANGE_KEYS = ("reward", "gain", "kl", "len", "ref")
# Hand-typed URLs may use the short names of the design notes (``sort=kl``).
SORT_ALIASES = {"kl": "kl_mean", "gain": "reward_gain", "len": "response_length", "length": "response_length"}

# Table columns in order; optional ones are shown only when the run has a value in them.
METRIC_COLUMNS = (
    "step",
    "reward",
    "ref_reward",
    "reward_gain",
    "response_length",
    "response_chars",
    "kl_mean",
    "kl_sum",
    "log_ratio_mean",
    "value_error_abs_mean",
)
ALWAYS_SHOWN = ("step", "reward")
PREVIEW_COLUMNS = ("prompt_preview", "response_preview")
# Scalar columns that are bookkeeping, not something to sort by.
NOT_SORTABLE = {"sample_id", "source", "part", "row", "prompt_key", "prompt_preview", "response_preview"}
# Keys of ``/export`` besides the view's (the selected sample is a page thing and is accepted, unused).
EXPORT_KEYS = ("format",)
# Keys the app shell keeps in every page's URL (auto-refresh of a live run): accepted, not part of the view.
SHELL_KEYS = (LIVE_KEY,)
REGEX_FALLBACK = ": the text search is not applied."


@dataclass(frozen=True)
class ResponsesView:
    """Everything that describes one view of the responses page; ``to_query()`` omits defaults.

    ``step`` is None for the run's last step (the default), ``"all"`` for every step, or a step number.
    Ranges are half-open (``min <= x < max``), as in :class:`data.queries.ResponseFilter`; ``q`` is a
    regular expression over prompt and response; ``loses`` keeps responses below their reference reward;
    ``sample`` is the selected response (shown beside the table).
    """

    run: str | None = None
    step: int | str | None = None
    sort: str = DEFAULT_SORT
    order: str = DEFAULT_ORDER
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
    q: str | None = None
    loses: bool = False
    sample: str | None = None

    @classmethod
    def from_query(
        cls,
        query: Mapping,
        steps: Iterable[int] | None = None,
        sortable: Iterable[str] | None = None,
        extra_keys: Iterable[str] = (),
    ) -> tuple[ResponsesView, list[str]]:
        """Parse a query (``parse_search`` dict or ``layout(**query)`` kwargs); bad values -> default + notice.

        ``steps`` and ``sortable`` (when given) are the run's steps and sortable columns: a step or sort
        column the run does not have falls back too. Unknown keys (other than ``extra_keys``) are noticed.
        """
        notices = key_notices(query, {f.name for f in fields(cls)} | set(extra_keys) | set(SHELL_KEYS))
        run = first(query, "run") or None
        step = _parse_step(query, steps, notices)
        raw_sort = first(query, "sort")
        sort = SORT_ALIASES.get(raw_sort, raw_sort) if raw_sort else DEFAULT_SORT
        if sort == LENGTH_TOKENS and sortable is not None:
            sort = length_column(sortable)  # a run without token arrays: its length in characters
        if sortable is not None:
            choices = list(sortable)
            if sort not in choices:
                shown = ", ".join(choices[:12]) + ("…" if len(choices) > 12 else "")
                notices.append(f"Ignored sort={raw_sort!r}: expected one of {shown}.")
                sort = DEFAULT_SORT
        order = get_choice(query, "order", ORDERS, notices, DEFAULT_ORDER)
        ranges = {}
        for key in RANGE_KEYS:
            for end in ("min", "max"):
                ranges[f"{key}_{end}"] = get_float(query, f"{key}_{end}", notices)
        q = first(query, "q") or None
        if q is not None:
            try:
                check_regex(q)
            except QueryError as e:
                notices.append(f"{e}{REGEX_FALLBACK}")
        loses = get_bool(query, "loses", notices)
        sample = first(query, "sample") or None
        view = cls(run=run, step=step, sort=sort, order=order, q=q, loses=loses, sample=sample, **ranges)
        return view, notices

    def to_query(self) -> str:
        """``?run=…&step=…`` with defaults left out ('' when everything is a default)."""
        return encode(
            [
                ("run", self.run),
                ("step", self.step),
                ("sort", None if self.sort == DEFAULT_SORT else self.sort),
                ("order", None if self.order == DEFAULT_ORDER else self.order),
                *((f"{k}_{e}", getattr(self, f"{k}_{e}")) for k in RANGE_KEYS for e in ("min", "max")),
                ("q", self.q),
                ("loses", True if self.loses else None),
                ("sample", self.sample),
            ]
        )

    @property
    def descending(self) -> bool:
        return self.order == "desc"

    def resolved_step(self, steps: list[int]) -> int | None:
        """The step shown: None for all steps, the last step of ``steps`` by default."""
        if self.step == ALL_STEPS:
            return None
        if self.step is None:
            return steps[-1] if steps else None
        return int(self.step)

    def response_filter(self, steps: list[int]) -> ResponseFilter:
        """The filter of this view (an invalid regex is left out: the page says so)."""
        q = self.q
        if q is not None and regex_error(q) is not None:
            q = None
        return ResponseFilter(
            step=self.resolved_step(steps),
            reward_min=self.reward_min,
            reward_max=self.reward_max,
            gain_min=self.gain_min,
            gain_max=self.gain_max,
            kl_min=self.kl_min,
            kl_max=self.kl_max,
            len_min=self.len_min,
            len_max=self.len_max,
            ref_min=self.ref_min,
            ref_max=self.ref_max,
            q=q,
            loses_only=self.loses,
        )

    def filter_key(self) -> str:
        """The query of what selects and orders rows (not the selected sample): the grid reloads on change."""
        return replace(self, sample=None, sort=DEFAULT_SORT, order=DEFAULT_ORDER).to_query()

    def with_(self, **changes) -> ResponsesView:
        return replace(self, **changes)


def _parse_step(query: Mapping, steps: Iterable[int] | None, notices: list[str]) -> int | str | None:
    raw = first(query, "step")
    if raw is None or raw == "":
        return None
    if raw.lower() == ALL_STEPS:
        return ALL_STEPS
    try:
        step = int(raw)
    except ValueError:
        notices.append(f"Ignored step={raw!r}: expected a step number or 'all'.")
        return None
    if steps is not None:
        steps = list(steps)
        if step not in set(steps):
            last = f": showing the last step ({steps[-1]})" if steps else ""
            notices.append(f"Ignored step={raw!r}: the run has no such step{last}.")
            return None
    return step


def regex_error(pattern: str) -> str | None:
    """The readable error of an invalid regular expression, None when it is valid."""
    try:
        check_regex(pattern)
    except QueryError as e:
        return str(e)
    return None


# ---- columns ---------------------------------------------------------------------------------------------


@shared(32)
def _columns(key: StoreKey) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    df = key.store.scalars()
    present = {c for c in df.columns if df.get_column(c).null_count() < df.height}
    metrics = [c for c in METRIC_COLUMNS if c in ALWAYS_SHOWN or c in present]
    # Characters only stand in for the length in tokens when a run has no token fields.
    if "response_length" in metrics:
        metrics.remove("response_chars")
    extras = [c for c in key.store.extra_columns() if c in df.columns and c not in METRIC_COLUMNS]
    # Only shown columns: the grid's header is where a sort is chosen and seen.
    sortable = [c for c in (*metrics, *extras) if c in df.columns and c not in NOT_SORTABLE]
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


# ---- rows ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Order:
    """Filtered, sorted positions into ``store.scalars()`` plus the summary of the matches."""

    positions: pl.Series
    scope: int  # responses of the step (or of the run for all steps), before the filter
    mean_reward: float | None

    @property
    def count(self) -> int:
        return len(self.positions)


# ---- text index: what a regex search scans --------------------------------------------------------------

TEXT_INDEX_COLUMNS = ("part", "row", "step", "prompt", "response")
_WARMING: set[str] = set()  # text indexes being built in the background (one thread per store)
_WARMING_LOCK = threading.Lock()


def text_index_dir(store: RunStore) -> Path:
    """``<cache>/<store>.text-index``: beside the store, not in it (the store's own files stay its own)."""
    return beside_store(store.dir, TEXT_INDEX)


def text_index_files(store: RunStore, folder: Path | None = None) -> list[Path] | None:
    """Per committed part, its ``part, row, step, prompt, response`` as an uncompressed Arrow IPC file in
    ``folder`` (default :func:`text_index_dir`), built on first use; None when it cannot be written.

    A regex search over all steps scans these memory-mapped files instead of decompressing the parts
    (about 5x faster on the 2 GB benchmark run). A part never changes once committed, and each file name
    carries its part file's size and mtime, so a rebuilt store never reads a stale one.
    """
    folder = folder or text_index_dir(store)
    out = []
    try:
        folder.mkdir(exist_ok=True)
        for src in store.part_files():
            st = src.stat()
            dst = folder / f"{src.stem}-{st.st_size}-{st.st_mtime_ns}.arrow"
            if not dst.exists():
                for old in folder.glob(f"{src.stem}-*.arrow"):
                    old.unlink(missing_ok=True)
                df = pl.read_parquet(src, columns=list(TEXT_INDEX_COLUMNS))
                tmp = folder / f".{dst.name}.{os.getpid()}.{threading.get_ident()}.tmp"
                df.write_ipc(tmp)
                os.replace(tmp, dst)
            out.append(dst)
    except OSError:
        return None
    return out


def warm_text_index(store: RunStore) -> None:
    """Build the text index of ``store`` in a background thread (once at a time), so a first search is fast."""
    key = store.version
    with _WARMING_LOCK:
        if key in _WARMING:
            return
        _WARMING.add(key)

    def build():
        try:
            bounded.warm()  # and a search helper, so that a first search need not start one
            text_index_files(store)
        finally:
            with _WARMING_LOCK:
                _WARMING.discard(key)

    threading.Thread(target=build, name=f"text-index-{store.dir.name}", daemon=True).start()


# Searches stopped at their deadline, by (store key, pattern, step): each grid block and the summary ask for
# the same search, and a search that just took all its time is not run again before STOPPED_SECONDS.
STOPPED_SECONDS = 60.0
_STOPPED: dict[tuple, tuple[float, str]] = {}
_STOPPED_LOCK = threading.Lock()


@functools.lru_cache(maxsize=16)
def _text_hits(key: StoreKey, pattern: str, step: int | None, seconds: float) -> pl.DataFrame:
    """``(part, row)`` of the responses whose prompt or response matches (integers join faster than ids),
    found within ``seconds`` (raises :class:`data.queries.SearchStopped`)."""
    memo = (key, pattern, step)
    with _STOPPED_LOCK:
        when, message = _STOPPED.get(memo, (None, ""))
    if when is not None and time.monotonic() - when < STOPPED_SECONDS:
        raise SearchStopped(message)
    if step is not None:
        # One step: the parts' row-group statistics skip every other step, so they are the faster source.
        lf = key.store.scan_parts().select(*TEXT_INDEX_COLUMNS).filter(pl.col("step") == step)
    else:
        files = text_index_files(key.store)
        lf = pl.scan_ipc(files) if files else key.store.scan_parts().select(*TEXT_INDEX_COLUMNS)
    hit = pl.col("prompt").str.contains(pattern) | pl.col("response").str.contains(pattern)
    try:
        return search(lf.filter(hit).select("part", "row"), pattern, seconds)
    except SearchStopped as e:
        with _STOPPED_LOCK:
            if len(_STOPPED) > 64:
                _STOPPED.clear()
            _STOPPED[memo] = (time.monotonic(), str(e))
        raise


@functools.lru_cache(maxsize=16)
def _order(key: StoreKey, flt: ResponseFilter, sort: str, descending: bool, seconds: float) -> Order:
    df = key.store.scalars()
    if df.height == 0 or "step" not in df.columns:
        return Order(pl.Series("i", [], dtype=pl.UInt32), 0, None)
    base = df.lazy().with_row_index("__i")
    scope = base.filter(pl.col("step") == flt.step) if flt.step is not None else base
    lf = base.filter(flt.scalar_expr())
    if flt.q:
        lf = lf.join(_text_hits(key, flt.q, flt.step, seconds).lazy(), on=["part", "row"], how="semi")
    out = sort_rows(lf, sort, descending).select("__i", "reward").collect()
    n_scope = scope.select(pl.len()).collect().item()
    rewards = out.get_column("reward")
    finite = rewards.filter(rewards.is_finite())
    mean = finite.mean() if len(finite) else None
    return Order(out.get_column("__i"), int(n_scope), None if mean is None else float(mean))


def ordered(
    store: RunStore,
    flt: ResponseFilter,
    sort: str,
    descending: bool,
    seconds: float = DEFAULT_SEARCH_SECONDS,
) -> Order:
    """The cached :class:`Order` of ``flt`` sorted by ``sort`` (ties by ``sample_id``); raises QueryError
    (:class:`data.queries.SearchStopped` for a text search that took more than ``seconds``)."""
    if flt.q:
        check_regex(flt.q)
    return _order(StoreKey(store), flt, sort, descending, seconds)


def page_rows(
    store: RunStore,
    flt: ResponseFilter,
    sort: str,
    descending: bool,
    start: int,
    end: int,
    seconds: float = DEFAULT_SEARCH_SECONDS,
) -> tuple[pl.DataFrame, int]:
    """Rows ``start:end`` of the ordered matches (table columns, previews and ``sample_id``) and the count."""
    order = ordered(store, flt, sort, descending, seconds)
    start, end = max(0, start), max(0, min(end, order.count))
    metrics, extras = table_columns(store)
    cols = ["sample_id", *metrics, *extras, *PREVIEW_COLUMNS]
    df = store.scalars()
    cols = [c for c in cols if c in df.columns]
    if end <= start:
        return df.select(cols).clear(), order.count
    return df.select(cols)[order.positions.slice(start, end - start)], order.count


def json_rows(df: pl.DataFrame) -> list[dict]:
    """Rows as JSON-ready dicts: NaN and infinities become None (JSON has no such numbers)."""
    floats = [c for c, t in df.schema.items() if t.is_float()]
    if floats:
        df = df.with_columns(
            pl.when(pl.col(c).is_finite()).then(pl.col(c)).otherwise(None).alias(c) for c in floats
        )
    return df.to_dicts()


def sample_texts(store: RunStore, sample: str, pad_tokens: tuple[str, ...]) -> dict | None:
    """Prompt, response and reference response of one response (pad tokens removed) with its scalars."""
    row = store.sample(sample)
    if row is None:
        return None

    def clean(text):
        return strip_pad_text(text, tuple(pad_tokens))

    def num(v):
        return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else v

    return {
        "sample_id": sample,
        "step": row.get("step"),
        "prompt": clean(row.get("prompt")),
        "response": clean(row.get("response")),
        "ref_response": clean(row.get("ref_response")),
        "reward": num(row.get("reward")),
        "ref_reward": num(row.get("ref_reward")),
        "reward_gain": num(row.get("reward_gain")),
        "source": row.get("source"),
        "line": row.get("line"),
    }


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
    from data.store import UnknownRun

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
    formats = list(formats)
    fmt = first(query, "format") or "csv"
    if fmt not in formats:
        notices.append(f"Ignored format={fmt!r}: expected one of {', '.join(formats)}.")
    if notices:
        raise ExportError(400, "\n".join(_strict(n) for n in notices))
    flt = view.response_filter(steps)
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in run)
    where = "all" if flt.step is None else f"step{flt.step}"
    return ExportPlan(
        store, flt, view.sort, view.descending, fmt, f"{safe}-{where}.{fmt}", board.settings.search_seconds
    )
