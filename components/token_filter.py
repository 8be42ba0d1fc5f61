"""The responses page's token filter (``tok``, ``tok_metric``, ``tok_min``, ``tok_max`` in the URL): its row of
inputs, the browser code that applies it, and its columns in the grid (where the token is, its value).
Pure: values, labels and ids in, components out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import dash_bootstrap_components as dbc
from dash import dcc, html

# Applies the token filter: the page's URL with the four keys set from the inputs (an empty one left out)
# and the selected row dropped, loaded anew: the grid's columns (where the token is, its value) are part
# of the page's layout. Runs in the browser only: the inputs are the user's, the URL is built with
# URLSearchParams (never markup).
APPLY_JS = r"""
function(clicks, submits, tok, metric, lo, hi) {
    if (!clicks && !submits) { return window.dash_clientside.no_update; }
    var params = new URLSearchParams(window.location.search);
    var values = {tok: tok, tok_metric: metric, tok_min: lo, tok_max: hi};
    for (var k in values) {
        var v = values[k];
        if (v === null || v === undefined || String(v).trim() === '' || (k === 'tok_metric' && !tok)) {
            params.delete(k);
        } else {
            params.set(k, String(v));
        }
    }
    if (!tok) { params.delete('tok_min'); params.delete('tok_max'); }
    params.delete('sample');
    window.location.assign(window.location.pathname + '?' + params.toString());
    return window.dash_clientside.no_update;
}
"""


def apply_js() -> str:
    """:data:`APPLY_JS` (the Apply button's clicks, the pattern's Enter, then the four inputs' values)."""
    return APPLY_JS


def token_filter_row(
    tok: str | None,
    metric: str,
    lo: float | None,
    hi: float | None,
    metrics: Sequence[tuple[str, str]],
    words: str | None,
    ids: Mapping[str, str],
) -> dbc.Card:
    """The token filter's inputs: the pattern over each token's string as the file gives it, the per-token
    metric (``metrics``: ``(value, label)``), its inclusive bounds, Apply, and the filter in words
    (``words``, when one applies). ``ids``: ``pattern``, ``metric``, ``min``, ``max``, ``apply``."""

    def labelled(text: str, control, width: str) -> html.Div:
        return html.Div([html.Div(text, className="small text-muted"), control], style={"width": width})

    number = {"type": "number", "size": "sm", "debounce": True, "placeholder": "any"}
    row = [
        labelled(
            "token (regular expression over the token as the file gives it)",
            dbc.Input(
                id=ids["pattern"],
                type="text",
                value=tok or "",
                size="sm",
                n_submit=0,
                placeholder="e.g. ^Ġ\\.$",
            ),
            "19rem",
        ),
        labelled(
            "its per-token metric",
            dcc.Dropdown(
                id=ids["metric"],
                options=[{"value": v, "label": t} for v, t in metrics],
                value=metric,
                clearable=False,
                style={"fontSize": "0.85rem"},
            ),
            "15rem",
        ),
        labelled("at least (≥)", dbc.Input(id=ids["min"], value=lo, **number), "7rem"),
        labelled("at most (≤)", dbc.Input(id=ids["max"], value=hi, **number), "7rem"),
        dbc.Button("Apply", id=ids["apply"], size="sm", color="secondary", outline=True, className="mt-3"),
    ]
    note = words and html.Div(
        f"Showing the responses holding {words}; each row says where its first such token is and its value, "
        "and opens the token page there.",
        className="small text-muted mt-1",
        id=ids.get("words"),
    )
    return dbc.Card(
        dbc.CardBody(
            [html.Div(row, className="d-flex flex-wrap align-items-start gap-2"), note or None],
            className="py-2",
        ),
        className="mb-2",
    )
