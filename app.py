"""RL Logging Board: the Dash shell (navbar, run picker, pages) and ``server`` for gunicorn.

``gunicorn app:server`` serves the app configured from ``RLBOARD_*`` environment variables;
``python app.py …`` runs the command line (``cli.py``: serve, ingest, export).
"""

from __future__ import annotations

import sys
from pathlib import Path

import dash
import dash_bootstrap_components as dbc
from dash import ALL, Input, Output, State, dcc, html, no_update

import auth
from components import answers, figures
from components import live as live_ui
from components.layout import (
    PAGE_URL,
    SNAPSHOT_LINK,
    SNAPSHOT_VIEWS,
    nav_id,
    navbar,
    snapshot_link,
    url_prefix,
)
from data import live, service
from data.cache import code_version
from data.config import DEFAULT_ROOT, Settings, load_settings
from data.views import links, paths
from data.views.codec import parse_search
from data.views.paths import shown_run

HERE = Path(__file__).resolve().parent
# How long the navbar waits for a run's first read to resolve the step it carries (as the pages wait).
STEP_WAIT = 10.0
# The run the page shows (set with the picker by _sync_shell) and a run the user picked that differs from
# it: only the latter asks the server (_pick_run), not each page load's sync of the picker.
RUN_SHOWN, RUN_PICKED = "app-run-shown", "app-run-picked"


def create_app(settings: Settings | None = None) -> dash.Dash:
    """Build the Dash app for ``settings`` (default: from the environment) and make it the process's board."""
    settings = settings or load_settings()
    service.configure(settings)
    answers.install()
    prepare_root(settings)
    app = dash.Dash(
        __name__,
        use_pages=True,
        pages_folder=str(HERE / "pages"),
        assets_folder=str(HERE / "assets"),
        title="RL Logging Board",
        suppress_callback_exceptions=True,
        url_base_pathname=settings.url_prefix,
        serve_locally=True,
        # gzip/brotli for pages, scripts and callback answers (flask-compress): plotly.js is 4.8 MB, a
        # token page's callback ~300 KB of JSON; exports (CSV, JSON lines, Parquet) are not compressed.
        compress=True,
    )
    app.layout = shell
    _register_navbar_callback()
    _register_routes(app)
    # Dash registers the script paths it may serve only while rendering the index page. Under gunicorn the
    # browser may fetch the index from one worker and the scripts from another, which would then answer
    # 404: render the index once in every process so that each knows its paths.
    app.server.test_client().get(settings.url_prefix, headers=auth.own_headers(settings))
    # The digest of data/'s source that keys the results cache (~25 ms of reading and hashing 160 files),
    # taken here rather than in the first request that asks the cache.
    code_version()
    _warm_up()
    return app


def _warm_up() -> None:
    """What a fresh process's first pages would import on first use, done at start (~70 ms once; the
    first page served, the runs page, 122 -> 58 ms in process): Plotly's trace and layout classes and
    validators, numpy's masked arrays (np.isin of the heatmap's cells) and dateutil (pyarrow.compute's
    first comparison)."""
    import numpy.ma  # noqa: F401

    try:
        import dateutil.relativedelta  # noqa: F401
    except ImportError:  # pyarrow uses it where it is installed
        pass

    figures.warm_up()


def prepare_root(settings: Settings) -> None:
    """Write the demo run into the default rollout root when it holds no run (``settings.demo``)."""
    if (
        settings.demo
        and isinstance(settings.root, Path)
        and settings.root.resolve() == DEFAULT_ROOT.resolve()
    ):
        from data.demo import ensure_demo

        ensure_demo(settings.root)


def shell() -> html.Div:
    runs = list(service.board().runs())
    live = live_ui.live_controls(poll_ms=int(max(1.0, service.board().settings.refresh_seconds) * 1000))
    pages = [(p["name"], dash.get_relative_path(p["path"]), p["path"] == paths.RUNS) for p in _pages()]
    return html.Div(
        [
            dcc.Location(id="app-location", refresh="callback-nav"),
            dcc.Store(id=RUN_SHOWN),
            dcc.Store(id=RUN_PICKED),
            html.Div(
                navbar(pages, runs, dash.get_relative_path(paths.RUNS), live=live, snapshot=_snapshot_link()),
                id="app-navbar",
            ),
            dbc.Container(dash.page_container, fluid=True, className="pb-5"),
        ]
    )


def _snapshot_link():
    """The navbar's "Download snapshot" link, knowing the pages that have an answer (api.answers)."""
    from api.registry import modules

    return snapshot_link({m.PATH: name for name, m in modules().items()}, url_prefix())


def _pages() -> list[dict]:
    """The registered pages in their order (``dash.page_registry``): the navbar has a link to each."""
    return list(dash.page_registry.values())


def _page_run(pathname: str | None, search: str | None) -> tuple[str, str | None]:
    """``(path, run)``: the page (without the URL prefix) and the run it shows (see ``shown_run``)."""
    path = "/" + (dash.strip_relative_path(pathname or "/") or "")
    return path, shown_run(path, live.run_from_search(search), service.board().runs())


def _register_navbar_callback() -> None:
    """Register :func:`_sync_shell` for the pages Dash has imported (its outputs are their links)."""
    nav = [(nav_id(p["name"]), p["path"]) for p in _pages()]

    @dash.callback(
        Output("app-run", "value"),
        Output(RUN_SHOWN, "data"),
        *(Output(id_, "href") for id_, _ in nav),
        Input("app-location", "pathname"),
        Input("app-location", "search"),
        # A page writes its query through its own dcc.Location, which the shell's does not hear about: the
        # shell listens to them all (each page's id carries its path) to follow the page's URL.
        Input({"type": PAGE_URL, "path": ALL}, "search"),
    )
    def _sync_shell(pathname, search, _page_searches):
        """Keep the run picker and the page links on the run the page shows (the run named in the URL, or
        the first run where the page falls back to it; a run the page does not show is never selected) and,
        between the reward and responses pages, on the step it shows (see ``links.carried_step``)."""
        path = "/" + (dash.strip_relative_path(pathname or "/") or "")
        for page in dash.ctx.inputs_list[2]:
            if page["id"].get("path") == path and page.get("value") is not None:
                search = page["value"]  # the page's own URL: the latest
        path, run = _page_run(pathname, search)
        # Only a page that takes a step opens its run here; it waits for a first read as long as the page
        # does, so that its links carry the step the page shows.
        ctx = service.open_run(run, wait=STEP_WAIT) if path in links.STEP_PAGES else service.RunContext(run)
        step = links.carried_step(path, parse_search(search), ctx)
        prefix = url_prefix()
        return run, run, *(links.nav(page_path, run, prefix, step) for _, page_path in nav)


# The picker's value passed on to _pick_run only when it is not the run the page shows: set by _sync_shell
# on every page load (twice: the address, then the page's own URL), it would otherwise ask the server for
# nothing each time. The time makes each pick a new value (the same run picked again after Back).
dash.clientside_callback(
    """function (run, shown) {
        return run && run !== shown ? {run: run, at: Date.now()} : window.dash_clientside.no_update;
    }""",
    Output(RUN_PICKED, "data"),
    Input("app-run", "value"),
    State(RUN_SHOWN, "data"),
    prevent_initial_call=True,
)


@dash.callback(
    Output("app-location", "href"),
    Input(RUN_PICKED, "data"),
    State("app-location", "pathname"),
    State("app-location", "search"),
    prevent_initial_call=True,
)
def _pick_run(picked, pathname, search):
    """Choosing a run keeps the current page (the runs page goes to the reward page) with only ``run`` set.
    The picker set to the run the page already shows (by :func:`_sync_shell`) changes nothing."""
    run = picked.get("run") if isinstance(picked, dict) else None
    path, shown = _page_run(pathname, search)
    if not run or run == shown:
        return no_update
    path = path if path != paths.RUNS else paths.REWARD
    return links.run_page(path, run, url_prefix())


@dash.callback(
    Output(live_ui.LIVE_SEEN, "data"),
    Output(live_ui.LIVE_NEW, "style"),
    Output(live_ui.LIVE_NEW, "children"),
    Output(live_ui.LIVE_RELOAD, "data"),
    Output(live_ui.LIVE_BOX, "style"),
    Output(live_ui.LIVE_AUTO, "value"),
    Output(live_ui.LIVE_TICK, "disabled"),
    Input("app-location", "href"),
    Input(live_ui.LIVE_TICK, "n_intervals"),
    Input({"type": live_ui.SHOWN_TYPE, "page": ALL}, "data"),
    State("app-location", "search"),
    State(live_ui.LIVE_SEEN, "data"),
    State(live_ui.LIVE_RELOAD, "data"),
    State(live_ui.LIVE_AUTO, "value"),
)
def _live_poll(_href, _tick, shown, search, seen, reloads, auto):
    """Offer (or, with auto-refresh, do) a reload of the view when its run has new data since the page was
    rendered (the page's own snapshot, ``shown``, is the baseline; see ``live.live_decision``)."""
    trigger = dash.ctx.triggered_id
    event = "tick" if trigger == live_ui.LIVE_TICK else "shown" if isinstance(trigger, dict) else "navigate"
    page = next((s for s in shown or [] if s), None)
    run = live.run_from_search(search) or (page or {}).get("run")  # a page that fell back to the first run
    # live=1 in the URL switches auto-refresh on with the first poll that lands after a navigation. Dash
    # drops the answer to a call that a newer one of the same callback overtook: on a busy server a tick
    # can overtake the navigation's call, and then only "nothing seen yet" tells that this is the first.
    take_url = live.live_in_search(search) and not auto and (event == "navigate" or seen is None)
    d = live.live_decision(event, seen, live.run_version(run), bool(auto) or take_url, shown=page)
    return (
        d.seen,
        live_ui.SHOWN if d.offer else live_ui.HIDDEN,
        live_ui.new_steps_label(d.new_steps),
        (reloads or 0) + 1 if d.reload else no_update,
        live_ui.BOX_SHOWN if d.seen is not None else live_ui.HIDDEN,
        True if take_url else no_update,
        run is None,
    )


# A reload is a real one: the URL is the whole view state, and pages write their query strings through their
# own dcc.Location(refresh=False), which the shell's Location does not hear about. A click on "new steps"
# reloads here in the browser: sent through the poll above, a tick overtaking it would drop the click.
dash.clientside_callback(
    """
    function(reloads, clicks) {
        if (reloads || clicks) { window.location.reload(); }
        return window.dash_clientside.no_update;
    }
    """,
    Output(live_ui.LIVE_RELOAD, "modified_timestamp"),
    Input(live_ui.LIVE_RELOAD, "data"),
    Input(live_ui.LIVE_NEW, "n_clicks"),
    prevent_initial_call=True,
)

# Auto-refresh is a user choice kept in the URL (live=1). Pages write their own query strings and do not
# know the key, so it is put back (history.replaceState: no new Back entry) on every URL change and poll.
dash.clientside_callback(
    """
    function(auto, href, tick) {
        const url = new URL(window.location.href);
        const has = url.searchParams.get("live") === "1";
        if (auto && !has) { url.searchParams.set("live", "1"); }
        else if (!auto && url.searchParams.has("live")) { url.searchParams.delete("live"); }
        else { return window.dash_clientside.no_update; }
        window.history.replaceState(window.history.state, "", url.toString());
        return window.dash_clientside.no_update;
    }
    """,
    Output(live_ui.LIVE_AUTO, "className"),
    Input(live_ui.LIVE_AUTO, "value"),
    Input("app-location", "href"),
    Input(live_ui.LIVE_TICK, "n_intervals"),
)


# The "Download snapshot" link follows the page's URL: the shell's Location, or the page's own where the page
# wrote its query (as _sync_shell reads it); hidden on a page that has no answer.
dash.clientside_callback(
    """
    function(pathname, search, pageSearches, conf) {
        const prefix = (conf && conf.prefix) || "";
        let path = pathname || "/";
        if (prefix && path.startsWith(prefix)) { path = path.slice(prefix.length); }
        path = "/" + path.replace(/^\\/+|\\/+$/g, "");
        const pages = window.dash_clientside.callback_context.inputs_list[2] || [];
        pages.forEach(function (p) {
            if (p.id && p.id.path === path && p.value !== undefined && p.value !== null) { search = p.value; }
        });
        const name = conf && conf.views[path];
        if (!name) { return ["", {display: "none"}]; }
        return [prefix + "/snapshot/" + name + (search || ""), {}];
    }
    """,
    Output(SNAPSHOT_LINK, "href"),
    Output(SNAPSHOT_LINK, "style"),
    Input("app-location", "pathname"),
    Input("app-location", "search"),
    Input({"type": PAGE_URL, "path": ALL}, "search"),
    State(SNAPSHOT_VIEWS, "data"),
)


def _register_routes(app: dash.Dash) -> None:
    import routes

    routes.register(app.server, app.config.requests_pathname_prefix)
    routes.guard_callbacks(app)
    routes.security_headers(app)


if __name__ == "__main__":
    # `python app.py …` is the command line (cli.py). It imports this module by its name, `app`: the one
    # being run is that module, so the shell's callbacks above are not registered a second time.
    sys.modules["app"] = sys.modules["__main__"]
    from cli import main

    sys.exit(main())
else:
    app = create_app()
    server = app.server
