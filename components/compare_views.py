"""Layout pieces of the compare page: run chips, the summary and agreement tables, notes, the solved
lists, two runs' responses side by side and a word diff. Model text is shown as text, never markup."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import dash_bootstrap_components as dbc
from dash import dcc, html

from components import format as fmt
from components.compare_figures import overlay_figure
from components.figures import empty_figure
from components.layout import GRAPH_CONFIG
from components.layout import graph as layout_graph
from components.theme import AGREEMENT_COLOURS, DIFF_DELETE, DIFF_INSERT


def swatch(color: str) -> html.Span:
    return html.Span(
        className="d-inline-block rounded-circle me-1",
        style={"width": "0.7rem", "height": "0.7rem", "background": color, "verticalAlign": "middle"},
    )


def run_chips(runs: Sequence[tuple[str, str, str]]) -> html.Div:
    """``(run, color, href)`` as coloured chips linking to each run's reward page."""
    return html.Div(
        [
            dcc.Link([swatch(c), r], href=h, className="badge text-bg-light border me-2 text-decoration-none")
            for r, c, h in runs
        ],  # fmt: skip
        className="d-inline-flex flex-wrap",
    )


def notes_list(texts: Sequence[str], id_: str | None = None) -> html.Div:
    """What a chart or table cannot show, one muted line each (empty when none)."""
    kw = {"id": id_} if id_ else {}
    return html.Div([html.Div(t, className="text-muted small") for t in texts], className="mb-1", **kw)


def summary_table(
    rows: Sequence[dict], colors: Sequence[str], columns: Sequence[tuple[str, str, str]], id_=None
):
    """One row per run: ``columns`` are ``(key, label, kind)`` with kind ``text``, ``int``, ``num`` or
    ``share``; the first column is the run, with its colour."""
    head = html.Thead(html.Tr([html.Th(label, className="small") for _, label, _ in columns]))
    body = []
    for row, color in zip(rows, colors, strict=True):
        cells = []
        for i, (key, _, kind) in enumerate(columns):
            v = row.get(key)
            cells.append(html.Td([swatch(color), v]) if i == 0 else html.Td(fmt.value(v, kind)))
        body.append(html.Tr(cells))
    kw = {"id": id_} if id_ else {}
    return dbc.Table(
        [head, html.Tbody(body)], size="sm", hover=True, responsive=True, className="small mb-0", **kw
    )


def agreement_table(run: str, color: str, checks: Sequence[dict], id_: str | None = None) -> html.Div:
    """A run's agreement checks: trainer key, board quantity, verdict, steps compared, largest difference
    (and its step) or why it could not be compared."""
    kw = {"id": id_} if id_ else {}
    if not checks:
        return html.Div([swatch(color), html.B(run), html.Span(": no check applies (no trainer log, or none of "
                         "its keys has a board counterpart).", className="text-muted")], className="small mb-2", **kw)  # fmt: skip
    rows = []
    for c in checks:
        detail = c["note"] or ""
        if c["steps"]:
            detail = (f"{c['bad']} of {c['steps']} steps differ; largest |Δ| {fmt.num(c['max_abs_diff'], 3)} at step "
                      f"{c['worst_step']}" + (f" · {detail}" if detail else ""))  # fmt: skip
        rows.append(
            html.Tr(
                [
                    html.Td(html.Code(c["key"])),
                    html.Td(c["board"]),
                    html.Td(dbc.Badge(c["status"], color=AGREEMENT_COLOURS.get(c["status"], "secondary"))),
                    html.Td(detail, className="text-muted"),
                ]
            )  # fmt: skip
        )
    head = html.Thead(html.Tr([html.Th(h) for h in ("trainer key", "board's own", "verdict", "")]))
    return html.Div(
        [html.Div([swatch(color), html.B(run)], className="small"),
         dbc.Table([head, html.Tbody(rows)], size="sm", className="small mb-2")],
        **kw,
    )  # fmt: skip


def solved_list(rows: Sequence[dict], id_type: str, a: str, b: str, empty: str) -> html.Div:
    """Shared prompts as buttons (``id={"type": id_type, "match": …}``) showing the prompt's preview and
    both rewards; a click opens both runs' responses."""
    if not rows:
        return html.Div(empty, className="text-muted small")
    items = [
        dbc.ListGroupItem(
            [
                html.Div(r["preview"] or "(empty prompt)", className="text-truncate"),
                html.Div(
                    f"{a}: {fmt.num(r['a_reward'])} at step {r['a_step']} · {b}: {fmt.num(r['b_reward'])} at step "
                    f"{r['b_step']} · Δ {fmt.num(r['diff'])}",
                    className="text-muted small",
                ),
            ],
            id={"type": id_type, "match": r["match"]},
            action=True,
            n_clicks=0,
            className="py-1 small",
        )  # fmt: skip
        for r in rows
    ]
    return dbc.ListGroup(items, flush=True, style={"maxHeight": "22rem", "overflowY": "auto"})


def responses_column(run: str, color: str, step: int | None, rows: Sequence[dict], token_href: Callable[[str], str],
                     id_: str) -> html.Div:  # fmt: skip
    """One run's responses to the opened prompt at its step, best first; each links to its token page."""
    head = html.Div([swatch(color), html.B(run), html.Span(f" · step {step}" if step is not None else "",
                     className="text-muted")], className="mb-1")  # fmt: skip
    if not rows:
        return html.Div(
            [head, html.Div("This run never gave this prompt.", className="text-muted small")], id=id_
        )
    cards = []
    for r in rows:
        link = (
            dcc.Link("tokens", href=token_href(r["sample_id"]), className="small ms-2")
            if r["has_tokens"]
            else None
        )
        cards.append(
            html.Div(
                [
                    html.Div(
                        [html.Span(f"reward {fmt.num(r['reward'])}", className="fw-semibold small"), link]
                    ),
                    html.Pre(
                        r["response"], className="mb-0 small text-wrap", style={"whiteSpace": "pre-wrap"}
                    ),
                ],
                className="border rounded p-2 mb-2 bg-white",
            )  # fmt: skip
        )
    return html.Div([head, *cards], id=id_)


def word_diff_view(
    segments: Sequence[tuple[str, str]], a: str, b: str, truncated: bool, id_: str
) -> html.Div:
    """The word diff of the two best responses: text only in ``a`` struck through in red, only in ``b``
    underlined in green, the rest plain."""
    style = {"delete": DIFF_DELETE, "insert": DIFF_INSERT}
    spans = [html.Span(t, style=style.get(op)) for op, t in segments]
    legend = html.Div([html.Span(f"only in {a}", style=style["delete"], className="me-2"),
                       html.Span(f"only in {b}", style=style["insert"])], className="small mb-1")  # fmt: skip
    more = html.Div("The responses are long: only their beginnings are compared word by word.",
                    className="text-muted small") if truncated else None  # fmt: skip
    return html.Div(
        [legend, html.Pre(spans, className="small mb-0 p-2 border rounded bg-white", style={"whiteSpace": "pre-wrap"}), more],
        id=id_,
    )  # fmt: skip


def graph(id_, height: int = 280, figure=None) -> dcc.Loading | dcc.Graph:
    """A chart of the page: with an id, :func:`components.layout.graph` (a placeholder its callback
    fills); without, ``figure`` drawn as it is."""
    if id_ is not None:
        return layout_graph(id_, height)
    return dcc.Graph(figure=figure, config=GRAPH_CONFIG, style={"height": f"{height}px"})


def card(title, body, className: str = "mb-3") -> dbc.Card:
    head = dbc.CardHeader(title, className="fw-semibold py-2 small")
    return dbc.Card([head, dbc.CardBody(body, className="p-2")], className=f"shadow-sm {className}")


def labelled(text, control, width: int) -> dbc.Col:
    return dbc.Col([dbc.Label(text, className="small text-muted mb-0"), control], md=width)


def opened_prompt(preview: str, columns: Sequence, diff: html.Div) -> html.Div:
    """The opened prompt: its text, the two runs' response columns side by side, and their word diff."""
    return html.Div(
        [
            html.Div(
                [html.Span("Prompt: ", className="text-muted"), html.Span(preview)], className="small mb-2"
            ),
            dbc.Row([dbc.Col(c, lg=6) for c in columns], className="g-3"),
            html.Div("Word diff of the best response of each", className="fw-semibold small mt-2"),
            diff,
        ],
        id="compare-opened-body",
    )


def controls(
    ids: tuple[str, str, str], values: tuple, x_options: list[dict], band_options: list[dict]
) -> dbc.Card:
    """The curves' controls: a smoothing slider (the EMA weight, 0 to 0.99), the x-axis and the spread
    band; ``ids`` and ``values`` in that order. The slider writes on release only (one history entry)."""
    smooth = dcc.Slider(
        id=ids[0], min=0, max=0.99, step=0.01, value=values[0], updatemode="mouseup",
        marks={0: "0", 0.6: "0.6", 0.9: "0.9", 0.99: "0.99"}, tooltip={"placement": "bottom"},
    )  # fmt: skip
    row = dbc.Row(
        [
            labelled("Smoothing (EMA weight, as TensorBoard)", smooth, 5),
            labelled("x-axis", dbc.RadioItems(id=ids[1], options=x_options, value=values[1], inline=True), 4),
            labelled(
                "Spread band",
                dbc.RadioItems(id=ids[2], options=band_options, value=values[2], inline=True),
                3,
            ),
        ],
        className="g-3 align-items-end small",
    )
    return dbc.Card(dbc.CardBody(row, className="py-2"), className="mb-3 shadow-sm")


def pair_section(
    ids: tuple, runs: list[str], a: str | None, b: str | None, solved: float | None, gap: float | None
) -> list:
    """The "same prompt, two policies" card's body: the two runs and the solved threshold, notes, the
    paired scatter and the differences' histogram, the difference over steps, the two solved lists, and
    the opened prompt under its Close button. ``ids``: pair A, pair B, threshold, gap limit, notes,
    scatter, histogram, over steps, solved by A, solved by B, close, opened (each list's title is
    ``<id>-title``)."""
    a_id, b_id, solved_id, gap_id, notes_id, scatter, hist, over, solved_a, solved_b, close, opened = ids
    threshold = dbc.Input(id=solved_id, type="number", debounce=True, value=solved, size="sm",
                          placeholder="midpoint of the rewards")  # fmt: skip
    limit = dbc.Input(id=gap_id, type="number", debounce=True, value=gap, size="sm", min=0,
                      placeholder="10 % of the longer run")  # fmt: skip
    pick = dbc.Row(
        [
            labelled("Run A", dcc.Dropdown(id=a_id, options=runs, value=a, clearable=False), 3),
            labelled("Run B", dcc.Dropdown(id=b_id, options=runs, value=b, clearable=False), 3),
            labelled("Solved: mean reward at the paired step ≥", threshold, 3),
            labelled("Paired steps at most this far apart", limit, 3),
        ],
        className="g-2 mb-2",
    )
    lists = [
        dbc.Col([html.Div(id=f"{i}-title", className="fw-semibold small"), html.Div(id=i)], lg=6)
        for i in (solved_a, solved_b)
    ]
    return [
        pick,
        notes_list([], notes_id),
        dbc.Row([dbc.Col(graph(scatter, 340), lg=6), dbc.Col(graph(hist, 340), lg=6)]),
        graph(over, 260),
        dbc.Row(lists, className="mt-2"),
        dbc.Button("Close", id=close, size="sm", color="light", className="mt-2 d-none"),
        dcc.Loading(html.Div(id=opened, className="mt-2"), delay_show=300),
    ]


TRAINER_TITLE = "The trainer's own scalars"


def trainer_card(ids: tuple[str, str, str, str], keys: list[str], value: str | None) -> dbc.Card:
    """The trainer's own scalars: a key picker, notes, the chart and the agreement tables under "Do the
    dumped rollouts match what the trainer logged?". ``ids``: picker, notes, chart, agreement."""
    pick_id, notes_id, fig_id, agreement_id = ids
    pick = dcc.Dropdown(
        id=pick_id, options=keys, value=value, placeholder="no trainer log found", className="mb-1"
    )
    check = html.Div("Do the dumped rollouts match what the trainer logged?", className="fw-semibold small")
    body = [pick, notes_list([], notes_id), graph(fig_id), check, html.Div(id=agreement_id)]
    return card(TRAINER_TITLE, body)


def run_trainer_outputs(tv, run: str, colour: str, agreement_id: str) -> tuple:
    """:func:`trainer_outputs` of one run's trainer view (``data.compare.trainer.run_trainer_view``): its
    scalar over steps in ``colour``, the notes, and its agreement checks."""
    lines = [(ln.run, colour, ln.frame) for ln in tv.overlay.lines] if tv.overlay else []
    checks = [(run, colour, [c.as_row() for c in tv.checks])]
    empty = READING if tv.reading and tv.key is None else None
    return trainer_outputs(
        lines, tv.key, "step", False, [n.text for n in tv.notes], checks, agreement_id, empty
    )


READING = "Still reading the trainer's TensorBoard events… reload the page in a moment."


def trainer_outputs(lines: Sequence, key: str | None, x_title: str, smoothed: bool, notes: Sequence[str],
                    checks: Sequence[tuple[str, str, Sequence[dict]]], ids_prefix: str,
                    empty: str | None = None, exact: bool = False) -> tuple:  # fmt: skip
    """What :func:`trainer_card` shows: the chart of ``key`` (``lines``: ``(run, colour, frame)``, see
    :func:`~components.compare_figures.overlay_figure`; an empty state without a key, saying ``empty``
    when given), the notes, and one agreement table per ``(run, colour, checks)`` (ids
    ``<ids_prefix>-<i>``; ``exact``: see :func:`~components.compare_figures.overlay_figure`)."""
    fig = empty_figure(empty or "No trainer log in the folder.", 280)
    if key is not None:
        fig = overlay_figure(lines, y_title=key, x_title=x_title, smoothed=smoothed, exact=exact)
    tables = [agreement_table(r, c, rows, id_=f"{ids_prefix}-{i}") for i, (r, c, rows) in enumerate(checks)]
    return fig, notes_list(notes).children, tables
