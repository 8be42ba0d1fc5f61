"""What the prompts page shows of a view, as data beside the links it gives: the list's rows and each row's
prompt page, a block of one prompt's responses with their token pages and groups, the token pages of a
group view's completions. The page's callbacks and its JSON answer (``api.answers.prompts``) both call
these, so that the two cannot disagree."""

from __future__ import annotations

from dataclasses import dataclass, replace

from data import prompts
from data.responses import json_rows
from data.views import links
from data.views.prompts import PromptsView


def list_rows(listing: prompts.PromptList, view: PromptsView, prefix: str = "") -> tuple[PromptsView, list[dict], list[str]]:  # fmt: skip
    """``(view shown, rows, hrefs)`` of a :class:`data.prompts.PromptList` of ``view``: the view at the page
    shown (a page past the end shows the last), the list's rows in order and each row's prompt page (the
    list state rides along, so that "‹ all prompts" returns to this very list)."""
    shown = replace(view, page=listing.page)
    rows = listing.rows.to_dicts()
    return shown, rows, [links.prompts(replace(shown, prompt=r["prompt_key"]), prefix) for r in rows]


@dataclass(frozen=True)
class HistoryBlock:
    """A block of one prompt's responses as its grid shows them: ``rows`` (only the grid's ``columns``,
    ``(key, header, kind)``, and ``sample_id, source_line, zero_spread``), their ``count`` in all, each
    row's token page (``hrefs``) and its group's view (``groups``: None without groups)."""

    rows: list[dict]
    count: int
    columns: list[tuple[str, str, str]]
    hrefs: list[str]
    groups: list[str | None]


def history_block(
    store, view: PromptsView, sort: str | None, descending: bool, start: int, end: int, prefix: str = ""
) -> HistoryBlock:
    """Rows ``start:end`` of the responses to ``view.prompt`` in the grid's sort (see
    :func:`data.prompts.history_block`; ``sort`` None: step order) with their links."""
    df, count, columns = prompts.history_block(store, view.prompt, sort, descending, start, end)
    keys = {c[0] for c in columns} | {"sample_id", "source_line", "zero_spread"}
    rows = json_rows(df.select(c for c in df.columns if c in keys))  # only what the rows carry
    hrefs = links.tokens_many(view.run, [r["sample_id"] for r in rows], prefix)
    groups = links.groups(view.run, view.prompt, rows, prefix)
    return HistoryBlock(rows, count, columns, hrefs, groups)


def group_hrefs(view: PromptsView, groups: list[prompts.Group], prefix: str = "") -> list[list[str]]:
    """Each group's completions' token pages (group by group, card by card), with the way through them."""
    return [links.tokens_many(view.run, [c["sample_id"] for c in g.cards], prefix) for g in groups]
