"""The reward page's parts around its figures: its cards in order, the selected step's key figures. Pure:
values, labels and ids in, components out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import dash_bootstrap_components as dbc
from dash import dcc, html

from components import figures
from components.format import value
from components.layout import card, graph, stats_bar

NO_DATA = "No data for this run yet."
# A page scrolled to its top once ``href`` is set, as after following a link (Dash keeps the position).
SCROLL_TOP_JS = 'function (href) { if (href) { window.scrollTo({top: 0, left: 0, behavior: "instant"}); } }'


def panel_outputs(panels: Sequence, step: int | None, pick: bool = False) -> tuple:
    """The figures of ``panels`` (``data.curves.Panel``s, see :func:`components.figures.panel_figure`) with
    ``step`` marked, then their titles, then their notes: a callback's outputs in that order."""
    return (
        *(figures.panel_figure(p, step, pick=pick) for p in panels),
        *(p.title for p in panels),
        *(p.note for p in panels),
    )


def step_figures(hists: Sequence, labels: Mapping[str, str]) -> list:
    """The figures of one step's histograms (``data.curves.StepHistogram``; see
    :func:`components.figures.step_histogram_figure`), ``labels`` by kind and ``ref_reward``."""
    return [figures.step_histogram_figure(h, labels[h.kind], labels["ref_reward"]) for h in hists]


def step_view(hists: Sequence, labels: Mapping[str, str], stats, kl_href: str | None) -> tuple:
    """The selected step's outputs: :func:`step_figures`, their titles, their notes, then the step's key
    figures (:func:`step_stats` of ``stats``)."""
    return (
        *step_figures(hists, labels),
        *(h.title for h in hists),
        *(h.note for h in hists),
        step_stats(stats, kl_href),
    )


def graph_style(panel, height: int = 300) -> dict:
    """The style of ``panel``'s graph: its ``height``, or hidden for a panel that can never have a curve in
    this run (``panel.absent``: the critic's without values, whose note then says so in one line)."""
    return {"display": "none"} if getattr(panel, "absent", False) else {"height": f"{height}px"}


def no_data(n_figures: int, n_texts: int, height: int = 300) -> tuple:
    """``n_figures`` empty-state figures of a run with nothing to show yet, then ``n_texts`` empty texts."""
    return *(figures.empty_figure(NO_DATA, height),) * n_figures, *("",) * n_texts


def control_move(trigger, clicks: Sequence, pickable: Sequence[str], moves: Mapping) -> tuple | None:
    """What a control of the reward page did: ``(move, picked step)`` for ``RewardView.after``; ``moves``
    maps a control's id to its move (prev / next / slider), ``pickable`` are the figures whose click picks
    a step (the curves, then the heatmap, last: ``clicks`` in that order). None for a click on a heatmap
    column of a run of steps (the zoom's, not a step's). A heatmap cell with responses opens them (the
    drill's), so it moves nothing; an empty one picks its step."""
    heatmap = pickable[-1]
    if trigger == heatmap and figures.clicked_span(clicks[-1]):
        return None
    pick = trigger in pickable[:-1] or (trigger == heatmap and not figures.cell_has_responses(clicks[-1]))
    picked = figures.clicked_step(clicks[list(pickable).index(trigger)]) if pick else None
    return moves.get(trigger, "pick" if pick else "other"), picked


def clicked_bin(click, edges: Sequence[float], discrete: bool) -> tuple[int, int] | None:
    """``(step, bin index)`` of a click on a heatmap cell with responses drawn on ``edges``; None for an
    empty cell or one of bins that have changed since it was drawn (a growing run)."""
    cell, labels = figures.clicked_cell(click), figures.bin_labels(edges, discrete)
    if cell is None or cell.count == 0 or cell.label not in labels:
        return None
    return cell.step, labels.index(cell.label)


def heatmap(cols, label: str, step: int | None, height: int = 340):
    """The steps x reward-bins heatmap of ``cols`` (``data.curves.heatmap_columns``: one column per step,
    or per run of steps when ``k > 1``; ``window`` the steps drawn) with ``step`` marked."""
    return figures.heatmap_figure(
        cols.x, cols.edges, cols.share, cols.count, label=label, selected_step=step,
        discrete=cols.discrete, height=height, spans=(cols.first, cols.last) if cols.k > 1 else None,
        x_range=None if cols.window is None else (cols.first[0] - 0.5, cols.last[-1] + 0.5),
    )  # fmt: skip


def step_stats(items: Sequence[tuple[str, object, str]], kl_href: str | None = None) -> list[html.Div]:
    """The selected step's key figures in a line: ``(name, value, kind)``; kind ``share`` is a percentage
    with one decimal, ``warn`` a text shown as a warning (a partial step), ``kl_top`` the response with the
    step's largest KL (red when flagged; ``kl_href`` opens the step's responses sorted by KL), others as
    :func:`components.format.value` formats them."""
    out = []
    for name, v, kind in items:
        if kind == "kl_top":  # data.curves.KlTop: said in words, with the step's responses by KL a click away
            out.append(
                html.Div(
                    [html.Span(name, className="text-muted small me-1"), html.Span(v.text(), id="reward-kl-top"),
                     dcc.Link("open the step by KL", href=kl_href, className="small ms-2") if kl_href else None],
                    className="me-4" + (" text-danger" if v.flagged else ""),
                )
            )  # fmt: skip
            continue
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


def page(
    ids: Mapping,
    head: Sequence,
    controls,
    heatmap_title: str,
    q: str | None,
    trainer,
) -> html.Div:
    """The reward page below its title: ``head`` (the stores, title and notices the page fills in), the
    ``controls``, the 2 x 2 curves and below them the reward-hacking aids (degeneration curves; the search's
    share of matches, with its box holding ``q``), the step's key figures and histograms, the steps x
    reward heatmap and the ``trainer`` card.

    ``ids``: ``curve`` / ``curve_title`` / ``curve_note`` (by curve key), ``hist`` / ``hist_title`` /
    ``hist_note`` (by histogram kind), ``stats``, ``heatmap`` (its ``heatmap_note`` and ``heatmap_all``, the
    link back to all steps), ``signal`` / ``signal_title`` /
    ``signal_note`` (by ``degeneration`` and ``search``) and ``q``.
    """

    def panel(kind, key, height=300, extra=()):
        figure = graph(ids[kind][key], height)
        return card(ids[f"{kind}_title"][key], "", [*extra, figure], ids[f"{kind}_note"][key])

    def row(kind, extras=None):
        return dbc.Row(
            [
                dbc.Col(panel(kind, k, extra=(extras or {}).get(k, ())), lg=6, className="mb-3")
                for k in ids[kind]
            ],
            className="g-3",
        )

    search_box = dbc.Input(
        id=ids["q"],
        type="text",
        value=q or "",
        debounce=True,
        size="sm",
        placeholder="search prompt and response: a regular expression, e.g. (?i)as an ai",
        className="mb-1",
    )
    # A long run's heatmap draws runs of steps; a click on one draws the steps around it, and this link
    # goes back to all of them (the heatmap callback shows it only then).
    show_all = dbc.Button(
        "Show all steps", id=ids["heatmap_all"], color="link", size="sm", className="p-0 mb-1",
        style={"display": "none"},
    )  # fmt: skip
    heatmap = dbc.Col(
        # A note without a margin of its own: empty (one column per step), the card looks as before.
        card(
            "reward-heatmap-title",
            heatmap_title,
            [
                html.Div(id=ids["heatmap_note"], className="text-muted small"),
                show_all,
                graph(ids["heatmap"], 340),
            ],
        ),
        className="mb-3",
    )
    return html.Div(
        [
            *head,
            controls,
            row("curve"),
            row("signal", {"search": (search_box,)}),
            stats_bar(ids["stats"]),
            row("hist"),
            dbc.Row(heatmap, className="g-3"),
            trainer,
        ]
    )
