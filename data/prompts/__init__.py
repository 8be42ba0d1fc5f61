"""Prompts across training: per-prompt aggregates and trends (:mod:`.aggregates`), the list as the page
shows it (:mod:`.listing`), and one prompt's history and detail (:mod:`.detail`, response groups too).

Prompts are grouped by the store's ``prompt_key`` (a hash of the prompt with pad tokens removed and
surrounding whitespace stripped, computed at ingest). The prompt list is computed at each commit and kept
beside the store (see :mod:`data.derived.prompts`); the rest is computed from lazy scans once per
store version and cached. This package's face is what the pages read by.
"""

from data.prompts.aggregates import (
    answers_in_groups,
    group_link,
    overview,
    prompt_row,
    prompt_table,
    run_trend_threshold,
    search_prompts,
    step_medians,
    store_length_ratio,
)
from data.prompts.detail import (
    CHART_BINS,
    CHART_LIMIT,
    HISTORY_COLUMNS,
    HISTORY_LIMIT,
    PromptDetail,
    RewardChart,
    first_and_latest,
    group_note,
    history,
    history_block,
    history_by_step,
    history_columns,
    prompt_detail,
    reward_chart,
    texts,
)
from data.prompts.group import GROUP_LIMIT, Group, group_views, prompt_groups
from data.prompts.listing import PAGE_SIZE, PromptList, filter_prompts, list_columns, page_of, prompt_list

__all__ = [
    "CHART_BINS",
    "CHART_LIMIT",
    "GROUP_LIMIT",
    "Group",
    "HISTORY_COLUMNS",
    "HISTORY_LIMIT",
    "PAGE_SIZE",
    "PromptDetail",
    "PromptList",
    "RewardChart",
    "answers_in_groups",
    "filter_prompts",
    "first_and_latest",
    "group_link",
    "group_note",
    "group_views",
    "history",
    "history_block",
    "history_by_step",
    "history_columns",
    "list_columns",
    "overview",
    "page_of",
    "prompt_detail",
    "prompt_groups",
    "prompt_list",
    "prompt_row",
    "prompt_table",
    "reward_chart",
    "run_trend_threshold",
    "search_prompts",
    "step_medians",
    "store_length_ratio",
    "texts",
]
