"""The compare page's answer (``/api/v1/compare?run=A&run=B…``): the runs' curves side by side, their reward
distributions at the chosen steps, the trainer's own scalars, each by the page's chart id; the summary row
per run, each run's agreement checks, the prompts the pair shares (at their paired steps, within the gap
limit), the prompts solved by one run and not the other and an opened prompt's responses; and every note
the page shows. Built by the page's own sections (``data.compare.sections``, ``components.compare_sections``)
at full precision, where the page rounds its curves to 6 digits and sends float32."""

from __future__ import annotations

from dataclasses import asdict

from api.answer import Answer, Table
from api.registry import store_info
from components import compare_sections as cs
from components.theme import run_colours
from data.compare import curves, prompts, sections, summary
from data.compare.runs import load_runs
from data.curve_panels import BANDS
from data.metrics import label
from data.service import board
from data.views import links, paths
from data.views.compare import CompareView

PATH, NAME = paths.COMPARE, "compare"
STORE_WAIT_SECONDS = 10.0  # as the page (pages/compare.py): a run not read within it has a notice
PAIR_NEEDED = "Two runs are needed to pair prompts."
PAIR_COLUMNS = ("match", "preview", "a_step", "b_step", "gap", "a_reward", "b_reward", "diff", "a_solved",
                "b_solved", "a_n", "b_n")  # fmt: skip
PAIR_LABELS = {
    "gap": "|step A − step B|",
    "a_n": "responses of A at its step",
    "b_n": "responses of B at its step",
}
SOLVED_COLUMNS = ("match", "preview", "a_reward", "a_step", "b_reward", "b_step", "diff")
CHECK_COLUMNS = ("key", "board", "definition", "status", "steps", "bad", "max_abs_diff", "worst_step", "note")
RESPONSE_COLUMNS = ("sample_id", "step", "reward", "response", "has_tokens", "link")


def answer(query: dict[str, list[str]]) -> Answer:
    b = board()
    view, msgs = CompareView.from_query(query, list(b.runs()), b.scan().unreadable)
    state = {f: v for f, v in asdict(view).items() if f != "at"} | {"at": dict(view.at)}
    if not b.runs():
        trouble = b.scan().trouble
        msgs.append(f"No runs to show: {trouble}" if trouble else f"No runs found under {b.root}.")
        return Answer(PATH, state, notices=msgs)
    if not view.runs:
        return Answer(PATH, state, notices=[*msgs, "Choose runs to compare: two or more runs, run=A&run=B."])
    runs, notes = load_runs(b, list(view.runs), wait=STORE_WAIT_SECONDS)
    notices = msgs + [n.text for n in notes]
    colors, x_title, smoothed = run_colours(view.runs), curves.X_AXES[view.x], view.smooth > 0
    figures, titles, tables = {}, {}, {}

    c = sections.curves_section(runs, view.band, view.smooth, view.x, digits=None)
    tables["compare-summary"] = Table(list(summary.COLUMNS), c.summary.to_dicts(), dict(summary.COLUMNS))
    notices += c.step_notes
    charts = cs.curve_figures(c, colors, x_title=x_title, smoothed=smoothed, band_label=BANDS[view.band],
                              banded=curves.BANDED, exact=True)  # fmt: skip
    for cid, title, chart_notes, fig in charts:
        figures[cid], titles[cid] = fig, title
        notices += chart_notes

    t = sections.trainer_section(runs, view.trainer, view.smooth, view.x, digits=None)
    fig, _, _ = cs.trainer_section_outputs(t, colors, x_title=x_title, smoothed=smoothed,
                                           agreement_id="compare-agreement", exact=True)  # fmt: skip
    figures["compare-trainer-fig"], titles["compare-trainer-fig"] = fig, t.key or "no trainer log"
    notices += t.notes
    for i, (run, checks) in enumerate(t.checks):
        rows = [{"run": run, **ch.as_row()} for ch in checks]
        tables[f"compare-agreement-{i}"] = Table(["run", *CHECK_COLUMNS], rows)

    d = sections.distribution_section(runs, {r.name: view.step_of(r.name) for r in runs})
    figures["compare-dist"] = cs.distribution_figure(d, colors)
    titles["compare-dist"] = f"{label('reward').capitalize()} distribution at a chosen step of each run"
    notices += d.notes

    pair = _pair(runs, view, colors, figures, titles, tables, notices)
    resolved = {
        "shown_at": {bars.run: bars.step for bars in d.bars},
        "trainer_key": t.key,
        "trainer_keys": t.keys,
        "pair": pair,
        "url": paths.COMPARE + view.to_query(),
    }
    return Answer(
        PATH,
        state | resolved,
        figures=figures,
        titles=titles,
        tables=tables,
        main="compare-summary",
        notices=notices,
        store={r.name: store_info(r.store) for r in runs},
    )


def _pair(runs, view: CompareView, colors, figures, titles, tables, notices) -> dict | None:
    """Adds the pairing's figures, tables and notes; returns its window (None without two runs)."""
    p = sections.pair_section(runs, view.a, view.b, view.solved, view.gap)
    ids = ("compare-scatter", "compare-diff-hist", "compare-over")
    if p is None:
        notices.append(PAIR_NEEDED)
        return None
    paired = p.paired
    figs = cs.pair_figures(p, colors, exact=True)
    names = (f"{paired.a} against {paired.b}: reward at the paired step", p.diff_label, "mean difference")
    for cid, fig, title in zip(ids, figs, names, strict=True):
        figures[cid], titles[cid] = fig, title
    notices += p.notes
    cut = f"the {p.scatter.height:,} prompts with the largest differences" if p.left_out else None
    tables["compare-pairs"] = Table(
        list(PAIR_COLUMNS), p.scatter.select(PAIR_COLUMNS).to_dicts(), PAIR_LABELS, paired.table.height, cut
    )
    for side in ("a", "b"):
        rows = p.solved[side]
        shown = rows.head(cs.SOLVED_SHOWN)
        cut = f"the first {cs.SOLVED_SHOWN}" if rows.height > shown.height else None
        tables[f"compare-solved-{side}"] = Table(
            list(SOLVED_COLUMNS), shown.select(SOLVED_COLUMNS).to_dicts(), total=rows.height, cut_off=cut
        )
    opened = _opened(p, {r.name: r for r in runs}, view.prompt, tables, notices) if view.prompt else None
    return {
        "a": paired.a,
        "b": paired.b,
        "threshold": paired.threshold,
        "gap_limit": paired.limit,
        "shared": paired.shared,
        "paired": paired.table.height,
        "left_out": paired.left_out,
        "a_prompts": paired.a_prompts,
        "b_prompts": paired.b_prompts,
        "solved_titles": {side: cs.solved_title(p, side) for side in ("a", "b")},
        "opened": opened,
    }


def _opened(p, runs: dict, match: str, tables: dict, notices: list) -> dict | None:
    """The opened prompt: both runs' responses at their paired steps (best first, at most
    :data:`~data.compare.prompts.MAX_RESPONSES` each) and the word diff of the best of each; returns the
    prompt's key, preview and paired steps (None when the runs do not share it)."""
    paired = p.paired
    got = prompts.open_prompt(paired, runs[paired.a].store, runs[paired.b].store, match)
    if got is None:
        notices.append("This prompt is not shared by the two runs.")
        return None
    for side, run, rows in (("a", paired.a, got.a_rows), ("b", paired.b, got.b_rows)):
        shown = [r | {"link": links.tokens(run, r["sample_id"]) if r["has_tokens"] else None} for r in rows]
        tables[f"compare-responses-{side}"] = Table(list(RESPONSE_COLUMNS), shown)
    segments = [{"op": op, "text": text} for op, text in got.diff.segments]
    cut = "only the responses' beginnings are compared word by word" if got.diff.truncated else None
    tables["compare-diff"] = Table(["op", "text"], segments, cut_off=cut)
    return {"match": got.match, "preview": got.preview, "a_step": got.a_step, "b_step": got.b_step}
