"""Scatter page (``/scatter?run=R&step=40-60&x=kl_sum&y=reward``): two per-response columns read together.

For one step, a range of steps or every step: each response a point (up to data.scatter.MAX_POINTS), else
a 2-D histogram of exact counts. Dragging a box over it keeps the box in the URL as the two columns' range
filters, and links to exactly the responses inside it on the responses page.
"""

from dataclasses import replace

import dash
from dash import Input, Output, State, callback, ctx, dcc, html, no_update
from dash.exceptions import PreventUpdate

from components import scatter as sv
from components.figures import empty_figure
from components.layout import card, left_page, no_runs_state, notices, page_title, page_url, url_prefix
from components.live import shown_store
from components.theme import colour
from data import live
from data import scatter as sd
from data.metrics import label
from data.scatter_box import box_count
from data.service import board, open_run
from data.views import links, paths
from data.views.codec import first, parse_search
from data.views.scatter import ScatterView

dash.register_page(
    __name__, path=paths.SCATTER, name="Scatter", title="Scatter · RL Logging Board", order=1.5
)

URL = page_url(paths.SCATTER)  # the page's own Location: the shell listens to it
RUN, HEADER, NOTICES = "scatter-run", "scatter-header", "scatter-notices"
STEPS, X, Y, CLEAR = "scatter-steps", "scatter-x", "scatter-y", "scatter-clear"
XLOG, YLOG = "scatter-xlog", "scatter-ylog"
FIGURE, NOTE, BOX, POINT = "scatter-figure", "scatter-note", "scatter-box", "scatter-point"
TITLE = "scatter-title"
STORE_WAIT = 10.0


def _decode(search_or_query):
    """``(view, notices, run context)`` of a query string (or ``layout``'s query)."""
    query = parse_search(search_or_query) if isinstance(search_or_query, str | None) else search_or_query
    run_ctx = open_run(first(query, "run"), paths.SCATTER, STORE_WAIT)
    return *ScatterView.from_query(query, run_ctx), run_ctx


def layout(**query):
    if not list(board().runs()):
        return no_runs_state(board().root, board().scan().trouble)
    view, msgs, run_ctx = _decode(query)
    store = run_ctx.store
    msgs += board().failure_notices(view.run) if store is not None else [board().reading_text(view.run)]
    ids = {"steps": STEPS, "x": X, "y": Y, "xlog": XLOG, "ylog": YLOG, "clear": CLEAR}
    title = _title(view.x, view.y)
    return html.Div(
        [
            dcc.Location(id=URL, refresh=False),
            dcc.Store(id=RUN, data=view.run),
            shown_store("scatter", live.shown(view.run, store)),
            page_title("Scatter", view.run, HEADER),
            notices(msgs, NOTICES),
            sv.controls(ids, view.steps_text(run_ctx.step_list), view.x, view.y, sd.axis_labels(), view.logs),
            card(TITLE, title, sv.body({"note": NOTE, "figure": FIGURE, "box": BOX, "point": POINT})),
        ]
    )


# ---- callbacks -------------------------------------------------------------------------------------------


@callback(
    Output(URL, "search"), Output(STEPS, "value"), Output(X, "value"), Output(Y, "value"), Output(XLOG, "value"),
    Output(YLOG, "value"), Output(NOTICES, "children"), Output(POINT, "children"),
    Input(URL, "search"), Input(STEPS, "value"), Input(X, "value"), Input(Y, "value"), Input(XLOG, "value"),
    Input(YLOG, "value"), Input(CLEAR, "n_clicks"), Input(FIGURE, "selectedData"), State(URL, "pathname"),
)  # fmt: skip
def _sync(search, steps_text, x, y, xlog, ylog, _clear, selected, pathname):
    """URL <-> controls. The URL (page load, Back / Forward) sets the controls; the steps box, the columns,
    the log scales, "Clear box" and a box dragged over the figure write the URL. Unchanged -> no_update."""
    if left_page(pathname, paths.SCATTER):
        raise PreventUpdate
    view, msgs, run_ctx = _decode(search)
    trigger = ctx.triggered_id
    if trigger in (None, URL):
        shown = view.steps_text(run_ctx.step_list)
        return (
            no_update,
            no_update if shown == (steps_text or "") else shown,
            no_update if view.x == x else view.x,
            no_update if view.y == y else view.y,
            no_update if view.xlog == bool(xlog) else view.xlog,
            no_update if view.ylog == bool(ylog) else view.ylog,
            notices(msgs + board().failure_notices(view.run)).children if trigger == URL else no_update,
            [] if trigger == URL else no_update,
        )
    more: list[str] = []
    new = view
    if trigger == STEPS:
        new, more = view.with_steps(steps_text, run_ctx)
    elif trigger in (X, Y):
        new, more = _columns(view, x, y)
    elif trigger in (XLOG, YLOG):
        new = replace(view, xlog=bool(xlog), ylog=bool(ylog))
    elif trigger == CLEAR:
        new = replace(view, box=None)
    elif trigger == FIGURE:
        rng = sv.selected_range(selected)
        if rng is None or run_ctx.store is None:
            raise PreventUpdate
        drawn = sd.scatter(run_ctx.store, view.x, view.y, view.steps(run_ctx.step_list), logs=view.logs)
        new = replace(view, box=sd.brushed(drawn, *rng))
    query = new.to_query()
    return (
        no_update if query == (search or "") else query,
        *(no_update,) * 5,
        notices(more).children if more else no_update,
        no_update,
    )


def _columns(view: ScatterView, x, y) -> tuple[ScatterView, list[str]]:
    """The view with the columns picked (a box is of the columns it was drawn on: it is dropped)."""
    if x == y:
        return view, [f"x and y are both {label(x)}: pick two different columns."]
    if not (sd.is_axis(x) and sd.is_axis(y)) or (x, y) == (view.x, view.y):
        return view, []
    return replace(view, x=x, y=y, box=None), []


def _title(x: str, y: str) -> str:
    return sv.title(label(x), label(y))


@callback(
    Output(FIGURE, "figure"), Output(NOTE, "children"), Output(BOX, "children"), Output(TITLE, "children"),
    Input(URL, "search"), State(URL, "pathname"),
)  # fmt: skip
def _draw(search, pathname):
    """The figure of the URL's steps and columns with its box, its note, and the box's line: its bounds,
    its responses' count (the responses page's own count of the same filter) and the link to them."""
    if left_page(pathname, paths.SCATTER):
        raise PreventUpdate
    view, _, run_ctx = _decode(search)
    store, run_steps = run_ctx.store, run_ctx.step_list
    if store is None:
        return empty_figure("No data for this run yet.", sv.HEIGHT), "", "", no_update
    steps = view.steps(run_steps)
    drawn = sd.scatter(store, view.x, view.y, steps, logs=view.logs)
    fig = sv.scatter_figure(
        drawn, x_label=label(view.x), y_label=label(view.y), box=view.box, colour=colour("reward")
    )
    return fig, drawn.note(steps), _box_line(view, store, run_steps), _title(view.x, view.y)


def _box_line(view: ScatterView, store, run_steps):
    got = box_count(view, store, run_steps, board().settings.search_seconds)
    if got is None:
        return sv.box_line("", None, None)
    return sv.box_line(*got, links.scatter_box(view, run_steps, url_prefix()))


@callback(Output(POINT, "children", allow_duplicate=True), Input(FIGURE, "clickData"), State(RUN, "data"),
          prevent_initial_call=True)  # fmt: skip
def _point(click, run):
    """A click on a point: a link to its token page (a click renders a link; it does not navigate)."""
    got = sv.clicked_sample(click)
    if got is None or not run:
        return no_update
    sample, step = got
    return sv.point_line(sample, step, links.tokens(run, sample, prefix=url_prefix()))
