"""Responses page (``/responses``): every response of a step (or of the run), ranked, filtered and exported.

The grid pages and sorts on the server (AG Grid's infinite row model); filters, sort and the selected row
live in the URL. Selecting a row shows its full texts beside the table; its id opens the token page.
"""

from __future__ import annotations

import dash
import dash_bootstrap_components as dbc
from dash import Input, Output, State, callback, clientside_callback, ctx, dcc, html, no_update

from components.layout import no_runs_state, notices, progress, unknown_run_state, url_prefix
from components.live import shown_store
from components.tables import (
    column_defs,
    column_kind,
    grid_sort,
    responses_grid,
    sort_state,
    summary_line,
    text_panel,
)
from data import live
from data.metrics import METRICS, label
from data.queries import QueryError, SearchStopped, regex_error
from data.responses import (
    json_rows,
    ordered,
    page_rows,
    run_steps,
    sample_texts,
    sortable_columns,
    table_columns,
    warm_text_index,
)
from data.service import UnknownRun, board
from data.views import links, paths
from data.views.codec import first, parse_search
from data.views.paths import shown_run, unknown_run_notice
from data.views.responses import ALL_STEPS, RANGE_KEYS, ResponsesView

dash.register_page(
    __name__, path=paths.RESPONSES, name="Responses", title="Responses · RL Logging Board", order=2
)

URL = "responses-url"
VIEW = "responses-view"  # canonical query string of the view
FILTER = "responses-filter"  # the part of the view that selects rows: the grid reloads when it changes
NOTICES = "responses-notices"
STEP = "responses-step"
Q = "responses-q"
Q_ERROR = "responses-q-error"
LOSES = "responses-loses"
CLEAR = "responses-clear"
GRID = "responses-grid"
SUMMARY = "responses-summary"
EXPORT_CSV = "responses-export-csv"
EXPORT_JSONL = "responses-export-jsonl"
TEXT = "responses-text"
RANGE_IDS = {f"{k}_{e}": f"responses-{k}-{e}" for k in RANGE_KEYS for e in ("min", "max")}
RANGE_METRIC = {
    "reward": "reward",
    "gain": "reward_gain",
    "kl": "kl_mean",
    "len": "response_length",
    "ref": "ref_reward",
}
STORE_WAIT = 10.0


# ---- layout ----------------------------------------------------------------------------------------------


def layout(**query):
    runs = board().runs()
    if not runs:
        return no_runs_state(board().root, board().scan().trouble)
    asked = first(query, "run")
    run = shown_run(paths.RESPONSES, asked, runs)
    if run is None:
        notice = unknown_run_notice(paths.RESPONSES, asked, run, runs)
        return html.Div([notices([notice], NOTICES), unknown_run_state()])
    store = board().store(run, wait=STORE_WAIT)
    if store is None:
        status = board().status(run)
        return html.Div(
            [
                html.H4("Responses", className="mb-2"),
                shown_store("responses", live.shown(run)),
                progress(status.fraction, board().reading_text(run), failed=status.error is not None),
            ]
        )
    steps = run_steps(store)
    view, msgs = ResponsesView.from_query(query, steps, sortable_columns(store))
    view = view.with_(run=run)  # the first run when the URL names none
    warm_text_index(store)  # a first regex search over all steps need not build it
    return html.Div(
        [
            dcc.Location(id=URL, refresh=False),
            dcc.Store(id=VIEW, data=view.to_query()),
            dcc.Store(id=FILTER, data=view.filter_key()),
            shown_store("responses", live.shown(run, store)),
            notices([*msgs, *board().failure_notices(run)], NOTICES),
            html.Div(
                [
                    html.H4("Responses", className="mb-0 me-3"),
                    html.Span(run, className="text-muted me-3"),
                    html.Span(id=SUMMARY, className="small me-auto"),
                    html.Span("Export", className="small text-muted me-2"),
                    dbc.ButtonGroup(
                        [
                            dbc.Button("CSV", id=EXPORT_CSV, href="", external_link=True, **_btn),
                            dbc.Button("JSONL", id=EXPORT_JSONL, href="", external_link=True, **_btn),
                        ],
                        size="sm",
                    ),
                ],
                className="d-flex align-items-baseline flex-wrap mb-2",
            ),
            _filter_bar(store, view, steps),
            dbc.Row(
                [
                    dbc.Col(
                        responses_grid(GRID, _defs(store, view), view.sort), lg=8, md=12, className="mb-2"
                    ),
                    dbc.Col(html.Div(id=TEXT, children=text_panel(None, _text_labels(), None)), lg=4, md=12),
                ],
                className="g-2",
            ),
        ]
    )


_btn = {"color": "secondary", "outline": True, "className": "py-0"}


def _filter_bar(store, view: ResponsesView, steps: list[int]) -> dbc.Card:
    step_value = view.step if view.step is not None else (steps[-1] if steps else None)
    step = html.Div(
        [
            html.Div("step", className="small text-muted"),
            dcc.Dropdown(
                id=STEP,
                options=[{"label": "all steps", "value": ALL_STEPS}]
                + [{"label": f"step {s}", "value": s} for s in steps],
                value=step_value,
                clearable=False,
                style={"width": "8.5rem", "fontSize": "0.85rem"},
            ),
        ],
        className="me-3",
    )
    present = set(table_columns(store)[0])
    ranges = [_range_input(key, view, RANGE_METRIC[key] in present) for key in RANGE_KEYS]
    search = html.Div(
        [
            html.Div("search prompt and response (regular expression)", className="small text-muted"),
            dbc.Input(
                id=Q,
                type="text",
                value=view.q or "",
                debounce=True,
                size="sm",
                placeholder="e.g. (?i)great|\\bthe the\\b",
                style={"width": "17rem"},
            ),
            html.Div(id=Q_ERROR, className="small text-danger"),
        ],
        className="me-3",
    )
    loses = html.Div(
        dbc.Switch(
            id=LOSES,
            label="only responses that lose to the reference",
            value=view.loses,
            className="small mb-0",
        ),
        className="me-3 align-self-center pt-3",
    )
    clear = dbc.Button(
        "Clear filters", id=CLEAR, size="sm", color="link", className="align-self-center pt-3 px-0"
    )
    return dbc.Card(
        dbc.CardBody(
            html.Div(
                [step, *ranges, search, loses, clear], className="d-flex flex-wrap align-items-start gap-1"
            ),
            className="py-2",
        ),
        className="mb-2",
    )


def _range_input(key: str, view: ResponsesView, available: bool) -> html.Div:
    """min <= x < max inputs of one metric; disabled when the run has no value of it (e.g. no tokens)."""
    text = label(RANGE_METRIC[key])
    lo, hi = getattr(view, f"{key}_min"), getattr(view, f"{key}_max")
    common = {
        "type": "number",
        "step": "any",
        "debounce": True,
        "size": "sm",
        "style": {"width": "5.2rem"},
        "disabled": not available and lo is None and hi is None,
    }
    hint = text if available else f"{text}: not in this run's files"
    return html.Div(
        [
            html.Div(
                text, className="small text-muted text-truncate", title=hint, style={"maxWidth": "14rem"}
            ),
            dbc.InputGroup(
                [
                    dbc.Input(id=RANGE_IDS[f"{key}_min"], value=lo, placeholder="min", **common),
                    dbc.InputGroupText("≤ x <", className="px-1 small"),
                    dbc.Input(id=RANGE_IDS[f"{key}_max"], value=hi, placeholder="max", **common),
                ],
                size="sm",
                className="flex-nowrap",
            ),
        ],
        className="me-3",
    )


def _defs(store, view: ResponsesView) -> list[dict]:
    metrics, extras = table_columns(store)
    schema = store.scalars().schema
    cols = [
        (c, label(c), METRICS[c].description if c in METRICS else "extra field of the files")
        for c in metrics + extras
    ]
    kinds = {c: column_kind(schema[c]) for c in metrics + extras}
    signed = {c for c in metrics if c in METRICS and METRICS[c].signed and c not in ("reward", "ref_reward")}
    previews = [("prompt_preview", "prompt", False), ("response_preview", "response", True)]
    return column_defs(cols, kinds, signed, previews, view.sort, view.order)


def _text_labels() -> dict[str, str]:
    return {k: label(k) for k in ("reward", "ref_reward", "reward_gain")}


# ---- helpers of the callbacks ------------------------------------------------------------------------------


def _store_of(run):
    try:
        return board().store(run, wait=STORE_WAIT) if run in board().runs() else None
    except UnknownRun:
        return None


def _decode(search: str | None):
    """``(view, store, steps, notices)`` of a query string; store None for an unknown or unread run."""
    query = parse_search(search)
    run = first(query, "run")
    store = _store_of(run)
    if store is None:
        view, msgs = ResponsesView.from_query(query)
        return view, None, [], msgs
    steps = run_steps(store)
    view, msgs = ResponsesView.from_query(query, steps, sortable_columns(store))
    return view, store, steps, msgs


def _where(view: ResponsesView, steps: list[int]) -> str:
    step = view.resolved_step(steps)
    return "over all steps" if step is None else f"at step {step}"


def _view_from_controls(current: ResponsesView, steps, step, ranges: dict, q, loses, sort) -> ResponsesView:
    # Choosing the last step while the URL says "latest" (no step) keeps the URL as it was.
    if step == (steps[-1] if steps else None) and current.step is None:
        step = None
    sort_col, order = sort if sort else (current.sort, current.order)
    return current.with_(
        step=step,
        sort=sort_col,
        order=order,
        q=(q or None),
        loses=bool(loses),
        **{k: (None if v is None or v == "" else float(v)) for k, v in ranges.items()},
    )


def _changed(new, old):
    return no_update if new == old else new


# ---- callbacks -------------------------------------------------------------------------------------------


@callback(
    Output(URL, "search"),
    Output(STEP, "value"),
    *(Output(i, "value") for i in RANGE_IDS.values()),
    Output(Q, "value"),
    Output(LOSES, "value"),
    Output(GRID, "columnState"),
    Output(VIEW, "data"),
    Output(FILTER, "data"),
    Output(NOTICES, "children"),
    Input(URL, "search"),
    Input(STEP, "value"),
    *(Input(i, "value") for i in RANGE_IDS.values()),
    Input(Q, "value"),
    Input(LOSES, "value"),
    Input(CLEAR, "n_clicks"),
    Input(GRID, "columnState"),
    Input(GRID, "selectedRows"),
    State(VIEW, "data"),
    State(FILTER, "data"),
)
def _sync(search, step, *args):
    """The one URL <-> controls sync: the URL seeds the controls; a control, a header sort or a row
    selection writes the URL. Returns no_update for whatever did not change."""
    n = len(RANGE_IDS)
    ranges = dict(zip(RANGE_IDS, args[:n], strict=True))
    q, loses, _clear, column_state, selected, view_data, filter_data = args[n:]
    url_view, store, steps, msgs = _decode(search)
    trigger = ctx.triggered_id
    n_out = 1 + 1 + n + 2  # url, step, ranges, q, loses
    if trigger in (None, URL):
        view = url_view
        step_value = view.step if view.step is not None else (steps[-1] if steps else None)
        controls = [
            no_update,
            _changed(step_value, step),
            *(_changed(getattr(view, k), ranges[k]) for k in RANGE_IDS),
            _changed(view.q or "", q or ""),
            _changed(view.loses, bool(loses)),
        ]
        fields = [f for f in ([c.get("colId") for c in column_state or []]) if f]
        grid_state = (
            sort_state(fields, view.sort, view.order)
            if fields and grid_sort(column_state) != (view.sort, view.order)
            else no_update
        )
        return (
            *controls,
            grid_state,
            _changed(view.to_query(), view_data),
            _changed(view.filter_key(), filter_data),
            notices(msgs) if trigger == URL else no_update,
        )
    if trigger == CLEAR:
        view = ResponsesView(run=url_view.run, step=url_view.step, sort=url_view.sort, order=url_view.order)
        controls = [None, no_update, *([None] * n), "", False]
    else:
        view = _view_from_controls(url_view, steps, step, ranges, q, loses, grid_sort(column_state))
        if trigger == GRID and selected:
            view = view.with_(sample=selected[0].get("sample_id"))
        controls = [None, *([no_update] * (n_out - 1))]
    query = view.to_query()
    controls[0] = _changed(query, search or "")
    return (
        *controls,
        no_update,
        _changed(query, view_data),
        _changed(view.filter_key(), filter_data),
        no_update,
    )


# A new filter empties the grid's block cache so the infinite row model asks the server again.
clientside_callback(
    """
    function (key) {
        if (window.dash_ag_grid) {
            window.dash_ag_grid.getApiAsync("responses-grid").then(function (api) {
                api.ensureIndexVisible(0, "top");
                api.purgeInfiniteCache();
            });
        }
    }
    """,
    Input(FILTER, "data"),
    prevent_initial_call=True,
)


# Double-clicking a row opens it on the token page: the link its id cell has (the row's tokens_href).
clientside_callback(
    """
    function (cell) {
        if (!cell || cell.rowId === undefined || cell.rowId === null || !window.dash_ag_grid) { return; }
        window.dash_ag_grid.getApiAsync("responses-grid").then(function (api) {
            var node = api.getRowNode(String(cell.rowId));
            if (node && node.data && node.data.tokens_href) { window.location.assign(node.data.tokens_href); }
        });
    }
    """,
    Input(GRID, "cellDoubleClicked"),
    prevent_initial_call=True,
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
    sort = grid_sort(request.get("sortModel")) or (view.sort, view.order)
    view = view.with_(sort=sort[0], order=sort[1])
    try:
        df, count = page_rows(
            store,
            view.response_filter(steps),
            view.sort,
            view.descending,
            request["startRow"],
            request["endRow"],
            board().settings.search_seconds,
        )
    except QueryError:  # an invalid regex is left out of the filter, so this is a stopped search: no rows
        return {"rowData": [], "rowCount": 0}
    rows = json_rows(df)
    prefix = url_prefix()
    for row in rows:
        row["tokens_href"] = links.row_tokens(view, row["sample_id"], prefix)
    return {"rowData": rows, "rowCount": count}


@callback(
    Output(SUMMARY, "children"),
    Output(EXPORT_CSV, "href"),
    Output(EXPORT_JSONL, "href"),
    Output(Q_ERROR, "children"),
    Output(TEXT, "children"),
    Input(VIEW, "data"),
)
def _render(view_data):
    """Summary line, export links, regex error and the selected response's texts for the view."""
    view, store, steps, _ = _decode(view_data)
    if store is None:
        return "", no_update, no_update, "", no_update
    try:
        order = ordered(
            store, view.response_filter(steps), view.sort, view.descending, board().settings.search_seconds
        )
        summary = summary_line(
            order.count, order.scope, _where(view, steps), order.mean_reward, label("reward")
        )
        stopped = None
    except SearchStopped as e:
        summary, stopped = "No rows: the text search was stopped.", str(e)
    error = regex_error(view.q) if view.q else None
    texts = sample_texts(store, view.sample, board().settings.pad_tokens) if view.sample else None
    panel = text_panel(
        texts, _text_labels(), links.row_tokens(view, view.sample, url_prefix()) if texts else None
    )
    return (
        summary,
        links.export(view, "csv", url_prefix()),
        links.export(view, "jsonl", url_prefix()),
        f"{error}: not applied." if error else (f"{stopped[:1].upper()}{stopped[1:]}." if stopped else ""),
        panel,
    )
