"""Prompts page (``/prompts?run=R&view=never&trend=..&q=..&sort=..``): the same prompt across training.

The list has every distinct prompt of the run with its early vs late reward, gain and win rate against the
reference, trend, degeneration signals and groups; ``view=never`` keeps the prompts that never beat their
reference response. ``&prompt=KEY`` shows one prompt: its reward over steps, its first and latest response
beside their reference responses, and every response (grouped per step) linking to its token page.
"""

from dataclasses import replace

import dash
import dash_bootstrap_components as dbc
from dash import Input, Output, State, callback, ctx, dcc, html, no_update

from components import prompt_views as pv
from components.format import num, value
from components.layout import empty_state, no_runs_state, notices, page_title, progress, url_prefix
from components.live import shown_store
from data import live, prompts
from data.metrics import label
from data.metrics.group import MIN_GROUP, TREND_EFFECT, TRENDS
from data.queries import QueryError
from data.service import UnknownRun, board
from data.views import links, paths
from data.views.codec import parse_search
from data.views.prompts import VIEWS, PromptsView

dash.register_page(__name__, path=paths.PROMPTS, name="Prompts", title="Prompts · RL Logging Board", order=4)

URL = "prompts-url"
NOTICES = "prompts-notices"
HEADER = "prompts-header"
CONTROLS = "prompts-controls"
VIEW = "prompts-view"
TREND = "prompts-trend"
MIN_STEPS = "prompts-min-steps"
SEARCH = "prompts-q"
CONTENT = "prompts-content"
SUMMARY = "prompts-summary"
EXPLAIN = "prompts-explain"
TABLE = "prompts-table"
PAGER = "prompts-pager"
BACK = "prompts-back"
PROMPT_TEXT = "prompts-prompt-text"
STATS = "prompts-stats"
CHART = "prompts-chart"
CHART_LINK = "prompts-chart-link"
FIRST = "prompts-first"
LATEST = "prompts-latest"
HISTORY = "prompts-history"

STORE_WAIT_SECONDS = 10.0
HISTORY_LIMIT = 2000
GRAPH_CONFIG = {"displayModeBar": False, "responsive": True}
VIEW_OPTIONS = {"all": "All prompts", "never": "Never beat the reference"}


# ---- helpers ---------------------------------------------------------------------------------------------


def _decode(search_or_query):
    query = parse_search(search_or_query) if isinstance(search_or_query, str | None) else search_or_query
    return PromptsView.from_query(query, list(board().runs()))


def _store(run):
    if not run:
        return None
    try:
        return board().store(run, wait=STORE_WAIT_SECONDS)
    except UnknownRun:
        return None


def _href(view) -> str:
    return links.prompts(view, url_prefix())


def _tokens_href(run: str, sample_id: str) -> str:
    return links.tokens(run, sample_id, prefix=url_prefix())


def _list_columns(table) -> list:
    """The list's columns; optional ones only when the run has a value in them."""
    cols = [
        pv.Column("prompt_preview", "prompt", "text"),
        pv.Column("first_step", "first step", "step"),
        pv.Column("n_steps", "steps", "int"),
        pv.Column("n_responses", "responses", "int"),
        pv.Column("reward_early", f"{label('reward')} · first ¼ of its steps"),
        pv.Column("reward_late", f"{label('reward')} · last ¼ of its steps"),
        pv.Column("reward_delta", "Δ last − first ¼", "signed"),
        pv.Column("gain_mean", f"{label('reward_gain')} · mean", "signed"),
        pv.Column("win_rate", "win rate vs reference", "share"),
        pv.Column("trend", "trend", "trend"),
        pv.Column("repetition_mean", f"{label('repetition')} · mean"),
        pv.Column("length_ratio_mean", f"{label('length_ratio')} · mean"),
        pv.Column("zero_spread_groups", "zero-spread groups", "int"),
    ]
    optional = {"gain_mean", "win_rate", "repetition_mean", "length_ratio_mean"}
    keep = []
    for c in cols:
        if c.key in optional and table.get_column(c.key).null_count() == table.height:
            continue
        if c.key == "zero_spread_groups" and int(table.get_column("n_groups").sum() or 0) == 0:
            continue
        keep.append(c)
    return keep


def _history_columns(rows, recomputed: bool, has_groups: bool) -> list:
    """The responses grid's columns; empty ones left out, group columns only when there are groups."""
    adv = "advantage (recomputed)" if recomputed else "advantage (from the file)"
    cols = [
        pv.Column("step", "step", "step"),
        pv.Column("sample_id", "response", "text"),
        pv.Column("reward", label("reward")),
        pv.Column("ref_reward", label("ref_reward")),
        pv.Column("reward_gain", label("reward_gain"), "signed"),
    ]
    if has_groups:
        if "group_id" in rows.columns and rows.get_column("group_id").null_count() < rows.height:
            cols.append(pv.Column("group_id", "group", "int"))
        cols += [
            pv.Column("group_n", "responses in the group", "int"),
            pv.Column("group_spread", "group reward spread (max − min)"),
            pv.Column("advantage", adv, "signed"),
            pv.Column("group_flag", "learning signal", "text"),
        ]
    elif not recomputed:
        cols.append(pv.Column("advantage", adv, "signed"))
    cols += [
        pv.Column("response_length", label("response_length"), "int"),
        pv.Column("response_chars", label("response_chars"), "int"),
        pv.Column("kl_mean", label("kl_mean")),
        pv.Column("repetition", label("repetition")),
        pv.Column("length_ratio", label("length_ratio")),
        pv.Column("response_preview", "response (start)", "text"),
    ]
    always = {"step", "sample_id", "response_preview", "reward", "group_flag"}
    keep = []
    for c in cols:
        if (
            c.key in rows.columns
            and c.key not in always
            and rows.get_column(c.key).null_count() == rows.height
        ):
            continue
        if c.key == "response_chars" and "response_length" in rows.columns:
            if rows.get_column("response_length").null_count() < rows.height:
                continue  # tokens when the run has them, characters otherwise
        keep.append(c)
    return keep


# ---- layout ----------------------------------------------------------------------------------------------


def _controls(view) -> dbc.Card:
    return dbc.Card(
        dbc.CardBody(
            dbc.Row(
                [
                    dbc.Col(
                        [
                            dbc.Label("Show", html_for=VIEW, className="small text-muted mb-1"),
                            dbc.RadioItems(
                                id=VIEW,
                                options=[
                                    {"label": v, "value": k, "input_id": f"{VIEW}-{k}"}
                                    for k, v in VIEW_OPTIONS.items()
                                ],
                                value=view.view,
                                inline=True,
                                className="small",
                            ),
                        ],
                        lg=4,
                    ),
                    dbc.Col(
                        [
                            dbc.Label("Trend", html_for=TREND, className="small text-muted mb-1"),
                            dcc.Dropdown(
                                id=TREND,
                                options=[{"label": v, "value": k} for k, v in TRENDS.items()],
                                value=view.trend,
                                placeholder="any trend",
                                clearable=True,
                                className="small",
                            ),
                        ],
                        lg=2,
                    ),
                    dbc.Col(
                        [
                            dbc.Label(
                                "Seen in at least … steps",
                                html_for=MIN_STEPS,
                                className="small text-muted mb-1",
                            ),
                            dbc.Input(
                                id=MIN_STEPS,
                                type="number",
                                min=1,
                                step=1,
                                value=view.min_steps,
                                debounce=True,
                                size="sm",
                                placeholder="any",
                            ),
                        ],
                        lg=2,
                    ),
                    dbc.Col(
                        [
                            dbc.Label(
                                "Search the prompt text", html_for=SEARCH, className="small text-muted mb-1"
                            ),
                            dbc.Input(
                                id=SEARCH,
                                type="search",
                                value=view.q or "",
                                debounce=True,
                                size="sm",
                                placeholder="regular expression, (?i) for any case; Enter to apply",
                            ),
                        ],
                        lg=4,
                    ),
                ],
                className="g-3 align-items-end",
            ),
            className="py-2",
        ),
        id=CONTROLS,
        className="mb-3 shadow-sm",
        style={"display": "none"} if view.prompt else {},
    )


def layout(**query):
    runs = list(board().runs())
    if not runs:
        return no_runs_state(board().root, board().scan().trouble)
    view, _msgs = PromptsView.from_query(query, runs)
    return html.Div(
        [
            dcc.Location(id=URL, refresh=False),
            page_title("Prompts", view.run, HEADER),
            shown_store("prompts", live.shown(view.run)),
            html.Div(id=NOTICES),
            _controls(view),
            dcc.Loading(html.Div(id=CONTENT), type="circle", delay_show=300),
        ]
    )


# ---- content builders (called by the callbacks) --------------------------------------------------------------


def _list_content(store, view):
    """The prompt list of ``view``: summary, explanation, table, pager; and notices."""
    msgs = []
    table = prompts.prompt_table(store)
    if table.height == 0:
        return empty_state("No prompts yet", "This run has no responses yet."), msgs
    info = prompts.overview(table)
    keys = None
    if view.q:
        try:
            keys = prompts.search_prompts(store, view.q, board().settings.search_seconds)
        except QueryError as e:  # stopped at its deadline: no prompt is shown as matching
            msgs.append(f"{str(e)[:1].upper()}{str(e)[1:]}.")
            keys = frozenset()
    rows = prompts.filter_prompts(table, view, keys)
    page_rows, page, pages = prompts.page_of(rows, view.page)
    if page != view.page and rows.height:
        msgs.append(f"Page {view.page} is past the end: showing page {page} of {pages}.")
    shown = replace(view, page=page)
    columns = _list_columns(table)
    trends = info["trends"]
    summary = html.Div(
        [
            html.Span(f"{info['prompts']:,} prompts", className="fw-semibold me-2"),
            html.Span(f"· {info['recurring']:,} seen in 2+ steps ", className="me-2"),
            *(
                html.Span([pv.trend_badge(code, TRENDS), f" {trends[code]:,}"], className="me-2")
                for code in TRENDS
                if trends[code]
            ),
        ],
        id=SUMMARY,
        className="small mb-1",
    )
    threshold = prompts.run_trend_threshold(store)
    how = html.Div(
        f"Trend: mean {label('reward')} over the last quarter of a prompt's steps minus the first quarter; "
        f"above +{num(threshold)} is improved, below −{num(threshold)} regressed, otherwise flat "
        f"({TREND_EFFECT} × the run's reward standard deviation). Never beats the reference: no "
        "response scored above its reference response in any step where both exist (takes precedence).",
        className="small text-muted mb-2",
    )
    explain = None
    if info["max_steps"] < 2:
        explain = dbc.Alert(
            "Every prompt of this run appears in a single step: cross-step views (early vs late reward, "
            "trend) need prompts that recur across steps.",
            color="info",
            className="py-2 small",
            id=EXPLAIN,
        )
    header_hrefs = {c.key: _href(shown.sorted_by(c.key)) for c in columns if c.sortable}
    dicts = page_rows.to_dicts()
    # The list state rides along, so "‹ all prompts" on the prompt page returns to this very list.
    row_hrefs = [_href(replace(shown, prompt=r["prompt_key"])) for r in dicts]
    first = (page - 1) * prompts.PAGE_SIZE + 1
    last = first + page_rows.height - 1
    body = (
        pv.prompt_list_table(dicts, columns, view.sort, view.order, header_hrefs, row_hrefs, TRENDS, TABLE)
        if dicts
        else empty_state(
            "No prompt matches",
            "Change the filters above.",
            ("All prompts of the run", _href(PromptsView(run=view.run))),
        )
    )
    return (
        html.Div(
            [
                summary,
                how,
                explain,
                body,
                pv.pager(
                    first if rows.height else 0,
                    last,
                    rows.height,
                    _href(replace(shown, page=page - 1)) if page > 1 else None,
                    _href(replace(shown, page=page + 1)) if page < pages else None,
                    PAGER,
                ),
            ]
        ),
        msgs,
    )


def _meta(row) -> str:
    return f"step {row['step']} · {label('reward')} {num(row.get('reward'))}"


def _ref_meta(row) -> str | None:
    if row.get("ref_reward") is None:
        return None
    return f"{label('ref_reward')} {num(row.get('ref_reward'))}"


def _prompt_content(store, view):
    """One prompt: text, key figures, reward chart, first / latest response vs reference, all responses."""
    msgs = []
    back = dcc.Link("‹ all prompts", href=_href(replace(view, prompt=None)), id=BACK, className="small")
    rows = prompts.history(store, view.prompt)
    if rows.height == 0:
        msgs.append(f"Run {view.run!r} has no prompt with key {view.prompt!r}.")
        return html.Div([back, empty_state("Unknown prompt", "Pick a prompt from the list.")]), msgs
    agg = prompts.prompt_row(store, view.prompt)
    first_row, latest_row = prompts.first_and_latest(rows)
    first_text = prompts.texts(store, first_row)
    latest_text = (
        prompts.texts(store, latest_row) if latest_row["sample_id"] != first_row["sample_id"] else first_text
    )
    labels = {"reward": label("reward"), "ref_reward": label("ref_reward")}
    per_step = prompts.history_by_step(rows)
    fig = pv.reward_figure(
        rows.select("step", "reward", "sample_id").to_dict(as_series=False),
        per_step.to_dict(as_series=False),
        labels,
    )
    stats = pv.stats_row(
        [
            ("steps", num(agg.get("n_steps"))),
            ("responses", num(agg.get("n_responses"))),
            ("steps seen", f"{agg.get('first_step')} – {agg.get('last_step')}"),
            (
                f"{label('reward')} · first ¼ → last ¼",
                f"{num(agg.get('reward_early'))} → {num(agg.get('reward_late'))}",
            ),
            (f"{label('reward_gain')} · mean", value(agg.get("gain_mean"), "signed")),
            ("win rate vs reference", value(agg.get("win_rate"), "share")),
            ("trend", pv.trend_badge(agg.get("trend"), TRENDS)),
            *(
                [("groups (zero spread)", f"{agg.get('n_groups')} ({agg.get('zero_spread_groups')})")]
                if agg.get("n_groups")
                else []
            ),
        ],
        STATS,
    )
    shown = rows.head(HISTORY_LIMIT)
    if rows.height > HISTORY_LIMIT:
        msgs.append(
            f"This prompt has {rows.height:,} responses: the table shows the first {HISTORY_LIMIT:,}."
        )
    recomputed = bool(shown.get_column("advantage_recomputed").any()) if shown.height else True
    dicts = shown.to_dicts()
    hrefs = links.tokens_many(view.run, [r["sample_id"] for r in dicts], url_prefix())
    if latest_row["step"] == first_row["step"]:
        pair_specs = [
            (f"Response · step {first_row['step']} (the prompt's only step)", first_row, first_text, FIRST)
        ]
    else:
        pair_specs = [
            (f"First response · step {first_row['step']}", first_row, first_text, FIRST),
            (f"Latest response · step {latest_row['step']}", latest_row, latest_text, LATEST),
        ]
    pairs = [
        dbc.Col(
            pv.response_pair(
                title,
                text["response"],
                text["ref_response"],
                _meta(row),
                _ref_meta(row),
                _tokens_href(view.run, row["sample_id"]),
                pair_id,
            ),
            lg=12 // len(pair_specs),
        )
        for title, row, text, pair_id in pair_specs
    ]
    has_groups = bool(shown.height) and int(shown.get_column("group_n").max() or 0) >= MIN_GROUP
    group_note = None
    if has_groups:
        group_note = (
            "Responses of one step that share a group id (or else the prompt) form a group; advantages "
            + (
                "are recomputed as (reward − group mean) / group standard deviation (sample std), 0 when all "
                "rewards are equal."
                if recomputed
                else "come from the file's advantage column."
            )
        )
    return (
        html.Div(
            [
                back,
                pv.text_block("Prompt", f"key {view.prompt}", first_text["prompt"], PROMPT_TEXT),
                stats,
                dbc.Card(
                    [
                        dbc.CardHeader(f"{label('reward')} of this prompt over steps"),
                        dbc.CardBody(
                            [
                                dcc.Graph(id=CHART, figure=fig, config=GRAPH_CONFIG),
                                html.Div(
                                    "Click a point to open that response token by token.",
                                    id=CHART_LINK,
                                    className="small text-muted",
                                ),
                            ]
                        ),
                    ],
                    className="shadow-sm",
                ),
                dbc.Row(pairs, className="g-3"),
                html.H6(f"All {rows.height:,} responses, in step order", className="mt-2"),
                html.Div(group_note, className="small text-muted mb-1"),
                pv.history_grid(dicts, _history_columns(shown, recomputed, has_groups), hrefs, HISTORY),
            ]
        ),
        msgs,
    )


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
)
def _sync(search, view_value, trend, min_steps, q):
    """URL <-> controls: a URL change (load, Back/Forward, a link) sets the controls; a control change writes
    the URL (back to page 1). Unchanged -> no_update."""
    view, _ = _decode(search)
    if ctx.triggered_id in (None, URL):
        return (
            no_update,
            no_update if view_value == view.view else view.view,
            no_update if trend == view.trend else view.trend,
            no_update if min_steps == view.min_steps else view.min_steps,
            no_update if (q or None) == view.q else (view.q or ""),
        )
    steps = int(min_steps) if isinstance(min_steps, int | float) and min_steps >= 1 else None
    new = replace(
        view,
        view=view_value if view_value in VIEWS else "all",
        trend=trend or None,
        min_steps=steps,
        q=(q or "").strip() or None,
    )
    if new == view:
        return (no_update,) * 5
    new = replace(new, page=1)
    return new.to_query(), no_update, no_update, no_update, no_update


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
    body, more = (_prompt_content if view.prompt else _list_content)(store, view)
    return body, notices(msgs + more + board().failure_notices(view.run)).children, view.run, hide


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
        href=_tokens_href(view.run, sample),
        id=f"{CHART_LINK}-a",
    )
