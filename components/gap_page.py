"""The gap page's parts: its controls (step, band, correction rule and threshold C), each rule's formula,
and the cards of its three charts (pure builders: ids and values in, components out)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import dash_bootstrap_components as dbc
from dash import dcc, html

from components.layout import card, graph

RATIO = "ratio_t = exp(Δ_t) = π_trainer(token) ÷ π_inference(token), Δ_t = trainer − inference log-prob"


def controls(ids: Mapping[str, str], step, band: str, bands: Mapping[str, str], rule: str, rules, c: float):
    """The row of controls: the selected step (a number), the band of the per-response curves, the rule
    (``rules``: key -> :class:`data.infer_gap.Rule`) and its threshold C (above 1)."""

    def col(text, control, lg):
        return dbc.Col([html.Div(text, className="small text-muted"), control], lg=lg, className="mb-2")

    def radio(id_, options, value):
        return dbc.RadioItems(
            id=id_, options=[{"label": v, "value": k} for k, v in options.items()], value=value, inline=True,
            className="small",
        )  # fmt: skip

    return dbc.Row(
        [
            col("step (the correction's token shares are counted around it)",
                dbc.Input(id=ids["step"], type="number", value=step, debounce=True, size="sm"), 2),
            col("band of the per-response curves", radio(ids["band"], bands, band), 3),
            col("correction", radio(ids["rule"], {k: r.name for k, r in rules.items()}, rule), 4),
            col("threshold C (> 1)", dbc.Input(id=ids["c"], type="number", value=c, min=1, step="any",
                                               debounce=True, size="sm"), 2),
        ],
        className="g-3 align-items-end mb-2",
    )  # fmt: skip


def formula_order(rules, rule: str) -> list:
    """``(key, rule)`` of each of ``rules`` in the order the page lists them: the previewed ``rule`` first."""
    return sorted(rules.items(), key=lambda kv: kv[0] != rule)


def formulas_head(c: float) -> str:
    """The line above the formulas: C and what the ratio is."""
    return f"Corrections at C = {c:g}; {RATIO}."


def formulas(rules, rule: str, c: float) -> html.Div:
    """Each rule's formula, the one previewed first and in bold, with what the ratio is (text, not markup)."""
    items = [
        html.Li(
            [html.Span(f"{r.name}: ", className="fw-semibold"), f"{r.formula} ({r.touches})"],
            className="fw-bold" if key == rule else "text-muted",
        )
        for key, r in formula_order(rules, rule)
    ]
    return html.Div(
        [
            html.Div(formulas_head(c), className="small"),
            html.Ul(items, className="small mb-0"),
        ]
    )


def page(ids: Mapping, head: Sequence, controls_row, formula_box) -> html.Div:
    """The page below its ``head`` (stores, title, notices): the controls, the formulas, the gap and tail
    charts side by side and the correction's chart below. ``ids``: ``curve`` / ``curve_title`` /
    ``curve_note`` by chart key (``gap``, ``tail``, ``correction``), ``formulas`` and ``token_link`` (the
    correction's card: a link to a response's tokens with the correction marked, see :func:`token_link`)."""

    def panel(key, extra=()):
        return card(ids["curve_title"][key], "", [*extra, graph(ids["curve"][key])], ids["curve_note"][key])

    return html.Div(
        [
            *head,
            controls_row,
            dbc.Row([dbc.Col(panel(k), lg=6, className="mb-3") for k in ("gap", "tail")], className="g-3"),
            dbc.Row(
                [
                    dbc.Col(panel("correction", (html.Div(id=ids["token_link"], className="small mb-1"),)), lg=8,
                            className="mb-3"),
                    dbc.Col(dbc.Card(dbc.CardBody(html.Div(formula_box, id=ids["formulas"]), className="p-2"),
                                     className="h-100 shadow-sm"), lg=4, className="mb-3"),
                ],
                className="g-3",
            ),
        ]
    )  # fmt: skip


def token_link(step, href: str | None):
    """A link to the tokens of ``step``'s response with the largest |Δ|, the correction's tokens marked."""
    if href is None:
        return None
    return dcc.Link(
        f"Step {step:,}: the response with the largest |Δ|, its tokens with this correction marked →",
        href=href,
    )
