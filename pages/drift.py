"""Drifting tokens (``/drift?run=R&a=1&b=60&metric=log_ratio&min_n=5``): for two steps of a run, the tokens
whose mean log-ratio (or mean inference–trainer gap) moved most between them, each opening the responses
that hold it (the responses page's token filter of exactly that token).

The page is its layout: its controls load the page at a new URL (the board reads only the two steps' token
arrays, cached per store version), so Back and Forward are the browser's own.
"""

from __future__ import annotations

import dash
from dash import Input, State, clientside_callback, html

from components import drift_board as db
from components import layout as ly
from components.live import shown_store
from data import live
from data.service import board
from data.views import drift, paths

dash.register_page(
    __name__, path=paths.DRIFT, name="Drift", title="Drifting tokens · RL Logging Board", order=3.5
)

NOTICES = "drift-notices"
HEADER = "drift-run"
BOARD = "drift-board"
CONTROL_IDS = {k: f"drift-{k.replace('_', '-')}" for k in ("a", "b", "metric", "min_n", "show")}
STORE_WAIT = 10.0


def layout(**query):
    page = drift.drift_page(query, board(), STORE_WAIT, ly.url_prefix())
    if page.problem == drift.NO_RUNS:
        return ly.no_runs_state(board().root, board().scan().trouble)
    if page.problem == drift.UNKNOWN_RUN:
        return html.Div([ly.notices(page.notices, NOTICES), ly.unknown_run_state()])
    run, view = page.run, page.view
    title = ly.page_title("Drifting tokens", run, HEADER)
    if page.problem == drift.INGESTING:
        status = board().status(run)
        return html.Div(
            [title, ly.progress(status.fraction, board().reading_text(run), status.error is not None)]
        )
    a, b = page.pair or (None, None)
    parts = [
        title,
        shown_store("drift", live.shown(run, page.store)),
        ly.notices(page.notices, NOTICES),
        db.controls(a, b, view.metric, view.min_n, drift.metric_options(), CONTROL_IDS),
    ]
    if page.problem == drift.EMPTY:
        return html.Div([*parts, ly.empty_state(drift.EMPTY_TITLES[drift.EMPTY], run)])
    if page.problem == drift.NO_TOKENS:
        return html.Div([*parts, ly.empty_state(drift.EMPTY_TITLES[drift.NO_TOKENS], page.why)])
    return html.Div(
        [*parts, db.board(page.rows, page.pair, drift.metric_label(view.metric), page.explain, BOARD)]
    )


clientside_callback(
    db.show_js(),
    Input(CONTROL_IDS["show"], "n_clicks"),
    *(State(CONTROL_IDS[k], "value") for k in ("a", "b", "metric", "min_n")),
    prevent_initial_call=True,
)
