"""Runs page (``/``): every run under the rollout root with its size, freshness, data health, headline
figures and a reward sparkline; tick runs to open them side by side on the compare page."""

from __future__ import annotations

import time

import dash
import dash_bootstrap_components as dbc
from dash import ALL, Input, Output, State, callback, dcc, html

from components import run_cards as rc
from components.layout import access_problem, no_runs_state, progress, url_prefix
from data.access import AGAIN, Unreadable
from data.runs_overview import run_card
from data.service import board
from data.store.reading import mapping_shown
from data.views import links, paths

dash.register_page(__name__, path=paths.RUNS, name="Runs", title="Runs · RL Logging Board", order=0)

RUNS_TABLE = "runs-table"
RUNS_TICK = "runs-tick"
PICK = "runs-pick"  # pattern id {"type": PICK, "run": name}: a run's checkbox
PICKED = "runs-picked"  # the runs ticked, in the page's order (kept through the tick's redraws)
COMPARE = "runs-compare"
FIRST_ANSWER_SECONDS = 5.0
PAGE_LINKS = {"reward": paths.REWARD, "responses": paths.RESPONSES, "prompts": paths.PROMPTS}


def layout(**query):
    table = runs_overview()
    # Redrawn every 2 s only while a run is being read: a redraw with nothing new would race with a
    # click on a run's checkbox.
    busy = any(board().status(r).running for r in board().runs())
    return html.Div(
        [
            html.H4("Runs", className="mb-1"),
            html.P(id="runs-root", className="text-muted small", children=f"Rollout root: {board().root}"),
            dcc.Interval(id=RUNS_TICK, interval=2000, n_intervals=0, disabled=not busy),
            dcc.Store(id=PICKED, data=[]),
            rc.compare_bar(COMPARE, links.compare([], url_prefix())),
            html.Div(id=RUNS_TABLE, children=table),
        ]
    )


def _problem_box(problem, id_: str):
    """An AccessProblem or Unreadable of data.access as the alert that says what to do."""
    items = getattr(problem, "lines", None)  # an Unreadable: a part of the root, beside runs that load
    fixes = [(f.text, f.command) for f in problem.fixes()]
    return access_problem(problem.headline, problem.detail, fixes, AGAIN, items, id_, collapsed=bool(items))


def runs_overview(picked: list[str] | None = None) -> html.Div:
    b = board()
    scan = b.scan()
    if scan.problem is not None:
        return html.Div(_problem_box(scan.problem, "runs-root-problem"))
    runs = scan.runs
    # Other users' folders under a shared root: said after the runs that can be shown.
    unreadable = (
        [_problem_box(Unreadable.of(scan.root, "folder", scan.unreadable), "runs-unreadable")]
        if scan.unreadable
        else []
    )
    if scan.outside:
        unreadable.append(rc.links_out(str(scan.root), scan.outside, "runs-links-out"))
    if scan.skipped:
        unreadable.append(rc.skipped_entries(str(scan.root), scan.skipped, "runs-skipped"))
    if not runs:
        return html.Div(unreadable) if unreadable else no_runs_state(b.root)
    cards, prefix = [], url_prefix()
    # Small runs are ready within the first answer; a page over many or big runs must not wait for them
    # all (10 s each before): past this budget, cards show progress and the tick fills them in.
    deadline = time.monotonic() + FIRST_ANSWER_SECONDS
    for name, run_dir in runs.items():
        card = run_card(b, scan, name, run_dir, max(0.0, deadline - time.monotonic()))
        store, status, health = card.store, card.status, card.health
        body = []
        if status.running and status.total:
            body.append(progress(status.fraction, rc.ingest_text(status.done, status.total)))
        if status.error:
            body.append(dbc.Alert(f"Ingest failed: {status.error}", color="danger", className="py-2"))
        if store is not None:
            head = []
            if (h := card.headline) is not None:
                best = f"best (step {h.reward_best_step})" if h.reward_best is not None else "best"
                figures = [("reward, last step", h.reward_last), (best, h.reward_best),
                           ("KL per token (k3), last step", h.kl_last)]  # fmt: skip
                head = rc.headline(name, figures, h.steps, h.rewards)
            body.append(rc.run_stats(name, card.files, health, head))
            u = card.understood
            read_as = "; ".join(f"{title}: {text}" for title, text in u.read_as) or "–"
            body.append(rc.reading_block(name, read_as, [*u.mapping, *u.notes], u.not_read))
            shown = mapping_shown(store)
            body.append(rc.mapping_block(name, shown.toml, shown.unmapped))
            body.append(rc.fields_block(name, health.fields))
            body.append(rc.issues_block(health.errors, health.n_errors, health.notes, health.n_notes))
            if store.unreadable():
                problem = Unreadable.of(run_dir, "file", store.unreadable())
                body.append(_problem_box(problem, f"runs-unreadable-{name}"))
        hrefs = {k: links.run_page(path, name, prefix) for k, path in PAGE_LINKS.items()}
        pick = {"type": PICK, "run": name}
        cards.append(
            rc.run_card(name, hrefs, [p for p in body if p is not None], pick, name in (picked or []))
        )
    return html.Div(cards + unreadable)


@callback(
    Output(RUNS_TABLE, "children"),
    Output(RUNS_TICK, "disabled"),
    Input(RUNS_TICK, "n_intervals"),
    State(PICKED, "data"),
    prevent_initial_call=True,
)
def _tick(_n, picked):
    """Redraw while an ingest is under way (the runs ticked stay ticked); stop polling once every run is
    committed."""
    b = board()
    busy = any(b.status(r).running for r in b.runs())
    return runs_overview(picked), not busy


@callback(
    Output(PICKED, "data"),
    Output(COMPARE, "href"),
    Output(COMPARE, "className"),
    Output(COMPARE, "children"),
    Input({"type": PICK, "run": ALL}, "value"),
    State({"type": PICK, "run": ALL}, "id"),
)
def _pick(values, ids):
    """The runs ticked, in the page's order, and the compare link for them (disabled below two)."""
    picked = [i["run"] for i, v in zip(ids, values, strict=True) if v]
    return picked, links.compare(picked, url_prefix()), *rc.compare_link(len(picked))
