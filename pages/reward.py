"""Reward page (``/reward?run=R&step=S&band=p25-p75&zero=1``): is the run healthy?

Curves over steps (reward with a spread band and the reference reward, KL, response length, win rate),
the selected step's reward and reward-gain histograms on run-level bins, a steps x reward-bins heatmap and
the reward-hacking aids (repetition, truncation, the share matching a search ``q``, per step). A curve point
selects its step; a bar, a heatmap cell or a point of the reward-hacking aids opens its responses.
"""

from dataclasses import replace

import dash
from dash import Input, Output, State, callback, clientside_callback, ctx, dcc, no_update
from dash.exceptions import PreventUpdate

from components import compare_views as cv
from components import figures
from components import reward_page as rp
from components.controls import reward_controls, step_updates
from components.layout import left_page, no_runs_state, notices, page_title, page_url, url_prefix
from components.live import shown_store
from components.theme import colour
from data import curve_panels, curves, hacking, heatmaps, histograms, live, thinning
from data.compare import trainer
from data.metrics import label
from data.queries import bar_interval
from data.service import RunContext, board, open_run
from data.views import links, paths
from data.views.codec import first, parse_search
from data.views.reward import RewardView, heatmap_note, heatmap_window

dash.register_page(__name__, path=paths.REWARD, name="Reward", title="Reward · RL Logging Board", order=1)

URL = page_url(paths.REWARD)  # the page's own Location: the shell listens to it
RUN, NOTICES, HEADER, SELECTED = "reward-run", "reward-notices", "reward-header", "reward-selected"
CONTROL_IDS = {
    k: f"reward-{k.replace('_', '-')}" for k in ("step", "step_text", "prev", "next", "band", "zero")
}
STEP, STEP_TEXT, PREV, NEXT, BAND, ZERO = CONTROL_IDS.values()
MOVES = {PREV: "prev", NEXT: "next", STEP: "slider"}  # what each step control does to the view
CURVE_KEYS = ("reward", "kl", "length", "win")
CURVE = {k: f"reward-curve-{k}" for k in CURVE_KEYS}
HIST = {"reward": "reward-hist", "reward_gain": "reward-gain-hist"}
HIST_LABELS = {k: label(k) for k in (*HIST, "ref_reward")}
SIGNAL = {k: f"reward-signal-{k}" for k in ("degeneration", "search", "critic")}
HEATMAP, Q = "reward-heatmap", "reward-q"
HEATMAP_NOTE, HEATMAP_ALL = "reward-heatmap-note", "reward-heatmap-all"
CURVES_DRAWN, HEATMAP_DRAWN = "reward-curves-drawn", "reward-heatmap-drawn"
IDS = {
    "curve": CURVE, "hist": HIST, "signal": SIGNAL, "stats": "reward-step-stats", "heatmap": HEATMAP, "q": Q,
    "heatmap_note": HEATMAP_NOTE, "heatmap_all": HEATMAP_ALL,
    **{f"{kind}_{part}": {k: f"{v}-{part}" for k, v in ids.items()}
       for kind, ids in (("curve", CURVE), ("hist", HIST), ("signal", SIGNAL)) for part in ("title", "note")},
}  # fmt: skip
# Where a click on a bar, a heatmap cell or a reward-hacking point goes: the responses page, through this
# Location (callback-nav makes Dash's page router follow it, as after a dcc.Link).
NAV = "reward-nav"
TRAINER = ("reward-trainer", "reward-trainer-notes", "reward-trainer-fig", "reward-agreement")
STORE_WAIT_SECONDS = 10.0
HIDDEN = {"display": "none"}


def _store(run: str | None):
    return open_run(run, wait=STORE_WAIT_SECONDS).store


def _decode(search_or_query) -> tuple[RewardView, list[str], RunContext]:
    """The view of a query string (or ``layout``'s query), its notices and the run's context."""
    query = parse_search(search_or_query) if isinstance(search_or_query, str | None) else search_or_query
    ctx = open_run(first(query, "run"), paths.REWARD, STORE_WAIT_SECONDS)
    return *RewardView.from_query(query, ctx), ctx


def layout(**query):
    runs = list(board().runs())
    if not runs:
        return no_runs_state(board().root, board().scan().trouble)
    view, msgs, ctx = _decode(query)
    store, steps = ctx.store, ctx.step_list
    msgs += board().failure_notices(view.run) if store is not None else [board().reading_text(view.run)]
    step = view.shown_step(steps)
    head = [
        *(dcc.Location(id=i, refresh=r) for i, r in ((URL, False), (NAV, "callback-nav"))),
        *(dcc.Store(id=i, data=d) for i, d in ((RUN, view.run), (SELECTED, step), (CURVES_DRAWN, None))),
        dcc.Store(id=HEATMAP_DRAWN),
        shown_store("reward", live.shown(view.run, store)),
        page_title("Reward", view.run, HEADER),
        notices(msgs, NOTICES),
    ]
    controls = reward_controls(step, steps, view.band, curve_panels.BANDS, view.zero, CONTROL_IDS)
    # Only the picker's keys: the chart and the agreement checks are the _trainer callback's.
    keys, key = trainer.run_keys(board().run_dir(view.run), view.trainer) if store else ([], None)
    return rp.page(IDS, head, controls, histograms.HEATMAP_TITLE, view.q, cv.trainer_card(TRAINER, keys, key))


# ---- callbacks -------------------------------------------------------------------------------------------


@callback(
    *(Output(i, p) for i, p in ((URL, "search"), (RUN, "data"), (HEADER, "children"), (NOTICES, "children"),
                                (SELECTED, "data"), (STEP_TEXT, "children"), (STEP, "value"), (STEP, "max"),
                                (STEP, "marks"), (STEP, "disabled"), (BAND, "value"), (ZERO, "value"))),
    *(Input(i, p) for i, p in ((URL, "search"), (STEP, "value"), (BAND, "value"), (ZERO, "value"),
                               (PREV, "n_clicks"), (NEXT, "n_clicks"))),
    *(Input(i, "clickData") for i in (*CURVE.values(), HEATMAP)),
    State(RUN, "data"), State(SELECTED, "data"), State(URL, "pathname"),
)  # fmt: skip
def _sync(search, index, band, zero, _prev, _next, *rest):
    """URL <-> controls. A URL change (page load, Back/Forward) sets the controls; a control change (slider,
    prev/next, band, switch, a click on a curve or the heatmap) writes the URL. Unchanged -> no_update."""
    *clicks, run, selected, pathname = rest
    if left_page(pathname, paths.REWARD):
        raise PreventUpdate
    trigger = ctx.triggered_id
    view, msgs, run_ctx = _decode(search)
    steps = run_ctx.step_list
    if trigger is None or trigger == URL:
        new_view, url_out, notes = view, no_update, notices(msgs + board().failure_notices(view.run)).children
    else:
        if (moved := rp.control_move(trigger, clicks, (*CURVE.values(), HEATMAP), MOVES)) is None:
            raise PreventUpdate  # a column of a run of steps: _heatmap_zoom draws its steps
        move, picked = moved
        new_view = view.after(steps, move, index=index, picked=picked, band=band, zero=zero)
        url_out = no_update if new_view == view else new_view.to_query()
        notes = no_update if new_view == view else []
    same_run = new_view.run == run
    return (url_out, no_update if same_run else new_view.run, no_update if same_run else (new_view.run or ""),
            notes, *step_updates(new_view.shown_step(steps), steps, index, selected, same_run),
            no_update if new_view.band == band else new_view.band,
            no_update if new_view.zero == bool(zero) else new_view.zero)  # fmt: skip


@callback(*(Output(CURVE[k], "figure") for k in CURVE_KEYS),
          *(Output(IDS[f"curve_{part}"][k], "children") for part in ("title", "note") for k in CURVE_KEYS),
          Output(CURVES_DRAWN, "data"), Input(RUN, "data"), Input(SELECTED, "data"), Input(BAND, "value"),
          Input(ZERO, "value"), State(CURVES_DRAWN, "data"))  # fmt: skip
def _curves(run, step, band, zero, drawn):
    """The four curve panels; when only the step moved, just the selected-step marker is patched (a run of
    more than thinning.MAX_POINTS steps, whose curves are thinned to the selected step too, is drawn again)."""
    key = [run, band, bool(zero)]
    if drawn == key:
        return *([figures.marker_patch(step)] * 4), *((no_update,) * 8), no_update
    run_ctx = open_run(run, wait=STORE_WAIT_SECONDS)
    store, steps = run_ctx.store, run_ctx.step_list
    if store is None:
        return *rp.no_data(4, 8), None
    if len(steps) > thinning.MAX_POINTS:
        key = [*key, step]
    return *rp.panel_outputs(curves.run_panels_by_key(store, band, zero, step, CURVE_KEYS), step), key


@callback(*(Output(HIST[k], "figure") for k in HIST),
          *(Output(IDS[f"hist_{part}"][k], "children") for part in ("title", "note") for k in HIST),
          Output(IDS["stats"], "children"), Input(RUN, "data"), Input(SELECTED, "data"))  # fmt: skip
def _step_view(run, step):
    """The selected step's histograms (on the run's bins) and key figures."""
    store = _store(run)
    if store is None or step is None:
        return *rp.no_data(2, 4), []
    hists, stats = curves.histogram_panels(store, step), curves.step_stats(store, step)
    return rp.step_view(hists, HIST_LABELS, stats, links.kl_sorted(run, step, url_prefix()))


CLICKABLE = (*HIST.values(), HEATMAP, *SIGNAL.values())


@callback(Output(NAV, "href"), *(Input(i, "clickData") for i in CLICKABLE), State(RUN, "data"),
          State(SELECTED, "data"), State(URL, "search"), prevent_initial_call=True)  # fmt: skip
def _drill(*args):
    """A click on a bar (the histogram's or the reference's), a heatmap cell or a point of the reward-hacking
    aids opens the responses page with exactly its responses (run, step and the bar's interval; the curve's
    filter). A bar or cell without responses, or a heatmap drawn on bins that have changed since (a growing
    run), does nothing here."""
    *clicks, run, step, search = args
    click = dict(zip(CLICKABLE, clicks, strict=True))[ctx.triggered_id]
    store, prefix = _store(run), url_prefix()
    if store is None:
        return no_update
    if ctx.triggered_id in SIGNAL.values():
        point, q = figures.clicked_point(click), _decode(search)[0].q
        return (point and links.signal_responses(run, point[1], point[0], q, prefix)) or no_update
    if ctx.triggered_id == HEATMAP:
        bins = curves.run_bins(store, "reward")
        if (cell := rp.clicked_bin(click, bins.edges, bins.discrete)) is None:
            return no_update
        lo, hi = bar_interval(list(bins.edges), cell[1])
        return links.bar_responses(run, cell[0], "reward", lo, hi, prefix)
    kind = next(k for k, v in HIST.items() if v == ctx.triggered_id)
    bar = figures.clicked_bar(click)
    if bar is None or bar.count == 0 or step is None:
        return no_update
    key = "ref" if bar.trace == 1 else histograms.HISTOGRAMS[kind][0]
    return links.bar_responses(run, step, key, bar.lo, bar.hi, prefix)


@callback(*(Output(SIGNAL[k], "figure") for k in SIGNAL),
          *(Output(IDS[f"signal_{part}"][k], "children") for part in ("title", "note") for k in SIGNAL),
          Output(SIGNAL["critic"], "style"), Input(RUN, "data"), Input(SELECTED, "data"), Input(URL, "search"))  # fmt: skip
def _signals(run, step, search):
    """The reward-hacking aids and the critic's health per step (data.hacking.panels)."""
    run_ctx = open_run(run, wait=STORE_WAIT_SECONDS)
    store, steps = run_ctx.store, run_ctx.step_list
    if store is None:
        return *rp.no_data(3, 6), no_update
    q = _decode(search)[0].q
    shown, critic = hacking.shown_panels(store, board().settings, q, board().run_dir(run), steps, step)
    return *rp.panel_outputs(shown, step, pick=True), rp.graph_style(critic)  # hidden without a curve


@callback(Output(URL, "search", allow_duplicate=True), Output(Q, "value"), Input(Q, "value"),
          Input(URL, "search"), State(URL, "pathname"), prevent_initial_call=True)  # fmt: skip
def _search(value, search, pathname):
    """The search box writes q= into the URL; a URL (Back / Forward) sets the box."""
    if left_page(pathname, paths.REWARD):
        raise PreventUpdate
    view = _decode(search)[0]
    if ctx.triggered_id == URL:
        return no_update, no_update if (view.q or "") == (value or "") else (view.q or "")
    new = replace(view, q=value or None)
    return (no_update if new == view else new.to_query()), no_update


# The responses open at the top of the page, as after following a link (Dash keeps the scroll position).
clientside_callback(rp.SCROLL_TOP_JS, Input(NAV, "href"), prevent_initial_call=True)


@callback(Output(HEATMAP, "figure"), Output(HEATMAP_DRAWN, "data"), Output(HEATMAP_NOTE, "children"),
          Output(HEATMAP_ALL, "style"), Input(RUN, "data"), Input(SELECTED, "data"), Input(URL, "search"),
          State(HEATMAP_DRAWN, "data"), State(URL, "pathname"))  # fmt: skip
def _heatmap(run, step, search, drawn, pathname):
    """The steps x reward-bins heatmap of the URL's steps (``heatmap=``, else the whole run), in columns of
    runs of steps beyond thinning.MAX_POINTS steps; when only the step moved, just its marker is patched."""
    if left_page(pathname, paths.REWARD):
        # The URL moved to another page while this one is taken down: a patch of its figure, gone or
        # going, fails in the browser ("Cannot patch undefined").
        raise PreventUpdate
    window = heatmap_window(parse_search(search)) if run is not None else None
    key = [run, list(window) if window else None]
    if ctx.triggered_id == URL and drawn == key:
        raise PreventUpdate  # another part of the URL moved (the step moves through SELECTED)
    patch = drawn == key and run is not None
    if patch and window is None:
        return figures.marker_patch(step), no_update, no_update, no_update
    store = _store(run)
    if store is None:
        return *rp.no_data(1, 0, 340), None, "", HIDDEN
    cols = curves.reward_heatmap_columns(store, window)
    note = heatmap_note(cols, step)
    if patch:  # a window: its note says whether the selected step is in it
        return figures.marker_patch(step), no_update, note, no_update
    return rp.heatmap(cols, label("reward"), step), key, note, HIDDEN if cols.window is None else {}


@callback(Output(URL, "search", allow_duplicate=True), Input(HEATMAP, "clickData"), Input(HEATMAP_ALL, "n_clicks"),
          State(URL, "search"), State(URL, "pathname"), prevent_initial_call=True)  # fmt: skip
def _heatmap_zoom(click, _all, search, pathname):
    """A click on a column of a run of steps draws the thinning.MAX_POINTS steps around it, one per column
    (``heatmap=first-last`` in the URL); "Show all steps" draws the whole run again."""
    if left_page(pathname, paths.REWARD):
        raise PreventUpdate
    view, _, run_ctx = _decode(search)
    if ctx.triggered_id == HEATMAP_ALL:
        window = None
    else:
        span = figures.clicked_span(click)
        if span is None or run_ctx.store is None:
            raise PreventUpdate
        window = heatmaps.zoom_window(run_ctx.step_list, span.first, span.last)
    new = replace(view, heatmap=window)
    return no_update if new == view else new.to_query()


@callback(Output(URL, "search", allow_duplicate=True), Input(TRAINER[0], "value"), State(URL, "search"),
          State(URL, "pathname"), prevent_initial_call=True)  # fmt: skip
def _trainer_key(key, search, pathname):
    """The trainer key picked goes into the URL (the default one is left out)."""
    if left_page(pathname, paths.REWARD):
        raise PreventUpdate
    view = _decode(search)[0]
    default = trainer.run_keys(board().run_dir(view.run), None)[1] if view.run else None
    new = replace(view, trainer=None if key == default else key)
    return no_update if new == view else new.to_query()


@callback(*(Output(TRAINER[i], p) for i, p in ((2, "figure"), (1, "children"), (3, "children"))),
          Input(RUN, "data"), Input(TRAINER[0], "value"))  # fmt: skip
def _trainer(run, key):
    """The run's trainer scalar over steps, what its logs leave out, and its agreement checks."""
    store = _store(run)
    if store is None:
        return *rp.no_data(1, 0, 280), None, None
    # The step axis from the steps summary alone: not run_frame, which reads every response of the run.
    view = trainer.run_trainer_view(run, store, board().run_dir(run), curves.summary_columns(store, ()), key)
    return cv.run_trainer_outputs(view, run, colour("reward"), TRAINER[3])
