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
from data.service import board, open_run
from data.views import drift, links, paths
from data.views.drift import DriftView

dash.register_page(
    __name__, path=paths.DRIFT, name="Drift", title="Drifting tokens · RL Logging Board", order=3.5
)

NOTICES = "drift-notices"
HEADER = "drift-run"
BOARD = "drift-board"
CONTROL_IDS = {k: f"drift-{k.replace('_', '-')}" for k in ("a", "b", "metric", "min_n", "show")}
STORE_WAIT = 10.0


def layout(**query):
    runs = board().runs()
    if not runs:
        return ly.no_runs_state(board().root, board().scan().trouble)
    ctx = open_run(query.get("run"), paths.DRIFT, STORE_WAIT)
    if ctx.run is None:
        return html.Div([ly.notices(ctx.notices, NOTICES), ly.unknown_run_state()])
    view, notes = DriftView.from_query(query, ctx)
    title = ly.page_title("Drifting tokens", ctx.run, HEADER)
    if ctx.store is None:
        status = board().status(ctx.run)
        return html.Div(
            [title, ly.progress(status.fraction, board().reading_text(ctx.run), status.error is not None)]
        )
    steps = ctx.step_list
    pair = view.steps(steps)
    a, b = pair or (None, None)
    parts = [
        title,
        shown_store("drift", live.shown(ctx.run, ctx.store)),
        ly.notices([*notes, *board().failure_notices(ctx.run)], NOTICES),
        db.controls(a, b, view.metric, view.min_n, drift.metric_options(), CONTROL_IDS),
    ]
    if pair is None:
        return html.Div([*parts, ly.empty_state("No responses in this run yet", ctx.run)])
    rows, ranked = drift.board_rows(ctx.store, view, steps)
    if not ranked:
        why = f"No token is seen {view.min_n} times or more at both steps with a {drift.metric_label(view.metric)}."
        return html.Div([*parts, ly.empty_state("No tokens to compare", why)])
    prefix, out = ly.url_prefix(), []
    for r in rows.to_dicts():
        token = r["pattern"]
        out.append(
            {
                **r,
                "href_a": links.token_responses(ctx.run, a, token, view.metric, prefix),
                "href_b": links.token_responses(ctx.run, b, token, view.metric, prefix),
                "href_all": links.token_responses(ctx.run, "all", token, view.metric, prefix),
            }
        )
    explain = drift.explain(view, pair, ranked, len(out))
    return html.Div([*parts, db.board(out, pair, drift.metric_label(view.metric), explain, BOARD)])


clientside_callback(
    db.show_js(),
    Input(CONTROL_IDS["show"], "n_clicks"),
    *(State(CONTROL_IDS[k], "value") for k in ("a", "b", "metric", "min_n")),
    prevent_initial_call=True,
)
