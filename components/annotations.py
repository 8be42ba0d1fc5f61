"""Annotation controls (issue 38): the label filter and the label-and-note control of the responses page,
the span control of the token page, the list of a response's annotations, and the strip's span marks.

Labels, notes and names are shown as text children (escaped by React), never as markup.
"""

from __future__ import annotations

import dash_bootstrap_components as dbc
from dash import dcc, html

NOTE_ROWS = 1
SPAN_HINT = (
    "Click a token of the strip for the first position, shift-click for the last (or type them); "
    "annotated spans are underlined in orange on the strip."
)
# The grid's label column (text; never HTML: no cell renderer).
LABEL_COLUMN = {
    "field": "label",
    "headerName": "Label",
    "colId": "label",
    "width": 130,
    "sortable": False,
    "tooltipField": "label",
}


def with_label_column(defs: list[dict]) -> list[dict]:
    """The grid's ``defs`` with the label column after the pinned ones (beside the response's id)."""
    at = sum(1 for d in defs if d.get("pinned"))
    return [*defs[:at], dict(LABEL_COLUMN), *defs[at:]]


def _options(labels) -> list[dict]:
    return [{"label": lab, "value": lab} for lab in labels]


def label_filter(filter_id: str, labels, value: str | None) -> html.Div:
    """The responses page's ``label=`` filter: one of ``labels`` or none (every response)."""
    return html.Div(
        [
            html.Span("Label", className="small text-muted me-2"),
            dcc.Dropdown(
                id=filter_id,
                options=_options(labels),
                value=value,
                placeholder="any",
                clearable=True,
                style={"minWidth": "11rem"},
            ),
        ],
        className="d-flex align-items-center me-3",
    )


def label_control(ids: dict, labels, span: bool = False, problems=(), listing=None) -> html.Div:
    """Label, note and Save / Remove for the selected response (``span``: with the token page's first and
    last position). ``ids``: ``label, note, save, remove, status, list`` (and ``from, to`` with a span);
    ``problems``: what of the run's label set could not be read, said under the control; ``listing``: what
    the list shows until a callback fills it."""
    pieces = [
        dcc.Dropdown(
            id=ids["label"],
            options=_options(labels),
            value=labels[0] if labels else None,
            clearable=False,
            style={"minWidth": "11rem"},
        ),
    ]
    if span:
        pieces += [
            html.Span("tokens", className="small text-muted ms-2 me-1"),
            _position(ids["from"], "first"),
            html.Span("–", className="mx-1"),
            _position(ids["to"], "last"),
        ]
    pieces += [
        dcc.Textarea(
            id=ids["note"],
            placeholder="note (optional)",
            rows=NOTE_ROWS,
            maxLength=8192,
            className="form-control form-control-sm ms-2",
            style={"width": "22rem", "resize": "vertical"},
        ),
        dbc.Button("Label", id=ids["save"], size="sm", color="primary", className="ms-2"),
        dbc.Button("Remove", id=ids["remove"], size="sm", color="secondary", outline=True, className="ms-1"),
        html.Span(id=ids["status"], className="small ms-2", role="status"),
    ]
    title = "Label these tokens" if span else "Label the selected response"
    return html.Div(
        [
            html.Div(
                [html.Span(title, className="small fw-semibold me-2 text-nowrap"), *pieces],
                className="d-flex align-items-center flex-wrap",
            ),
            *(
                [html.Div(SPAN_HINT, className="small text-muted mt-1", id=ids["from"] + "-hint")]
                if span
                else []
            ),
            *(html.Div(p, className="small text-warning mt-1") for p in problems),
            html.Div(listing, id=ids["list"], className="small mt-1"),
        ],
        className="annotation-control mb-2",
    )


def export_links(hrefs) -> html.Div:
    """Links to the run's annotated responses as a dataset: ``(format, href)`` each."""
    links = [
        html.A(fmt.upper() if fmt == "jsonl" else fmt.capitalize(), href=href, className="ms-1")
        for fmt, href in hrefs
    ]
    return html.Div(
        [html.Span("Export the annotated responses:", className="text-muted"), *links],
        className="small ms-2 align-self-center text-nowrap",
    )


def _position(id_: str, which: str) -> dcc.Input:
    return dcc.Input(
        id=id_,
        type="number",
        min=0,
        step=1,
        placeholder=which,
        debounce=True,
        className="form-control form-control-sm",
        style={"width": "6rem"},
    )


def annotation_list(items, notice: str | None = None) -> list:
    """A response's annotations (``(label, where, note, who, when)`` each) as lines of text, and a notice
    of lines the file could not read."""
    out = []
    for label, where, note, who, when in items:
        out.append(
            html.Div(
                [
                    dbc.Badge(label, color="warning", text_color="dark", className="me-1"),
                    html.Span(where, className="text-muted me-1"),
                    html.Span(f"— {who}, {when}", className="text-muted me-2"),
                    html.Span(note, className="annotation-note"),
                ],
                className="annotation-item",
            )
        )
    if not items:
        out.append(html.Span("No annotations yet.", className="text-muted"))
    if notice:
        out.append(html.Div(notice, className="text-warning"))
    return out


def status(message: str, ok: bool) -> html.Span:
    return html.Span(message, className="text-success" if ok else "text-danger")


# The strip's annotated spans: every token whose position lies in a span gets the class ``token-ann``
# (assets/app.css), and a click on a token sets the first position, a shift-click the last. Positions are
# numbers and labels are set with ``title``: nothing becomes markup.
MARK_JS = r"""
function(spans, done, more) {
    var root = document.getElementById('__STRIP__');
    if (!root) { return window.dash_clientside.no_update; }
    if (!root.__annClick) {
        root.__annClick = true;
        root.addEventListener('click', function(e) {
            var s = e.target;
            if (s.parentNode !== root || !s.hasAttribute('data-pos')) { return; }
            var pos = +s.getAttribute('data-pos');
            window.dash_clientside.set_props(e.shiftKey ? '__TO__' : '__FROM__', {value: pos});
        });
    }
    var old = root.querySelectorAll('span.token-ann');
    for (var k = 0; k < old.length; k++) { old[k].classList.remove('token-ann'); old[k].removeAttribute('data-ann'); }
    var list = spans || [];
    var tokens = root.querySelectorAll('span[data-pos]');
    for (var i = 0; i < tokens.length; i++) {
        var pos = +tokens[i].getAttribute('data-pos');
        for (var j = 0; j < list.length; j++) {
            if (list[j].from <= pos && pos <= list[j].to) {
                tokens[i].classList.add('token-ann');
                tokens[i].setAttribute('data-ann', list[j].label);
                break;
            }
        }
    }
    return window.dash_clientside.no_update;
}
"""


def mark_js(strip_id: str, from_id: str, to_id: str) -> str:
    """:data:`MARK_JS` for the strip ``strip_id`` and the span inputs ``from_id`` / ``to_id``."""
    return MARK_JS.replace("__STRIP__", strip_id).replace("__FROM__", from_id).replace("__TO__", to_id)


# Refreshes the rows of the responses grid in place (their label column) after an annotation is saved.
REFRESH_JS = """
function (status) {
    if (status && window.dash_ag_grid) {  // a write said something (nothing at the page's load)
        window.dash_ag_grid.getApiAsync("__GRID__").then(function (api) { api.refreshInfiniteCache(); });
    }
    return window.dash_clientside.no_update;
}
"""


def refresh_js(grid_id: str) -> str:
    return REFRESH_JS.replace("__GRID__", grid_id)
