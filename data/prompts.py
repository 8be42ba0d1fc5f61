"""Prompts across training: per-prompt aggregates and trends, response groups, one prompt's history.

Prompts are grouped by the store's ``prompt_key`` (a hash of the prompt with pad tokens removed and
surrounding whitespace stripped, computed at ingest). Everything here is computed from the in-memory
scalars once per store version and cached; nothing is persisted beside the store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from data.cache import StoreKey, shared
from data.config import DEFAULT_SEARCH_SECONDS
from data.metrics.degeneration import step_length_medians, with_length_ratio
from data.metrics.group import TRENDS, finite, prompt_aggregates, trend_threshold, with_advantage
from data.metrics.response import prompt_key_text, strip_pad_text
from data.queries import check_regex, search

if TYPE_CHECKING:  # the view state is data.views'; this module only reads its fields
    from data.views.prompts import PromptsView

# ---- cached on the store version -------------------------------------------------------------------------


@shared(8)
def _table(v: StoreKey) -> tuple[pl.DataFrame, float]:
    scalars = v.store.scalars()
    if "prompt_key" not in scalars.columns or scalars.height == 0:
        return pl.DataFrame(schema=_EMPTY_TABLE), 0.0
    lf = scalars.lazy()
    threshold = trend_threshold(lf)
    return prompt_aggregates(lf, threshold).collect(), threshold


@shared(8)
def _medians(v: StoreKey) -> pl.DataFrame:
    return step_length_medians(v.store.scalars().lazy()).collect()


@shared(8)
def _from_file(v: StoreKey) -> bool:
    return v.store.has_column("advantage")


@shared(64)
def _search(v: StoreKey, pattern: str, seconds: float) -> frozenset[str]:
    pads = tuple(v.store.manifest.data.get("pad_tokens", ()))
    lf = (
        v.store.scan_parts()
        .select("prompt_key", "prompt")
        .unique("prompt_key")
        .with_columns(prompt_key_text(pads).alias("prompt"))
        .filter(pl.col("prompt").str.contains(pattern))
        .select("prompt_key")
    )
    return frozenset(search(lf, pattern, seconds).get_column("prompt_key").to_list())


_EMPTY_TABLE = {
    "prompt_key": pl.String,
    "n_steps": pl.Int64,
    "n_responses": pl.Int64,
    "first_step": pl.Int64,
    "last_step": pl.Int64,
    "reward_early": pl.Float64,
    "reward_late": pl.Float64,
    "reward_mean": pl.Float64,
    "gain_mean": pl.Float64,
    "n_both": pl.Int64,
    "wins": pl.Int64,
    "ties": pl.Int64,
    "repetition_mean": pl.Float64,
    "length_ratio_mean": pl.Float64,
    "order": pl.UInt32,
    "prompt_preview": pl.String,
    "n_groups": pl.Int64,
    "zero_spread_groups": pl.Int64,
    "reward_delta": pl.Float64,
    "win_rate": pl.Float64,
    "tie_rate": pl.Float64,
    "never_beats": pl.Boolean,
    "trend": pl.String,
}


def prompt_table(store) -> pl.DataFrame:
    """:func:`prompt_aggregates` of the store's run, one row per prompt (cached on the store version)."""
    return _table(StoreKey(store))[0]


def prompt_row(store, key: str) -> dict:
    """One prompt's row of :func:`prompt_table` as a dict ({} for an unknown key)."""
    rows = prompt_table(store).filter(pl.col("prompt_key") == key).to_dicts()
    return rows[0] if rows else {}


def run_trend_threshold(store) -> float:
    """The reward difference the store's trends were classified with (``TREND_EFFECT`` × σ)."""
    return _table(StoreKey(store))[1]


def step_medians(store) -> pl.DataFrame:
    """:func:`data.metrics.degeneration.step_length_medians` of the store (cached on the store version)."""
    return _medians(StoreKey(store))


def store_length_ratio(store, rows: pl.LazyFrame) -> pl.LazyFrame:
    """Add ``length_ratio`` (length over its step's median, see :mod:`data.metrics.degeneration`) to any rows of the
    store's scalars, e.g. one page of the responses table."""
    return with_length_ratio(rows, step_medians(store).lazy())


def search_prompts(store, pattern: str, seconds: float = DEFAULT_SEARCH_SECONDS) -> frozenset[str]:
    """Keys of the prompts whose text (pads removed, stripped) matches the regular expression ``pattern``.

    Raises :class:`data.queries.QueryError` for an invalid pattern (:class:`data.queries.SearchStopped` for a
    search that takes more than ``seconds``). Reads the prompt column of the parts once per (store version,
    pattern).
    """
    check_regex(pattern)
    return _search(StoreKey(store), pattern, seconds)


def overview(table: pl.DataFrame) -> dict:
    """Counts for the list header: prompts, recurring ones (2+ steps), per trend, and the most steps."""
    counts = dict.fromkeys(TRENDS, 0)
    if table.height:
        for code, n in table.group_by("trend").len().iter_rows():
            if code in counts:
                counts[code] = n
    return {
        "prompts": table.height,
        "recurring": int(table.filter(pl.col("n_steps") >= 2).height) if table.height else 0,
        "max_steps": int(table.get_column("n_steps").max() or 0) if table.height else 0,
        "never": int(table.get_column("never_beats").sum()) if table.height else 0,
        "trends": counts,
    }


# ---- one prompt ------------------------------------------------------------------------------------------

HISTORY_COLUMNS = (
    "sample_id",
    "source",
    "line",
    "part",
    "row",
    "step",
    "reward",
    "ref_reward",
    "reward_gain",
    "response_length",
    "response_chars",
    "kl_mean",
    "kl_sum",
    "repetition",
    "response_preview",
    "prompt_key",
    "prompt_preview",
    "group_id",
    "advantage",
)


def history(store, key: str) -> pl.DataFrame:
    """Every response to prompt ``key``, in step order, with ``length_ratio``, its group's columns (see
    :func:`group_stats`) and ``advantage`` / ``advantage_recomputed`` (see :func:`with_advantage`).

    Within a step: by group (``group_id`` when the run has one), then reward (highest first), then
    ``sample_id``. Empty for an unknown key.
    """
    scalars = store.scalars()
    if "prompt_key" not in scalars.columns:
        return pl.DataFrame()
    cols = [c for c in HISTORY_COLUMNS if c in scalars.columns]
    # Filter the big frame eagerly first (~1 ms): the rest of the plan then works on a few rows.
    rows = scalars.filter(pl.col("prompt_key") == key).select(cols).lazy()
    if "repetition" not in cols:
        rows = rows.with_columns(pl.lit(None, pl.Float64).alias("repetition"))
    rows = store_length_ratio(store, rows)
    rows = with_advantage(rows, _from_file(StoreKey(store)))
    by = ["step", *(["group_id"] if "group_id" in cols else []), "group", "reward", "sample_id"]
    desc = [c == "reward" for c in by]
    return rows.sort(by, descending=desc, nulls_last=True).collect()


def history_by_step(rows: pl.DataFrame) -> pl.DataFrame:
    """Per step of a :func:`history`: ``n``, mean ``reward`` and mean ``ref_reward`` (finite values), sorted."""
    if rows.height == 0:
        return pl.DataFrame(
            schema={"step": pl.Int64, "n": pl.UInt32, "reward": pl.Float64, "ref_reward": pl.Float64}
        )
    return (
        rows.group_by("step")
        .agg(
            pl.len().alias("n"),
            pl.col("reward").filter(finite("reward")).mean().alias("reward"),
            pl.col("ref_reward").filter(finite("ref_reward")).mean().alias("ref_reward"),
        )
        .sort("step")
    )


def first_and_latest(rows: pl.DataFrame) -> tuple[dict | None, dict | None]:
    """The first response of the earliest step and of the latest step of a :func:`history` (by file and
    line within the step): ``(first, latest)`` rows as dicts; the same row twice for a single step."""
    if rows.height == 0:
        return None, None
    ordered = rows.sort("step", "source", "line")
    firsts = ordered.filter(pl.col("step") == ordered.item(0, "step"))
    lasts = ordered.filter(pl.col("step") == ordered.item(ordered.height - 1, "step"))
    return firsts.row(0, named=True), lasts.row(0, named=True)


def texts(store, row: dict | None) -> dict:
    """``prompt``, ``response``, ``ref_response`` of one :func:`history` row, pad tokens removed (one read)."""
    if row is None:
        return {"prompt": "", "response": "", "ref_response": None}
    df = store.read_rows(int(row["part"]), [int(row["row"])], ["prompt", "response", "ref_response"])
    got = df.row(0, named=True) if df.height else {}
    pads = tuple(store.manifest.data.get("pad_tokens", ()))
    ref = got.get("ref_response")
    return {
        "prompt": (strip_pad_text(got.get("prompt"), pads) or "").strip(),
        "response": strip_pad_text(got.get("response"), pads) or "",
        "ref_response": None if ref is None else strip_pad_text(ref, pads),
    }


# ---- the list: filter, sort, page ------------------------------------------------------------------------

PAGE_SIZE = 50


def filter_prompts(
    table: pl.DataFrame, view: PromptsView, keys: frozenset[str] | None = None
) -> pl.DataFrame:
    """The rows of a :func:`prompt_table` that ``view`` keeps (``keys``: text-search hits), sorted by
    ``view.sort`` (nulls last) with ties in first-seen order."""
    cond = pl.lit(True)
    if view.view == "never":
        cond &= pl.col("never_beats")
    if view.trend:
        cond &= pl.col("trend") == view.trend
    if view.min_steps:
        cond &= pl.col("n_steps") >= view.min_steps
    if keys is not None:
        cond &= pl.col("prompt_key").is_in(list(keys))
    by = [view.sort] + [c for c in ("first_step", "order") if c != view.sort]
    desc = [view.order == "desc"] + [False] * (len(by) - 1)
    return table.filter(cond).sort(by, descending=desc, nulls_last=True)


def page_of(rows: pl.DataFrame, page: int, size: int = PAGE_SIZE) -> tuple[pl.DataFrame, int, int]:
    """``(rows of page, the page actually shown, number of pages)``; a page past the end shows the last."""
    pages = max(1, -(-rows.height // size))
    page = min(max(1, page), pages)
    return rows.slice((page - 1) * size, size), page, pages
