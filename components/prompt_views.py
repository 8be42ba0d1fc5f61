"""Prompts page builders: the prompt list table and pager, trend badges, one prompt's reward chart, its
responses table with groups, and texts side by side. Pure: rows and labels in, components out (no I/O).

Model text (prompts, responses) is rendered as plain text only: ``html.Pre`` / text children, never markup.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import dash_ag_grid as dag
import dash_bootstrap_components as dbc
import numpy as np
import plotly.graph_objects as go
from dash import dcc, html

from components.figures import _figure, empty_figure
from components.format import D3_NUM, grid_formatter, num, value
from components.layout import GRAPH_CONFIG
from components.tables import BLOCK_SIZE, TOKENS_LINK
from components.theme import GRID_THEME_JS, HIGHLIGHT, SIGN_STYLE_JS, TREND_COLOURS, colour, sign_style


@dataclass(frozen=True)
class Column:
    """One list column: ``key`` in the rows, header ``label``, ``kind`` (how its cells read: a kind of
    :func:`components.format.value`) and whether its header sorts."""

    key: str
    label: str
    kind: str = "num"
    sortable: bool = True


def trend_badge(code: str | None, labels: Mapping[str, str]) -> html.Span | dbc.Badge:
    """A coloured badge for a trend code (see ``data.prompts.TRENDS``); '–' when unknown."""
    if not code:
        return html.Span("–", className="text-muted")
    color = TREND_COLOURS.get(code, "secondary")
    return dbc.Badge(
        labels.get(code, code),
        color=color,
        text_color="dark" if color in ("light", "warning") else None,
        className="fw-normal",
    )


def _header(col: Column, sort: str, order: str, href: str | None) -> html.Th:
    arrow = ""
    if col.key == sort:
        arrow = " ▲" if order == "asc" else " ▼"
    text = col.label + arrow
    inner = dcc.Link(text, href=href, className="text-reset text-decoration-none") if href else text
    return html.Th(
        inner,
        className="small align-bottom",
        scope="col",
        **({"aria-sort": "ascending" if order == "asc" else "descending"} if col.key == sort else {}),
    )


def prompt_list_table(
    rows: Sequence[Mapping],
    columns: Sequence[Column],
    sort: str,
    order: str,
    header_hrefs: Mapping[str, str],
    row_hrefs: Sequence[str],
    trend_labels: Mapping[str, str],
    table_id: str,
) -> dbc.Table:
    """The prompt list: one row per prompt; the ``prompt_preview`` cell links to ``row_hrefs[i]`` and each
    sortable header links to ``header_hrefs[key]`` (the URL sorted by that column)."""
    head = html.Thead(
        html.Tr([_header(c, sort, order, header_hrefs.get(c.key) if c.sortable else None) for c in columns])
    )
    body = []
    for row, href in zip(rows, row_hrefs, strict=True):
        cells = []
        for c in columns:
            v = row.get(c.key)
            if c.key == "prompt_preview":
                cells.append(
                    html.Td(
                        dcc.Link(v or "(empty prompt)", href=href, className="prompts-row-link"),
                        className="prompts-preview",
                        style={"maxWidth": "28rem", "overflowWrap": "anywhere"},
                    )
                )
            elif c.kind == "trend":
                cells.append(html.Td(trend_badge(v, trend_labels)))
            else:
                style = sign_style(v) if c.kind == "signed" else {}
                cells.append(html.Td(value(v, c.kind), className="text-end numeric", style=style))
        body.append(html.Tr(cells))
    return dbc.Table(
        [head, html.Tbody(body)],
        id=table_id,
        size="sm",
        hover=True,
        responsive=True,
        className="bg-white small mb-2",
    )


def pager(first: int, last: int, total: int, prev_href: str | None, next_href: str | None, pager_id: str):
    """'Showing first–last of total' with previous / next links (None: disabled)."""

    def link(text, href, suffix):
        if href is None:
            return html.Span(text, className="btn btn-sm btn-light disabled me-1", id=f"{pager_id}-{suffix}")
        return dcc.Link(text, href=href, className="btn btn-sm btn-light me-1", id=f"{pager_id}-{suffix}")

    return html.Div(
        [
            html.Span(
                f"Showing {first:,}–{last:,} of {total:,} prompts" if total else "No prompt matches.",
                className="small text-muted me-3",
            ),
            link("‹ previous", prev_href, "prev"),
            link("next ›", next_href, "next"),
        ],
        className="d-flex align-items-center",
        id=pager_id,
    )


def _arr(values) -> np.ndarray:
    """Floats as a numpy array, None as NaN (a gap in a line)."""
    return np.asarray([np.nan if v is None else v for v in values], dtype=float)


def _ends_trace(points: Mapping[str, Sequence], kind: str, name: str, reward: str, symbol: str) -> dict:
    """The ``kind`` (lowest / highest) responses of each bin as points that open their token page."""
    pick = [i for i, k in enumerate(points["kind"]) if k == kind]
    return dict(
        type="scatter",
        x=_arr([points["step"][i] for i in pick]),
        y=_arr([points["reward"][i] for i in pick]),
        customdata=np.asarray([points["sample_id"][i] for i in pick], dtype=object),
        mode="markers",
        name=name,
        marker=dict(color=colour("reward"), size=8, opacity=0.7, symbol=symbol),
        hovertemplate=f"step %{{x}}<br>{kind} {reward} %{{y:{D3_NUM}}}<br>%{{customdata}}<extra></extra>",
    )


def _bins_data(means: Mapping[str, Sequence]) -> np.ndarray:
    """Each bin's first and last step and count of responses (rows), for the hover of its means: numbers,
    so that Plotly ships them as a typed array."""
    return np.column_stack([np.asarray(means[k], dtype=np.int64) for k in ("first", "last", "n")])


def reward_chart_note(total: int, bin_steps: int) -> str | None:
    """What a chart of :func:`reward_figure` with ``bin_steps`` draws instead of each of ``total``
    responses (None when it draws each one)."""
    if not bin_steps:
        return None
    per = "each step" if bin_steps == 1 else f"each {bin_steps:,} steps"
    return (
        f"{total:,} responses are too many to draw one by one: for {per}, the points are the lowest and "
        "the highest reward response and the line is the mean of all its responses."
    )


def reward_figure(
    points: Mapping[str, Sequence],
    means: Mapping[str, Sequence],
    labels: Mapping[str, str],
    bin_steps: int = 0,
    height: int = 320,
) -> go.Figure:
    """Reward over steps for one prompt (see ``data.prompts.reward_chart``).

    ``points``: columns ``step``, ``reward``, ``sample_id`` of the responses drawn (each point's
    ``customdata`` is its ``sample_id``). ``means``: ``x``, ``first``, ``last``, ``n``, ``reward``,
    ``ref_reward`` (means per step or bin of steps, drawn as lines). ``bin_steps`` 0: ``points`` are every
    response and ``means`` per step; otherwise ``points`` (with ``kind``: lowest / highest) are the ends of
    bins of ``bin_steps`` steps and ``means`` per bin. ``labels``: UI labels of ``reward`` and
    ``ref_reward``. Empty input gives an empty-state figure.
    """
    steps = list(points.get("step", []))
    if not steps:
        return empty_figure("No response to this prompt", height)
    reward = labels["reward"]
    of = "the step" if bin_steps <= 1 else f"each {bin_steps:,} steps"
    # numpy arrays: Plotly validates them at once (lists element by element) and ships them as typed arrays.
    if bin_steps:
        traces = [
            _ends_trace(points, "highest", f"{reward} (highest response of {of})", reward, "triangle-up"),
            _ends_trace(points, "lowest", f"{reward} (lowest response of {of})", reward, "triangle-down"),
        ]
        where, data = (
            "steps %{customdata[0]}–%{customdata[1]} · responses: %{customdata[2]}",
            _bins_data(means),
        )
    else:
        traces = [
            dict(
                type="scatter",
                x=_arr(steps),
                y=_arr(points["reward"]),
                customdata=np.asarray(list(points["sample_id"]), dtype=object),
                mode="markers",
                name=f"{reward} (one response)",
                marker=dict(color=colour("reward"), size=7, opacity=0.45),
                hovertemplate="step %{x}<br>"
                + reward
                + " %{y:"
                + D3_NUM
                + "}<br>%{customdata}<extra></extra>",
            )
        ]
        where, data = "step %{x}", None
    traces.append(
        dict(
            type="scatter",
            x=_arr(means["x"]),
            y=_arr(means["reward"]),
            customdata=data,
            mode="lines+markers",
            name=f"{reward} (mean of {of})",
            line=dict(color=colour("reward"), width=2),
            marker=dict(size=4),
            hovertemplate=where + "<br>mean " + reward + " %{y:" + D3_NUM + "}<extra></extra>",
        )
    )
    refs = list(means.get("ref_reward", []))
    if any(v is not None for v in refs):
        traces.append(
            dict(
                type="scatter",
                x=_arr(means["x"]),
                y=_arr(refs),
                customdata=data,
                mode="lines+markers",
                name=f"{labels['ref_reward']} (mean of {of})",
                line=dict(color=colour("ref_reward"), width=2, dash="dash"),
                marker=dict(size=4, symbol="diamond"),
                connectgaps=False,
                hovertemplate=where
                + "<br>mean "
                + labels["ref_reward"]
                + " %{y:"
                + D3_NUM
                + "}<extra></extra>",
            )
        )
    xaxis: dict = {"title": {"text": "step"}}
    distinct = sorted(set(steps))
    if len(distinct) <= 12:
        # Few steps: tick exactly at them (a lone step would otherwise get ticks at 0.5, 1.5, ...).
        xaxis.update(tickmode="array", tickvals=distinct)
    # Plain dicts, not validated (Plotly's validation of this figure took ~5 ms of the prompt page's ~16).
    return _figure(
        traces,
        {
            "height": height,
            "xaxis": xaxis,
            "yaxis": {"title": {"text": reward}},
            "hovermode": "closest",
            "clickmode": "event",
        },
    )


def chart_figure(chart, labels: Mapping[str, str]) -> go.Figure:
    """:func:`reward_figure` of one prompt's ``data.prompts.RewardChart`` (its ``points``, ``means`` and
    ``bin_steps``), as the prompt page draws it."""
    points, means = chart.points.to_dict(as_series=False), chart.means.to_dict(as_series=False)
    return reward_figure(points, means, labels, chart.bin_steps)


def clicked_sample(click_data) -> str | None:
    """The ``sample_id`` of a clicked response point of :func:`reward_figure` (None for anything else)."""
    try:
        v = click_data["points"][0].get("customdata")
    except (TypeError, KeyError, IndexError, AttributeError):
        return None
    return v if isinstance(v, str) else None


# The learning-signal column's cells (``data.metrics.group.learning_signal``: True, False, None).
SIGNAL_TEXT = {
    True: "yes: rewards differ",
    False: "no learning signal: every reward equal",
    None: "– (one response)",
}
ZERO_SPREAD_TEXT = SIGNAL_TEXT[False]


def _grid_column(col: Column, group_cell: str | None = None) -> dict:
    """The grid's column of ``col``; the ``group_cell`` column's cells link to their group (``group_href``)."""
    d: dict = {"field": col.key, "headerName": col.label, "headerTooltip": col.label}
    if col.key == group_cell:
        d.update(cellRenderer="AppLink", cellRendererParams={"hrefField": "group_href"})
    if col.key == "sample_id":
        # Shown as where the response is in the run's files (file:line); the stable id in its tooltip and link.
        d.update(
            **TOKENS_LINK,
            valueGetter={"function": "params.data ? params.data.source_line || params.data.sample_id : null"},
            tooltipField="sample_id",
            pinned="left",
            width=140,
            cellStyle={"fontFamily": "var(--rlb-mono)", "fontSize": "11px"},
        )
    elif col.kind in ("text", "trend"):
        d.update(tooltipField=col.key, width=300 if col.key == "response_preview" else 150)
    else:
        d.update(
            type="rightAligned",
            valueFormatter=grid_formatter(col.kind),
            width=70 if col.kind == "step" else 104,
            cellStyle={"function": SIGN_STYLE_JS}
            if col.kind == "signed"
            else {"fontVariantNumeric": "tabular-nums"},
        )
    return d


def history_rows(
    rows: Sequence[Mapping], columns: Sequence[Column], hrefs: Sequence[str], groups: Sequence[str | None]
) -> list[dict]:
    """Grid rows of :func:`history_grid`: every ``columns`` key of ``rows`` (dicts of
    ``data.prompts.history``), with ``sample_id``, ``source_line``, ``tokens_href`` (``hrefs[i]``: the token
    page of row i), ``group_href`` (``groups[i]``: its group side by side) and ``zero_spread``;
    ``learning_signal`` in words (:data:`SIGNAL_TEXT`)."""
    data = []
    for row, href, group in zip(rows, hrefs, groups, strict=True):
        d = {c.key: row.get(c.key) for c in columns}
        d["sample_id"] = row["sample_id"]
        d["source_line"] = row.get("source_line")
        d["tokens_href"] = href
        d["group_href"] = group
        d["zero_spread"] = bool(row.get("zero_spread"))
        if "learning_signal" in d:
            d["learning_signal"] = SIGNAL_TEXT[row.get("learning_signal")]
        data.append(d)
    return data


def group_cell(columns: Sequence[Column]) -> str | None:
    """The history grid's column whose cells open their group: its group id, else its group's size; None
    without groups (neither column)."""
    keys = {c.key for c in columns}
    return next((k for k in ("group_id", "group_n") if k in keys), None)


def history_grid(columns: Sequence[Column], n_rows: int, grid_id: str, height_rows: int = 16) -> dag.AgGrid:
    """One prompt's responses, one grid row each, on the infinite row model: its ``n_rows`` rows come from a
    ``getRowsRequest`` callback as :func:`history_rows`, a block at a time, in the grid's sort order (one
    column, sorted on the server; unsorted: step, group, reward).

    The ``sample_id`` column links to the row's token page, showing the row's ``source_line``; the group's
    column (``group_id``, else ``group_n`` where there are groups) to the group side by side. Rows of a
    zero-spread group (``zero_spread``) are highlighted and say so in the ``learning_signal`` column when it is one
    of ``columns``.
    """
    n = max(3, min(n_rows, height_rows))
    return dag.AgGrid(
        id=grid_id,
        columnDefs=[_grid_column(c, group_cell(columns)) for c in columns],
        rowModelType="infinite",
        getRowId="params.data.sample_id",
        defaultColDef={
            "resizable": True,
            "sortable": True,
            "wrapHeaderText": True,
            "autoHeaderHeight": True,
            "suppressMovable": True,
        },
        dashGridOptions={
            "theme": {"function": GRID_THEME_JS},
            "animateRows": False,
            "suppressCellFocus": True,
            "cacheBlockSize": BLOCK_SIZE,
            "maxBlocksInCache": 50,
            "infiniteInitialRowCount": 1,
            "suppressMultiSort": True,
            # A file's field may have a dot in its name (an object's field, `rewards.accuracy`): a name, not a path.
            "suppressFieldDotNotation": True,
            "tooltipShowDelay": 400,
            "localeText": {"noRowsToShow": "No response."},
        },
        getRowStyle={
            "styleConditions": [
                # a row still loading has no data yet
                {
                    "condition": "params.data && params.data.zero_spread",
                    "style": {"backgroundColor": HIGHLIGHT},
                },
            ]
        },
        style={"height": f"{26 * n + 110}px", "width": "100%"},  # rows + a wrapped header + scrollbar
        className="mb-3",
    )


def text_block(title: str, meta: str | None, text: str | None, block_id: str | None = None) -> html.Div:
    """A titled plain-text box (whitespace and newlines kept); '(none in the file)' for a missing text."""
    head = [html.Span(title, className="fw-semibold")]
    if meta:
        head.append(html.Span(meta, className="ms-2 text-muted numeric"))
    kw = {"id": block_id} if block_id else {}
    body = (
        html.Pre(text, className="text-block mb-0", **kw)
        if text is not None
        else html.Div("(none in the file)", className="text-muted small fst-italic", **kw)
    )
    return html.Div([html.Div(head, className="small mb-1"), body], className="mb-2")


def response_pair(
    title: str,
    response: str | None,
    ref_response: str | None,
    response_meta: str | None,
    ref_meta: str | None,
    href: str | None,
    pair_id: str,
) -> dbc.Card:
    """A card with a response beside its reference response (the reference model's sample for the same
    prompt at the same step); ``href`` links the response to its token page."""
    header = [html.Span(title)]
    if href:
        header.append(dcc.Link("tokens ›", href=href, className="ms-2 small fw-normal"))
    return dbc.Card(
        [
            dbc.CardHeader(header),
            dbc.CardBody(
                dbc.Row(
                    [
                        dbc.Col(text_block("Response", response_meta, response, f"{pair_id}-response"), md=6),
                        dbc.Col(
                            text_block("Reference response", ref_meta, ref_response, f"{pair_id}-ref"), md=6
                        ),
                    ]
                )
            ),
        ],
        id=pair_id,
        className="shadow-sm",
    )


def stats_row(items: Sequence[tuple[str, object]], row_id: str | None = None) -> html.Div:
    """Key figures in a row: ``(label, value)`` pairs; a value may be a component."""
    kw = {"id": row_id} if row_id else {}
    return html.Div(
        [
            html.Div(
                [html.Div(k, className="text-muted small"), html.Div(v, className="fw-semibold numeric")],
                className="me-4 mb-1",
            )
            for k, v in items
        ],
        className="d-flex flex-wrap align-items-end bg-white border rounded px-3 py-2 mb-3 shadow-sm",
        **kw,
    )


# ---- the list and one prompt, whole ----------------------------------------------------------------------


def list_summary(info: Mapping, trend_labels: Mapping[str, str], summary_id: str) -> html.Div:
    """'N prompts · M seen in 2+ steps · G groups (by …)' and a badge with the count of each trend the run
    has (``info``: ``prompts``, ``recurring``, ``trends``, and ``groups``, ``group_by`` where known)."""
    trends = info["trends"]
    groups = info.get("groups") or 0
    return html.Div(
        [
            html.Span(f"{info['prompts']:,} prompts", className="fw-semibold me-2"),
            html.Span(f"· {info['recurring']:,} seen in 2+ steps ", className="me-2"),
            html.Span(
                f"· {groups:,} group{'s' if groups != 1 else ''} (by {info.get('group_by', 'prompt')}) ",
                className="me-2",
            )
            if groups
            else None,
            *(
                html.Span([trend_badge(code, trend_labels), f" {trends[code]:,}"], className="me-2")
                for code in trend_labels
                if trends[code]
            ),
        ],
        id=summary_id,
        className="small mb-1",
    )


def trend_note(reward_label: str, threshold: float, effect: float) -> html.Div:
    """How a trend is told, with the run's threshold (``effect`` × the run's reward standard deviation)."""
    return html.Div(
        f"Trend: mean {reward_label} over the last quarter of a prompt's steps minus the first quarter; "
        f"above +{num(threshold)} is improved, below −{num(threshold)} regressed, otherwise flat "
        f"({effect} × the run's reward standard deviation). Never beats the reference: no "
        "response scored above its reference response in any step where both exist (takes precedence).",
        className="small text-muted mb-2",
    )


def single_step_note(alert_id: str) -> dbc.Alert:
    """Why cross-step views say little: every prompt of the run appears in a single step."""
    return dbc.Alert(
        "Every prompt of this run appears in a single step: cross-step views (early vs late reward, "
        "trend) need prompts that recur across steps.",
        color="info",
        className="py-2 small",
        id=alert_id,
    )


def prompt_stats(
    agg: Mapping, labels: Mapping[str, str], trend_labels: Mapping[str, str], row_id: str
) -> html.Div:
    """One prompt's key figures (``agg``: its row of the prompt table): steps, responses, the steps it was
    seen in, early and late reward, mean gain, win rate, trend and groups when it has any."""
    items = [
        ("steps", num(agg.get("n_steps"))),
        ("responses", num(agg.get("n_responses"))),
        ("steps seen", f"{agg.get('first_step')} – {agg.get('last_step')}"),
        (
            f"{labels['reward']} · first ¼ → last ¼",
            f"{num(agg.get('reward_early'))} → {num(agg.get('reward_late'))}",
        ),
        (f"{labels['reward_gain']} · mean", value(agg.get("gain_mean"), "signed")),
        ("win rate vs reference", value(agg.get("win_rate"), "share")),
        ("trend", trend_badge(agg.get("trend"), trend_labels)),
    ]
    if agg.get("n_groups"):
        items.append(("groups (zero spread)", f"{agg.get('n_groups')} ({agg.get('zero_spread_groups')})"))
    return stats_row(items, row_id)


def response_pairs(
    first: Mapping,
    latest: Mapping,
    first_text: Mapping,
    latest_text: Mapping,
    hrefs: tuple,
    labels,
    ids: tuple,
) -> dbc.Row:
    """The prompt's first and latest response beside their reference responses (one pair when both are of
    its only step); ``hrefs`` and ``ids``: the token pages and the ids of the first and the latest."""
    if latest["step"] == first["step"]:
        specs = [
            (f"Response · step {first['step']} (the prompt's only step)", first, first_text, hrefs[0], ids[0])
        ]
    else:
        specs = [
            (f"First response · step {first['step']}", first, first_text, hrefs[0], ids[0]),
            (f"Latest response · step {latest['step']}", latest, latest_text, hrefs[1], ids[1]),
        ]

    def meta(row):
        where = f"{row['source_line']} · " if row.get("source_line") else ""
        return f"{where}step {row['step']} · {labels['reward']} {num(row.get('reward'))}"

    def ref_meta(row):
        return (
            None if row.get("ref_reward") is None else f"{labels['ref_reward']} {num(row.get('ref_reward'))}"
        )

    return dbc.Row(
        [
            dbc.Col(
                response_pair(
                    title, text["response"], text["ref_response"], meta(row), ref_meta(row), href, pair_id
                ),
                lg=12 // len(specs),
            )
            for title, row, text, href, pair_id in specs
        ],
        className="g-3",
    )


def chart_card(
    title: str, figure: go.Figure, chart_id: str, link_id: str, note: str | None = None
) -> dbc.Card:
    """The prompt's reward chart in a card, with what it draws when it cannot draw each response (``note``)
    and the line where a clicked point's link appears."""
    return dbc.Card(
        [
            dbc.CardHeader(title),
            dbc.CardBody(
                [
                    html.Div(note, id=f"{chart_id}-note", className="small text-muted") if note else None,
                    dcc.Graph(id=chart_id, figure=figure, config=GRAPH_CONFIG),
                    html.Div(
                        "Click a point to open that response token by token.",
                        id=link_id,
                        className="small text-muted",
                    ),
                ]
            ),
        ],
        className="shadow-sm",
    )
