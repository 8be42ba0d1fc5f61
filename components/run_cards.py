"""The runs page's cards: one per run, with its links, key figures, fields beyond the contract and the lines
that could not be used. Pure: values, texts and links in, components out (file names, reasons and
details from the files are shown as text)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import dash_bootstrap_components as dbc
from dash import dcc, html

from components.compare_figures import sparkline
from components.format import age, megabytes, num, step_range
from components.layout import GRAPH_CONFIG
from components.theme import colour


def run_card(
    name: str, hrefs: Mapping[str, str], body: Sequence, pick_id: dict | None = None, picked: bool = False
) -> dbc.Card:
    """A run's card: its name linking to its reward page, links to its ``responses`` and ``prompts``
    (``hrefs``: ``reward``, ``responses``, ``prompts``), then ``body``. With ``pick_id``, a checkbox of
    that id (ticked when ``picked``) before the name, to pick the run for the compare page."""
    pick = []
    if pick_id is not None:
        pick = [dbc.Checkbox(id=pick_id, value=picked, className="me-2", label=f"compare {name}",
                             label_class_name="visually-hidden")]  # fmt: skip
    return dbc.Card(
        dbc.CardBody(
            [
                html.Div(
                    [
                        *pick,
                        html.H5(dcc.Link(name, href=hrefs["reward"]), className="mb-2 me-3"),
                        dcc.Link("responses", href=hrefs["responses"], className="small me-2"),
                        dcc.Link("prompts", href=hrefs["prompts"], className="small"),
                    ],
                    className="d-flex align-items-baseline",
                ),
                *body,
            ]
        ),
        className="mb-3",
    )


def ingest_text(done: int, total: int) -> str:
    """The progress bar's text while a run is read: ``Ingesting: 12 of 80 MB``."""
    return f"Ingesting: {done / 1e6:.0f} of {total / 1e6:.0f} MB"


def run_stats(name: str, files, health, extra: Sequence = ()) -> html.Div:
    """The run's key figures, each with its id ``runs-<figure>-<run>``: ``files`` (count, size and newest
    time; see ``data.runs_overview.RunFiles``) and ``health`` (samples, steps, their span, bad lines; see
    ``data.runs_overview.RunHealth``), then ``extra`` in the same row (the headline, see :func:`headline`)."""
    span = step_range(*health.step_span) if health.step_span else "–"
    stats = [
        ("files", f"{files.count} ({megabytes(files.size)})"),
        ("samples", num(health.samples)),
        ("steps", f"{health.steps} ({span})"),
        ("last update", age(files.last_modified)),
        ("bad lines", str(health.bad_lines)),
    ]
    return html.Div(
        [
            html.Div(
                [
                    html.Div(k, className="text-muted small"),
                    html.Div(v, className="fw-semibold", id=f"runs-{k.replace(' ', '-')}-{name}"),
                ],
                className="me-4",
            )
            for k, v in stats
        ]
        + list(extra),
        className="d-flex flex-wrap align-items-center mb-2",
    )


def reading_block(name: str, read_as: str, items: Sequence[str], not_read: Sequence[str]) -> html.Details:
    """What the board understood of the run's files: ``read_as`` (the dialects found, id
    ``runs-read-as-<run>``) always shown; the mapping and notes (``items``) and what was not read, on a click
    (open when something was not read)."""
    lis = [html.Li(t) for t in items] + [html.Li(f"Not read: {t}", className="text-danger") for t in not_read]
    return html.Details(
        [
            html.Summary(
                [html.Span("read as ", className="text-muted"), html.Span(read_as, id=f"runs-read-as-{name}")]
            ),
            html.Ul(lis, className="small mt-1 mb-1", id=f"runs-reading-{name}"),
        ],
        className="small mb-2",
        open=bool(not_read),
    )


def mapping_block(name: str, toml_text: str, unmapped: Sequence[str]) -> html.Details:
    """The mapping the run was read with as a ready rlboard.toml (``toml_text``, shown as text in a ``pre``,
    id ``runs-mapping-<run>``) and what it could not map (id ``runs-unmapped-<run>``), folded."""
    return html.Details(
        [
            html.Summary(html.Span("mapping (rlboard.toml to copy and edit)", className="text-muted")),
            html.Pre(toml_text, id=f"runs-mapping-{name}", className="small mb-1 p-2 bg-light"),
            html.Ul([html.Li(t) for t in unmapped], className="small mb-1", id=f"runs-unmapped-{name}"),
        ],
        className="small mb-2",
    )


def fields_block(name: str, fields: Sequence[tuple[str, str, str]]) -> html.Div | None:
    """What the files hold beyond the contract's fields and where it is shown (or that it is not read):
    ``(kind, names, where)`` each, one line with id ``runs-<first word of kind>-<run>``; None without any."""
    lines = [
        html.Div(
            [
                html.Span(f"{kind}: ", className="text-muted"),
                html.Span(names),
                html.Span(f" ({where})", className="text-muted"),
            ],
            id=f"runs-{kind.split()[0]}-{name}",
        )
        for kind, names, where in fields
    ]
    return html.Div(lines, className="small mb-2") if lines else None


def issues_block(
    errors: Sequence[Mapping], n_errors: int, notes: Sequence[tuple[str, int, str]], n_notes: int
):
    """The unusable lines (a table of the first ``errors``: file, line, status, reason, text, of
    ``n_errors``) and the data-quality notes (``(reason, lines, example)`` of ``n_notes`` lines kept), each
    folded; None without either."""
    blocks = []
    if n_errors:
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
            for r in errors
        ]
        more = f" (first {len(errors)} shown)" if n_errors > len(errors) else ""
        blocks.append(
            html.Details(
                [
                    html.Summary(f"{n_errors} unusable line(s){more}", className="text-danger"),
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
    if n_notes:
        blocks.append(
            html.Details(
                [
                    html.Summary(f"{n_notes} data-quality note(s): lines kept", className="text-secondary"),
                    html.Ul(
                        [html.Li(f"{reason}: {n} line(s), e.g. {example}") for reason, n, example in notes],
                        className="small mt-2",
                    ),
                ]
            )
        )
    return html.Div(blocks) if blocks else None


def headline(name: str, figures: Sequence[tuple[str, float | None]], steps, rewards) -> list:
    """A run's headline figures (``(label, value)``, ids ``runs-headline-<n>-<run>``) and a sparkline of
    its mean reward over ``steps`` (``runs-spark-<run>``), to put in the row of :func:`run_stats`."""
    cells = [
        html.Div([html.Div(k, className="text-muted small"),
                  html.Div(num(v), className="fw-semibold", id=f"runs-headline-{i}-{name}")], className="me-4")
        for i, (k, v) in enumerate(figures)
    ]  # fmt: skip
    spark = dcc.Graph(
        figure=sparkline(steps, rewards, color=colour("reward")),
        config=GRAPH_CONFIG,
        style={"height": "40px", "width": "180px"},
        id=f"runs-spark-{name}",
    )
    return [*cells, spark]


def links_out(root: str, links: dict[str, str], id_: str) -> dbc.Alert:
    """The folders of the root that are links out of it (``{name: target}``): not read, and what to do."""
    n = len(links)
    return dbc.Alert(
        [
            html.Div(
                f"{n} folder{'s' if n != 1 else ''} under {root} "
                f"{'are links' if n != 1 else 'is a link'} out of the rollout root: not read as "
                f"{'runs' if n != 1 else 'a run'}. The board reads only inside its root.",
                className="fw-semibold",
            ),
            html.Ul([html.Li(f"{name} → {target}") for name, target in links.items()], className="mb-1"),
            html.Div(
                "To show them: copy or bind-mount the folders into the root, or serve their parent folder "
                "as the root (--root / RLBOARD_ROOT).",
                className="small",
            ),
        ],
        color="warning",
        id=id_,
        className="py-2",
    )


def skipped_entries(root: str, skipped: dict[str, str], id_: str, shown: int = 50) -> dbc.Alert:
    """What the walk of the root did not read (``{path under the root: reason}``: a symlink loop, a link
    out, a FIFO, a device, a second way to a file already read), the first ``shown`` of them listed."""
    n = len(skipped)
    items = [html.Li(f"{path}: {why}") for path, why in list(skipped.items())[:shown]]
    if n > shown:
        items.append(html.Li(f"… and {n - shown:,} more"))
    return dbc.Alert(
        [
            html.Div(
                f"{n:,} entr{'ies' if n != 1 else 'y'} under {root} {'were' if n != 1 else 'was'} not read:",
                className="fw-semibold",
            ),
            html.Ul(items, className="mb-1"),
            html.Div(
                "The board reads only regular files and folders inside the rollout root, each once.",
                className="small",
            ),
        ],
        color="warning",
        id=id_,
        className="py-2",
    )


def compare_bar(link_id: str, href: str) -> html.Div:
    """The link to the compare page (``link_id``), disabled until two runs are ticked."""
    link = dcc.Link(
        "Compare the runs ticked", id=link_id, href=href, className="btn btn-primary btn-sm disabled me-2"
    )
    hint = html.Span("Tick two or more runs to compare them.", className="text-muted small")
    return html.Div([link, hint], className="mb-2")


def compare_link(count: int) -> tuple[str, str]:
    """The compare link's class and text for ``count`` runs ticked (disabled below two)."""
    if count >= 2:
        return "btn btn-primary btn-sm me-2", f"Compare the {count} runs ticked"
    return "btn btn-primary btn-sm disabled me-2", "Compare the runs ticked"
