"""Prompts page (``/prompts?run=R&view=never&trend=..&q=..&sort=..``): the same prompt across training.

The list has every distinct prompt of the run with its early vs late reward, gain and win rate against the
reference, trend, degeneration signals and groups; ``view=never`` keeps the prompts that never beat their
reference response. ``&prompt=KEY`` shows one prompt: its reward over steps, its first and latest response
beside their reference responses, and every response (grouped per step) linking to its token page;
``&prompt=KEY&step=S[&group=G]`` its group(s) at step S, the completions side by side.
"""

from dataclasses import replace

import dash
from dash import Input, Output, State, callback, ctx, dcc, html, no_update
from dash.exceptions import PreventUpdate

from components import group_view as gv
from components import prompt_views as pv
from components.controls import prompts_controls
from components.layout import (
    empty_state,
    left_page,
    no_runs_state,
    notices,
    page_title,
    page_url,
    progress,
    url_prefix,
)
from components.live import shown_store
from components.tables import grid_sort
from data import live, prompts
from data import prompts_page as pp
from data.metrics import label
from data.metrics.group import TREND_EFFECT, TRENDS
from data.service import board, open_run
from data.views import links, paths
from data.views.codec import parse_search
from data.views.prompts import VIEW_OPTIONS, PromptsView

dash.register_page(__name__, path=paths.PROMPTS, name="Prompts", title="Prompts · RL Logging Board", order=4)

URL = page_url(paths.PROMPTS)  # the page's own Location: the shell listens to it
NOTICES, HEADER, CONTROLS, VIEW = "prompts-notices", "prompts-header", "prompts-controls", "prompts-view"
TREND, MIN_STEPS, SEARCH, CONTENT = "prompts-trend", "prompts-min-steps", "prompts-q", "prompts-content"
SUMMARY, EXPLAIN, TABLE, PAGER = "prompts-summary", "prompts-explain", "prompts-table", "prompts-pager"
BACK, PROMPT_TEXT, STATS, CHART = "prompts-back", "prompts-prompt-text", "prompts-stats", "prompts-chart"
CHART_LINK, FIRST, LATEST = "prompts-chart-link", "prompts-first", "prompts-latest"
HISTORY = "prompts-history"
GROUP_LINKS, GROUP_IDS = "prompts-group-links", {"prompt": "prompts-group-prompt", "groups": "prompts-groups"}
CONTROL_IDS = {"card": CONTROLS, "view": VIEW, "trend": TREND, "min_steps": MIN_STEPS, "q": SEARCH}

STORE_WAIT_SECONDS = 10.0


def layout(**query):
    runs = list(board().runs())
    if not runs:
        return no_runs_state(board().root, board().scan().trouble)
    view, _msgs = PromptsView.from_query(query, runs, board().scan().unreadable)
    return html.Div(
        [
            dcc.Location(id=URL, refresh=False),
            page_title("Prompts", view.run, HEADER),
            shown_store("prompts", live.shown(view.run)),
            html.Div(id=NOTICES),
            prompts_controls(
                view.view,
                VIEW_OPTIONS,
                view.trend,
                TRENDS,
                view.min_steps,
                view.q,
                bool(view.prompt),
                CONTROL_IDS,
            ),
            dcc.Loading(html.Div(id=CONTENT), type="circle", delay_show=300),
        ]
    )


def _decode(search: str | None):
    return PromptsView.from_query(parse_search(search), list(board().runs()), board().scan().unreadable)


def _store(run):
    return open_run(run, wait=STORE_WAIT_SECONDS).store


def _labels() -> dict[str, str]:
    return {k: label(k) for k in ("reward", "ref_reward", "reward_gain")}


def _list_content(store, view: PromptsView):
    """The prompt list of ``view``: summary, how trends are told, table, pager; and notices."""
    listing = prompts.prompt_list(store, view, board().settings.search_seconds)
    if listing is None:
        return empty_state("No prompts yet", "This run has no responses yet."), []
    prefix = url_prefix()
    shown, dicts, row_hrefs = pp.list_rows(listing, view, prefix)
    columns = [pv.Column(*c) for c in listing.columns]
    body = empty_state(
        "No prompt matches",
        "Change the filters above.",
        ("All prompts of the run", links.prompts(PromptsView(run=view.run), prefix)),
    )
    if dicts:
        header_hrefs = {c.key: links.prompts(shown.sorted_by(c.key), prefix) for c in columns if c.sortable}
        body = pv.prompt_list_table(
            dicts, columns, view.sort, view.order, header_hrefs, row_hrefs, TRENDS, TABLE
        )
    page = listing.page
    pager = pv.pager(
        listing.first_shown,
        listing.last_shown,
        listing.matching,
        links.prompts(replace(shown, page=page - 1), prefix) if page > 1 else None,
        links.prompts(replace(shown, page=page + 1), prefix) if page < listing.pages else None,
        PAGER,
    )
    return html.Div(
        [
            pv.list_summary(listing.info, TRENDS, SUMMARY),
            pv.trend_note(label("reward"), listing.threshold, TREND_EFFECT),
            pv.single_step_note(EXPLAIN) if listing.info["max_steps"] < 2 else None,
            body,
            pager,
        ]
    ), listing.notices


def _prompt_content(store, view: PromptsView):
    """One prompt: text, key figures, reward chart, first / latest response vs reference, all responses."""
    prefix = url_prefix()
    back = dcc.Link(
        "‹ all prompts", href=links.prompts(replace(view, prompt=None), prefix), id=BACK, className="small"
    )
    detail = prompts.prompt_detail(store, view.prompt)
    groups = prompts.prompt_groups(store, view.prompt)
    if detail is None:
        notice = f"Run {view.run!r} has no prompt with key {view.prompt!r}."
        return html.Div([back, empty_state("Unknown prompt", "Pick a prompt from the list.")]), [notice]
    msgs = []
    if detail.total > detail.shown:
        msgs.append(
            f"This prompt has {detail.total:,} responses: the table shows the first {detail.shown:,}."
        )
    labels, chart = _labels(), detail.chart
    fig = pv.chart_figure(chart, labels)
    pair_hrefs = tuple(
        links.tokens(view.run, r["sample_id"], prefix=prefix) for r in (detail.first, detail.latest)
    )
    return html.Div(
        [
            back,
            pv.text_block("Prompt", f"key {view.prompt}", detail.first_text["prompt"], PROMPT_TEXT),
            pv.prompt_stats(detail.agg, labels, TRENDS, STATS),
            pv.chart_card(
                f"{labels['reward']} of this prompt over steps",
                fig,
                CHART,
                CHART_LINK,
                pv.reward_chart_note(chart.total, chart.bin_steps),
            ),
            pv.response_pairs(
                detail.first,
                detail.latest,
                detail.first_text,
                detail.latest_text,
                pair_hrefs,
                labels,
                (FIRST, LATEST),
            ),
            html.H6(f"All {detail.total:,} responses, in step order", className="mt-2"),
            gv.group_links(groups, links.groups(view.run, view.prompt, groups, prefix), GROUP_LINKS),
            html.Div(prompts.group_note(detail), className="small text-muted mb-1"),
            # The rows come a block at a time from _history_rows: the answer stays small however often the
            # prompt comes back.
            pv.history_grid([pv.Column(*c) for c in detail.columns], detail.shown, HISTORY),
        ]
    ), msgs


def _group_content(store, view: PromptsView):
    """The prompt's group(s) at ``view.step``, the completions side by side (see components.group_view)."""
    prefix, s = url_prefix(), board().settings
    groups = prompts.group_views(store, view.prompt, view.step, view.group, s.pad_tokens, s.end_tokens)
    hrefs = pp.group_hrefs(view, groups, prefix)
    back = links.prompts(replace(view, step=None, group=None), prefix)
    return gv.group_page(groups, hrefs, back, (view.step, view.group), GROUP_IDS | {"back": BACK}), []


# ---- callbacks -------------------------------------------------------------------------------------------


@callback(
    Output(URL, "search"),
    Output(VIEW, "value"),
    Output(TREND, "value"),
    Output(MIN_STEPS, "value"),
    Output(SEARCH, "value"),
    Input(URL, "search"),
    Input(VIEW, "value"),
    Input(TREND, "value"),
    Input(MIN_STEPS, "value"),
    Input(SEARCH, "value"),
    State(URL, "pathname"),
)
def _sync(search, view_value, trend, min_steps, q, pathname):
    """URL <-> controls: a URL change (load, Back/Forward, a link) sets the controls; a control change writes
    the URL (back to page 1). Unchanged -> no_update."""
    if left_page(pathname, paths.PROMPTS):
        raise PreventUpdate
    view, _ = _decode(search)
    if ctx.triggered_id in (None, URL):
        return (
            no_update,
            no_update if view_value == view.view else view.view,
            no_update if trend == view.trend else view.trend,
            no_update if min_steps == view.min_steps else view.min_steps,
            no_update if (q or None) == view.q else (view.q or ""),
        )
    new = view.from_controls(view_value, trend, min_steps, q)
    return (no_update if new == view else new.to_query()), no_update, no_update, no_update, no_update


@callback(
    Output(CONTENT, "children"),
    Output(NOTICES, "children"),
    Output(HEADER, "children"),
    Output(CONTROLS, "style"),
    Input(URL, "search"),
)
def _content(search):
    """The list or one prompt, from the URL."""
    view, msgs = _decode(search)
    store = _store(view.run)
    hide = {"display": "none"} if view.prompt else {}
    if view.run is None:
        return empty_state("No run", "Pick a run in the top bar."), notices(msgs).children, "", hide
    if store is None:
        status = board().status(view.run)
        return (
            progress(status.fraction, board().reading_text(view.run), failed=status.error is not None),
            notices(msgs).children,
            view.run,
            hide,
        )
    show = _group_content if view.step is not None else _prompt_content if view.prompt else _list_content
    body, more = show(store, view)
    return body, notices(msgs + more + board().failure_notices(view.run)).children, view.run, hide


@callback(
    Output(HISTORY, "getRowsResponse"),
    Input(HISTORY, "getRowsRequest"),
    State(URL, "search"),
    prevent_initial_call=True,
)
def _history_rows(request, search):
    """One block of the prompt's responses, in the grid's sort order (the server sorts and pages)."""
    if not request:
        return no_update
    view, _ = _decode(search)
    store = _store(view.run) if view.prompt else None
    if store is None:
        return {"rowData": [], "rowCount": 0}
    sort = grid_sort(request.get("sortModel"))
    start, end = int(request.get("startRow") or 0), int(request.get("endRow") or 0)
    desc = sort is not None and sort[1] == "desc"
    got = pp.history_block(store, view, sort and sort[0], desc, start, end, url_prefix())
    cols = [pv.Column(*c) for c in got.columns]
    return {"rowData": pv.history_rows(got.rows, cols, got.hrefs, got.groups), "rowCount": got.count}


@callback(
    Output(CHART_LINK, "children"),
    Input(CHART, "clickData"),
    State(URL, "search"),
    prevent_initial_call=True,
)
def _chart_click(click, search):
    """A click on a response point renders a link to its token page (no forced navigation)."""
    sample = pv.clicked_sample(click)
    view, _ = _decode(search)
    if sample is None or view.run is None:
        return no_update
    return dcc.Link(
        [f"Open response {sample} token by token ", html.I(className="bi bi-arrow-right")],
        href=links.tokens(view.run, sample, prefix=url_prefix()),
        id=f"{CHART_LINK}-a",
    )
