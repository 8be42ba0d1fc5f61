"""A response group side by side (the prompts page's ``&step=S`` view): per group a header with its reward
statistics and learning signal, then one card per completion in a grid that fits four to a row at 1440 px
(text, reward, advantage, how it ended); and the prompt page's links to its groups. Model text is data:
rendered as text, never as markup. Pure: values, labels, links and ids in, components out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import dash_bootstrap_components as dbc
from dash import dcc, html

from components.format import num, signed
from components.layout import empty_state
from components.theme import sign_style

# How a group's learning signal reads (``data.metrics.group.learning_signal``: True, False, None).
SIGNAL_BADGES = {
    True: ("learning signal: rewards differ", "light"),
    False: ("no learning signal: every reward equal", "warning"),
    None: ("a group of one: no spread", "light"),
}
END_BADGES = {"ended": ("ended", "light"), "truncated": ("truncated", "warning")}
# Cards of at least this width side by side: four to a row in a 1440 px window, two on a laptop's half.
CARD_MIN_PX = 300
TEXT_MAX_REM = 14  # a long completion scrolls inside its card: a group of 8 fits one 1440 x 900 screen


def _badge(text: str, colour: str, id_: str | None = None) -> dbc.Badge:
    return dbc.Badge(
        text, color=colour, text_color="dark", className="border me-1", **({"id": id_} if id_ else {})
    )


def completion_card(card: Mapping, href: str | None, advantage_label: str, id_: str) -> dbc.Card:
    """One completion: ``source_line`` (a link to its token page ``href``), reward, advantage (signed
    colours; '–' where there is none), an ended / truncated badge (none where it cannot be told), its
    length and its text, as plain text with its newlines."""
    end = END_BADGES.get(card.get("end") or "")
    adv = card.get("advantage")
    head = html.Div(
        [
            dcc.Link(card["source_line"], href=href, className="font-monospace small me-auto")
            if href
            else html.Code(card["source_line"], className="small me-auto"),
            _badge(*end) if end else None,
        ],
        className="d-flex align-items-center",
    )
    figures = html.Div(
        [
            html.Span(["reward ", html.B(num(card.get("reward")))], className="me-3"),
            html.Span([f"{advantage_label} ", html.B(signed(adv), style=sign_style(adv))], className="me-3"),
            html.Span(f"{num(card.get('length'))} {card.get('length_unit', '')}", className="text-muted"),
        ],
        className="small",
    )
    text = html.Pre(
        card.get("text") or "",
        className="small mb-0 mt-1",
        style={
            "whiteSpace": "pre-wrap",
            "wordBreak": "break-word",
            "maxHeight": f"{TEXT_MAX_REM}rem",
            "overflowY": "auto",
            "fontFamily": "inherit",
        },
    )
    return dbc.Card(dbc.CardBody([head, figures, text], className="p-2"), id=id_, className="h-100")


def group_section(group, hrefs: Sequence[str | None], prefix_id: str) -> html.Div:
    """One group (``data.prompts.group.Group``): a line of its figures and its learning-signal badge (a
    zero-spread group flagged), then its completions' cards side by side. ``hrefs``: each card's token
    page. Ids: ``<prefix_id>-signal``, ``<prefix_id>-card-<i>``."""
    text, colour = SIGNAL_BADGES[group.signal]
    what = f"group {group.group_id}" if group.group_id is not None else "the prompt's responses"
    stats = (
        f"step {group.step} · {what} · {group.n} responses · reward mean {num(group.mean)}, "
        f"std {num(group.std)}, spread {num(group.spread)}"
    )
    more = (
        html.Div(
            f"Showing the first {len(group.cards)} of its {group.total} responses, by reward.",
            className="small text-muted",
        )
        if group.total > len(group.cards)
        else None
    )
    adv = "advantage (recomputed)" if group.recomputed else "advantage"
    cards = [
        completion_card(c, h, adv, f"{prefix_id}-card-{i}")
        for i, (c, h) in enumerate(zip(group.cards, hrefs, strict=True))
    ]
    grid = {
        "display": "grid",
        "gridTemplateColumns": f"repeat(auto-fill, minmax({CARD_MIN_PX}px, 1fr))",
        "gap": "0.5rem",
    }
    return html.Div(
        [
            html.Div(
                [html.Span(stats, className="me-2"), _badge(text, colour, f"{prefix_id}-signal")],
                className="d-flex align-items-center flex-wrap mb-1",
            ),
            more,
            html.Div(cards, style=grid),
        ],
        className="mb-3",
        id=prefix_id,
    )


def group_page(
    groups: Sequence,
    hrefs: Sequence[Sequence[str | None]],
    back_href: str,
    asked: tuple[int, str | None],
    ids: Mapping[str, str],
) -> html.Div:
    """The group view: the way back to the prompt (``back_href``), the prompt (plain text) and each of
    ``groups`` as :func:`group_section` (``hrefs[g][i]``: card i of group g's token page); an empty state
    naming the step and group ``asked`` when there is none. ``ids``: ``back``, ``prompt``, ``groups`` (the
    sections are ``<groups>-<g>``)."""
    back = dcc.Link("‹ this prompt across training", href=back_href, id=ids["back"], className="small")
    if not groups:
        step, gid = asked
        where = f"step {step}" + (f", group {gid!r}" if gid is not None else "")
        return html.Div([back, empty_state("No such group", f"This prompt has no response at {where}.")])
    prompt = groups[0].prompt
    return html.Div(
        [
            back,
            html.H6("Prompt", className="mt-2 mb-1"),
            html.Pre(
                prompt,
                id=ids["prompt"],
                className="small p-2 bg-light border rounded",
                style={
                    "whiteSpace": "pre-wrap",
                    "wordBreak": "break-word",
                    "maxHeight": "10rem",
                    "overflowY": "auto",
                },
            ),
            html.Div(
                [
                    group_section(g, h, f"{ids['groups']}-{k}")
                    for k, (g, h) in enumerate(zip(groups, hrefs, strict=True))
                ],
                id=ids["groups"],
            ),
        ]
    )


def group_links(groups: Sequence[Mapping], hrefs: Sequence[str], links_id: str) -> html.Div | None:
    """The prompt page's links to its groups side by side (``groups``: ``step, group_id, n, signal``,
    latest first; ``hrefs`` theirs), a zero-spread group marked; None for a prompt without groups."""
    if not groups:
        return None
    items = []
    for g, href in zip(groups, hrefs, strict=True):
        name = f"step {g['step']}" + (f" · group {g['group_id']}" if g.get("group_id") is not None else "")
        flat = ", every reward equal" if g.get("signal") is False else ""
        items += [dcc.Link(f"{name} ({g['n']} responses{flat})", href=href, className="me-3 text-nowrap")]
    return html.Div(
        [html.Span("Its groups side by side: ", className="text-muted me-1"), *items],
        className="small mb-2 d-flex flex-wrap",
        id=links_id,
    )
