"""Responses page (``/responses``): every response of a step (or of the run), ranked, filtered and exported.

The grid pages and sorts on the server (AG Grid's infinite row model); filters, sort and the selected row
live in the URL. Selecting a row shows its full texts beside the table; its id opens the token page.
"""

from __future__ import annotations

import dash
from dash import Input, Output, State, callback, clientside_callback, ctx, dcc, html, no_update
from dash.exceptions import PreventUpdate

from components import layout as ly
from components import tables as tb
from components import token_filter as tf
from components.controls import MAX_STEP_OPTIONS, responses_filters, step_options
from components.live import shown_store
from data import live, responses
from data import response_columns as rc
from data import responses_grid as rg
from data.metrics import label
from data.queries import QueryError
from data.search import engine as search_engine
from data.service import board, open_run
from data.views import links, paths
from data.views.codec import first, parse_search
from data.views.responses import ALL_STEPS, RANGE_KEYS
from pages import _annotations as ann

dash.register_page(__name__, path=paths.RESPONSES, name="Responses", title="Responses · RL Logging Board", order=2)  # fmt: skip

URL = ly.page_url(paths.RESPONSES)  # the page's own Location: the shell listens to it
VIEW = "responses-view"  # canonical query string of the view
FILTER = "responses-filter"  # the part of the view that selects rows: the grid reloads when it changes
NOTICES, STEP, Q, Q_ERROR = "responses-notices", "responses-step", "responses-q", "responses-q-error"
LOSES, TRUNCATED, ENDED, CLEAR = (f"responses-{k}" for k in ("loses", "truncated", "ended", "clear"))
GRID, SUMMARY, TEXT, COLS = "responses-grid", "responses-summary", "responses-text", "responses-cols"
DRAWER, CLOSE, RELOAD = "responses-drawer", "responses-text-close", "responses-reload"
EXPORT_CSV, EXPORT_JSONL = "responses-export-csv", "responses-export-jsonl"
COUNT_POLL = "responses-count-poll"  # while a search over every step counts its matches in the background
# How often the page asks how far the count got (ms).
POLL_MS = 800
RANGE_IDS = {f"{k}_{e}": f"responses-{k}-{e}" for k in RANGE_KEYS for e in ("min", "max")}
FILTER_IDS = dict(step=STEP, q=Q, q_error=Q_ERROR, loses=LOSES, clear=CLEAR)
FILTER_IDS |= dict(truncated=TRUNCATED, ended=ENDED, cols=COLS)
HEADER_IDS = {"summary": SUMMARY, "csv": EXPORT_CSV, "jsonl": EXPORT_JSONL}
TOK_IDS = {k: f"responses-tok-{k}" for k in ("pattern", "metric", "min", "max", "apply", "words")}
STORE_WAIT = 10.0


def layout(**query):
    runs = board().runs()
    if not runs:
        return ly.no_runs_state(board().root, board().scan().trouble)
    asked = first(query, "run")
    ctx = open_run(asked, paths.RESPONSES, STORE_WAIT)
    run, store = ctx.run, ctx.store
    if run is None:
        return html.Div(
            [ly.notices(ctx.notices, NOTICES), ly.unknown_run_state(asked in board().scan().unreadable)]
        )
    if store is None:
        status = board().status(run)
        return html.Div(
            [
                html.H4("Responses", className="mb-2"),
                shown_store("responses", live.shown(run)),
                ly.progress(status.fraction, board().reading_text(run), failed=status.error is not None),
            ]
        )
    view, msgs = responses.view_on(query, ctx, board().settings)
    steps = ctx.step_list
    search_engine.warm_text_index(store)  # a first regex search over all steps need not build it
    spec, shown = responses.table_spec(store, view.token_metric()), rc.shown(store, view)
    defs = ann.with_label_column(tb.spec_column_defs(spec, responses.previews(), view.sort, view.order, rc.with_hits(view, shown)))  # fmt: skip
    ranges = view.range_controls(responses.range_filters(store), RANGE_IDS)
    chooser = (rc.column_choices(store), shown)
    filters = (view.q, view.loses, FILTER_IDS, view.truncated, view.ended, chooser)
    return html.Div(
        [
            dcc.Location(id=URL, refresh=False),
            dcc.Location(id=RELOAD),  # a view leaving the token filter reloads: its columns are the layout's
            dcc.Store(id=VIEW, data=view.to_query()),
            dcc.Store(id=FILTER, data=view.filter_key()),
            dcc.Interval(id=COUNT_POLL, interval=POLL_MS, disabled=True),
            shown_store("responses", live.shown(run, store)),
            ly.notices([*rg.banner_notices(view, msgs), *board().failure_notices(run)], NOTICES),
            tb.responses_header(run, HEADER_IDS),
            responses_filters(steps, ALL_STEPS, view.step_value(steps), ranges, *filters),
            tf.token_filter_row(*view.token_controls(), TOK_IDS),
            ann.responses_bar(run, view.label, view.sample),
            html.Div(
                [
                    tb.responses_grid(GRID, defs, view.sort, lines=spec.preview_lines),
                    tb.texts_drawer(DRAWER, CLOSE, TEXT, None),
                ],
                className="position-relative mb-2",
            ),
        ]
    )


def _decode(search: str | None):
    """``(view, store, steps, notices)`` of a query string; store None for an unknown or unread run."""
    return responses.resolve(parse_search(search), board(), STORE_WAIT)


def _changed(new, old):
    return no_update if new == old else new


# ---- callbacks -------------------------------------------------------------------------------------------


@callback(
    Output(URL, "search"), Output(STEP, "value"), *(Output(i, "value") for i in RANGE_IDS.values()),
    *(Output(i, "value") for i in (Q, LOSES, TRUNCATED, ENDED, COLS)), Output(GRID, "columnState"),
    Output(VIEW, "data"), Output(FILTER, "data"), Output(NOTICES, "children"), Output(RELOAD, "search"),
    Input(URL, "search"), Input(STEP, "value"), *(Input(i, "value") for i in RANGE_IDS.values()),
    *(Input(i, "value") for i in (Q, LOSES, TRUNCATED, ENDED, COLS)), Input(CLEAR, "n_clicks"),
    Input(GRID, "columnState"), Input(GRID, "selectedRows"), State(VIEW, "data"), State(FILTER, "data"),
    State(URL, "pathname"),
)  # fmt: skip
def _sync(search, step, *args):
    """The one URL <-> controls sync: the URL seeds the controls; a control, a header sort or a row
    selection writes the URL. Returns no_update for whatever did not change."""
    n = len(RANGE_IDS)
    ranges = dict(zip(RANGE_IDS, args[:n], strict=True))
    q, loses, truncated, ended, cols, _clear, column_state, selected, view_data, filter_data, path = args[n:]
    if ly.left_page(path, paths.RESPONSES):
        raise PreventUpdate
    url_view, store, steps, msgs = _decode(search)
    trigger = ctx.triggered_id
    if trigger in (None, URL):
        view = url_view
        grid_state = tb.sorted_state(column_state, view.sort, view.order)
        return (
            no_update,  # the URL
            _changed(view.step_value(steps), step),
            *(_changed(getattr(view, k), ranges[k]) for k in RANGE_IDS),
            _changed(view.q or "", q or ""),
            _changed(view.loses, bool(loses)),
            _changed(view.truncated, bool(truncated)),
            _changed(view.ended, bool(ended)),
            no_update if (value := rc.chooser_value(store, view, cols)) is None else value,
            no_update if grid_state is None else grid_state,
            _changed(view.to_query(), view_data),
            _changed(view.filter_key(), filter_data),
            ly.notices([*rg.banner_notices(url_view, msgs), *board().failure_notices(url_view.run)])
            if trigger == URL
            else no_update,
            no_update,
        )
    if trigger == CLEAR:
        view = url_view.cleared()
        if url_view.tok:  # Apply's way out too: the page anew, without the filter's inputs and columns
            return *[no_update] * (11 + n), view.to_query()
        controls = [no_update, *([None] * n), "", False, False, False, no_update]
    else:
        sort = tb.grid_sort(column_state)
        view = url_view.from_controls(
            steps, step, ranges, q, loses, sort, truncated, ended, rc.chosen(store, cols)
        )
        if f"{GRID}.selectedRows" in ctx.triggered_prop_ids:
            # A row clicked, or none (the drawer closed): the URL names the selected response.
            view = view.with_(sample=selected[0].get("sample_id") if selected else None)
        ends = [_changed(view.truncated, bool(truncated)), _changed(view.ended, bool(ended))]  # exclusive
        controls = [*[no_update] * (1 + n + 2), *ends, no_update]  # step, ranges, q, loses, ends, cols
    query = view.to_query()
    return (
        _changed(query, search or ""),
        *controls,
        no_update,
        _changed(query, view_data),
        _changed(view.filter_key(), filter_data),
        no_update,
        no_update,
    )


@callback(Output(STEP, "options"), Input(STEP, "search_value"), Input(STEP, "value"), State(VIEW, "data"), prevent_initial_call=True)  # fmt: skip
def _step_options(typed, step, view_data):
    """A run of more steps than the picker lists (see step_options): the steps matching what is typed, and
    the chosen one (after Back / Forward too)."""
    _, store, steps, _ = _decode(view_data)
    if store is None or len(steps) <= MAX_STEP_OPTIONS:
        raise PreventUpdate
    return step_options(steps, ALL_STEPS, step, typed)


clientside_callback(tb.purge_js(GRID), Input(FILTER, "data"), prevent_initial_call=True)
ann.register_responses(URL, VIEW, GRID)
clientside_callback(tb.columns_js(GRID), Input(COLS, "value"), State(COLS, "options"), prevent_initial_call=True)  # fmt: skip
clientside_callback(tb.open_row_js(GRID), Input(GRID, "cellDoubleClicked"), prevent_initial_call=True)
clientside_callback(tb.unselect_js(GRID), Input(CLOSE, "n_clicks"), prevent_initial_call=True)
clientside_callback(tf.apply_js(), Input(TOK_IDS["apply"], "n_clicks"), Input(TOK_IDS["pattern"], "n_submit"), *(State(TOK_IDS[k], "value") for k in ("pattern", "metric", "min", "max")), prevent_initial_call=True)  # fmt: skip
# The page opens at its top, as after following a link: Dash keeps the scroll position of the page it
# replaces, and a drill from far down the reward page would land below the summary.
clientside_callback(
    'function (path) { window.scrollTo({top: 0, left: 0, behavior: "instant"}); }', Input(URL, "pathname")
)


@callback(
    Output(GRID, "getRowsResponse"),
    Input(GRID, "getRowsRequest"),
    State(VIEW, "data"),
    prevent_initial_call=True,
)
def _rows(request, view_data):
    """One block of rows of the view's filter, in the grid's sort order (the server sorts and pages)."""
    if not request:
        return no_update
    view, store, steps, _ = _decode(view_data)
    if store is None:
        return {"rowData": [], "rowCount": 0}
    sort = tb.grid_sort(request.get("sortModel")) or (view.sort, view.order)
    view = view.with_(sort=sort[0], order=sort[1])
    try:
        rows, count = rg.grid_rows(
            store, view, steps, board().settings, request["startRow"], request["endRow"], ly.url_prefix()
        )
    except QueryError:  # an invalid regex is left out of the filter, so this is a stopped search: no rows
        return {"rowData": [], "rowCount": 0}
    # A search's first matches come before its count: the grid is then told no last row (it asks for more).
    return {"rowData": rows} if count is None else {"rowData": rows, "rowCount": count}


def _summary(view, store, steps):
    """``(summary line, stopped message or None, whether a count is still under way)`` of the view."""
    got = rg.summary(store, view, steps, board().settings)
    if got is None:  # a pattern refused: reported beside the search box
        return "", None, False
    if got.stopped is not None:
        return "No rows: the text search was stopped.", got.stopped, False
    where = view.where(steps)
    if got.count is None:
        return tb.counting_line(got.share, got.scope, where), None, True
    line = tb.summary_line(got.count, got.scope, where, got.mean_reward, label("reward"), got.partial)
    return line, None, False


@callback(*(Output(i, p) for i, p in ((SUMMARY, "children"), (EXPORT_CSV, "href"), (EXPORT_JSONL, "href"),
                                      (Q_ERROR, "children"), (TEXT, "children"), (DRAWER, "hidden"),
                                      (COUNT_POLL, "disabled"))),
          Input(VIEW, "data"))  # fmt: skip
def _render(view_data):
    """Summary line, export links, regex error and the selected response's texts for the view (and the
    poll of a count under way started or stopped)."""
    view, store, steps, _ = _decode(view_data)
    if store is None:
        return "", no_update, no_update, "", no_update, no_update, True
    prefix = ly.url_prefix()
    summary, stopped, counting = _summary(view, store, steps)
    error = rg.query_error(view)
    texts, href, group = rg.selected(store, view, board().settings, prefix)
    q = view.q if view.q and not error else None
    panel = tb.text_panel(texts, responses.text_labels(), href, responses.matches_note(q), group)
    return (
        summary,
        links.export(view, "csv", prefix),
        links.export(view, "jsonl", prefix),
        f"{error}: not applied." if error else (tb.sentence(stopped) if stopped else ""),
        panel,
        panel is None,
        not counting,
    )


@callback(
    Output(SUMMARY, "children", allow_duplicate=True),
    Output(Q_ERROR, "children", allow_duplicate=True),
    Output(COUNT_POLL, "disabled", allow_duplicate=True),
    Input(COUNT_POLL, "n_intervals"),
    State(VIEW, "data"),
    prevent_initial_call=True,
)
def _poll(_n, view_data):
    """The summary line of a search over every step while its count runs: how far it got, then the count
    (the poll then stops). It reads the view shown now, so a new search supersedes the old one's count."""
    view, store, steps, _ = _decode(view_data)
    if store is None:
        return no_update, no_update, True
    summary, stopped, counting = _summary(view, store, steps)
    return summary, (tb.sentence(stopped) if stopped else no_update), not counting
