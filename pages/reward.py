"""Reward page (``/reward?run=R&step=S&band=p25-p75&zero=1``): is the run healthy?

Curves over steps (reward with a spread band and the reference reward, KL to the reference, response
length, win rate against the reference), then the selected step's reward and reward-gain histograms on
run-level bins and a steps x reward-bins heatmap. Clicking a curve point selects its step; clicking a bar
(reward, reference reward, gain) or a heatmap cell opens the responses behind it.
"""

from dataclasses import replace

import dash
import dash_bootstrap_components as dbc
from dash import Input, Output, Patch, State, callback, clientside_callback, ctx, dcc, html, no_update
from dash.exceptions import PreventUpdate

from components import compare_views as cv
from components import figures
from components import reward_page as rp
from components.controls import reward_controls, slider_props, step_index, step_text
from components.layout import (
    card,
    graph,
    left_page,
    no_runs_state,
    notices,
    page_title,
    page_url,
    stats_bar,
    url_prefix,
)
from components.live import shown_store
from components.theme import colour
from data import curves, live
from data.compare import trainer
from data.compare.curves import run_frame
from data.metrics import label
from data.queries import bar_interval
from data.service import board, committed_store
from data.trainer_logs import trainer_scalars
from data.views import links, paths
from data.views.codec import parse_search
from data.views.reward import RewardView

dash.register_page(__name__, path=paths.REWARD, name="Reward", title="Reward · RL Logging Board", order=1)

URL = page_url(paths.REWARD)  # the page's own Location: the shell listens to it
RUN = "reward-run"
NOTICES = "reward-notices"
HEADER = "reward-header"
STEP = "reward-step"
STEP_TEXT = "reward-step-text"
SELECTED = "reward-selected"
PREV = "reward-prev"
NEXT = "reward-next"
BAND = "reward-band"
ZERO = "reward-zero"
CURVE_KEYS = ("reward", "kl", "length", "win")
CURVE = {k: f"reward-curve-{k}" for k in CURVE_KEYS}
CURVE_TITLE = {k: f"reward-curve-{k}-title" for k in CURVE_KEYS}
CURVE_NOTE = {k: f"reward-curve-{k}-note" for k in CURVE_KEYS}
CURVES_DRAWN = "reward-curves-drawn"
STEP_STATS = "reward-step-stats"
HIST = {"reward": "reward-hist", "reward_gain": "reward-gain-hist"}
HIST_TITLE = {"reward": "reward-hist-title", "reward_gain": "reward-gain-hist-title"}
HIST_NOTE = {"reward": "reward-hist-note", "reward_gain": "reward-gain-hist-note"}
HEATMAP = "reward-heatmap"
# Where a click on a bar or a heatmap cell goes: the responses page, through this Location (callback-nav
# makes Dash's page router follow it, as after a dcc.Link).
NAV = "reward-nav"
HEATMAP_DRAWN = "reward-heatmap-drawn"
TRAINER = ("reward-trainer", "reward-trainer-notes", "reward-trainer-fig", "reward-agreement")

CONTROL_IDS = {"step": STEP, "step_text": STEP_TEXT, "prev": PREV, "next": NEXT, "band": BAND, "zero": ZERO}

STORE_WAIT_SECONDS = 10.0


def _store(run: str | None):
    return committed_store(run, STORE_WAIT_SECONDS)


def _steps_of(run: str) -> list[int] | None:
    store = _store(run)
    return None if store is None else curves.step_list(store)


def _decode(search_or_query) -> tuple[RewardView, list[str]]:
    query = parse_search(search_or_query) if isinstance(search_or_query, str | None) else search_or_query
    return RewardView.from_query(query, list(board().runs()), _steps_of, board().scan().unreadable)


def layout(**query):
    runs = list(board().runs())
    if not runs:
        return no_runs_state(board().root, board().scan().trouble)
    view, msgs = RewardView.from_query(query, runs, _steps_of, board().scan().unreadable)
    store = _store(view.run)
    steps = curves.step_list(store) if store is not None else []
    if store is None:
        msgs.append(board().reading_text(view.run))
    else:
        msgs += board().failure_notices(view.run)
    curve_cards = [
        dbc.Col(card(CURVE_TITLE[k], "", [graph(CURVE[k])], CURVE_NOTE[k]), lg=6, className="mb-3")
        for k in CURVE_KEYS
    ]
    hist_cards = [
        dbc.Col(card(HIST_TITLE[k], "", [graph(HIST[k])], HIST_NOTE[k]), lg=6, className="mb-3") for k in HIST
    ]
    step = view.shown_step(steps)
    return html.Div(
        [
            dcc.Location(id=URL, refresh=False),
            dcc.Location(id=NAV, refresh="callback-nav"),
            dcc.Store(id=RUN, data=view.run),
            dcc.Store(id=SELECTED, data=step),
            dcc.Store(id=CURVES_DRAWN),
            shown_store("reward", live.shown(view.run, store)),
            dcc.Store(id=HEATMAP_DRAWN),
            page_title("Reward", view.run, HEADER),
            notices(msgs, NOTICES),
            reward_controls(step, steps, view.band, curves.BANDS, view.zero, CONTROL_IDS),
            dbc.Row(curve_cards, className="g-3"),
            stats_bar(STEP_STATS),
            dbc.Row(hist_cards, className="g-3"),
            dbc.Row(
                dbc.Col(
                    card("reward-heatmap-title", curves.HEATMAP_TITLE, [graph(HEATMAP, 340)]),
                    className="mb-3",
                ),
                className="g-3",
            ),
            _trainer_card(view, store),
        ]
    )


def _trainer_view(run, store, key):
    return trainer.run_trainer_view(run, store, board().run_dir(run), run_frame(store), key)


def _trainer_card(view: RewardView, store):
    tv = _trainer_view(view.run, store, view.trainer) if store is not None else None
    return cv.trainer_card(TRAINER, tv.keys if tv else [], tv.key if tv else None)


# ---- callbacks -------------------------------------------------------------------------------------------


@callback(
    Output(URL, "search"),
    Output(RUN, "data"),
    Output(HEADER, "children"),
    Output(NOTICES, "children"),
    Output(SELECTED, "data"),
    Output(STEP_TEXT, "children"),
    Output(STEP, "value"),
    Output(STEP, "max"),
    Output(STEP, "marks"),
    Output(STEP, "disabled"),
    Output(BAND, "value"),
    Output(ZERO, "value"),
    Input(URL, "search"),
    Input(STEP, "value"),
    Input(BAND, "value"),
    Input(ZERO, "value"),
    Input(PREV, "n_clicks"),
    Input(NEXT, "n_clicks"),
    *(Input(CURVE[k], "clickData") for k in CURVE_KEYS),
    Input(HEATMAP, "clickData"),
    State(RUN, "data"),
    State(SELECTED, "data"),
    State(URL, "pathname"),
)
def _sync(search, index, band, zero, _prev, _next, *rest):
    """URL <-> controls. A URL change (page load, Back/Forward) sets the controls; a control change (slider,
    prev/next, band, switch, a click on a curve or the heatmap) writes the URL. Unchanged -> no_update."""
    *clicks, run, selected, pathname = rest
    if left_page(pathname, paths.REWARD):
        raise PreventUpdate
    trigger = ctx.triggered_id
    view, msgs = _decode(search)
    store = _store(view.run)
    steps = curves.step_list(store) if store is not None else []
    if trigger is None or trigger == URL:
        new_view, url_out, notes = view, no_update, notices(msgs + board().failure_notices(view.run)).children
    else:
        new_step = view.shown_step(steps)
        if trigger in (PREV, NEXT):
            new_step = view.moved(steps, 1 if trigger == NEXT else -1)
        elif trigger == STEP:
            new_step = view.at(steps, index)
        elif trigger in CURVE.values() or (trigger == HEATMAP and not figures.cell_has_responses(clicks[-1])):
            # A heatmap cell with responses opens them (see _drill); an empty one selects its step.
            new_step = view.picked(
                steps, figures.clicked_step(clicks[[*CURVE.values(), HEATMAP].index(trigger)])
            )
        new_view = view.with_step(steps, new_step, band=band or view.band, zero=bool(zero))
        url_out = no_update if new_view == view else new_view.to_query()
        notes = no_update if new_view == view else []
    shown = new_view.shown_step(steps)
    same_run = new_view.run == run
    slider = slider_props(steps)
    return (
        url_out,
        no_update if same_run else new_view.run,
        no_update if same_run else (new_view.run or ""),
        notes,
        no_update if shown == selected else shown,
        no_update if shown == selected and same_run else step_text(shown, steps),
        no_update if step_index(shown, steps) == index else step_index(shown, steps),
        *((no_update,) * 3 if same_run else (slider["max"], slider["marks"], slider["disabled"])),
        no_update if new_view.band == band else new_view.band,
        no_update if new_view.zero == bool(zero) else new_view.zero,
    )


@callback(
    *(Output(CURVE[k], "figure") for k in CURVE_KEYS),
    *(Output(CURVE_TITLE[k], "children") for k in CURVE_KEYS),
    *(Output(CURVE_NOTE[k], "children") for k in CURVE_KEYS),
    Output(CURVES_DRAWN, "data"),
    Input(RUN, "data"),
    Input(SELECTED, "data"),
    Input(BAND, "value"),
    Input(ZERO, "value"),
    State(CURVES_DRAWN, "data"),
)
def _curves(run, step, band, zero, drawn):
    """The four curve panels; when only the step moved, just the selected-step marker is patched."""
    key = [run, band, bool(zero)]
    if drawn == key:
        patch = Patch()
        patch["layout"]["shapes"] = figures.step_marker(step)
        return *([patch] * 4), *((no_update,) * 8), no_update
    store = _store(run)
    if store is None:
        empty = figures.empty_figure("No data for this run yet.")
        return *([empty] * 4), *("",) * 4, *("",) * 4, None
    panels = {p.key: p for p in curves.run_panels(store, band or curves.DEFAULT_BAND, bool(zero))}
    shown = [panels[k] for k in CURVE_KEYS]
    return (
        *(figures.panel_figure(p, step) for p in shown),
        *(p.title for p in shown),
        *(p.note for p in shown),
        key,
    )


@callback(
    *(Output(HIST[k], "figure") for k in HIST),
    *(Output(HIST_TITLE[k], "children") for k in HIST),
    *(Output(HIST_NOTE[k], "children") for k in HIST),
    Output(STEP_STATS, "children"),
    Input(RUN, "data"),
    Input(SELECTED, "data"),
)
def _step_view(run, step):
    """The selected step's histograms (on the run's bins) and key figures."""
    store = _store(run)
    if store is None or step is None:
        empty = figures.empty_figure("No data for this run yet.")
        return empty, empty, "", "", "", "", []
    hists = curves.histogram_panels(store, step)
    return (
        *(figures.step_histogram_figure(h, label(h.kind), label("ref_reward")) for h in hists),
        *(h.title for h in hists),
        *(h.note for h in hists),
        rp.step_stats(curves.step_stats(store, step)),
    )


@callback(
    Output(NAV, "href"),
    *(Input(HIST[k], "clickData") for k in HIST),
    Input(HEATMAP, "clickData"),
    State(RUN, "data"),
    State(SELECTED, "data"),
    prevent_initial_call=True,
)
def _drill(*args):
    """A click on a bar (the histogram's or the reference's) or a heatmap cell opens the responses page
    with exactly its responses: run, step and the bar's interval. A bar or cell without responses, or a
    heatmap drawn on bins that have changed since (a growing run), does nothing here."""
    *clicks, run, step = args
    trigger = ctx.triggered_id
    store = _store(run)
    if store is None:
        return no_update
    if trigger == HEATMAP:
        cell = figures.clicked_cell(clicks[-1])
        bins = curves.run_bins(store, "reward")
        labels = figures.bin_labels(bins.edges, bins.discrete)
        if cell is None or cell.count == 0 or cell.label not in labels:
            return no_update
        lo, hi = bar_interval(list(bins.edges), labels.index(cell.label))
        return links.bar_responses(run, cell.step, "reward", lo, hi, url_prefix())
    kind = next((k for k, v in HIST.items() if v == trigger), None)
    bar = figures.clicked_bar(clicks[list(HIST).index(kind)]) if kind else None
    if bar is None or bar.count == 0 or step is None:
        return no_update
    prefix = "ref" if bar.trace == 1 else curves.HISTOGRAMS[kind][0]
    return links.bar_responses(run, step, prefix, bar.lo, bar.hi, url_prefix())


# The responses open at the top of the page, as after following a link (Dash keeps the scroll position).
clientside_callback(
    "function (href) { if (href) { window.scrollTo(0, 0); } }",
    Input(NAV, "href"),
    prevent_initial_call=True,
)


@callback(
    Output(HEATMAP, "figure"),
    Output(HEATMAP_DRAWN, "data"),
    Input(RUN, "data"),
    Input(SELECTED, "data"),
    State(HEATMAP_DRAWN, "data"),
)
def _heatmap(run, step, drawn):
    """The steps x reward-bins heatmap; when only the step moved, just its marker is patched."""
    if drawn == run and run is not None:
        patch = Patch()
        patch["layout"]["shapes"] = figures.step_marker(step)
        return patch, no_update
    store = _store(run)
    if store is None:
        return figures.empty_figure("No data for this run yet.", 340), None
    hm = curves.run_heatmap(store, "reward")
    return figures.heatmap_figure(
        *hm.arrays(), label=label("reward"), selected_step=step, discrete=hm.discrete, height=340
    ), run


@callback(Output(URL, "search", allow_duplicate=True), Input(TRAINER[0], "value"), State(URL, "search"),
          State(URL, "pathname"), prevent_initial_call=True)  # fmt: skip
def _trainer_key(key, search, pathname):
    """The trainer key picked goes into the URL (the default one is left out)."""
    if left_page(pathname, paths.REWARD):
        raise PreventUpdate
    view, _ = _decode(search)
    keys = trainer_scalars(board().run_dir(view.run)).keys() if view.run else []
    new = replace(view, trainer=None if key == trainer.default_key(keys) else key)
    return no_update if new == view else new.to_query()


@callback(*(Output(TRAINER[i], p) for i, p in ((2, "figure"), (1, "children"), (3, "children"))),
          Input(RUN, "data"), Input(TRAINER[0], "value"))  # fmt: skip
def _trainer(run, key):
    """The run's trainer scalar over steps, what its logs leave out, and its agreement checks."""
    store = _store(run)
    if store is None:
        return figures.empty_figure("No data for this run yet.", 280), None, None
    tv = _trainer_view(run, store, key)
    lines = [(ln.run, colour("reward"), ln.frame) for ln in tv.overlay.lines] if tv.overlay else []
    checks = [(run, colour("reward"), [c.as_row() for c in tv.checks])]
    return cv.trainer_outputs(lines, tv.key, "step", False, [n.text for n in tv.notes], checks, TRAINER[3])
