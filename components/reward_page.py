"""The reward page's parts around its figures: the selected step's key figures. Pure: values, labels and
ids in, components out.
"""

from __future__ import annotations

from collections.abc import Sequence

from dash import html

from components.format import value


def step_stats(items: Sequence[tuple[str, object, str]]) -> list[html.Div]:
    """The selected step's key figures in a line: ``(name, value, kind)``; kind ``share`` is a percentage
    with one decimal, ``warn`` a text shown as a warning (a partial step), others as
    :func:`components.format.value` formats them."""
    out = []
    for name, v, kind in items:
        if kind == "warn":
            out.append(
                html.Div(
                    [html.I(className="bi bi-exclamation-triangle me-1"), f"{name}: {v}"],
                    className="badge text-bg-warning fw-normal me-4",
                    id="reward-partial-step",
                )
            )
            continue
        text = value(v, kind, share_digits=1)
        out.append(
            html.Div(
                [
                    html.Span(name, className="text-muted small me-1"),
                    html.Span(text, className="fw-semibold"),
                ],
                className="me-4",
            )
        )
    return out
