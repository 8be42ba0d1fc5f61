"""The token page's parts around the strip (:mod:`components.token_strip`) and the figures
(:mod:`components.token_figures`): the response's header, navigation, key figures and texts, the strip's
card with its legend, the row of per-position charts and the top-token tables. Pure: values, labels,
links and ids in, components out.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

import dash_bootstrap_components as dbc
import orjson
import polars as pl
from dash import dcc, html

from components.format import value
from components.layout import inline_stats, stat
from components.theme import colour_stops
from components.token_figures import file_fields_figure, logprob_figure, token_reward_figure, value_figure
from components.token_strip import clip_text, legend, strip_data, strip_keys, window_end
from components.token_tables import top_table

NO_METRIC = "__none__"  # the strip's data when there is no metric to colour by


# How a response ended (``data.signals.END_LABELS``), as the token page's badge says it.
END_BADGES = {
    "truncated": ("truncated: no end token (cut at the length limit)", "warning"),
    "ended": ("ended with an end token", "light"),
}


def header(
    source_line: str, sample: str, where: str, end: str | None = None, group_href: str | None = None
) -> html.Div:
    """'Response <file:line>' (where the response is in the run's files), where it comes from (run and
    step), its stable id (the one the page's URL carries), a badge saying how it ended (``end``: a key of
    :data:`END_BADGES`; None: it cannot be told, no badge) and a link to its group (``group_href``)."""
    text, colour = END_BADGES.get(end or "", (None, None))
    return html.Div(
        [
            html.H4("Response", className="mb-0 me-3"),
            html.Code(source_line, className="me-3 fs-6", id="tokens-source-line"),
            html.Span(where, className="text-muted small me-3"),
            dbc.Badge(text, color=colour, text_color="dark", className="me-3 border", id="tokens-end")
            if text
            else None,
            dcc.Link("its group", href=group_href, className="small me-3", id="tokens-group")
            if group_href
            else None,
            html.Span(["id ", html.Code(sample, className="small")], className="text-muted small"),
        ],
        className="d-flex align-items-baseline flex-wrap mb-2",
    )


def nav(
    prev_href: str | None, next_href: str | None, where: str, back_href: str, ids: Mapping[str, str]
) -> html.Div:
    """Previous / next response (a disabled button where there is none), where this one sits, and the link
    back to the responses. ``ids``: ``prev``, ``next``, ``back``."""

    def link(text, href, id_):
        if href is None:
            return dbc.Button(text, id=id_, size="sm", color="secondary", outline=True, disabled=True)
        return dcc.Link(dbc.Button(text, size="sm", color="secondary", outline=True), href=href, id=id_)

    return html.Div(
        [
            link("← previous", prev_href, ids["prev"]),
            link("next →", next_href, ids["next"]),
            html.Span(where, className="small text-muted mx-2", id=ids.get("where")),
            dcc.Link("back to the responses", href=back_href, id=ids["back"], className="small ms-auto"),
        ],
        className="d-flex align-items-center gap-2 mb-2",
    )


def key_figures(items: Sequence[tuple[str, object, str]], id_: str) -> html.Div:
    """The response's key figures: ``(label, value, kind)`` (kind: see :func:`components.format.value`)."""
    return html.Div(
        [stat(k, value(v, kind)) for k, v, kind in items], className="d-flex flex-wrap mb-2 numeric", id=id_
    )


def texts(cols: Sequence[tuple[str, str]], text_id: str) -> dbc.Row:
    """The response's texts side by side as plain text: ``(name, text)`` pairs; each block's id is
    ``text_id`` with the name's first word (``tokens-text-prompt``)."""
    return dbc.Row(
        [
            dbc.Col(
                [
                    html.Div(name, className="small text-muted"),
                    html.Div(text, className="text-block", id=text_id.format(name.split()[0])),
                ],
                lg=12 // len(cols),
                className="mb-2",
            )
            for name, text in cols
        ],
        className="g-2",
    )


def figure_line(title: str, items: Sequence[tuple[str, object, str]], id_: str) -> html.Div:
    """A short line of figures under a title (the response's inference–trainer mismatch): ``(label, value,
    kind)`` each (kind: see :func:`components.format.value`); an empty div for none."""
    if not items:
        return html.Div(id=id_)
    return html.Div(
        [
            html.Span(title, className="small fw-semibold me-3"),
            *inline_stats([(k, value(v, kind, share_digits=1)) for k, v, kind in items]),
        ],
        className="d-flex flex-wrap align-items-baseline mb-2",
        id=id_,
    )


def notes(lines: Sequence[str], id_: str) -> html.Div:
    """What the response lacks, one muted line each."""
    return html.Div([html.Div(m, className="small text-muted") for m in lines], id=id_, className="mb-2")


def _scale(metric: str | None, scale):
    """``(column, lo, hi, stops, signed)`` the strip is coloured with: each token's place on ``scale``
    (its ``column``, 0..1) on the metric's colour stops (no metric: a neutral scale)."""
    if metric is None:
        return NO_METRIC, 0.0, 1.0, colour_stops("prob", False), False
    return scale.column, 0.0, 1.0, colour_stops(metric, scale.signed), scale.signed


def strip_card(
    shown: pl.DataFrame,
    metric: str | None,
    metric_label: str,
    scale,
    hidden: int,
    hover: Sequence[tuple[str, str]],
    controls,
    ids: Mapping[str, str],
    select: int | None = None,
    keys: Sequence[tuple[str, str]] = (),
) -> dbc.Card:
    """The token strip's card: token count, ``controls``, the colour legend and the strip, filled in the
    browser from its data (see :func:`components.token_strip.strip_data`): the first window of tokens, the
    next ones as the strip is scrolled (:func:`strip_window`), and a line saying how many are shown.

    ``shown``: the visible positions, with each one's place on the colour scale (``scale.column``, 0..1);
    ``metric`` the metric they are coloured by (None: no colour) on ``scale`` (``data.strip_scale.StripScale``:
    ``column``, ``signed``, ``lo``, ``hi``, ``clip``, ``ticks()``, ``caption()``; see
    :func:`components.token_strip.legend`); ``hidden`` the pad positions left out; ``hover`` the ``(column,
    label)`` pairs of a token's hover text. ``ids``: ``count``, ``data`` (the strip's store), ``strip``,
    ``status``. ``select``: a position the strip opens at (its first window reaches it), outlined.
    ``keys``: the legend's other entries (see :func:`components.token_strip.strip_keys`).
    """
    count = f"{shown.height:,} tokens" + (f", {hidden:,} pad position(s) hidden" if hidden else "")
    data_metric, lo, hi, stops, signed = _scale(metric, scale)
    if metric is None:
        key_legend = html.Span("no metric to colour by", className="small text-muted")
    else:
        key_legend = legend(
            metric_label, scale.lo, scale.hi, stops, signed, scale.clip, scale.ticks(), scale.caption()
        )
    key = uuid.uuid4().hex[:12]  # which strip div the browser fills: a re-render mounts a new one
    end = window_end(shown, 0, select) if select is not None else None
    first = {**strip_data(shown, data_metric, lo, hi, stops, key, hover, 0, end), "select": select}
    return dbc.Card(
        [
            dbc.CardHeader(
                html.Div(
                    [
                        html.Span("Tokens", className="me-2"),
                        html.Span(count, className="small text-muted fw-normal me-4", id=ids["count"]),
                        controls,
                        html.Div(key_legend, className="ms-auto"),
                    ],
                    className="d-flex align-items-center flex-wrap gap-2",
                )
            ),
            dbc.CardBody(
                [
                    strip_keys(keys),
                    dcc.Store(id=ids["data"], data=first),
                    html.Div(
                        id=ids["strip"],
                        className="token-strip text-block",
                        style={"maxHeight": "22rem"},
                        **{"data-key": key},
                    ),
                    html.Div(
                        [
                            html.Span(
                                "Hover a token for all its values; hover a chart to find its token here.",
                                className="me-2",
                            ),
                            html.Span(id=ids["status"]),
                        ],
                        className="small text-muted mt-1",
                    ),
                ]
            ),
        ]
    )


def strip_window(
    shown: pl.DataFrame,
    metric: str | None,
    scale,
    hover: Sequence[tuple[str, str]],
    key: str,
    start: int,
    upto: int | None = None,
) -> dict:
    """The strip's data from row ``start`` of ``shown`` (the next window, up to position ``upto`` at least),
    coloured as :func:`strip_card` colours the strip ``key``."""
    data_metric, lo, hi, stops, _ = _scale(metric, scale)
    end = window_end(shown, start, upto)
    return strip_data(shown, data_metric, lo, hi, stops, key, hover, start, end)


def strip_paint(shown: pl.DataFrame, metric: str | None, scale) -> tuple[list[str], list[str]]:
    """Each visible token's background and text colour as the browser paints the strip (``""``: none, the
    page's own): read from the very data :func:`strip_card` and :func:`strip_window` send, whole (the
    palette index ``colour[i]`` into ``bg`` / ``fg``, as :data:`components.token_js.STRIP_JS` reads it)."""
    data_metric, lo, hi, stops, _ = _scale(metric, scale)
    sent = orjson.loads(strip_data(shown, data_metric, lo, hi, stops, "", (), 0, shown.height)["json"])
    bg, fg = sent["bg"], sent["fg"]
    return (
        ["" if c is None else bg[c] for c in sent["colour"]],
        ["" if c is None else (fg[c] or "") for c in sent["colour"]],
    )


def strip_caption(metric: str | None, scale) -> str:
    """What the strip's legend says beside its colour bar, as one line: which scale (a log scale's
    caption) and where it is clipped; "no metric to colour by" without a metric; "" for a plain linear
    scale."""
    if metric is None:
        return "no metric to colour by"
    caption = scale.caption()
    texts = [caption[0]] if caption else []
    if scale.clip:
        texts.append(clip_text(scale.lo, scale.hi, scale.signed, scale.clip[0]))
    return " · ".join(texts)


def chart_names(fields: frozenset[str], file_fields: Sequence[tuple[str, str]]) -> list[str]:
    """The per-position charts the response's token ``fields`` allow, in order: log-probs, critic value
    against the return, token rewards, the trainer's own fields."""
    names = []
    if "logprobs" in fields:
        names.append("logprob")
    if "values" in fields and "token_rewards" in fields:
        names.append("value")
    if "token_rewards" in fields:
        names.append("token_reward")
    if file_fields:
        names.append("file")
    return names


def chart_figure(
    name: str,
    shown: pl.DataFrame,
    labels: Mapping[str, str],
    file_fields: Sequence[tuple[str, str]],
    x_range: tuple[float, float] | None = None,
):
    """The figure of chart ``name`` (see :func:`chart_names`) over the positions of ``shown``; ``x_range``:
    the positions the chart is zoomed to."""
    if name == "logprob":
        return logprob_figure(shown, labels, x_range)
    if name == "value":
        return value_figure(shown, labels, x_range)
    if name == "token_reward":
        return token_reward_figure(shown, labels, x_range)
    return file_fields_figure(shown, file_fields, x_range)


def charts(
    shown: pl.DataFrame,
    fields: frozenset[str],
    labels: Mapping[str, str],
    file_fields: Sequence[tuple[str, str]],
    chart_type: str,
) -> dbc.Row:
    """The per-position charts the response's token ``fields`` allow, side by side (see
    :func:`chart_names`); none without any. Each graph's id is ``{"type": chart_type, "name": ...}``."""
    names = chart_names(fields, file_fields)
    if not names:
        return dbc.Row()
    return dbc.Row(
        [
            dbc.Col(
                dcc.Graph(
                    id={"type": chart_type, "name": name},
                    figure=chart_figure(name, shown, labels, file_fields),
                    config={"displayModeBar": False},
                    clear_on_unhover=True,
                ),
                xl=12 // len(names),
                lg=12,
                className="mb-2",
            )
            for name in names
        ],
        className="g-2",
    )


def top_tables(tables: Sequence[tuple[pl.DataFrame, str, str]], labels: Mapping[str, str]) -> dbc.Row:
    """Top-token tables side by side: ``(rows, title, id)`` each (see
    :func:`components.token_tables.top_table`); an empty row for none."""
    if not tables:
        return dbc.Row()
    return dbc.Row(
        [dbc.Col(top_table(rows, title, labels, id_), lg=6) for rows, title, id_ in tables],
        className="g-3 mt-1",
    )
