"""Runs page (``/``): every run under the rollout root with its size, freshness and data health."""

from __future__ import annotations

import time

import dash
import dash_bootstrap_components as dbc
import polars as pl
from dash import Input, Output, callback, dcc, html

from components.format import age, megabytes, num, step_range
from components.layout import access_problem, no_runs_state, progress, url_prefix
from data.access import AGAIN, Unreadable
from data.service import board
from data.store import run_file_stats
from data.views import links, paths

dash.register_page(__name__, path=paths.RUNS, name="Runs", title="Runs · RL Logging Board", order=0)

RUNS_TABLE = "runs-table"
RUNS_TICK = "runs-tick"
MAX_LISTED_ISSUES = 200
FIRST_ANSWER_SECONDS = 5.0
# One example location per kind of note: "rank0.jsonl:17 (logprobs 8, values 9)".
_EXAMPLE = pl.format("{}:{} ({})", "source", "line", pl.col("detail").fill_null("")).first()


def layout(**query):
    return html.Div(
        [
            html.H4("Runs", className="mb-1"),
            html.P(id="runs-root", className="text-muted small", children=f"Rollout root: {board().root}"),
            dcc.Interval(id=RUNS_TICK, interval=2000, n_intervals=0, disabled=False),
            html.Div(id=RUNS_TABLE, children=runs_overview()),
        ]
    )


def _issues_block(store) -> html.Div | None:
    issues = store.issues()
    if issues.height == 0:
        return None
    errors = issues.filter(issues["severity"] != "note")
    notes = issues.filter(issues["severity"] == "note")
    blocks = []
    if errors.height:
        rows = [
            html.Tr(
                [
                    html.Td(r["source"]),
                    html.Td(r["line"]),
                    html.Td(r["severity"]),
                    html.Td(r["reason"]),
                    html.Td(html.Code(r["detail"] or "")),
                ]
            )
            for r in errors.head(MAX_LISTED_ISSUES).iter_rows(named=True)
        ]
        more = f" (first {MAX_LISTED_ISSUES} shown)" if errors.height > MAX_LISTED_ISSUES else ""
        blocks.append(
            html.Details(
                [
                    html.Summary(f"{errors.height} unusable line(s){more}", className="text-danger"),
                    dbc.Table(
                        [
                            html.Thead(
                                html.Tr([html.Th(h) for h in ("file", "line", "status", "reason", "text")])
                            ),
                            html.Tbody(rows),
                        ],
                        size="sm",
                        className="mt-2 small",
                    ),
                ]
            )
        )
    if notes.height:
        summary = (
            notes.group_by("reason")
            .agg(pl.len().alias("n"), _EXAMPLE.alias("example"))
            .sort("n", descending=True)
        )
        blocks.append(
            html.Details(
                [
                    html.Summary(
                        f"{notes.height} data-quality note(s): lines kept", className="text-secondary"
                    ),
                    html.Ul(
                        [
                            html.Li(f"{r['reason']}: {r['n']} line(s), e.g. {r['example']}")
                            for r in summary.iter_rows(named=True)
                        ],
                        className="small mt-2",
                    ),
                ]
            )
        )
    return html.Div(blocks)


FIELDS_SHOWN = 20  # names listed per kind of field; the rest are counted


def _fields_block(store, name: str) -> html.Div | None:
    """What the files hold beyond the contract's fields, and where it is shown (or that it is not read)."""
    kinds = [
        ("extra columns", store.extra_columns(), "in the responses table"),
        (
            "per-token fields of the trainer",
            store.token_extras(),
            "on the token page, where not longer than the response",
        ),
        (
            "not read",
            store.manifest.data.get("ignored_fields", []),
            "not a number, a text or a list of numbers",
        ),
    ]
    lines = []
    for kind, names, where in kinds:
        if not names:
            continue
        shown = ", ".join(names[:FIELDS_SHOWN]) + (
            f" and {len(names) - FIELDS_SHOWN} more" if len(names) > FIELDS_SHOWN else ""
        )
        lines.append(
            html.Div(
                [
                    html.Span(f"{kind}: ", className="text-muted"),
                    html.Span(shown),
                    html.Span(f" ({where})", className="text-muted"),
                ],
                id=f"runs-{kind.split()[0]}-{name}",
            )
        )
    return html.Div(lines, className="small mb-2") if lines else None


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
    cards = []
    # Small runs are ready within the first answer; a page over many or big runs must not wait for them
    # all (10 s each before): past this budget, cards show progress and the tick fills them in.
    deadline = time.monotonic() + FIRST_ANSWER_SECONDS
    for name, run_dir in runs.items():
        store = b.store(name, wait=max(0.0, deadline - time.monotonic()))
        status = b.status(name)
        files = run_file_stats(run_dir)
        last = max((st.st_mtime for _, st in files), default=None)
        size = sum(st.st_size for _, st in files)
        body = []
        if status.running and status.total:
            body.append(
                progress(
                    status.fraction, f"Ingesting: {status.done / 1e6:.0f} of {status.total / 1e6:.0f} MB"
                )
            )
        if status.error:
            body.append(dbc.Alert(f"Ingest failed: {status.error}", color="danger", className="py-2"))
        if store is not None:
            steps = store.steps()
            n = int(steps.get_column("n").sum()) if steps.height else 0
            errors = sum(p["errors"] for p in store.manifest.data["parts"].values())
            pending = len(store.manifest.data.get("pending", {}))
            step_col = steps.get_column("step")
            span = step_range(step_col.min(), step_col.max()) if steps.height else "–"
            stats = [
                ("files", f"{len(files)} ({megabytes(size)})"),
                ("samples", num(n)),
                ("steps", f"{steps.height} ({span})"),
                ("last update", age(last)),
                ("bad lines", str(errors + pending)),
            ]
            body.append(
                html.Div(
                    [
                        html.Div(
                            [
                                html.Div(k, className="text-muted small"),
                                html.Div(v, className="fw-semibold", id=f"runs-{k.replace(' ', '-')}-{name}"),
                            ],
                            className="me-4",
                        )
                        for k, v in stats
                    ],
                    className="d-flex flex-wrap mb-2",
                )
            )
            fields = _fields_block(store, name)
            if fields is not None:
                body.append(fields)
            issues = _issues_block(store)
            if issues is not None:
                body.append(issues)
            if store.unreadable():
                body.append(
                    _problem_box(
                        Unreadable.of(run_dir, "file", store.unreadable()), f"runs-unreadable-{name}"
                    )
                )
        prefix = url_prefix()
        cards.append(
            dbc.Card(
                dbc.CardBody(
                    [
                        html.Div(
                            [
                                html.H5(
                                    dcc.Link(name, href=links.run_page(paths.REWARD, name, prefix)),
                                    className="mb-2 me-3",
                                ),
                                dcc.Link(
                                    "responses",
                                    href=links.run_page(paths.RESPONSES, name, prefix),
                                    className="small me-2",
                                ),
                                dcc.Link(
                                    "prompts",
                                    href=links.run_page(paths.PROMPTS, name, prefix),
                                    className="small",
                                ),
                            ],
                            className="d-flex align-items-baseline",
                        ),
                        *body,
                    ]
                ),
                className="mb-3",
            )
        )
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
