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

from components import figures
from components.format import num, share
from components.layout import no_runs_state, notices, url_prefix
from components.live import shown_store
from components.theme import colour
from data import curves, live
from data.metrics import label
from data.queries import bar_interval
from data.service import UnknownRun, board
from data.views import links, paths
from data.views.codec import parse_search
from data.views.reward import RewardView

dash.register_page(__name__, path=paths.REWARD, name="Reward", title="Reward · RL Logging Board", order=1)

URL = "reward-url"
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

STORE_WAIT_SECONDS = 10.0
# No mode bar: it covers the legends. Dragging zooms and a double click resets, as in any Plotly chart.
GRAPH_CONFIG = {"displayModeBar": False, "responsive": True}


def _store(run: str | None):
    """The run's committed store, or None (no run, unknown run, nothing ingested yet)."""
    if not run:
        return None
    try:
        return board().store(run, wait=STORE_WAIT_SECONDS)
    except UnknownRun:
        return None


def _steps_of(run: str) -> list[int] | None:
    store = _store(run)
    return None if store is None else curves.step_list(store)


def _decode(search_or_query) -> tuple[RewardView, list[str]]:
    query = parse_search(search_or_query) if isinstance(search_or_query, str | None) else search_or_query
    return RewardView.from_query(query, list(board().runs()), _steps_of)


def _slider_props(steps: list[int]) -> dict:
    """max, marks and disabled of the step slider. The slider moves over step *indices* (steps may skip
    numbers, and Dash's slider takes at most 500 marks); about eight marks are labelled with their step."""
    if not steps:
        return {"max": 0, "marks": {}, "disabled": True}
    every = max(1, -(-len(steps) // 8))
    idx = sorted(set(range(0, len(steps), every)) | {len(steps) - 1})
    if len(idx) > 2 and idx[-1] - idx[-2] < every / 2:
        idx.pop(-2)  # keep the last label from overlapping its neighbour
    return {"max": len(steps) - 1, "marks": {i: str(steps[i]) for i in idx}, "disabled": False}


def _step_index(step: int | None, steps: list[int]) -> int:
    return steps.index(step) if step in steps else 0


def _step_text(step: int | None, steps: list[int]) -> str:
    if step is None or step not in steps:
        return "no step"
    return f"step {step} · {steps.index(step) + 1} of {len(steps)}"


# ---- layout ----------------------------------------------------------------------------------------------


def _card(title_id: str, title: str, body: list, note_id: str | None = None, note=None) -> dbc.Card:
    head = dbc.CardHeader(html.Span(title, id=title_id), className="fw-semibold py-2 small")
    content = []
    if note_id:
        content.append(html.Div(note, id=note_id, className="text-muted small mb-1"))
    return dbc.Card([head, dbc.CardBody([*content, *body], className="p-2")], className="h-100 shadow-sm")


def _graph(id_: str, height: int = 300) -> dcc.Loading:
    return dcc.Loading(
        dcc.Graph(
            id=id_,
            figure=figures.empty_figure("Loading…", height),
            config=GRAPH_CONFIG,
            style={"height": f"{height}px"},
        ),
        type="circle",
        delay_show=300,
    )


def _controls(view: RewardView, steps: list[int]) -> dbc.Card:
    slider = _slider_props(steps)
    return dbc.Card(
        dbc.CardBody(
            dbc.Row(
                [
                    dbc.Col(
                        [
                            html.Div(
                                [
                                    dbc.Label("Step", html_for=STEP, className="small text-muted mb-0 me-2"),
                                    html.Span(
                                        _step_text(view.shown_step(steps), steps),
                                        id=STEP_TEXT,
                                        className="badge text-bg-primary",
                                    ),
                                ],
                                className="d-flex align-items-center",
                            ),
                            html.Div(
                                [
                                    dbc.Button(
                                        html.I(className="bi bi-chevron-left"),
                                        id=PREV,
                                        color="light",
                                        size="sm",
                                        title="previous step",
                                        className="me-1",
                                    ),
                                    html.Div(
                                        dcc.Slider(
                                            id=STEP,
                                            min=0,
                                            step=1,
                                            value=_step_index(view.shown_step(steps), steps),
                                            updatemode="mouseup",
                                            allow_direct_input=False,
                                            included=False,
                                            **slider,
                                        ),
                                        className="flex-grow-1",
                                    ),
                                    dbc.Button(
                                        html.I(className="bi bi-chevron-right"),
                                        id=NEXT,
                                        color="light",
                                        size="sm",
                                        title="next step",
                                        className="ms-1",
                                    ),
                                ],
                                className="d-flex align-items-center",
                            ),
                        ],
                        lg=7,
                    ),
                    dbc.Col(
                        [
                            dbc.Label("Spread band", html_for=BAND, className="small text-muted mb-1"),
                            dbc.RadioItems(
                                id=BAND,
                                options=[
                                    {"label": v, "value": k, "input_id": f"{BAND}-{k}"}
                                    for k, v in curves.BANDS.items()
                                ],
                                value=view.band,
                                inline=True,
                                className="small",
                            ),
                        ],
                        lg=3,
                    ),
                    dbc.Col(
                        [
                            dbc.Label("Compare trends", html_for=ZERO, className="small text-muted mb-1"),
                            dbc.Switch(id=ZERO, label="zero shift", value=view.zero, className="small mb-0"),
                        ],
                        lg=2,
                    ),
                ],
                className="g-3 align-items-end",
            ),
            className="py-2",
        ),
        className="mb-3 shadow-sm",
    )


def layout(**query):
    runs = list(board().runs())
    if not runs:
        return no_runs_state(board().root, board().scan().trouble)
    view, msgs = RewardView.from_query(query, runs, _steps_of)
    store = _store(view.run)
    steps = curves.step_list(store) if store is not None else []
    if store is None:
        msgs.append(board().reading_text(view.run))
    else:
        msgs += board().failure_notices(view.run)
    curve_cards = [
        dbc.Col(
            _card(CURVE_TITLE[k], "", [_graph(CURVE[k])], CURVE_NOTE[k]),
            lg=6,
            className="mb-3",
        )
        for k in CURVE_KEYS
    ]
    hist_cards = [
        dbc.Col(
            _card(
                HIST_TITLE[k],
                "",
                [_graph(HIST[k])],
                HIST_NOTE[k],
            ),
            lg=6,
            className="mb-3",
        )
        for k in HIST
    ]
    return html.Div(
        [
            dcc.Location(id=URL, refresh=False),
            dcc.Location(id=NAV, refresh="callback-nav"),
            dcc.Store(id=RUN, data=view.run),
            dcc.Store(id=SELECTED, data=view.shown_step(steps)),
            dcc.Store(id=CURVES_DRAWN),
            shown_store("reward", live.shown(view.run, store)),
            dcc.Store(id=HEATMAP_DRAWN),
            html.Div(
                [
                    html.H4("Reward", className="mb-0 me-3"),
                    html.Span(view.run or "", id=HEADER, className="text-muted"),
                ],
                className="d-flex align-items-baseline mb-2",
            ),
            notices(msgs, NOTICES),
            _controls(view, steps),
            dbc.Row(curve_cards, className="g-3"),
            html.Div(
                id=STEP_STATS,
                className="d-flex flex-wrap align-items-baseline bg-white border rounded px-3 py-2 mb-3 shadow-sm",
            ),
            dbc.Row(hist_cards, className="g-3"),
            dbc.Row(
                dbc.Col(
                    _card(
                        "reward-heatmap-title",
                        _title(
                            f"{label('reward')} distribution across training: "
                            "share of each step's responses per bin"
                        ),
                        [_graph(HEATMAP, 340)],
                    ),
                    className="mb-3",
                ),
                className="g-3",
            ),
        ]
    )


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
)
def _sync(search, index, band, zero, _prev, _next, *rest):
    """URL <-> controls. A URL change (page load, Back/Forward) sets the controls; a control change (slider,
    prev/next, band, switch, a click on a curve or the heatmap) writes the URL. Unchanged -> no_update."""
    *clicks, run, selected = rest
    trigger = ctx.triggered_id
    view, msgs = _decode(search)
    store = _store(view.run)
    steps = curves.step_list(store) if store is not None else []
    current = view.shown_step(steps)
    if trigger is None or trigger == URL:
        new_view, url_out, notes = view, no_update, notices(msgs).children
    else:
        new_step = current
        if trigger in (PREV, NEXT) and current in steps:
            i = steps.index(current) + (1 if trigger == NEXT else -1)
            new_step = steps[min(max(i, 0), len(steps) - 1)]
        elif trigger == STEP and isinstance(index, int) and 0 <= index < len(steps):
            new_step = steps[index]
        elif trigger in CURVE.values() or (trigger == HEATMAP and _empty_cell(clicks[-1])):
            # A heatmap cell with responses opens them (see _drill); an empty one selects its step.
            picked = figures.clicked_step(clicks[[*CURVE.values(), HEATMAP].index(trigger)])
            new_step = picked if picked in steps else current
        if new_step == current and view.step is None:
            new_step = None  # still "the last step": the URL keeps following a growing run
        new_view = replace(view, step=new_step, band=band or view.band, zero=bool(zero))
        url_out = no_update if new_view == view else new_view.to_query()
        notes = no_update if new_view == view else []
    shown = new_view.shown_step(steps)
    same_run = new_view.run == run
    slider = _slider_props(steps)
    return (
        url_out,
        no_update if same_run else new_view.run,
        no_update if same_run else (new_view.run or ""),
        notes,
        no_update if shown == selected else shown,
        no_update if shown == selected and same_run else _step_text(shown, steps),
        no_update if _step_index(shown, steps) == index else _step_index(shown, steps),
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
    figs = [
        figures.curves_figure(
            panels[k].series,
            y_title=panels[k].y_title,
            selected_step=step,
            percent=panels[k].percent,
            empty_message="Not available for this run (see the note above).",
        )
        for k in CURVE_KEYS
    ]
    return *figs, *(panels[k].title for k in CURVE_KEYS), *(panels[k].note for k in CURVE_KEYS), key


def _title(text: str) -> str:
    """A sentence-case title from lower-case metric labels (the labels themselves stay exact)."""
    return text[:1].upper() + text[1:]


def _empty_cell(click) -> bool:
    cell = figures.clicked_cell(click)
    return cell is None or cell.count == 0


def _histograms(store, step):
    """Figures, titles and notes of the two histograms of ``step``."""
    out_figs, titles, notes = [], [], []
    for kind in HIST:
        title = f"{label(kind)} at step {step}"
        bins = curves.run_bins(store, kind)
        if not bins.edges:
            msg = (
                "No reference reward (ref_reward) in this run, so there is no reward gain."
                if kind == "reward_gain"
                else "No finite rewards in this run."
            )
            out_figs.append(figures.empty_figure(msg))
            titles.append(_title(title))
            notes.append(msg)
            continue
        bars = curves.step_bars(store, kind, step)
        ref = None
        note = "Bars share the run's bins at every step; click a bar for its responses."
        if kind == "reward":
            ref = curves.step_bars(store, kind, step, "ref_reward")
            if ref.get_column("count").sum() == 0:
                ref, note = None, curves.NOTE_NO_REF + " " + note
            else:
                title = f"{label('reward')} and {label('ref_reward')} at step {step}"
        out_figs.append(
            figures.histogram_figure(
                bars,
                label=label(kind),
                color=colour(kind),
                ref_bars=ref,
                ref_label=label("ref_reward"),
                signed=kind == "reward_gain",
                discrete=bins.discrete,
            )
        )
        titles.append(_title(title))
        notes.append(note)
    return out_figs, titles, notes


def _step_stats(store, step) -> list:
    stats = [
        ("step", step),
        ("responses", curves.summary_value(store, step, "n")),
        (f"{label('reward')} mean", curves.summary_value(store, step, "reward_mean")),
        (f"{label('ref_reward')} mean", curves.summary_value(store, step, "ref_reward_mean")),
        ("win rate", curves.summary_value(store, step, "win_rate")),
    ]
    out = []
    for name, v in stats:
        if v is None and name != "step":
            continue
        text = share(v) if name == "win rate" else str(v) if name == "step" else num(v)
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
    figs, titles, notes = _histograms(store, step)
    return *figs, *titles, *notes, _step_stats(store, step)


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
    fig = figures.heatmap_figure(
        hm.steps,
        hm.edges,
        hm.share,
        hm.count,
        label=label("reward"),
        selected_step=step,
        discrete=hm.discrete,
        height=340,
    )
    return fig, run
