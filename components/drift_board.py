"""The drifting-tokens page's parts: its controls (two steps, the metric, the fewest times a token is seen),
the browser code that applies them, and the board (a table of tokens, each linking to the responses that
hold it). Pure: values, labels, links and ids in, components out; a token is shown as text, never markup."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import dash_bootstrap_components as dbc
from dash import dcc, html

from components.format import num, signed

# Shows the board for the inputs: the page's URL with a, b, metric and min_n set from them (an empty one
# left out), loaded anew. Browser side only; the URL is built with URLSearchParams.
SHOW_JS = r"""
function(clicks, a, b, metric, minN) {
    if (!clicks) { return window.dash_clientside.no_update; }
    var params = new URLSearchParams(window.location.search);
    var values = {a: a, b: b, metric: metric, min_n: minN};
    for (var k in values) {
        var v = values[k];
        if (v === null || v === undefined || String(v).trim() === '') { params.delete(k); }
        else { params.set(k, String(v)); }
    }
    window.location.assign(window.location.pathname + '?' + params.toString());
    return window.dash_clientside.no_update;
}
"""


def show_js() -> str:
    """:data:`SHOW_JS` (the Show button's clicks, then the four inputs' values)."""
    return SHOW_JS


def controls(
    a: int | None,
    b: int | None,
    metric: str,
    min_n: int,
    metrics: Sequence[tuple[str, str]],
    ids: Mapping[str, str],
) -> dbc.Card:
    """The two steps (any step number: the run's step rule resolves one it lacks), the metric (``metrics``:
    ``(value, label)``), the fewest times a token is seen at each step, and Show. ``ids``: ``a``, ``b``,
    ``metric``, ``min_n``, ``show``."""

    def labelled(text: str, control, width: str) -> html.Div:
        return html.Div([html.Div(text, className="small text-muted"), control], style={"width": width})

    step = {"type": "number", "size": "sm", "step": 1}
    return dbc.Card(
        dbc.CardBody(
            html.Div(
                [
                    labelled("step A", dbc.Input(id=ids["a"], value=a, **step), "7rem"),
                    labelled("step B", dbc.Input(id=ids["b"], value=b, **step), "7rem"),
                    labelled(
                        "mean of",
                        dcc.Dropdown(
                            id=ids["metric"],
                            options=[{"value": v, "label": t} for v, t in metrics],
                            value=metric,
                            clearable=False,
                            style={"fontSize": "0.85rem"},
                        ),
                        "17rem",
                    ),
                    labelled(
                        "seen at least (times, each step)",
                        dbc.Input(id=ids["min_n"], value=min_n, type="number", size="sm", min=1, step=1),
                        "13rem",
                    ),
                    dbc.Button(
                        "Show", id=ids["show"], size="sm", color="secondary", outline=True, className="mt-3"
                    ),
                ],
                className="d-flex flex-wrap align-items-start gap-2",
            ),
            className="py-2",
        ),
        className="mb-2",
    )


def board(
    rows: list[dict], pair: tuple[int, int], metric_label: str, explain: str, board_id: str
) -> html.Div:
    """The board: one row per token (``rows``: ``token, text, n_a, mean_a, n_b, mean_b, change`` and
    ``href_a``, ``href_b``, ``href_all``: the responses holding it at step A, at step B, at every step)."""
    a, b = pair
    head = html.Thead(
        html.Tr(
            [
                html.Th("#"),
                html.Th("token (as the file gives it)"),
                html.Th("shown as"),
                html.Th(f"seen at {a}", className="text-end"),
                html.Th(f"mean at {a}", className="text-end", title=f"mean {metric_label} at step {a}"),
                html.Th(f"seen at {b}", className="text-end"),
                html.Th(f"mean at {b}", className="text-end", title=f"mean {metric_label} at step {b}"),
                html.Th("change (B − A)", className="text-end"),
                html.Th("responses holding it"),
            ]
        )
    )
    body = html.Tbody(
        [
            html.Tr(
                [
                    html.Td(str(i + 1), className="text-muted"),
                    html.Td(html.Code(r["token"])),
                    html.Td(html.Span(r["text"], style={"whiteSpace": "pre", "fontFamily": "monospace"})),
                    html.Td(f"{r['n_a']:,}", className="text-end"),
                    html.Td(num(r["mean_a"]), className="text-end"),
                    html.Td(f"{r['n_b']:,}", className="text-end"),
                    html.Td(num(r["mean_b"]), className="text-end"),
                    html.Td(signed(r["change"]), className="text-end fw-semibold"),
                    html.Td(
                        [
                            dcc.Link(f"at step {a}", href=r["href_a"], className="me-2"),
                            dcc.Link(f"at step {b}", href=r["href_b"], className="me-2"),
                            dcc.Link("every step", href=r["href_all"]),
                        ]
                    ),
                ]
            )
            for i, r in enumerate(rows)
        ]
    )
    table = dbc.Table([head, body], size="sm", hover=True, className="mb-1 small", id=board_id)
    return html.Div([html.P(explain, className="small text-muted mb-1"), table])
