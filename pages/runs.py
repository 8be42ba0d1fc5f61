"""Runs page (``/``): every run under the rollout root with its size, freshness and data health."""

from __future__ import annotations

import time

import dash
import dash_bootstrap_components as dbc
from dash import Input, Output, callback, dcc, html

from components import run_cards as rc
from components.layout import access_problem, no_runs_state, progress, url_prefix
from data.access import AGAIN, Unreadable
from data.runs_overview import run_files_summary, run_health
from data.service import board
from data.views import links, paths

dash.register_page(__name__, path=paths.RUNS, name="Runs", title="Runs · RL Logging Board", order=0)

RUNS_TABLE = "runs-table"
RUNS_TICK = "runs-tick"
FIRST_ANSWER_SECONDS = 5.0
PAGE_LINKS = {"reward": paths.REWARD, "responses": paths.RESPONSES, "prompts": paths.PROMPTS}


def layout(**query):
    return html.Div(
        [
            html.H4("Runs", className="mb-1"),
            html.P(id="runs-root", className="text-muted small", children=f"Rollout root: {board().root}"),
            dcc.Interval(id=RUNS_TICK, interval=2000, n_intervals=0, disabled=False),
            html.Div(id=RUNS_TABLE, children=runs_overview()),
        ]
    )


def _problem_box(problem, id_: str):
    """An AccessProblem or Unreadable of data.access as the alert that says what to do."""
    items = getattr(problem, "lines", None)  # an Unreadable: a part of the root, beside runs that load
    fixes = [(f.text, f.command) for f in problem.fixes()]
    return access_problem(problem.headline, problem.detail, fixes, AGAIN, items, id_, collapsed=bool(items))


def runs_overview() -> html.Div:
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
    if not runs:
        return html.Div(unreadable) if unreadable else no_runs_state(b.root)
    cards, prefix = [], url_prefix()
    # Small runs are ready within the first answer; a page over many or big runs must not wait for them
    # all (10 s each before): past this budget, cards show progress and the tick fills them in.
    deadline = time.monotonic() + FIRST_ANSWER_SECONDS
    for name, run_dir in runs.items():
        store = b.store(name, wait=max(0.0, deadline - time.monotonic()))
        status = b.status(name)
        body = []
        if status.running and status.total:
            body.append(progress(status.fraction, rc.ingest_text(status.done, status.total)))
        if status.error:
            body.append(dbc.Alert(f"Ingest failed: {status.error}", color="danger", className="py-2"))
        if store is not None:
            health = run_health(store)
            body.append(rc.run_stats(name, run_files_summary(run_dir), health))
            body.append(rc.fields_block(name, health.fields))
            body.append(rc.issues_block(health.errors, health.n_errors, health.notes, health.n_notes))
            if store.unreadable():
                problem = Unreadable.of(run_dir, "file", store.unreadable())
                body.append(_problem_box(problem, f"runs-unreadable-{name}"))
        hrefs = {k: links.run_page(path, name, prefix) for k, path in PAGE_LINKS.items()}
        cards.append(rc.run_card(name, hrefs, [part for part in body if part is not None]))
    return html.Div(cards + unreadable)


@callback(
    Output(RUNS_TABLE, "children"),
    Output(RUNS_TICK, "disabled"),
    Input(RUNS_TICK, "n_intervals"),
    prevent_initial_call=True,
)
def _tick(_n):
    """Redraw while an ingest is under way; stop polling once every run is committed."""
    b = board()
    busy = any(b.status(r).running for r in b.runs())
    return runs_overview(), not busy
