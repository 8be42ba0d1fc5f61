"""Tables of responses: AG Grid column definitions and grid (server-side infinite row model), its sort
state and scripts, the page's title line and summary, and the text panel that shows one response's prompt,
response and reference response as plain text.
"""

from __future__ import annotations

from collections.abc import Collection

import dash_ag_grid as dag
import dash_bootstrap_components as dbc
from dash import dcc, html

from components.format import grid_formatter, num, signed
from components.theme import GRID_THEME_JS, SIGN_STYLE_JS

# Grid rows per request of the infinite row model.
BLOCK_SIZE = 100

# The sample id as a link to the row's token page (``tokens_href``, a path built from ids we generate,
# never from model text), followed inside the app without reloading it (assets/dashAgGridComponentFunctions.js).
TOKENS_LINK = {"cellRenderer": "AppLink", "cellRendererParams": {"hrefField": "tokens_href"}}


# The previews of the prompt's question and of the response: wrapped on up to three lines (assets/app.css
# ``.rlb-preview``), pinned on the right so that they stay in view beside the numbers whatever the scroll.
ROW_HEIGHTS = {1: 28, 2: 42, 3: 56}  # by lines of 12 px text, with the cell's padding
PREVIEW_WIDTHS = {"prompt_preview": 230, "response_preview": 380}


def column_defs(
    columns: list[tuple[str, str, str]],
    kinds: dict[str, str],
    signed: set[str],
    previews: list[tuple[str, str]],
    sort: str | None,
    order: str,
    pinned: tuple[str, ...] = (),
    id_chars: int = 16,
    lines: int = 3,
    shown: Collection[str] | None = None,
    unsortable: Collection[str] = (),
) -> list[dict]:
    """AG Grid column definitions for the responses table.

    The first column is the response's ``source_line`` (``rank1.jsonl:1526``, ``id_chars`` long at most)
    rendered as a link to the row's ``tokens_href`` (see :data:`TOKENS_LINK`), its stable ``sample_id`` in
    its tooltip. ``columns``: ``(field, header, tooltip)`` of the sortable value columns in order;
    ``kinds`` maps a field to ``"int"``, ``"float"``, ``"bool"`` or ``"text"`` (numbers right-aligned with
    4 significant digits, whole numbers without decimals); ``signed`` fields are coloured by sign;
    ``pinned`` ones stay in view on the left with the id. ``previews``: ``(field, header)`` of the text
    previews (not sortable), wrapped on at most ``lines`` lines and pinned on the right. ``sort``/``order``
    set the column sorted initially. ``shown``: the value columns shown (the others hidden, a click of the
    column chooser away; None: all); ``unsortable``: value columns read for the rows on screen only.
    """
    defs: list[dict] = [
        {
            "field": "source_line",
            "headerName": "file:line",
            "headerTooltip": "where the response is in the run's files; click to open it token by token",
            **TOKENS_LINK,
            "tooltipField": "sample_id",
            "sortable": False,
            "pinned": "left",
            "width": min(max(7 * id_chars + 20, 90), 240),
            "cellStyle": {"fontFamily": "var(--rlb-mono)", "fontSize": "11px"},
        }
    ]
    for field, header, tooltip in columns:
        kind = kinds.get(field, "text")
        col = {
            "field": field,
            "headerName": header,
            "headerTooltip": tooltip,
            "sortable": field not in unsortable,
            "width": 60 if field == "step" else 84,
            "hide": shown is not None and field not in shown,
        }
        if field in pinned:
            col["pinned"] = "left"
        if kind in ("int", "float"):
            col["type"] = "rightAligned"
            col["valueFormatter"] = grid_formatter(kind, missing="")
            col["cellStyle"] = (
                {"function": SIGN_STYLE_JS} if field in signed else {"fontVariantNumeric": "tabular-nums"}
            )
        if field == sort:
            col["sort"] = order
        defs.append(col)
    for field, header in previews:
        defs.append(
            {
                "field": field,
                "headerName": header,
                "sortable": False,
                "tooltipField": field,
                "pinned": "right",
                "width": PREVIEW_WIDTHS.get(field, 260),
                "wrapText": True,
                "cellClass": f"rlb-preview rlb-lines-{lines}",
                # the search's matches in it highlighted, from the row's <field>_marks (text pieces)
                "cellRenderer": "MarkedText",
                "cellRendererParams": {"marksField": f"{field}_marks"},
            }
        )
    return defs


def column_kind(dtype) -> str:
    """``int``/``float``/``bool``/``text`` for a Polars dtype (how a column is formatted and aligned)."""
    if dtype.is_integer():
        return "int"
    if dtype.is_float():
        return "float"
    if str(dtype) == "Boolean":
        return "bool"
    return "text"


def spec_column_defs(
    spec, previews: list[tuple[str, str]], sort: str | None, order: str, shown: Collection[str] | None = None
) -> list[dict]:
    """:func:`column_defs` of a table ``spec`` (``columns``, ``dtypes``, ``signed``, ``pinned``,
    ``id_chars``, ``unsortable``: the responses table's, ``data.responses.table_spec``), its kinds told by
    dtype, showing the value columns ``shown`` (None: all)."""
    kinds = {c: column_kind(t) for c, t in spec.dtypes.items()}
    return column_defs(
        list(spec.columns), kinds, set(spec.signed), previews, sort, order, spec.pinned, spec.id_chars,
        shown=shown, unsortable=spec.unsortable,
    )  # fmt: skip


def responses_grid(
    grid_id: str,
    defs: list[dict],
    sort: str | None = None,
    height: str = "calc(100vh - 15.5rem)",
    lines: int = 3,
) -> dag.AgGrid:
    """A compact grid on the infinite row model: rows come from a ``getRowsRequest`` callback.

    One click selects a row (``selectedRows``); sorting is single-column, descending first, and never
    'unsorted' (the server always sorts by something). The ``sort`` column is scrolled into view. Rows
    are ``lines`` (1 to 3) lines of text high.
    """
    # The columns fill the grid's width (AG Grid's size-to-fit), never narrower than defined (minWidth):
    # the room left goes to the text previews (numbers widen a little at most, maxWidth), and a horizontal
    # scroll appears only when even the defined widths do not fit.
    defs = [
        {**d, "minWidth": d["width"], **({} if d.get("wrapText") else {"maxWidth": d["width"] + 24})}
        for d in defs
    ]
    return dag.AgGrid(
        columnSize="responsiveSizeToFit",
        scrollTo={"column": sort, "columnPosition": "auto"} if sort else None,
        id=grid_id,
        columnDefs=defs,
        rowModelType="infinite",
        getRowId="params.data.sample_id",
        defaultColDef={
            "resizable": True,
            "sortingOrder": ["desc", "asc"],
            "wrapHeaderText": True,
            "autoHeaderHeight": True,
            "suppressMovable": True,
        },
        dashGridOptions={
            "theme": {"function": GRID_THEME_JS},
            "rowSelection": {"mode": "singleRow", "checkboxes": False, "enableClickSelection": True},
            "cacheBlockSize": BLOCK_SIZE,
            "maxBlocksInCache": 50,
            "infiniteInitialRowCount": 1,
            "suppressMultiSort": True,
            "tooltipShowDelay": 400,
            "animateRows": False,
            "suppressCellFocus": True,
            "rowHeight": ROW_HEIGHTS[lines],
            # A file's field may have a dot in its name (an object's field, `rewards.accuracy`): a name, not a path.
            "suppressFieldDotNotation": True,
            "localeText": {"noRowsToShow": "No response matches these filters."},
        },
        style={"height": height, "minHeight": "22rem", "width": "100%"},
    )


def grid_sort(column_state: list[dict] | None) -> tuple[str, str] | None:
    """``(column, "asc"|"desc")`` of the sorted column in a grid's ``columnState``, None when unsorted."""
    for col in column_state or []:
        if col.get("sort") in ("asc", "desc"):
            return col["colId"], col["sort"]
    return None


def sort_state(fields: list[str], sort: str, order: str) -> list[dict]:
    """A ``columnState`` that sorts by ``sort`` and clears every other column's sort."""
    return [{"colId": f, "sort": order if f == sort else None} for f in fields]


def summary_line(
    count: int,
    scope: int,
    where: str,
    mean_reward: float | None,
    reward_label: str,
    partial: str | None = None,
):
    """'N matching of M responses at step S · mean reward of the matches X', and a warning badge with
    ``partial`` (the step is a partial last step) when given."""
    parts = [
        html.Span(f"{count:,}", className="fw-semibold", id="responses-count"),
        f" matching of {scope:,} responses {where}",
    ]
    if count:
        parts += [
            " · ",
            f"mean {reward_label} of the matches ",
            html.Span(num(mean_reward), className="fw-semibold"),
        ]
    if partial:
        parts.append(
            html.Span(
                [html.I(className="bi bi-exclamation-triangle me-1"), partial],
                className="badge text-bg-warning fw-normal ms-2",
                id="responses-partial-step",
            )
        )
    return html.Span(parts)


def counting_line(share: float, scope: int, where: str):
    """'Counting matches… 40% of 2,560,000 responses over all steps read', with a spinner: a search's count
    under way (its first matches may be in the grid already)."""
    return html.Span(
        [
            html.Span(className="spinner-border spinner-border-sm me-2", role="status"),
            html.Span("Counting matches… ", className="fw-semibold"),
            html.Span(f"{share:.0%}", id="responses-count-progress", className="numeric"),
            f" of {scope:,} responses {where} read",
        ],
        id="responses-counting",
        className="text-muted",
    )


def _text_block(title, value, pieces: list[tuple[str, bool]] | None, block_id: str) -> html.Div:
    head = [html.Span(title, className="fw-semibold")]
    if value is not None:
        head.append(html.Span(value, className="ms-2 text-muted numeric"))
    # Model text as text: the search's matches are <mark> elements holding plain strings, never markup.
    body = (
        html.Pre(
            [html.Mark(t, className="rlb-match p-0") if hit else t for t, hit in pieces],
            className="text-block mb-0",
            id=block_id,
        )
        if pieces is not None
        else html.Div("(none in the file)", className="text-muted small fst-italic", id=block_id)
    )
    return html.Div([html.Div(head, className="small mb-1"), body], className="mb-2")


def sentence(text: str) -> str:
    """``text`` as a sentence (capital first, a full stop): why a search was stopped, under the search box."""
    return f"{text[:1].upper()}{text[1:]}."


def text_panel(
    sample: dict | None,
    labels: dict[str, str],
    tokens_href: str | None,
    matches_note: str | None = None,
    group_href: str | None = None,
) -> html.Div | None:
    """The selected response as plain text (newlines kept): prompt, response and reference response, the
    search's matches marked; None when nothing is selected (the panel is then hidden).

    ``sample``: dict with ``sample_id, source_line, step, reward, ref_reward, reward_gain`` and ``pieces``:
    per text (``prompt``, ``response``, ``ref_response``) its ``(piece, matched)`` pairs, None for a text
    the file does not have. ``labels``: UI labels of reward, ref_reward and reward_gain. ``matches_note``:
    what the marks are (the search), shown above the texts. ``group_href``: the response's group side by
    side ("its group"), None for none.
    """
    if sample is None:
        return None
    gain = sample.get("reward_gain")
    pieces = sample.get("pieces", {})

    def texts(key):
        return pieces.get(key) if sample.get(key) is not None else None

    header = html.Div(
        [
            html.Code(sample.get("source_line"), className="me-2 fw-semibold", id="responses-text-where"),
            html.Span(f"step {sample.get('step')}", className="me-2 small"),
            html.Span(f"{labels['reward_gain']}: {signed(gain)}", className="small text-muted me-2")
            if gain is not None
            else None,
            dcc.Link("its group", href=group_href, className="small ms-auto me-3", id="responses-open-group")
            if group_href
            else None,
            dbc.Button(
                [html.I(className="bi bi-box-arrow-up-right me-1"), "tokens"],
                href=tokens_href,
                size="sm",
                color="primary",
                outline=True,
                className=("" if group_href else "ms-auto ") + "py-0 me-4",
                id="responses-open-tokens",
                external_link=True,
            )
            if tokens_href
            else None,
        ],
        className="d-flex align-items-center flex-wrap mb-2",
    )
    return html.Div(
        [
            header,
            html.Div(matches_note, className="small text-muted mb-1") if matches_note else None,
            _text_block("Prompt", None, texts("prompt"), "responses-text-prompt"),
            _text_block(
                "Response",
                f"{labels['reward']} {num(sample.get('reward'))}",
                texts("response"),
                "responses-text-response",
            ),
            _text_block(
                "Reference response",
                f"{labels['ref_reward']} {num(sample.get('ref_reward'))}",
                texts("ref_response"),
                "responses-text-ref",
            ),
        ]
    )


def texts_drawer(drawer_id: str, close_id: str, body_id: str, body) -> html.Div:
    """The panel over the right of the responses grid (its previews) that shows the selected row's texts:
    hidden while no row is selected, closed by its × (which unselects the row). ``body``: the panel's
    first content (:func:`text_panel`)."""
    return html.Div(
        [
            html.Button(id=close_id, className="btn-close position-absolute top-0 end-0 m-2", title="close"),
            html.Div(body, id=body_id),
        ],
        id=drawer_id,
        className="responses-drawer border rounded-start bg-white shadow p-2",
        hidden=body is None,
    )


def sorted_state(column_state: list[dict] | None, sort: str, order: str) -> list[dict] | None:
    """The ``columnState`` that sorts a grid by ``sort`` / ``order``; None when it already does so (or
    has no columns yet)."""
    fields = [f for f in (c.get("colId") for c in column_state or []) if f]
    if not fields or grid_sort(column_state) == (sort, order):
        return None
    return sort_state(fields, sort, order)


def responses_header(run: str, ids: dict[str, str]) -> html.Div:
    """The responses page's title line: the run, the summary of the view (filled in by a callback) and the
    export buttons (their links too). ``ids``: ``summary``, ``csv``, ``jsonl``."""
    btn = {"color": "secondary", "outline": True, "className": "py-0", "href": "", "external_link": True}
    return html.Div(
        [
            html.H4("Responses", className="mb-0 me-3"),
            html.Span(run, className="text-muted me-3"),
            html.Span(id=ids["summary"], className="small me-auto"),
            html.Span("Export", className="small text-muted me-2"),
            dbc.ButtonGroup(
                [dbc.Button("CSV", id=ids["csv"], **btn), dbc.Button("JSONL", id=ids["jsonl"], **btn)],
                size="sm",
            ),
        ],
        className="d-flex align-items-baseline flex-wrap mb-2",
    )


# A new filter empties the grid's block cache so that the infinite row model asks the server again.
PURGE_JS = """
function (key) {
    if (window.dash_ag_grid) {
        window.dash_ag_grid.getApiAsync("__GRID__").then(function (api) {
            api.ensureIndexVisible(0, "top");
            api.purgeInfiniteCache();
        });
    }
}
"""
# The drawer's close button unselects the row: the page then drops it from the URL and hides the drawer.
UNSELECT_JS = """
function (n) {
    if (n && window.dash_ag_grid) {
        window.dash_ag_grid.getApiAsync("__GRID__").then(function (api) { api.deselectAll(); });
    }
}
"""
# A double-clicked row opens on the token page: the link its id cell has (the row's tokens_href).
OPEN_ROW_JS = """
function (cell) {
    if (!cell || cell.rowId === undefined || cell.rowId === null || !window.dash_ag_grid) { return; }
    window.dash_ag_grid.getApiAsync("__GRID__").then(function (api) {
        var node = api.getRowNode(String(cell.rowId));
        if (node && node.data && node.data.tokens_href) { window.location.assign(node.data.tokens_href); }
    });
}
"""


# The column chooser shows its columns and hides the others it offers (the file:line and the previews stay).
COLUMNS_JS = """
function (cols, options) {
    if (!options || !window.dash_ag_grid) { return; }
    var on = new Set(cols || []);
    var all = options.map(function (o) { return o.value; });
    window.dash_ag_grid.getApiAsync("__GRID__").then(function (api) {
        api.setColumnsVisible(all.filter(function (c) { return on.has(c); }), true);
        api.setColumnsVisible(all.filter(function (c) { return !on.has(c); }), false);
        api.sizeColumnsToFit();
    });
}
"""


def columns_js(grid_id: str) -> str:
    """:data:`COLUMNS_JS` for grid ``grid_id`` (a clientside callback on the column chooser)."""
    return COLUMNS_JS.replace("__GRID__", grid_id)


def purge_js(grid_id: str) -> str:
    """:data:`PURGE_JS` for grid ``grid_id`` (a clientside callback on the view's filter key)."""
    return PURGE_JS.replace("__GRID__", grid_id)


def unselect_js(grid_id: str) -> str:
    """:data:`UNSELECT_JS` for grid ``grid_id`` (a clientside callback on the drawer's close button)."""
    return UNSELECT_JS.replace("__GRID__", grid_id)


def open_row_js(grid_id: str) -> str:
    """:data:`OPEN_ROW_JS` for grid ``grid_id`` (a clientside callback on its ``cellDoubleClicked``)."""
    return OPEN_ROW_JS.replace("__GRID__", grid_id)
