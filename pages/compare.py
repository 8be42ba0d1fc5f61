"""Compare page (``/compare?run=A&run=B[&run=C…]``): did my change help? The chosen runs' curves on one
axis (one colour per run, optional TensorBoard smoothing, step or responses-seen axis), their reward
distributions at a chosen step on shared bins, a summary table, the trainer's own scalars with the check
that they agree with the rollouts, and the prompts two runs share: paired reward differences and the
prompts solved by one run and not the other, each opening both runs' responses with a word diff.
"""

# No ``from __future__ import annotations``: Dash loads page modules outside sys.modules (see reward.py).
import dash
import dash_bootstrap_components as dbc
from dash import ALL, Input, Output, State, callback, clientside_callback, ctx, dcc, html, no_update
from dash.exceptions import PreventUpdate

from components import compare_sections as cs
from components import compare_views as cv
from components.figures import empty_figure
from components.layout import empty_state, left_page, no_runs_state, notices, url_prefix
from components.live import shown_store
from components.theme import run_colours
from data import live
from data.compare import curves, prompts, sections, summary, trainer
from data.compare.runs import load_runs
from data.curve_panels import BANDS
from data.metrics import label
from data.run_context import context_of
from data.service import board
from data.trainer_logs import trainer_scalars
from data.views import links, paths
from data.views.codec import parse_search
from data.views.compare import CompareView

dash.register_page(__name__, path=paths.COMPARE, name="Compare", title="Compare · RL Logging Board", order=5)

URL, VIEW, NOTICES = "compare-url", "compare-view", "compare-notices"
SMOOTH, XAXIS, BAND, TRAINER = "compare-smooth", "compare-x", "compare-band", "compare-trainer"
PAIR_A, PAIR_B, SOLVED, GAP = "compare-a", "compare-b", "compare-solved", "compare-gap"
AT = "compare-at"  # pattern id {"type": AT, "run": name}: the step of a run's distribution
OPEN = "compare-open"  # pattern id {"type": OPEN, "match": key}: an item of a solved list
SUMMARY, CURVES, STEP_NOTES = "compare-summary", "compare-curves", "compare-step-notes"
TRAINER_FIG, TRAINER_NOTES, AGREEMENT = "compare-trainer-fig", "compare-trainer-notes", "compare-agreement"
DIST, DIST_NOTES = "compare-dist", "compare-dist-notes"
SCATTER, DIFF_HIST, OVER = "compare-scatter", "compare-diff-hist", "compare-over"
PAIR_NOTES, SOLVED_A, SOLVED_B = "compare-pair-notes", "compare-solved-a", "compare-solved-b"
OPENED, CLOSE = "compare-opened", "compare-close"

STORE_WAIT_SECONDS = 10.0


def _decode(search: str | None):
    return CompareView.from_query(parse_search(search), list(board().runs()), board().scan().unreadable)


def _runs(view):
    runs, notes = load_runs(board(), list(view.runs), wait=STORE_WAIT_SECONDS)
    return runs, [n.text for n in notes]


def _pair_section(view):
    ids = (PAIR_A, PAIR_B, SOLVED, GAP, PAIR_NOTES, SCATTER, DIFF_HIST, OVER, SOLVED_A, SOLVED_B, CLOSE, OPENED)  # fmt: skip
    return cv.pair_section(ids, list(view.runs), view.a, view.b, view.solved, view.gap)


def _shown_at(view: CompareView, run) -> int | None:
    """The step ``run``'s distribution shows for the URL's ``at=`` (the run's one step rule; None: its last)."""
    asked = view.step_of(run.name)
    return None if asked is None else context_of(run.name, run.store).step(asked)[0]


def layout(**query):
    if not board().runs():
        return no_runs_state(board().root, board().scan().trouble)
    view, msgs = CompareView.from_query(query, list(board().runs()), board().scan().unreadable)
    if not view.runs:
        runs_link = ("All runs", links.run_page(paths.RUNS, None, url_prefix()))
        choose = empty_state("Choose runs to compare", "Tick two or more runs on the runs page.", runs_link)
        return html.Div([notices(msgs, NOTICES), choose])
    runs, run_notes = _runs(view)
    colors = run_colours(view.runs)
    chips = [(r, colors[r], links.run_page(paths.REWARD, r, url_prefix())) for r in view.runs]
    keys = trainer.trainer_keys({r.name: trainer_scalars(r.run_dir) for r in runs})
    default = trainer.default_key(keys)
    at = [
        cv.labelled([cv.swatch(colors[r.name]), r.name], dcc.Dropdown(
            id={"type": AT, "run": r.name}, options=r.frame.get_column("step").to_list(),
            value=_shown_at(view, r), placeholder="last step"), 3)
        for r in runs
    ]  # fmt: skip
    dist_title = f"{label('reward').capitalize()} distribution at a chosen step of each run (shared bins)"
    return html.Div(
        [
            dcc.Location(id=URL, refresh=False),
            dcc.Store(id=VIEW, data=view.to_query()),
            # The shell's live poll offers a reload when the first run gets new steps.
            shown_store("compare", live.shown(runs[0].name, runs[0].store) if runs else None),
            html.Div(
                [html.H4("Compare", className="mb-0 me-3"), cv.run_chips(chips)], className="d-flex mb-2"
            ),  # fmt: skip
            notices(msgs + run_notes, NOTICES),
            cv.controls((SMOOTH, XAXIS, BAND), (view.smooth, view.x, view.band), curves.X_AXES, BANDS),
            cv.card("Summary", [html.Div(id=SUMMARY), cv.notes_list([], STEP_NOTES)]),
            html.Div(id=CURVES),
            cv.trainer_card((TRAINER, TRAINER_NOTES, TRAINER_FIG, AGREEMENT), keys, view.trainer or default),
            cv.card(
                dist_title,
                [dbc.Row(at, className="g-2 mb-1"), cv.notes_list([], DIST_NOTES), cv.graph(DIST, 300)],
            ),  # fmt: skip
            cv.card("Same prompt, two policies", _pair_section(view)),
        ]
    )


# ---- callbacks -------------------------------------------------------------------------------------------


@callback(
    Output(URL, "search"), Output(VIEW, "data"),
    Input(URL, "search"), Input(SMOOTH, "value"), Input(XAXIS, "value"), Input(BAND, "value"),
    Input(TRAINER, "value"), Input(PAIR_A, "value"), Input(PAIR_B, "value"), Input(SOLVED, "value"), Input(GAP, "value"),
    Input({"type": AT, "run": ALL}, "value"), Input(SCATTER, "clickData"),
    Input({"type": OPEN, "match": ALL}, "n_clicks"), Input(CLOSE, "n_clicks"),
    State({"type": AT, "run": ALL}, "id"), State(VIEW, "data"), State(URL, "pathname"),
)  # fmt: skip
def _sync(search, smooth, x, band, key, a, b, solved, gap, steps, click, opens, _close, at_ids, shown, pathname):  # fmt: skip
    """URL <-> controls: the URL (page load, Back/Forward) gives the view; a control, a click on the
    scatter or a solved list writes the URL. The view store changes only when the view does."""
    if left_page(pathname, paths.COMPARE):
        raise PreventUpdate
    view, _ = _decode(search)
    trig = ctx.triggered_id
    if trig is None or trig == URL:
        q = view.to_query()
        return no_update, no_update if q == shown else q
    if isinstance(trig, dict) and trig.get("type") == OPEN:
        if not any(opens):
            return no_update, no_update  # the list was drawn again: nothing was clicked
        view = view.with_(prompt=trig["match"])
    elif trig == SCATTER:
        points = (click or {}).get("points") or [{}]
        match = (points[0].get("customdata") or [None])[0]
        view = view.with_(prompt=match) if isinstance(match, str) else view
    elif trig == CLOSE:
        view = view.with_(prompt=None)
    else:
        at = tuple((i["run"], int(s)) for i, s in zip(at_ids, steps, strict=True) if s is not None)
        keys = trainer.trainer_keys({r: trainer_scalars(board().run_dir(r)) for r in view.runs})
        view = view.with_(
            smooth=float(smooth or 0), x=x or view.x, band=band or view.band, at=at,
            trainer=None if key == trainer.default_key(keys) else key,
            a=a, b=b if b != a else view.b, solved=float(solved) if isinstance(solved, int | float) else None,
            gap=float(gap) if isinstance(gap, int | float) else None,
        )  # fmt: skip
        view, _ = _decode(view.to_query())
    q = view.to_query()
    return (no_update, no_update) if q == (search or "") and q == shown else (q, q)


@callback(
    Output(SUMMARY, "children"),
    Output(STEP_NOTES, "children"),
    Output(CURVES, "children"),
    Input(VIEW, "data"),
)
def _curves(q):
    """The summary table and one chart per metric any run has, each with its notes."""
    view, _ = _decode(q)
    c = sections.curves_section(_runs(view)[0], view.band, view.smooth, view.x)
    colors = run_colours(view.runs)
    cols = [(k, v, summary.KINDS.get(k, "num")) for k, v in summary.COLUMNS.items()]
    tbl = cv.summary_table(c.summary.to_dicts(), [colors[r] for r in c.summary.get_column("run")], cols)
    charts = cs.curve_figures(c, colors, x_title=curves.X_AXES[view.x], smoothed=view.smooth > 0,
                              band_label=BANDS[view.band], banded=curves.BANDED)  # fmt: skip
    return tbl, cv.notes_list(c.step_notes).children, cs.curve_cards(charts)


@callback(
    Output(TRAINER_FIG, "figure"),
    Output(TRAINER_NOTES, "children"),
    Output(AGREEMENT, "children"),
    Input(VIEW, "data"),
)
def _trainer(q):
    """The chosen trainer key of every run, and each run's agreement checks."""
    view, _ = _decode(q)
    t = sections.trainer_section(_runs(view)[0], view.trainer, view.smooth, view.x)
    return cs.trainer_section_outputs(t, run_colours(view.runs), x_title=curves.X_AXES[view.x],
                                      smoothed=view.smooth > 0, agreement_id=AGREEMENT)  # fmt: skip


@callback(Output(DIST, "figure"), Output(DIST_NOTES, "children"), Input(VIEW, "data"))
def _distribution(q):
    """Each run's reward histogram at its chosen step, on bins shared by all runs."""
    view, _ = _decode(q)
    runs = _runs(view)[0]
    d = sections.distribution_section(runs, {r.name: view.step_of(r.name) for r in runs})
    return cs.distribution_figure(d, run_colours(view.runs)), cv.notes_list(d.notes).children


def _pair(view):
    runs = {r.name: r for r in _runs(view)[0]}
    if view.a not in runs or view.b not in runs:
        return None, runs
    return prompts.pair(view.a, runs[view.a].store, view.b, runs[view.b].store, view.solved, view.gap), runs


@callback(
    Output(SCATTER, "figure"), Output(DIFF_HIST, "figure"), Output(OVER, "figure"), Output(PAIR_NOTES, "children"),
    Output(f"{SOLVED_A}-title", "children"), Output(SOLVED_A, "children"),
    Output(f"{SOLVED_B}-title", "children"), Output(SOLVED_B, "children"), Input(VIEW, "data"),
)  # fmt: skip
def _pairs(q):
    """Prompts shared by runs A and B: scatter of their rewards, the differences, and the solved lists."""
    view, _ = _decode(q)
    p = sections.pair_section(_runs(view)[0], view.a, view.b, view.solved, view.gap)
    if p is None:
        msg = "Two runs are needed to pair prompts."
        return empty_figure(msg, 340), empty_figure(msg, 340), empty_figure("", 240), msg, "", "", "", ""
    lists = []
    for side in ("a", "b"):
        rows = p.solved[side].head(cs.SOLVED_SHOWN).to_dicts()
        lists += [cs.solved_title(p, side), cv.solved_list(rows, OPEN, p.paired.a, p.paired.b, "None.")]
    return *cs.pair_figures(p, run_colours(view.runs)), cs.pair_notes(p.notes), *lists


@callback(Output(OPENED, "children"), Output(CLOSE, "className"), Input(VIEW, "data"))
def _opened(q):
    """The opened prompt: both runs' responses at their last step of it, side by side, and a word diff of
    the best response of each."""
    view, _ = _decode(q)
    p, runs = _pair(view) if view.prompt else (None, {})
    if p is None:
        return None, "mt-2 d-none"
    got = prompts.open_prompt(p, runs[p.a].store, runs[p.b].store, view.prompt)
    if got is None:
        return html.Div(
            "This prompt is not shared by the two runs.", className="text-muted small"
        ), "mt-2 d-none"
    colors, cols = run_colours(view.runs), []
    for side, run, step, rows in (("a", p.a, got.a_step, got.a_rows), ("b", p.b, got.b_step, got.b_rows)):
        href = lambda s, run=run: links.tokens(run, s, prefix=url_prefix())  # noqa: E731
        cols.append(cv.responses_column(run, colors[run], step, rows, href, f"compare-responses-{side}"))
    diff = cv.word_diff_view(got.diff.segments, p.a, p.b, got.diff.truncated, "compare-diff")
    return cv.opened_prompt(got.preview, cols, diff), "mt-2"


# An opened prompt is scrolled into view: it opens below the lists, often below the fold (after a moment:
# the callback runs before the new children are in the page).
clientside_callback(
    "function (c) { if (c) { setTimeout(() => { const el = document.getElementById('compare-opened-body');"
    " if (el) { el.scrollIntoView({block: 'start'}); } }, 100); } }",
    Input(OPENED, "children"),
    prevent_initial_call=True,
)
