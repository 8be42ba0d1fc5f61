"""Layout pieces shared by pages: navbar, notices, empty states, cards and graphs, key figures, the ids of
the pages' own Locations and the app's URL prefix."""

from __future__ import annotations

import json
from functools import lru_cache

import dash
import dash_bootstrap_components as dbc
from dash import dcc, html

from components.figures import empty_figure

# The type of every page's own dcc.Location id, ``{"type": PAGE_URL, "path": <the page's path>}``: the shell
# listens to them all (a page writes its query through its own Location, which the shell's does not hear).
PAGE_URL = "app-page-url"


def page_url(path: str) -> dict:
    """The id of the dcc.Location of the page at ``path`` (see :data:`PAGE_URL`)."""
    return {"type": PAGE_URL, "path": path}


def left_page(pathname: str | None, path: str) -> bool:
    """Whether the browser has left the page at ``path`` (``pathname``: the page's own Location's, behind any
    URL prefix). A page's Location hears the URL of the page navigated to before the old page unmounts, and a
    URL sync that ran then (a grid's click on a link cell, say) wrote the old page's query onto the new page
    (/tokens lost its back=): such a callback does nothing."""
    return pathname is not None and "/" + (dash.strip_relative_path(pathname) or "") != path


def nav_id(name: str) -> str:
    """The id of the navbar's link to the page called ``name``: ``app-nav-<name>``."""
    return f"app-nav-{name.lower()}"


def url_prefix() -> str:
    """The app's URL prefix without its last slash ('' at the root, ``/rlboard`` behind a proxy): what the
    links of ``data.views.links`` are given to put before their path."""
    return dash.get_relative_path("/").rstrip("/")


# The navbar's "Download snapshot" link (its href follows the page's URL, see app.py) and the store of which
# page paths have a snapshot (``{"prefix": …, "views": {path: name}}``).
SNAPSHOT_LINK, SNAPSHOT_VIEWS = "app-snapshot", "app-snapshot-views"


def snapshot_link(views: dict[str, str], prefix: str) -> html.Span:
    """The navbar's "Download snapshot" link, hidden until the shell's clientside callback points it at the
    page's ``/snapshot/<view>?<query>`` (it stays hidden on a page with no view in ``views``)."""
    return html.Span(
        [
            dcc.Store(id=SNAPSHOT_VIEWS, data={"prefix": prefix, "views": views}),
            html.A(
                # "Snapshot" beside a download icon: the navbar of a run's page (with the live box and the
                # run picker) has no room at 1440 px for "Download snapshot" on one line; it is the link's name.
                [html.I(className="bi bi-download me-1"), "Snapshot"],
                id=SNAPSHOT_LINK,
                href="",
                className="btn btn-sm btn-outline-light me-3 text-nowrap",
                **{"aria-label": "Download snapshot"},
                style={"display": "none"},
                title="Download snapshot: this view as one HTML file that opens anywhere, with no board or network",
            ),
        ]
    )


def navbar(
    pages: list[tuple[str, str, bool]], runs: list[str], home: str, live=None, snapshot=None
) -> dbc.Navbar:
    """Top bar: brand (linking to ``home``), one link per page, the ``live`` controls (the shell's, see
    ``components.live``), the ``snapshot`` link (:func:`snapshot_link`) and the run picker (``app-run``,
    empty until the shell's callback sets it).
    ``pages``: ``(name, href, exact)`` each, its link's id :func:`nav_id`; ``exact``: the link is active
    on that very path only (the home page), else on the path and below."""
    links = [
        dbc.NavItem(dbc.NavLink(name, href=href, id=nav_id(name), active="exact" if exact else "partial"))
        for name, href, exact in pages
    ]
    picker = dcc.Dropdown(
        id="app-run",
        options=[{"label": r, "value": r} for r in runs],
        value=None,
        placeholder="Choose a run…",
        clearable=False,
        style={"minWidth": "16rem"},
        className="app-run-picker",
    )
    return dbc.Navbar(
        dbc.Container(
            [
                dbc.NavbarBrand([html.I(className="bi bi-activity me-2"), "RL Logging Board"], href=home),
                dbc.Nav(links, className="me-auto", navbar=True),
                html.Div(
                    [snapshot, live, html.Span("Run", className="text-light me-2 small"), picker],
                    className="d-flex align-items-center",
                ),
            ],
            fluid=True,
        ),
        color="dark",
        dark=True,
        className="mb-3 py-1",
    )


def notices(messages: list[str], id_: str | None = None) -> html.Div:
    """Visible notices (e.g. a URL parameter that fell back to its default); empty when none."""
    kw = {"id": id_} if id_ else {}
    return html.Div(
        [dbc.Alert(m, color="warning", className="py-2 mb-2", dismissable=True) for m in messages], **kw
    )


def empty_state(title: str, detail: str | None = None, link: tuple[str, str] | None = None) -> html.Div:
    """A friendly box for 'nothing to show' with an optional link (text, href)."""
    children = [html.H5(title, className="text-muted")]
    if detail:
        children.append(html.P(detail, className="text-muted mb-2"))
    if link:
        children.append(dcc.Link(link[0], href=link[1]))
    return html.Div(children, className="border rounded p-4 text-center bg-light")


def no_runs_state(root, trouble: str | None = None) -> html.Div:
    """What a page shows when the rollout root holds no run; ``trouble`` (e.g. "The rollout folder /data
    cannot be read: permission denied.") sends the user to the runs page, which says what to do."""
    if trouble:
        return empty_state(
            "No runs to show",
            f"{trouble} The runs page says what to do.",
            ("What to do", dash.get_relative_path("/")),
        )
    return empty_state(
        "No runs found",
        f"Put one folder per run under {root}, holding its rollout files (*.jsonl, *.jsonl.gz, *.jsonl.zst "
        "or *.parquet, also in sub-folders).",
    )


def access_problem(
    headline: str,
    detail: str,
    fixes: list[tuple[str, str]],
    note: str,
    items: list[str] | None = None,
    id_: str | None = None,
    collapsed: bool = False,
) -> dbc.Alert:
    """What the board may not read and the ways out: ``headline``, optionally the ``items`` concerned (one
    line each), ``detail`` (whose folder, who the board runs as), then ``fixes`` as ``(text, command)``
    (the command shown verbatim, to copy; may be empty) and a closing ``note``. ``collapsed``: the fixes
    open on a click (a smaller box, for a part of the root beside runs that load)."""
    steps = [
        html.Li(
            [html.Span(text), html.Pre(cmd, className="mb-1 mt-1 small") if cmd else None], className="mb-1"
        )
        for text, cmd in fixes
    ]
    what = "What to do (any one of these)" if len(fixes) > 1 else "What to do"
    todo = [html.Ol(steps, className="mb-2 mt-1"), html.P(note, className="mb-0 small")]
    kw = {"id": id_} if id_ else {}
    return dbc.Alert(
        [
            html.Div(headline, className="fw-semibold mb-1" if collapsed else "alert-heading h5"),
            html.Ul([html.Li(i) for i in items], className="mb-2 font-monospace small") if items else None,
            html.P(detail, className="mb-2"),
            html.Details([html.Summary(what, className="fw-semibold"), *todo])
            if collapsed
            else html.Div([html.Div(what + ":", className="fw-semibold"), *todo]),
        ],
        color="warning",
        className="py-2 mb-2" if collapsed else None,
        **kw,
    )


def unknown_run_state(unreadable: bool = False) -> html.Div:
    """What the responses and token pages show for a URL naming a run that is not under the root, or (with
    ``unreadable``) a folder under it the board may not read."""
    if unreadable:
        return empty_state(
            "This run cannot be read",
            "The runs page says why and what to do.",
            ("All runs", dash.get_relative_path("/")),
        )
    return empty_state("Unknown run", "Pick a run in the top bar.", ("All runs", dash.get_relative_path("/")))


# No mode bar: it covers the legends. Dragging zooms and a double click resets, as in any Plotly chart.
GRAPH_CONFIG = {"displayModeBar": False, "responsive": True}


def card(title_id: str, title: str, body: list, note_id: str | None = None, note=None) -> dbc.Card:
    """A titled card (``title_id`` on its title, to fill in later) with an optional muted note above its
    ``body``."""
    head = dbc.CardHeader(html.Span(title, id=title_id), className="fw-semibold py-2 small")
    content = []
    if note_id:
        content.append(html.Div(note, id=note_id, className="text-muted small mb-1"))
    return dbc.Card([head, dbc.CardBody([*content, *body], className="p-2")], className="h-100 shadow-sm")


@lru_cache(maxsize=64)
def _loading(height: int) -> str:
    return json.dumps(empty_figure("Loading…", height).to_plotly_json())


def graph(id_: str, height: int = 300) -> dcc.Loading:
    """A graph of ``height`` px that says "Loading…" until its callback draws it; a spinner while that
    takes more than 0.3 s. (Its figure is the JSON of one made once per height: a page of 11 graphs built
    11 Plotly figures in its layout for it.)"""
    return dcc.Loading(
        dcc.Graph(
            id=id_,
            figure=json.loads(_loading(height)),
            config=GRAPH_CONFIG,
            style={"height": f"{height}px"},
        ),
        type="circle",
        delay_show=300,
    )


def page_title(title: str, run: str | None, run_id: str) -> html.Div:
    """A page's title with the run it shows beside it (``run_id``: that text, for callbacks to change)."""
    return html.Div(
        [html.H4(title, className="mb-0 me-3"), html.Span(run or "", id=run_id, className="text-muted")],
        className="d-flex align-items-baseline mb-2",
    )


def stats_bar(id_: str) -> html.Div:
    """An empty bar for a line of key figures (:func:`inline_stats`) a callback fills."""
    return html.Div(
        id=id_,
        className="d-flex flex-wrap align-items-baseline bg-white border rounded px-3 py-2 mb-3 shadow-sm",
    )


def inline_stats(items) -> list[html.Div]:
    """Key figures in a line: ``(name, text)`` pairs, a muted name before each value."""
    return [
        html.Div(
            [html.Span(name, className="text-muted small me-1"), html.Span(text, className="fw-semibold")],
            className="me-4",
        )
        for name, text in items
    ]


def stat(label: str, value, hint: str | None = None) -> html.Div:
    """A key figure: small label above a large value."""
    return html.Div(
        [
            html.Div(label, className="text-muted small"),
            html.Div(value, className="fs-5 fw-semibold"),
            html.Div(hint, className="text-muted small") if hint else None,
        ],
        className="me-4",
    )


def progress(fraction: float, text: str, failed: bool = False) -> html.Div:
    """A progress bar under ``text``; ``failed``: ``text`` says why reading failed (an alert, no bar)."""
    if failed:
        return html.Div(dbc.Alert(text, color="danger", className="py-2"), className="mb-3")
    return html.Div(
        [
            html.Div(text, className="small text-muted mb-1"),
            dbc.Progress(value=round(fraction * 100), striped=True, animated=True),
        ],
        className="mb-3",
    )
