"""The prompt list as the page shows it: filtered, sorted and paged, with its columns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import polars as pl

from data.config import DEFAULT_SEARCH_SECONDS
from data.metrics import label
from data.prompts.aggregates import overview, prompt_table, run_trend_threshold, search_prompts
from data.queries import QueryError

if TYPE_CHECKING:  # the view state is data.views'; this module only reads its fields
    from data.views.prompts import PromptsView


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


def list_columns(table: pl.DataFrame) -> list[tuple[str, str, str]]:
    """``(key, header, kind)`` of the prompt list's columns (kind: see components.format.value); the
    optional ones only when the run has a value in them."""
    cols = [
        ("prompt_preview", "prompt", "text"),
        ("first_step", "first step", "step"),
        ("n_steps", "steps", "int"),
        ("n_responses", "responses", "int"),
        ("reward_early", f"{label('reward')} · first ¼ of its steps", "num"),
        ("reward_late", f"{label('reward')} · last ¼ of its steps", "num"),
        ("reward_delta", "Δ last − first ¼", "signed"),
        ("gain_mean", f"{label('reward_gain')} · mean", "signed"),
        ("win_rate", "win rate vs reference", "share"),
        ("trend", "trend", "trend"),
        ("repetition_mean", f"{label('repetition')} · mean", "num"),
        ("length_ratio_mean", f"{label('length_ratio')} · mean", "num"),
        ("n_groups", "groups", "int"),
        ("zero_spread_groups", "zero-spread groups", "int"),
    ]
    optional = {"gain_mean", "win_rate", "repetition_mean", "length_ratio_mean"}
    keep = []
    for c in cols:
        if c[0] in optional and table.get_column(c[0]).null_count() == table.height:
            continue
        if c[0] in ("n_groups", "zero_spread_groups") and int(table.get_column("n_groups").sum() or 0) == 0:
            continue
        keep.append(c)
    return keep


@dataclass(frozen=True)
class PromptList:
    """One page of the prompt list: the run's ``info`` (see :func:`overview`), the ``rows`` of the page and
    their ``columns``, the page shown of ``pages`` with the total of ``matching`` prompts, the trend
    ``threshold``, and ``notices`` (a stopped search, a page past the end)."""

    info: dict
    rows: pl.DataFrame
    columns: list[tuple[str, str, str]]
    page: int
    pages: int
    matching: int
    threshold: float
    notices: list[str]

    @property
    def first_shown(self) -> int:
        """The number of the page's first prompt among the matching ones (0 when none matches)."""
        return (self.page - 1) * PAGE_SIZE + 1 if self.matching else 0

    @property
    def last_shown(self) -> int:
        return (self.page - 1) * PAGE_SIZE + self.rows.height


def prompt_list(store, view: PromptsView, seconds: float = DEFAULT_SEARCH_SECONDS) -> PromptList | None:
    """The :class:`PromptList` ``view`` shows (None for a run without prompts yet)."""
    table = prompt_table(store)
    if table.height == 0:
        return None
    msgs = []
    keys = None
    if view.q:
        try:
            keys = search_prompts(store, view.q, seconds)
        except QueryError as e:  # stopped at its deadline: no prompt is shown as matching
            msgs.append(f"{str(e)[:1].upper()}{str(e)[1:]}.")
            keys = frozenset()
    rows = filter_prompts(table, view, keys)
    shown, page, pages = page_of(rows, view.page)
    if page != view.page and rows.height:
        msgs.append(f"Page {view.page} is past the end: showing page {page} of {pages}.")
    info = overview(table)
    # What a group is in this run: the trainer's own key where its dialect or file names one.
    info["group_by"] = "group_id" if "group_id" in store.schema() else "prompt"
    return PromptList(
        info, shown, list_columns(table), page, pages, rows.height, run_trend_threshold(store), msgs
    )
