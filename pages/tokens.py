"""Token page (``/tokens?run=R&sample=ID&metric=M&pads=1&back=...``): one response, token by token: its
texts and rewards, the strip coloured by one per-token metric, per-position charts, the top tokens by
|log-ratio| and by KL; previous / next walk the responses view ``back`` (its query string) it came from."""

from __future__ import annotations

from dataclasses import replace

import dash
from dash import ALL, MATCH, Input, Output, State, callback, clientside_callback, ctx, dcc, html, no_update
from dash.exceptions import PreventUpdate

from components import token_page as tp
from components.controls import token_controls
from components.layout import (
    empty_state,
    left_page,
    no_runs_state,
    notices,
    page_url,
    progress,
    unknown_run_state,
    url_prefix,
)
from components.live import shown_store
from components.token_figures import POSITION_FIGURE_HEIGHT, RESET, relayout_range
from components.token_js import highlight_js, strip_js
from data import live, tokens
from data.service import board
from data.token_page import TokenPage, chart_inputs, strip_of, token_page
from data.views import paths
from data.views import tokens as views
from data.views.codec import parse_search
from data.views.paths import shown_run
from data.views.tokens import DEFAULT_METRIC, TokensState
from pages import _annotations as ann

dash.register_page(__name__, path=paths.TOKENS, name="Tokens", title="Tokens · RL Logging Board", order=3)

URL = page_url(paths.TOKENS)  # the page's own Location: the shell listens to it
VIEW = "tokens-view"  # canonical query string of the state the body shows
BODY = "tokens-body"
NOTICES = "tokens-notices"
METRIC = "tokens-metric"
PADS = "tokens-pads"
STRIP = "tokens-strip"
STRIP_DATA = "tokens-strip-data"
STRIP_DONE = "tokens-strip-done"
STRIP_WANT = "tokens-strip-want"  # the next window of tokens the strip asks for: {key, start, upto}
STRIP_MORE = "tokens-strip-more"  # ... and its data
STRIP_MORE_DONE = "tokens-strip-more-done"
STRIP_STATUS = "tokens-strip-status"  # how many tokens the strip shows
HOVER = "tokens-hover"
CHARTS = "tokens-charts"
CHART = "tokens-chart"  # pattern id {"type": CHART, "name": ...}
PREV = "tokens-prev"
NEXT = "tokens-next"
BACK = "tokens-back"
TOP_LOG_RATIO = "tokens-top-log-ratio"
TOP_KL = "tokens-top-kl"
STATS = "tokens-stats"
GAP = "tokens-gap"  # the response's inference–trainer mismatch in figures
MISSING_NOTE = "tokens-missing"  # one line per part hidden for a missing field
COUNT = "tokens-count"
TEXT = "tokens-text-{}"  # prompt / response / reference
STORE_WAIT = 10.0
CONTROL_IDS = {"metric": METRIC, "pads": PADS}
NAV_IDS = {"prev": PREV, "next": NEXT, "back": BACK, "where": "tokens-nav-where"}
STRIP_IDS = {"count": COUNT, "data": STRIP_DATA, "strip": STRIP, "status": STRIP_STATUS}


def layout(**query):
    state, notes = TokensState.from_query(query)
    body = _body(state, notes)  # first: it waits for the run's first read
    return html.Div(
        [
            dcc.Location(id=URL, refresh=False),
            dcc.Store(id=VIEW, data=state.to_query()),
            dcc.Store(id=STRIP_DONE),
            dcc.Store(id=STRIP_WANT),
            dcc.Store(id=STRIP_MORE),
            dcc.Store(id=STRIP_MORE_DONE),
            dcc.Store(id=HOVER),
            html.Div(body, id=BODY),
            shown_store("tokens", live.shown(shown_run(paths.TOKENS, state.run, board().runs()))),
        ]
    )


def _controls(state: TokensState, view: tokens.TokenView | None = None):
    """The metric picker and pad switch: hidden without a response's token fields to colour by."""
    if view is None or not view.fields:
        return token_controls(
            tokens.metric_options(state.metric, None), state.metric, state.pads, False, CONTROL_IDS
        )
    overlong = frozenset(name for name, _, _ in view.overlong)
    options = tokens.metric_options(state.metric, view.fields, view.file_fields, overlong)
    return token_controls(options, state.metric, state.pads, True, CONTROL_IDS)


def _body(state: TokensState, notes: list[str]) -> list:
    """Everything below the navbar for ``state``: a response, or a notice saying why there is none."""
    b = board()
    page = token_page(state, notes, b, STORE_WAIT, url_prefix())
    state, run, hidden = page.state, page.state.run, _controls(page.state)
    if page.problem == views.NO_RUNS:
        return [hidden, no_runs_state(b.root, b.scan().trouble)]
    if page.problem == views.UNKNOWN_RUN:
        return [hidden, notices(page.notices, NOTICES), unknown_run_state(run in b.scan().unreadable)]
    if page.problem == views.INGESTING:
        status = b.status(run)
        return [hidden, progress(status.fraction, b.reading_text(run), failed=status.error is not None)]
    if page.problem == views.EMPTY:
        return [hidden, notices(page.notices, NOTICES), empty_state(views.EMPTY_TITLES[views.EMPTY], run)]
    if page.problem == views.UNKNOWN_SAMPLE:
        return [
            hidden,
            notices(page.notices, NOTICES),
            empty_state(
                views.EMPTY_TITLES[views.UNKNOWN_SAMPLE],
                "The sample id is not in this run (the link may be from another run or an older file).",
                (f"Back to run {run}", page.back_href),
            ),
        ]
    return _response(page)


def _response(page: TokenPage) -> list:
    state, view = page.state, page.view
    out = [
        notices(page.notices, NOTICES),
        tp.header(page.source_line, state.sample, page.where, page.end, page.group_href),
        tp.nav(page.prev_href, page.next_href, page.nav_text, page.back_href, NAV_IDS),
        tp.key_figures(page.key_figures, STATS),
        tp.texts(page.texts, TEXT),
    ]
    if page.strip is None:
        return [
            *out,
            _controls(state),
            html.P(tokens.NO_TOKEN_FIELDS, className="small text-muted", id=MISSING_NOTE),
        ]
    s = page.strip
    strip = tp.strip_card(
        s.shown,
        s.metric,
        s.label,
        s.scale,
        s.hidden,
        s.hover,
        _controls(state, view),
        STRIP_IDS,
        state.pos,
        s.keys,
    )
    top_ids = {"log_ratio": TOP_LOG_RATIO, "kl": TOP_KL}
    tables = [(rows, title, top_ids[by]) for by, rows, title in page.top]
    return [
        *out,
        tp.notes(s.lacks, MISSING_NOTE),
        tp.figure_line(f"{tokens.metric_label('infer_gap')}:", page.gap, GAP),
        strip,
        ann.tokens_card(state.run, state.sample),
        # The charts come in a second round trip, once the strip is filled (see _fill_charts): plotly.js
        # drawing three 4,000-point charts would otherwise hold the strip back.
        html.Div(id=CHARTS, style={"minHeight": f"{POSITION_FIGURE_HEIGHT + 10}px"}),
        tp.top_tables(tables, tokens.metric_labels(view.file_fields)),
    ]


# ---- callbacks -------------------------------------------------------------------------------------------


@callback(
    Output(URL, "search"),
    Output(VIEW, "data"),
    Output(BODY, "children"),
    Input(URL, "search"),
    Input(METRIC, "value"),
    Input(PADS, "value"),
    State(VIEW, "data"),
    State(URL, "pathname"),
    prevent_initial_call=True,
)
def _sync(search, metric, pads, shown, pathname):
    """URL <-> controls: a control writes the URL; a new URL (Back/Forward) redraws the body, controls
    included. A URL or control that says what the body already shows changes nothing (no_update): the
    Location reports the URL once when it mounts."""
    if left_page(pathname, paths.TOKENS):
        raise PreventUpdate
    state, notes = TokensState.from_query(parse_search(search))
    if ctx.triggered_id != URL:
        state = replace(state, metric=metric or DEFAULT_METRIC, pads=bool(pads))
    query = state.to_query()
    if query == shown:
        return no_update, no_update, no_update
    return (no_update if ctx.triggered_id == URL else query), query, _body(state, notes)


@callback(
    Output(CHARTS, "children"),
    Input(STRIP_DONE, "data"),
    State(VIEW, "data"),
    prevent_initial_call=True,
)
def _fill_charts(_done, shown):
    """Per-position charts of the response the body shows, drawn once its strip is filled."""
    state, _ = TokensState.from_query(parse_search(shown))
    state, view, _ = views.resolve(state, board(), STORE_WAIT)
    if view is None:
        return None
    return tp.charts(*chart_inputs(state, view), CHART)


@callback(
    Output(STRIP_MORE, "data"),
    Input(STRIP_WANT, "data"),
    State(VIEW, "data"),
    prevent_initial_call=True,
)
def _more_tokens(want, shown):
    """The strip's next window of tokens (what a scroll near its end, or a chart's point beyond it, asks)."""
    if not isinstance(want, dict) or not isinstance(want.get("start"), int):
        return no_update
    state, _ = TokensState.from_query(parse_search(shown))
    state, view, _ = views.resolve(state, board(), STORE_WAIT)
    if view is None or not view.fields:
        return no_update
    metric, _, visible, scale = strip_of(state, view, board(), STORE_WAIT)
    upto = want.get("upto") if isinstance(want.get("upto"), int) else None
    hover = tokens.hover_columns(view)
    return tp.strip_window(visible, metric, scale, hover, str(want.get("key")), want["start"], upto)


@callback(
    Output({"type": CHART, "name": MATCH}, "figure"),
    Input({"type": CHART, "name": MATCH}, "relayoutData"),
    State(VIEW, "data"),
    prevent_initial_call=True,
)
def _zoom(relayout, shown):
    """A chart zoomed (or panned) along x: its positions there, in detail; reset: the whole response."""
    asked = relayout_range(relayout)
    if asked is None:
        return no_update
    state, _ = TokensState.from_query(parse_search(shown))
    state, view, _ = views.resolve(state, board(), STORE_WAIT)
    if view is None:
        return no_update
    visible, _, labels, fields_of_file = chart_inputs(state, view)
    if asked != RESET:
        visible = tokens.positions_near(visible, *asked)
    x_range = None if asked == RESET else asked
    return tp.chart_figure(ctx.triggered_id["name"], visible, labels, fields_of_file, x_range)


clientside_callback(
    strip_js(STRIP, STRIP_WANT, STRIP_STATUS, STRIP_DATA, STRIP_DONE),
    Output(STRIP_DONE, "data"),
    Input(STRIP_DATA, "data"),
)
clientside_callback(
    strip_js(STRIP, STRIP_WANT, STRIP_STATUS, STRIP_DATA, STRIP_DONE),
    Output(STRIP_MORE_DONE, "data"),
    Input(STRIP_MORE, "data"),
)
clientside_callback(
    highlight_js(STRIP), Output(HOVER, "data"), Input({"type": CHART, "name": ALL}, "hoverData")
)
ann.register_tokens(STRIP, STRIP_DONE, STRIP_MORE_DONE)
