"""The token page's tables: the top tokens of a response by a metric, shown as text."""

from __future__ import annotations

from collections.abc import Mapping

import dash_bootstrap_components as dbc
import polars as pl
from dash import html

from components.format import num

# ---- tables ------------------------------------------------------------------------------------------


def top_table(rows: pl.DataFrame, title: str, labels: Mapping[str, str], table_id: str) -> html.Div:
    """A small table of top-k tokens (``pos, token, is_pad, logprob, ref_logprob, log_ratio, kl``)."""
    head = html.Thead(
        html.Tr(
            [
                html.Th("position"),
                html.Th("token"),
                *(html.Th(labels[k]) for k in ("logprob", "ref_logprob", "log_ratio", "kl")),
            ]
        )
    )
    body = [
        html.Tr(
            [
                html.Td(r["pos"]),
                html.Td(
                    [
                        html.Code(r["token"] if r["token"] is not None else "", style={"whiteSpace": "pre"}),
                        html.Span(" pad", className="text-muted") if r["is_pad"] else None,
                    ]
                ),
                *(html.Td(num(r[k])) for k in ("logprob", "ref_logprob", "log_ratio", "kl")),
            ]
        )
        for r in rows.iter_rows(named=True)
    ]
    return html.Div(
        [
            html.Div(title, className="small fw-semibold mb-1"),
            dbc.Table([head, html.Tbody(body)], size="sm", className="small mb-0", id=table_id),
        ]
    )
