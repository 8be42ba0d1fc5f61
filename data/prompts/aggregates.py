"""Per-prompt aggregates of a run: the prompt list (one row per prompt, written beside the store at each
commit, see :mod:`data.derived.prompts`), its trend threshold, the steps' length medians, a search of the
prompts' texts and the counts of the list's header; cached on the store version."""

from __future__ import annotations

import polars as pl

from data.cache import StoreKey, shared
from data.config import DEFAULT_SEARCH_SECONDS
from data.derived import prompts as prompt_summary
from data.metrics.degeneration import with_length_ratio
from data.metrics.group import TRENDS
from data.metrics.response import prompt_key_text
from data.queries import check_regex, search
from data.views import links


@shared(8)
def _table(v: StoreKey) -> tuple[pl.DataFrame, float]:
    # Written beside the store by the commit (one row per prompt); a store committed before such files
    # existed is scanned, by the same function.
    return prompt_summary.read_prompt_list(v.store) or prompt_summary.prompt_list(v.store)


@shared(8)
def _medians(v: StoreKey) -> pl.DataFrame:
    return prompt_summary.step_medians(v.store)


@shared(64)
def _search(v: StoreKey, pattern: str, seconds: float) -> frozenset[str]:
    pads = tuple(v.store.manifest.pad_tokens)
    lf = (
        v.store.scan_parts()
        .select("prompt_key", "prompt")
        .unique("prompt_key")
        .with_columns(prompt_key_text(pads).alias("prompt"))
        .filter(pl.col("prompt").str.contains(pattern))
        .select("prompt_key")
    )
    return frozenset(search(lf, pattern, seconds).get_column("prompt_key").to_list())


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
    """Counts for the list header: prompts, recurring ones (2+ steps), per trend, the most steps, and the
    groups of 2+ responses (``groups``: of one step and one ``group_id`` where the trainer names it, else
    of one step and one prompt; see data.metrics.group)."""
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
        "groups": int(table.get_column("n_groups").sum() or 0) if table.height else 0,
    }


def answers_in_groups(store) -> bool:
    """Whether the run's responses come in groups: its files give a ``group_id``, or some prompt was answered
    more than once at a step (the prompt list's ``n_responses`` above its ``n_steps``, its distinct steps).
    A run of one answer per prompt and step has no group to show."""
    if "group_id" in store.extra_columns():
        return True
    table = prompt_table(store)
    return bool(table.height) and bool(table.select((pl.col("n_responses") > pl.col("n_steps")).any()).item())


def group_link(store, run: str | None, row, prefix: str = "") -> str | None:
    """The link "its group" of one response ``row`` (:func:`data.views.links.group_of`); None for no row and
    on a run whose responses come in no group (:func:`answers_in_groups`)."""
    return links.group_of(run, row, prefix) if row and answers_in_groups(store) else None
