"""Gap page (``/gap?run=R&step=S&band=p25-p75&rule=mis&c=2``): the inference–trainer gap of a run.

Per step, the responses' mean and max |Δ| (Δ = trainer − inference log-prob) with their band, the tail share
pooled over the step's tokens, and what a correction (truncated IS, masked IS, sequence masking) at a
threshold C would clip or mask, each rule's formula beside it. A point opens its step's responses, the
largest first.
"""

import dash
from dash import Input, Output, State, callback, ctx, dcc, no_update
from dash.exceptions import PreventUpdate

from components import figures
from components import gap_page as gp
from components import reward_page as rp
from components.layout import left_page, no_runs_state, notices, page_title, page_url, url_prefix
from data import gap_panels, infer_gap
from data.curve_panels import BANDS
from data.service import RunContext, board, open_run
from data.views import links, paths
from data.views.codec import first, parse_search
from data.views.gap import GapView

dash.register_page(__name__, path=paths.GAP, name="Gap", title="Gap · RL Logging Board", order=6)

URL = page_url(paths.GAP)
RUN, NOTICES, HEADER, NAV = "gap-run", "gap-notices", "gap-header", "gap-nav"
CONTROL = {k: f"gap-{k}" for k in ("step", "band", "rule", "c")}
KEYS = ("gap", "tail", "correction")
IDS = {
    "curve": {k: f"gap-curve-{k}" for k in KEYS},
    "curve_title": {k: f"gap-curve-{k}-title" for k in KEYS},
    "curve_note": {k: f"gap-curve-{k}-note" for k in KEYS},
    "formulas": "gap-formulas",
    "token_link": "gap-token-link",
}
STORE_WAIT_SECONDS = 10.0


def _decode(search_or_query) -> tuple[GapView, list[str], RunContext]:
    """The view of a query string (or ``layout``'s query), its notices and the run's context."""
    query = parse_search(search_or_query) if isinstance(search_or_query, str | None) else search_or_query
    run_ctx = open_run(first(query, "run"), paths.GAP, STORE_WAIT_SECONDS)
    return *GapView.from_query(query, run_ctx), run_ctx


def layout(**query):
    if not list(board().runs()):
        return no_runs_state(board().root, board().scan().trouble)
    view, msgs, run_ctx = _decode(query)
    store = run_ctx.store
    msgs += board().failure_notices(view.run) if store is not None else [board().reading_text(view.run)]
    head = [
        dcc.Location(id=URL, refresh=False),
        dcc.Location(id=NAV, refresh="callback-nav"),
        dcc.Store(id=RUN, data=view.run),
        page_title("Inference–trainer gap", view.run, HEADER),
        notices(msgs, NOTICES),
    ]
    step = view.shown_step(run_ctx.step_list)
    row = gp.controls(CONTROL, step, view.band, BANDS, view.rule, infer_gap.RULES, view.c)
    return gp.page(IDS, head, row, gp.formulas(infer_gap.RULES, view.rule, view.c))


# ---- callbacks -------------------------------------------------------------------------------------------


@callback(
    Output(URL, "search"), *(Output(CONTROL[k], "value") for k in CONTROL), Output(NOTICES, "children"),
    Input(URL, "search"), *(Input(CONTROL[k], "value") for k in CONTROL), State(URL, "pathname"),
)  # fmt: skip
def _sync(search, step, band, rule, c, pathname):
    """URL <-> controls: a URL (page load, Back / Forward) sets the controls; a control writes the URL (a
    step the run lacks, or a C of 1 or less, falls back as the URL's would, with a notice)."""
    if left_page(pathname, paths.GAP):
        raise PreventUpdate
    view, msgs, run_ctx = _decode(search)
    steps = run_ctx.step_list
    if ctx.triggered_id is None or ctx.triggered_id == URL:
        values = (view.shown_step(steps), view.band, view.rule, view.c)
        return no_update, *values, notices(msgs).children
    query = {"run": [view.run or ""], "band": [band or ""], "rule": [rule or ""]}
    query |= {"step": ["" if step is None else str(step)], "c": ["" if c is None else str(c)]}
    new, more, _ = _decode({k: v for k, v in query.items() if v != [""]})
    if new.step == (steps[-1] if steps else None) and view.step is None:
        new = new.with_(step=None)  # a view following the run's last step keeps following it
    url = no_update if new == view else new.to_query()
    return url, *((no_update,) * 4), notices(more).children if more else no_update


@callback(
    *(Output(IDS["curve"][k], "figure") for k in KEYS),
    *(Output(IDS[f"curve_{part}"][k], "children") for part in ("title", "note") for k in KEYS),
    Output(IDS["formulas"], "children"), Output(IDS["token_link"], "children"), Input(URL, "search"),
    State(URL, "pathname"),
)  # fmt: skip
def _curves(search, pathname):
    """The gap's two charts and the correction's, with their titles and notes, the formulas, and a link to the
    selected step's response with the largest |Δ| with the correction's tokens marked."""
    if left_page(pathname, paths.GAP):
        raise PreventUpdate
    view, _, run_ctx = _decode(search)
    store = run_ctx.store
    if store is None:
        return *rp.no_data(3, 6), no_update, None
    step = view.shown_step(run_ctx.step_list)
    sample = infer_gap.largest_gap_sample(store, step)
    href = sample and links.tokens_corrected(view.run, sample, view.rule, view.c, url_prefix())
    panels = gap_panels.page_panels(store, view.band, view.rule, view.c, step)
    formulas = gp.formulas(infer_gap.RULES, view.rule, view.c)
    return *rp.panel_outputs(panels, step, pick=True), formulas, gp.token_link(step, href)


@callback(
    Output(NAV, "href"), *(Input(IDS["curve"][k], "clickData") for k in KEYS), State(URL, "search"),
    prevent_initial_call=True,
)  # fmt: skip
def _drill(*args):
    """A point opens its step's responses sorted by what it draws, the largest first (a correction's: by
    max |Δ|, or by mean |Δ| for sequence masking)."""
    *clicks, search = args
    click = dict(zip(IDS["curve"].values(), clicks, strict=True)).get(ctx.triggered_id)
    point = figures.clicked_point(click)
    view = _decode(search)[0]
    if point is None or view.run is None:
        return no_update
    key, step = point
    sort = gap_panels.SORT_OF.get(key)
    if key in (gap_panels.CORRECTION_TOKENS, gap_panels.CORRECTION_RESPONSES) and view.rule == "seq":
        sort = "infer_gap_abs_mean"
    return links.gap_sorted(view.run, step, sort, url_prefix()) if sort else no_update
