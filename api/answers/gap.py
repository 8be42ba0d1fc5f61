"""The gap page's answer: its curves (mean and max |Δ| per step with their band, the tail share) and the
preview of the URL's correction (rule and C: the shares of tokens and responses it clips or masks), each
with its card's title and note (a run without inference log-probs: what the page says instead), the
rules' formulas as the page lists them and the link to the selected step's largest-|Δ| response."""

from __future__ import annotations

from dataclasses import asdict

from api.answer import Answer, Table
from api.answers._page import no_runs_notice, open_view
from api.registry import store_info
from components import gap_page as gp
from components import reward_page as rp
from data import gap_panels, infer_gap
from data.views import links, paths
from data.views.gap import GapView

PATH, NAME = paths.GAP, "gap"
CURVE = {k: f"gap-curve-{k}" for k in ("gap", "tail", "correction")}
FORMULAS, TOKEN_LINK = "gap-formulas", "gap-token-link"


def answer(query: dict[str, list[str]]) -> Answer:
    if (none := no_runs_notice()) is not None:
        return Answer(PATH, {}, notices=[none])
    view, msgs, ctx = open_view(query, PATH, GapView)
    store, steps = ctx.store, ctx.step_list
    step = view.shown_step(steps)
    out = Answer(PATH, asdict(view) | {"step": step}, run=view.run, notices=msgs, store=store_info(store))
    rows = [
        {
            "rule": key,
            "name": r.name,
            "formula": r.formula,
            "touches": r.touches,
            "previewed": key == view.rule,
        }
        for key, r in gp.formula_order(infer_gap.RULES, view.rule)
    ]
    out.tables[FORMULAS] = Table(list(rows[0]), rows)
    out.view["corrections"] = gp.formulas_head(view.c)  # the line above the formulas
    if store is None:
        return out
    panels = gap_panels.page_panels(store, view.band, view.rule, view.c, step)
    outputs, n = rp.panel_outputs(panels, step, pick=True), len(panels)
    for i, fid in enumerate(CURVE.values()):  # the page's outputs, in this order
        out.figures[fid], out.titles[fid], out.notes[fid] = outputs[i], outputs[n + i], outputs[2 * n + i]
    sample = infer_gap.largest_gap_sample(store, step)
    if sample:
        href = links.tokens_corrected(view.run, sample, view.rule, view.c)
        out.tables[TOKEN_LINK] = Table(
            ["step", "sample", "href"], [{"step": step, "sample": sample, "href": href}]
        )
    return out
