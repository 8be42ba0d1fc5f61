"""Token page (``/tokens?run=R&sample=ID&metric=M&pads=1&back=...``): one response, token by token.

Texts and rewards of the response, the token strip coloured by one per-token metric, per-position charts,
the top tokens by |log-ratio| and by KL. Previous / next go through the responses of the same step in
(source file, line) order; ``back`` is the responses view's query string, kept for the link back to it.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

import dash
import dash_bootstrap_components as dbc
from dash import ALL, Input, Output, State, callback, clientside_callback, ctx, dcc, html, no_update

from components.format import num
from components.layout import (
    empty_state,
    no_runs_state,
    notices,
    progress,
    stat,
    unknown_run_state,
    url_prefix,
)
from components.live import shown_store
from components.theme import colour_stops
from components.token_view import (
    POSITION_FIGURE_HEIGHT,
    file_fields_figure,
    highlight_js,
    legend,
    logprob_figure,
    strip_data,
    strip_js,
    token_reward_figure,
    top_table,
    value_figure,
)
from data import live
from data.metrics import METRICS, label
from data.metrics.token import file_column
from data.service import board
from data.tokens import (
    HOVER_METRICS,
    METRIC_FIELDS,
    STRIP_METRICS,
    TOP_K,
    TokenView,
    file_field_of,
    file_label,
    first_sample,
    hover_metrics,
    is_file_metric,
    metric_available,
    metric_label,
    scale_range,
    strip_pad_text,
    token_view,
    top_tokens,
    visible_tokens,
)
from data.views import links, paths
from data.views.codec import parse_search
from data.views.paths import shown_run, unknown_run_notice
from data.views.tokens import DEFAULT_METRIC, TokensState

dash.register_page(__name__, path=paths.TOKENS, name="Tokens", title="Tokens · RL Logging Board", order=3)

URL = "tokens-url"
VIEW = "tokens-view"  # canonical query string of the state the body shows
BODY = "tokens-body"
NOTICES = "tokens-notices"
METRIC = "tokens-metric"
PADS = "tokens-pads"
STRIP = "tokens-strip"
STRIP_DATA = "tokens-strip-data"
STRIP_DONE = "tokens-strip-done"
HOVER = "tokens-hover"
CHARTS = "tokens-charts"
CHART = "tokens-chart"  # pattern id {"type": CHART, "name": ...}
PREV = "tokens-prev"
NEXT = "tokens-next"
BACK = "tokens-back"
TOP_LOG_RATIO = "tokens-top-log-ratio"
TOP_KL = "tokens-top-kl"
STATS = "tokens-stats"
MISSING_NOTE = "tokens-missing"  # one line per part hidden for a missing field
COUNT = "tokens-count"
TEXT = "tokens-text-{}"  # prompt / response / reference
STORE_WAIT = 10.0

# Why a part of the page is hidden, per missing field.
MISSING = {
    "logprobs": "No logprobs in this response: probabilities, log-ratio, KL and the log-prob chart are hidden.",
    "ref_logprobs": "No ref_logprobs in this response: reference probability, log-ratio and KL are hidden.",
    "values": "No values (no critic, e.g. GRPO) in this response: critic value, value error and the critic chart are hidden.",
    "token_rewards": "No token_rewards in this response: token reward, return, value error and their charts are hidden.",
    "response_tokens": "No response_tokens in this response: positions are shown as □.",
}


# ---- layout ----------------------------------------------------------------------------------------------


def layout(**query):
    state, notes = TokensState.from_query(query)
    body = _body(state, notes)  # first: it waits for the run's first read
    return html.Div(
        [
            dcc.Location(id=URL, refresh=False),
            dcc.Store(id=VIEW, data=state.to_query()),
            dcc.Store(id=STRIP_DONE),
            dcc.Store(id=HOVER),
            html.Div(body, id=BODY),
            shown_store("tokens", live.shown(shown_run(paths.TOKENS, state.run, board().runs()))),
        ]
    )


def _labels() -> dict[str, str]:
    return {k: label(k) for k in HOVER_METRICS}


def _controls(
    state: TokensState,
    fields: frozenset[str] | None,
    file_fields: tuple[str, ...] = (),
    overlong: frozenset[str] = frozenset(),
) -> html.Div:
    """Metric picker and pad switch; hidden (but present, so the sync callback always has its inputs)
    when there is no token to colour. The picker also offers the trainer's own per-token fields (not
    those in ``overlong``, longer than the response)."""
    options = [
        {
            "label": label(m)
            if fields is None or metric_available(m, fields)
            else f"{label(m)} (not in this response)",
            "value": m,
            "disabled": fields is not None and not metric_available(m, fields),
        }
        for m in STRIP_METRICS
    ]
    options += [{"label": file_label(f), "value": file_column(f)} for f in file_fields]
    if is_file_metric(state.metric) and state.metric not in {o["value"] for o in options}:
        why = (
            "longer than the response" if file_field_of(state.metric) in overlong else "not in this response"
        )
        gone = f"{metric_label(state.metric)} ({why})"
        options.append({"label": gone, "value": state.metric, "disabled": True})
    return html.Div(
        [
            html.Span("colour by", className="small text-muted me-2 fw-normal"),
            dcc.Dropdown(
                id=METRIC,
                options=options,
                value=state.metric,
                clearable=False,
                searchable=False,
                style={"width": "15rem", "fontSize": "0.85rem", "fontWeight": "normal"},
            ),
            dbc.Switch(
                id=PADS, label="show pad tokens", value=state.pads, className="small mb-0 ms-3 fw-normal"
            ),
        ],
        # Bootstrap's d-flex is !important: hiding needs its d-none, not an inline style.
        className="d-flex align-items-center" if fields else "d-none",
    )


def _resolve(state: TokensState) -> tuple[TokensState, TokenView | None, str | None]:
    """``state`` with the run and sample it shows filled in (first run, first response when absent), the
    response's token view, and why there is none: "no-runs", "unknown-run", "ingesting", "empty",
    "unknown-sample" (None when there is a view)."""
    b = board()
    runs = b.runs()
    if not runs:
        return state, None, "no-runs"
    run = shown_run(paths.TOKENS, state.run, runs)
    if run is None:
        return state, None, "unknown-run"
    state = replace(state, run=run)
    store = b.store(state.run, wait=STORE_WAIT)
    if store is None:
        return state, None, "ingesting"
    if state.sample is None:
        first = first_sample(store)
        if first is None:
            return state, None, "empty"
        state = replace(state, sample=first)
    view = token_view(store, state.sample, b.settings.pad_tokens)
    return state, view, (None if view is not None else "unknown-sample")


def _body(state: TokensState, notes: list[str]) -> list:
    """Everything below the navbar for ``state``: a response, or a notice saying why there is none."""
    b = board()
    chosen = state.sample is not None
    state, view, problem = _resolve(state)
    run = state.run
    hidden = _controls(state, None)
    back_href = links.responses_back(state.back, run, url_prefix())
    if problem == "no-runs":
        return [
            hidden,
            no_runs_state(b.root, b.scan().trouble),
        ]
    if problem == "unknown-run":
        notice = unknown_run_notice(paths.TOKENS, run, None, b.runs())
        return [hidden, notices([*notes, notice], NOTICES), unknown_run_state()]
    if problem == "ingesting":
        status = b.status(run)
        return [hidden, progress(status.fraction, b.reading_text(run), failed=status.error is not None)]
    if problem == "empty":
        return [hidden, empty_state("No responses in this run yet", run)]
    if problem == "unknown-sample":
        return [
            hidden,
            notices([*notes, f"Unknown response {state.sample!r} in run {run!r}."], NOTICES),
            empty_state(
                "Response not found",
                "The sample id is not in this run (the link may be from another run or an older file).",
                (f"Back to run {run}", back_href),
            ),
        ]
    if not chosen:
        notes = [*notes, "No response chosen: showing the first response of the run."]
    return _response(state, view, notes, back_href)


def _nav(state: TokensState, view: TokenView, back_href: str) -> html.Div:
    nav = view.nav

    def link(text, sample, id_):
        if sample is None:
            return dbc.Button(text, id=id_, size="sm", color="secondary", outline=True, disabled=True)
        href = links.tokens(
            state.run, sample, state.back, metric=state.metric, pads=state.pads, prefix=url_prefix()
        )
        return dcc.Link(dbc.Button(text, size="sm", color="secondary", outline=True), href=href, id=id_)

    where = (
        f"response {nav.index + 1} of {nav.count} in step {nav.step} (file order)" if nav.index >= 0 else ""
    )
    return html.Div(
        [
            link("← previous", nav.prev_id, PREV),
            link("next →", nav.next_id, NEXT),
            html.Span(where, className="small text-muted mx-2"),
            dcc.Link("back to the responses", href=back_href, id=BACK, className="small ms-auto"),
        ],
        className="d-flex align-items-center gap-2 mb-2",
    )


def _texts(view: TokenView, show_pads: bool, pad_tokens) -> dbc.Row:
    info = view.info

    def text(t):
        return t if show_pads else strip_pad_text(t, pad_tokens)

    cols = [("prompt", info.get("prompt")), ("response", info.get("response"))]
    if info.get("ref_response") is not None:
        cols.append(("reference response", info.get("ref_response")))
    return dbc.Row(
        [
            dbc.Col(
                [
                    html.Div(name, className="small text-muted"),
                    html.Div(text(t) or "", className="text-block", id=TEXT.format(name.split()[0])),
                ],
                lg=12 // len(cols),
                className="mb-2",
            )
            for name, t in cols
        ],
        className="g-2",
    )


def _response(state: TokensState, view: TokenView, notes: list[str], back_href: str) -> list:
    info, fields = view.info, view.fields
    pad_tokens = board().settings.pad_tokens
    labels = _labels()
    stats = [
        stat(label("reward"), num(info.get("reward"))),
        stat(label("ref_reward"), num(info.get("ref_reward"))),
        stat(label("reward_gain"), num(info.get("reward_gain"))),
        stat(label("kl_mean"), num(info.get("kl_mean"))),
        stat(label("kl_sum"), num(info.get("kl_sum"))),
        stat(label("response_length"), num(info.get("response_length"))),
    ]
    header = html.Div(
        [
            html.H4("Response", className="mb-0 me-3"),
            html.Code(state.sample, className="me-3"),
            html.Span(
                f"{state.run} · step {info.get('step')} · {info.get('source')}:{info.get('line')}",
                className="text-muted small",
            ),
        ],
        className="d-flex align-items-baseline flex-wrap mb-2",
    )
    out = [
        notices([*notes, *board().failure_notices(state.run)], NOTICES),
        header,
        _nav(state, view, back_href),
        html.Div(stats, className="d-flex flex-wrap mb-2 numeric", id=STATS),
        _texts(view, state.pads, pad_tokens),
    ]
    if not fields:
        out.append(_controls(state, None))
        out.append(
            html.P(
                "This response has no token-level fields (response_tokens, logprobs, ref_logprobs, values, "
                "token_rewards): the token strip, charts and top-token tables are hidden.",
                className="small text-muted",
                id=MISSING_NOTE,
            )
        )
        return out
    missing = [MISSING[f] for f in MISSING if f not in fields]
    overlong = {name: (n, tokens) for name, n, tokens in view.overlong}
    missing += [
        f"{file_label(name)} has {n} values for {tokens} tokens: longer than the response, so it is not drawn "
        "(it likely covers the prompt too)."
        for name, (n, tokens) in overlong.items()
    ]
    metric = state.metric
    if not metric_available(metric, fields, view.file_fields):
        fallback = next((m for m in STRIP_METRICS if metric_available(m, fields)), None)
        name = file_field_of(metric)
        if name in overlong:
            lack = f"{file_label(name)} is longer than the response"
        elif name is not None:
            lack = f"This response has no per-token field {name!r} of the trainer"
        else:
            lack = (
                f"{label(metric)} needs {', '.join(METRIC_FIELDS[metric])}, which this response does not have"
            )
        missing.insert(0, lack + (f": coloured by {label(fallback)} instead." if fallback else "."))
        metric = fallback
    shown = visible_tokens(view.tokens, state.pads)
    hidden = view.tokens.height - shown.height
    out.append(
        html.Div(
            [html.Div(m, className="small text-muted") for m in missing],
            id=MISSING_NOTE,
            className="mb-2",
        )
    )
    hover = [(m, label(m)) for m in hover_metrics(fields)]
    hover += [(file_column(f), file_label(f)) for f in view.file_fields]
    out.append(
        _strip_card(
            shown, metric, hidden, hover, _controls(state, fields, view.file_fields, frozenset(overlong))
        )
    )
    # The charts come in a second round trip, once the strip is filled (see _fill_charts): plotly.js
    # drawing three 4,000-point charts would otherwise hold the strip back.
    out.append(html.Div(id=CHARTS, style={"minHeight": f"{POSITION_FIGURE_HEIGHT + 10}px"}))
    out.append(_tables(view, fields, labels))
    return out


def _strip_card(shown, metric: str | None, hidden: int, hover: list, controls) -> dbc.Card:
    count = f"{shown.height} tokens" + (f", {hidden} pad position(s) hidden" if hidden else "")
    if metric is None:
        lo, hi, stops, signed = 0.0, 1.0, colour_stops("prob", False), False
        data_metric = "__none__"
        key_legend = html.Span("no metric to colour by", className="small text-muted")
    else:
        signed = METRICS[metric].signed if metric in METRICS else True  # a field of the trainer's own
        lo, hi = scale_range(metric, shown.get_column(metric))
        stops = colour_stops(metric, signed)
        data_metric = metric
        key_legend = legend(metric_label(metric), lo, hi, stops, signed)
    key = uuid.uuid4().hex[:12]
    return dbc.Card(
        [
            dbc.CardHeader(
                html.Div(
                    [
                        html.Span("Tokens", className="me-2"),
                        html.Span(count, className="small text-muted fw-normal me-4", id=COUNT),
                        controls,
                        html.Div(key_legend, className="ms-auto"),
                    ],
                    className="d-flex align-items-center flex-wrap gap-2",
                )
            ),
            dbc.CardBody(
                [
                    dcc.Store(id=STRIP_DATA, data=strip_data(shown, data_metric, lo, hi, stops, key, hover)),
                    html.Div(
                        id=STRIP,
                        className="token-strip text-block",
                        style={"maxHeight": "22rem"},
                        **{"data-key": key},
                    ),
                    html.Div(
                        "Hover a token for all its values; hover a chart to find its token here.",
                        className="small text-muted mt-1",
                    ),
                ]
            ),
        ]
    )


def _charts(shown, fields: frozenset[str], labels: dict, file_fields: tuple[str, ...] = ()) -> dbc.Row:
    """The per-position charts the response's fields allow (none without log-probs / token rewards /
    per-token fields of the trainer's own)."""
    charts = []
    if "logprobs" in fields:
        charts.append(("logprob", logprob_figure(shown, labels)))
    if "values" in fields and "token_rewards" in fields:
        charts.append(("value", value_figure(shown, labels)))
    if "token_rewards" in fields:
        charts.append(("token_reward", token_reward_figure(shown, labels)))
    if file_fields:
        fields_of_file = [(file_column(f), file_label(f)) for f in file_fields]
        charts.append(("file", file_fields_figure(shown, fields_of_file)))
    if not charts:
        return dbc.Row()
    return dbc.Row(
        [
            dbc.Col(
                dcc.Graph(
                    id={"type": CHART, "name": name},
                    figure=fig,
                    config={"displayModeBar": False},
                    clear_on_unhover=True,
                ),
                xl=12 // len(charts),
                lg=12,
                className="mb-2",
            )
            for name, fig in charts
        ],
        className="g-2",
    )


def _tables(view: TokenView, fields: frozenset[str], labels: dict) -> dbc.Row:
    if not metric_available("kl", fields):
        return dbc.Row()
    return dbc.Row(
        [
            dbc.Col(
                top_table(
                    top_tokens(view.tokens, "log_ratio"),
                    f"Top {TOP_K} tokens by |{labels['log_ratio']}|",
                    labels,
                    TOP_LOG_RATIO,
                ),
                lg=6,
            ),
            dbc.Col(
                top_table(
                    top_tokens(view.tokens, "kl"), f"Top {TOP_K} tokens by {labels['kl']}", labels, TOP_KL
                ),
                lg=6,
            ),
        ],
        className="g-3 mt-1",
    )


# ---- callbacks -------------------------------------------------------------------------------------------


@callback(
    Output(URL, "search"),
    Output(VIEW, "data"),
    Output(BODY, "children"),
    Input(URL, "search"),
    Input(METRIC, "value"),
    Input(PADS, "value"),
    State(VIEW, "data"),
    prevent_initial_call=True,
)
def _sync(search, metric, pads, shown):
    """URL <-> controls: a control writes the URL; a new URL (Back/Forward) redraws the body, controls
    included. A URL or control that says what the body already shows changes nothing (no_update): the
    Location reports the URL once when it mounts."""
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
    state, view, problem = _resolve(state)
    if view is None:
        return None
    return _charts(visible_tokens(view.tokens, state.pads), view.fields, _labels(), view.file_fields)


clientside_callback(strip_js(STRIP), Output(STRIP_DONE, "data"), Input(STRIP_DATA, "data"))
clientside_callback(
    highlight_js(STRIP), Output(HOVER, "data"), Input({"type": CHART, "name": ALL}, "hoverData")
)
