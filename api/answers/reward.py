"""The reward page's answer: its four curves, the selected step's two histograms (each bar's interval in
its customdata) and key figures, the reward-hacking and critic panels, the heatmap of the URL's window and
the trainer's chart with its agreement checks, built by the page's own data calls and builders."""

from __future__ import annotations

from dataclasses import asdict

from api.answer import Answer, Table
from api.answers._page import no_runs_notice, open_view
from api.registry import store_info
from components import compare_views as cv
from components import reward_page as rp
from components.theme import colour
from data import curves, hacking, histograms
from data.compare import trainer
from data.metrics import label
from data.service import board
from data.views import paths
from data.views.reward import RewardView, heatmap_note

PATH, NAME = paths.REWARD, "reward"
CURVE_KEYS = ("reward", "kl", "length", "win")
CURVE = {k: f"reward-curve-{k}" for k in CURVE_KEYS}
HIST = {"reward": "reward-hist", "reward_gain": "reward-gain-hist"}
SIGNAL = {k: f"reward-signal-{k}" for k in ("degeneration", "search", "critic")}
HEATMAP, STATS, TRAINER_FIG, AGREEMENT = (
    "reward-heatmap",
    "reward-step-stats",
    "reward-trainer-fig",
    "reward-agreement",
)
STAT_COLUMNS = ("name", "value", "kind")


def answer(query: dict[str, list[str]]) -> Answer:
    if (none := no_runs_notice()) is not None:
        return Answer(PATH, {}, notices=[none])
    view, msgs, ctx = open_view(query, PATH, RewardView)
    store, steps = ctx.store, ctx.step_list
    step = view.shown_step(steps)
    run_dir = board().run_dir(view.run) if store is not None else None
    key = trainer.run_keys(run_dir, view.trainer)[1] if store is not None else None
    shown = asdict(view) | {"step": step, "trainer": key, "steps": len(steps)}
    out = Answer(PATH, shown, run=view.run, notices=msgs, store=store_info(store))
    if store is None:
        return out
    panels = curves.run_panels_by_key(store, view.band, view.zero, step, CURVE_KEYS)
    _panels(out, CURVE, panels, rp.panel_outputs(panels, step))
    signals, _critic = hacking.shown_panels(store, board().settings, view.q, run_dir, steps, step)
    _panels(out, SIGNAL, signals, rp.panel_outputs(signals, step, pick=True))
    if step is not None:
        hists = curves.histogram_panels(store, step)
        labels = {k: label(k) for k in (*HIST, "ref_reward")}
        for h, fig in zip(hists, rp.step_figures(hists, labels), strict=True):
            out.figures[HIST[h.kind]], out.titles[HIST[h.kind]], out.notes[HIST[h.kind]] = (
                fig,
                h.title,
                h.note,
            )
        out.tables[STATS] = Table(list(STAT_COLUMNS), [_stat(*s) for s in curves.step_stats(store, step)])
        out.main = STATS
    cols = curves.reward_heatmap_columns(store, view.heatmap)
    out.figures[HEATMAP] = rp.heatmap(cols, label("reward"), step)
    out.titles[HEATMAP], out.notes[HEATMAP] = histograms.HEATMAP_TITLE, heatmap_note(cols, step)
    tv = trainer.run_trainer_view(view.run, store, run_dir, curves.summary_columns(store, ()), key)
    out.figures[TRAINER_FIG] = cv.run_trainer_outputs(tv, view.run, colour("reward"), AGREEMENT)[0]
    out.titles[TRAINER_FIG] = cv.TRAINER_TITLE
    out.notes[TRAINER_FIG] = " ".join(n.text for n in tv.notes)
    checks = [c.as_row() for c in tv.checks]
    out.tables[f"{AGREEMENT}-0"] = Table(list(checks[0]) if checks else [], checks)
    out.view["trainer_keys"] = list(tv.keys)
    return out


def _panels(out: Answer, ids: dict[str, str], panels, outputs: tuple) -> None:
    """The figures (``outputs``: figures, titles, notes, as the page's callback returns them) by id."""
    n = len(panels)
    for i, p in enumerate(panels):
        fid = ids[p.key]
        out.figures[fid], out.titles[fid], out.notes[fid] = outputs[i], outputs[n + i], outputs[2 * n + i]


def _stat(name: str, value, kind: str) -> dict:
    """A key figure as a row; the response carrying most of the step's KL as its fields and its sentence."""
    if kind == "kl_top":
        value = asdict(value) | {"flagged": value.flagged, "text": value.text()}
    return {"name": name, "value": value, "kind": kind}
