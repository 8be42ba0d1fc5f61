"""The prompts page's answer, as the page shows its URL: the prompt list (one page of it, in the list's
order, each row with its prompt page, and the list's summary); with ``prompt=KEY`` that prompt across
training (its reward chart by step, its figures, its first and latest response, its groups and the first
block of its responses); with ``prompt=KEY&step=S[&group=G]`` its group(s) at step S (each group's reward
figures and learning signal, and its completions)."""

from __future__ import annotations

from dataclasses import asdict

from api.answer import Answer, Table
from api.registry import store_info
from components import prompt_views as pv
from components.tables import BLOCK_SIZE
from data import prompts
from data import prompts_page as pp
from data.metrics import label
from data.prompts.listing import PAGE_SIZE
from data.service import board, open_run
from data.views import links, paths
from data.views.prompts import PromptsView

PATH, NAME = paths.PROMPTS, "prompts"
STORE_WAIT = 10.0  # as the page waits for a first ingest
# The page's ids of what the answer holds.
LIST, SUMMARY, STATS, CHART = "prompts-table", "prompts-summary", "prompts-stats", "prompts-chart"
PAIRS, HISTORY, GROUP_LINKS = "prompts-pairs", "prompts-history", "prompts-group-links"
GROUPS, CARDS = "prompts-groups", "prompts-group-cards"
GROUP_COLUMNS = ("step", "group_id", "n", "mean", "std", "spread", "signal", "recomputed", "total", "prompt")
CARD_COLUMNS = ("group", "group_id", "sample_id", "source_line", "reward", "advantage", "end", "length",
                "length_unit", "text", "tokens_href")  # fmt: skip
PAIR_COLUMNS = ("which", "sample_id", "source_line", "step", "reward", "ref_reward", "reward_gain",
                "response", "ref_response", "tokens_href")  # fmt: skip


def _labels() -> dict[str, str]:
    return {k: label(k) for k in ("reward", "ref_reward", "reward_gain")}


def _view_json(view: PromptsView) -> dict:
    return {**asdict(view), "query": view.to_query()}


def answer(query: dict[str, list[str]]) -> Answer:
    b = board()
    view, msgs = PromptsView.from_query(query, list(b.runs()), b.scan().unreadable)
    if view.run is None:
        return Answer(PATH, _view_json(view), notices=msgs, store=store_info(None))
    store = open_run(view.run, wait=STORE_WAIT).store
    if store is None:
        return Answer(PATH, _view_json(view), run=view.run, notices=[*msgs, b.reading_text(view.run)],
                      store=store_info(None))  # fmt: skip
    show = _groups if view.step is not None else _prompt if view.prompt else _list
    got = show(store, view)
    got.notices[:0] = msgs
    got.notices.extend(b.failure_notices(view.run))
    got.store = store_info(store)
    return got


def _list(store, view: PromptsView) -> Answer:
    """One page of the list, as the page's table shows it, and the list's summary."""
    listing = prompts.prompt_list(store, view, board().settings.search_seconds)
    if listing is None:  # the page's empty state, said
        return Answer(
            PATH, _view_json(view), run=view.run, notices=["No prompts yet: this run has no responses yet."]
        )
    shown, rows, hrefs = pp.list_rows(listing, view)
    keys = [c[0] for c in listing.columns]
    columns = ["prompt_key", *keys, "href"]
    kept = [
        {**{k: r.get(k) for k in ["prompt_key", *keys]}, "href": h} for r, h in zip(rows, hrefs, strict=True)
    ]
    cut = None
    if listing.pages > 1:
        cut = (f"page {listing.page} of {listing.pages}: prompts {listing.first_shown} to "
               f"{listing.last_shown} of {listing.matching} ({PAGE_SIZE} a page; page= for another)")  # fmt: skip
    table = Table(columns, kept, {k: h for k, h, _ in listing.columns}, listing.matching, cut)
    summary = {**listing.info, "trend_threshold": listing.threshold}
    tables = {LIST: table, SUMMARY: Table(list(summary), [summary])}
    return Answer(
        PATH, _view_json(shown), run=view.run, tables=tables, main=LIST, notices=list(listing.notices)
    )


def _prompt(store, view: PromptsView) -> Answer:
    """One prompt: its reward chart, figures, first and latest response, groups and responses' first block."""
    detail = prompts.prompt_detail(store, view.prompt)
    if detail is None:
        return Answer(PATH, _view_json(view), run=view.run,
                      notices=[f"Run {view.run!r} has no prompt with key {view.prompt!r}."])  # fmt: skip
    notices = []
    if detail.total > detail.shown:
        notices.append(
            f"This prompt has {detail.total:,} responses: the table shows the first {detail.shown:,}."
        )
    labels = _labels()
    pairs = []
    for which, row, texts in (("first", detail.first, detail.first_text), ("latest", detail.latest, detail.latest_text)):  # fmt: skip
        href = links.tokens(view.run, row["sample_id"])
        pairs.append(
            {k: ({**row, **texts, "which": which, "tokens_href": href}).get(k) for k in PAIR_COLUMNS}
        )
    groups = prompts.prompt_groups(store, view.prompt)
    group_rows = [
        {**g, "href": h} for g, h in zip(groups, links.groups(view.run, view.prompt, groups), strict=True)
    ]
    block = pp.history_block(store, view, None, False, 0, BLOCK_SIZE)
    cols = [pv.Column(*c) for c in block.columns]
    rows = pv.history_rows(block.rows, cols, block.hrefs, block.groups)
    cut = None
    if block.count > len(rows):
        cut = f"the first {len(rows)} of {block.count} rows (the page loads {BLOCK_SIZE} rows at a time)"
    history = Table([*(c.key for c in cols), "source_line", "tokens_href", "group_href", "zero_spread"], rows,
                    {c.key: c.label for c in cols}, block.count, cut)  # fmt: skip
    stats = {"prompt_key": view.prompt, "prompt": detail.first_text["prompt"], **detail.agg}
    tables = {
        HISTORY: history,
        STATS: Table(list(stats), [stats]),
        PAIRS: Table(list(PAIR_COLUMNS), pairs, {k: v for k, v in labels.items() if k in PAIR_COLUMNS}),
        GROUP_LINKS: Table(["step", "group_id", "n", "signal", "href"], group_rows),
    }
    fig = pv.chart_figure(detail.chart, labels)
    title = f"{labels['reward']} of this prompt over steps"
    note = pv.reward_chart_note(detail.chart.total, detail.chart.bin_steps)
    return Answer(PATH, _view_json(view), run=view.run, figures={CHART: fig}, titles={CHART: title},
                  tables=tables, main=HISTORY, notices=[*notices, *([note] if note else [])])  # fmt: skip


def _groups(store, view: PromptsView) -> Answer:
    """The prompt's group(s) at ``view.step``: each group's figures and learning signal, and its cards."""
    s = board().settings
    groups = prompts.group_views(store, view.prompt, view.step, view.group, s.pad_tokens, s.end_tokens)
    hrefs = pp.group_hrefs(view, groups)
    group_rows = [{k: asdict(g).get(k) for k in GROUP_COLUMNS} for g in groups]
    cards = [
        {"group": i, "group_id": g.group_id, **{k: c.get(k) for k in CARD_COLUMNS[2:-1]}, "tokens_href": h}
        for i, (g, hs) in enumerate(zip(groups, hrefs, strict=True))
        for c, h in zip(g.cards, hs, strict=True)
    ]
    cut = [
        f"group {g.group_id if g.group_id is not None else i}: the first {len(g.cards)} of its {g.total} "
        "responses, by reward"
        for i, g in enumerate(groups)
        if g.total > len(g.cards)
    ]
    labels = {
        "signal": "learning signal",
        "mean": "reward mean",
        "std": "reward std",
        "spread": "reward spread",
    }
    tables = {
        GROUPS: Table(list(GROUP_COLUMNS), group_rows, labels),
        CARDS: Table(list(CARD_COLUMNS), cards, cut_off="; ".join(cut) or None),
    }
    empty = []
    if not groups:  # the page's empty state, said
        where = f"step {view.step}" + (f", group {view.group!r}" if view.group is not None else "")
        empty.append(f"No such group: this prompt has no response at {where}.")
    return Answer(PATH, _view_json(view), run=view.run, tables=tables, main=GROUPS, notices=empty)
