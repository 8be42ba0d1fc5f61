"""The scatter page's answer: its figure (each response a point, or a 2-D histogram of exact counts), what
its note says of it (how many drawn, how, what is left out) and, for a URL with a box, the box's line (its
bounds, its responses' count and the link to them), built by the page's own data calls and builders."""

from __future__ import annotations

from dataclasses import asdict

from api.answer import Answer, Table
from api.answers._page import no_runs_notice, open_view
from api.registry import store_info
from components import scatter as sv
from components.theme import colour
from data import scatter as sd
from data.metrics import label
from data.scatter_box import box_count
from data.service import board
from data.views import links, paths
from data.views.scatter import ScatterView

PATH, NAME = paths.SCATTER, "scatter"
FIGURE, BOX = "scatter-figure", "scatter-box"


def answer(query: dict[str, list[str]]) -> Answer:
    if (none := no_runs_notice()) is not None:
        return Answer(PATH, {}, notices=[none])
    view, msgs, ctx = open_view(query, PATH, ScatterView)
    store, run_steps = ctx.store, ctx.step_list
    steps = view.steps(run_steps)
    shown = asdict(view) | {
        "steps": view.steps_text(run_steps),
        "first_step": steps.first,
        "last_step": steps.last,
    }
    out = Answer(PATH, shown, run=view.run, notices=msgs, store=store_info(store))
    if store is None:
        return out
    drawn = sd.scatter(store, view.x, view.y, steps, logs=view.logs)
    xl, yl = label(view.x), label(view.y)
    out.figures[FIGURE] = sv.scatter_figure(
        drawn, x_label=xl, y_label=yl, box=view.box, colour=colour("reward")
    )
    out.titles[FIGURE], out.notes[FIGURE] = sv.title(xl, yl), drawn.note(steps)
    out.view["drawn"] = {
        "responses": drawn.n, "as": "histogram" if drawn.density else "points", "points_up_to": drawn.limit,
        "not_finite": drawn.missing, "not_on_log_axis": drawn.off_log,
    }  # fmt: skip
    box = box_count(view, store, run_steps, board().settings.search_seconds)
    if box is not None:
        row = {"box": box[0], "responses": box[1], "href": links.scatter_box(view, run_steps)}
        out.tables[BOX], out.main = Table(list(row), [row]), BOX
    return out
