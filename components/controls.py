"""The pages' controls: what each page lets the user change, with the values of its view state. Pure:
values, options and ids in, components out; each page's sync callback reads them back into its URL.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import dash_bootstrap_components as dbc
from dash import dcc, html


def token_controls(
    options: Sequence[Mapping], metric: str, pads: bool, visible: bool, ids: Mapping[str, str]
) -> html.Div:
    """The token page's metric picker (``options``: ``label``, ``value``, ``disabled``) and pad switch.
    Hidden but present when not ``visible`` (no token to colour), so the sync callback always has its
    inputs. ``ids``: ``metric``, ``pads``."""
    return html.Div(
        [
            html.Span("colour by", className="small text-muted me-2 fw-normal"),
            dcc.Dropdown(
                id=ids["metric"],
                options=list(options),
                value=metric,
                clearable=False,
                searchable=False,
                style={"width": "15rem", "fontSize": "0.85rem", "fontWeight": "normal"},
            ),
            dbc.Switch(
                id=ids["pads"], label="show pad tokens", value=pads, className="small mb-0 ms-3 fw-normal"
            ),
        ],
        # Bootstrap's d-flex is !important: hiding needs its d-none, not an inline style.
        className="d-flex align-items-center" if visible else "d-none",
    )
