"""Live-run controls of the app shell: a poll of the run's store version, a "new steps available" button
that reloads the current view, and the auto-refresh switch (kept in the URL as ``live=1``)."""

from __future__ import annotations

import dash_bootstrap_components as dbc
from dash import dcc, html

LIVE_BOX = "app-live"
LIVE_TICK = "app-live-tick"
LIVE_SEEN = "app-live-seen"
LIVE_RELOAD = "app-live-reload"
LIVE_NEW = "app-live-new"
LIVE_AUTO = "app-live-auto"
# Each page that shows a run holds one store of this type (``{"type": SHOWN_TYPE, "page": <page>}``): the state of
# the run it was rendered from, which the shell's poll compares with the run's current state.
SHOWN_TYPE = "live-shown"

HIDDEN = {"display": "none"}
SHOWN: dict = {}
# The box lays out its button and switch in a row. Not with Bootstrap's d-flex class: its
# "display: flex !important" beats the inline "display: none", and the box showed on every page.
BOX_SHOWN = {"display": "flex", "alignItems": "center"}


def live_controls(poll_ms: int) -> html.Div:
    """The shell's live-run box, in the navbar beside the run picker (hidden while no run is shown). It sat
    fixed at the bottom right of the window before, over the corners of charts and table headers.

    ``app-live-seen`` holds the snapshot the view was loaded with, ``app-live-reload`` counts reload
    requests (the browser reloads the page when it changes), ``app-live-new`` offers a reload,
    ``app-live-auto`` is the auto-refresh switch.
    """
    return html.Div(
        [
            dcc.Interval(id=LIVE_TICK, interval=poll_ms, n_intervals=0),
            dcc.Store(id=LIVE_SEEN, data=None),
            dcc.Store(id=LIVE_RELOAD, data=0),
            dbc.Button(
                [html.I(className="bi bi-arrow-clockwise me-1"), "New steps available · reload"],
                id=LIVE_NEW,
                color="warning",
                size="sm",
                n_clicks=0,
                className="me-3",
                style=HIDDEN,
                title="The run has new data since this view was loaded",
            ),
            dbc.Switch(
                id=LIVE_AUTO,
                label="Auto-refresh",
                value=False,
                className="mb-0 small",
                label_class_name="text-light",
                input_class_name="app-live-auto-input",
            ),
        ],
        id=LIVE_BOX,
        className="app-live me-3",
        style=HIDDEN,
    )


def shown_store(page: str, snapshot: dict | None) -> dcc.Store:
    """The snapshot (``data.live.shown``) a page was rendered from, for the shell's poll."""
    return dcc.Store(id={"type": SHOWN_TYPE, "page": page}, data=snapshot)


def new_steps_label(new_steps: int) -> list:
    """Text of the reload button: how many steps arrived since the view was loaded, when any did."""
    what = (
        f"{new_steps} new step{'s' if new_steps != 1 else ''} available"
        if new_steps > 0
        else "New steps available"
    )
    return [html.I(className="bi bi-arrow-clockwise me-1"), f"{what} · reload"]
