"""RL Logging Board: the Dash shell (navbar, run picker, pages) and the command line (serve, ingest, export).

``gunicorn app:server`` serves the app configured from ``RLBOARD_*`` environment variables;
``python app.py serve`` does the same with command-line flags on top.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from urllib.parse import urlencode

import dash
import dash_bootstrap_components as dbc
from dash import Input, Output, State, dcc, html, no_update

import auth
from components import live as live_ui
from components.layout import NAV_PAGES, nav_href, navbar
from data import live, service
from data.config import DEFAULT_ROOT, Settings, load_settings
from data.views import paths
from data.views.paths import shown_run

HERE = Path(__file__).resolve().parent


def create_app(settings: Settings | None = None) -> dash.Dash:
    """Build the Dash app for ``settings`` (default: from the environment) and make it the process's board."""
    settings = settings or load_settings()
    service.configure(settings)
    if settings.demo and Path(settings.root).resolve() == DEFAULT_ROOT.resolve():
        from data.demo import ensure_demo

        ensure_demo(settings.root)
    app = dash.Dash(
        __name__,
        use_pages=True,
        pages_folder=str(HERE / "pages"),
        assets_folder=str(HERE / "assets"),
        title="RL Logging Board",
        suppress_callback_exceptions=True,
        url_base_pathname=settings.url_prefix,
        serve_locally=True,
    )
    app.layout = shell
    _register_routes(app)
    # Dash registers the script paths it may serve only while rendering the index page. Under gunicorn the
    # browser may fetch the index from one worker and the scripts from another, which would then answer
    # 404: render the index once in every process so that each knows its paths.
    app.server.test_client().get(settings.url_prefix, headers=auth.own_headers(settings))
    return app


def shell() -> html.Div:
    runs = list(service.board().runs())
    return html.Div(
        [
            dcc.Location(id="app-location", refresh="callback-nav"),
            html.Div(navbar(runs, None, dash.get_relative_path), id="app-navbar"),
            dbc.Container(dash.page_container, fluid=True, className="pb-5"),
            live_ui.live_controls(poll_ms=int(max(1.0, service.board().settings.refresh_seconds) * 1000)),
        ]
    )


def _page_run(pathname: str | None, search: str | None) -> tuple[str, str | None]:
    """``(path, run)``: the page (without the URL prefix) and the run it shows (see ``shown_run``)."""
    path = "/" + (dash.strip_relative_path(pathname or "/") or "")
    return path, shown_run(path, live.run_from_search(search), service.board().runs())


@dash.callback(
    Output("app-run", "value"),
    *(Output(f"app-nav-{name.lower()}", "href") for name, _ in NAV_PAGES),
    Input("app-location", "pathname"),
    Input("app-location", "search"),
)
def _sync_shell(pathname, search):
    """Keep the run picker and the page links on the run the page shows: the run named in the URL, or the
    first run where the page falls back to it (a run the page does not show is never selected)."""
    _, run = _page_run(pathname, search)
    return run, *(dash.get_relative_path(nav_href(path, run)) for _, path in NAV_PAGES)


@dash.callback(
    Output("app-location", "href"),
    Input("app-run", "value"),
    State("app-location", "pathname"),
    State("app-location", "search"),
    prevent_initial_call=True,
)
def _pick_run(run, pathname, search):
    """Choosing a run keeps the current page (the runs page goes to the reward page) with only ``run`` set.
    The picker set to the run the page already shows (by :func:`_sync_shell`) changes nothing."""
    path, shown = _page_run(pathname, search)
    if not run or run == shown:
        return no_update
    path = path if path != paths.RUNS else paths.REWARD
    return dash.get_relative_path(f"{path}?{urlencode({'run': run})}")


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
    State("app-location", "search"),
    State(live_ui.LIVE_SEEN, "data"),
    State(live_ui.LIVE_RELOAD, "data"),
    State(live_ui.LIVE_AUTO, "value"),
)
def _live_poll(_href, _tick, search, seen, reloads, auto):
    """Offer (or, with auto-refresh, do) a reload of the view when its run has new data."""
    event = "tick" if dash.ctx.triggered_id == live_ui.LIVE_TICK else "navigate"
    run = live.run_from_search(search)
    # live=1 in the URL switches auto-refresh on with the first poll that lands after a navigation. Dash
    # drops the answer to a call that a newer one of the same callback overtook: on a busy server a tick
    # can overtake the navigation's call, and then only "nothing seen yet" tells that this is the first.
    take_url = live.live_in_search(search) and not auto and (event == "navigate" or seen is None)
    d = live.live_decision(event, seen, live.run_version(run), bool(auto) or take_url)
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


def _register_routes(app: dash.Dash) -> None:
    import routes

    routes.register(app.server, app.config.requests_pathname_prefix)


# ---- command line ----------------------------------------------------------------------------------------


def _fail(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return 2


class _Bar:
    """A one-line progress bar on a terminal; silent otherwise."""

    def __init__(self, label: str):
        self.label = label
        self.tty = sys.stderr.isatty()
        self.t0 = time.monotonic()
        self.last = 0.0

    def __call__(self, done: int, total: int) -> None:
        if not self.tty:
            return
        now = time.monotonic()
        if now - self.last < 0.1 and done < total:
            return
        self.last = now
        frac = 1.0 if not total else done / total
        width = 30
        bar = "█" * int(frac * width) + "·" * (width - int(frac * width))
        mb = done / 1e6
        rate = mb / max(now - self.t0, 1e-6)
        sys.stderr.write(f"\r{self.label[:24]:<24} {bar} {frac * 100:5.1f}%  {mb:8.1f} MB  {rate:6.1f} MB/s")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _runs_at(path: Path) -> dict[str, Path]:
    """Runs at PATH: each sub-folder holding *.jsonl, or PATH itself when it holds *.jsonl."""
    from data.store import discover_runs

    if any(p.suffix == ".jsonl" and p.is_file() for p in path.iterdir()):
        return {path.resolve().name: path}
    return discover_runs(path)


def cmd_ingest(args) -> int:
    from data.ingest import ingest_run

    path = Path(args.path)
    if not path.is_dir():
        return _fail(f"no such folder: {path}")
    settings = load_settings(cache_dir=args.cache_dir)
    runs = _runs_at(path)
    if not runs:
        return _fail(f"no run under {path} (a run is a folder of *.jsonl files)")
    out = []
    for name, run_dir in runs.items():
        res = ingest_run(run_dir, settings.cache_dir, settings.pad_tokens, progress=_Bar(name))
        out.append(res.summary())
        if not args.json:
            print(
                f"{name}: {res.files} files, {res.samples} samples, {res.steps} steps, {res.tokens} tokens, {res.bad_lines} bad lines ({res.bytes_read / 1e6:.1f} MB read in {res.seconds:.1f} s)"
            )
    if args.json:
        print(json.dumps({"runs": out}))
    return 0


def cmd_export(args) -> int:
    from data.export import FORMATS, export_stream
    from data.ingest import ingest_run
    from data.queries import ResponseFilter
    from data.store import open_store

    path = Path(args.path)
    if not path.is_dir():
        return _fail(f"no such folder: {path}")
    runs = _runs_at(path)
    if args.run not in runs:
        return _fail(f"unknown run {args.run!r} under {path} (runs: {', '.join(runs) or 'none'})")
    if args.format not in FORMATS:
        return _fail(f"unknown format {args.format!r}")
    settings = load_settings(cache_dir=args.cache_dir)
    res = ingest_run(runs[args.run], settings.cache_dir, settings.pad_tokens)
    store = open_store(res.store_dir)
    if args.step is not None and args.step not in set(store.steps().get_column("step").to_list()):
        return _fail(f"run {args.run!r} has no step {args.step}")
    chunks = export_stream(store, ResponseFilter(step=args.step), args.format)
    if args.output:
        with open(args.output, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
    else:
        for chunk in chunks:
            sys.stdout.buffer.write(chunk)
    return 0


def cmd_serve(args) -> int:
    settings = load_settings(root=args.root, cache_dir=args.cache_dir, host=args.host, port=args.port)
    if args.root and not Path(args.root).is_dir():
        return _fail(f"no such folder: {args.root}")
    app = create_app(settings)
    print(
        f"RL Logging Board on http://{settings.host}:{settings.port}{settings.url_prefix} (runs under {settings.root})"
    )
    app.run(host=settings.host, port=settings.port, debug=False)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="app.py", description="RL Logging Board")
    sub = parser.add_subparsers(dest="cmd")
    p = sub.add_parser("serve", help="serve the web app (default)")
    p.add_argument("--root", help="rollout root: one sub-folder of *.jsonl per run")
    p.add_argument("--cache-dir")
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p = sub.add_parser("ingest", help="ingest a rollout root or one run folder into the cache")
    p.add_argument("path")
    p.add_argument("--cache-dir")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p = sub.add_parser("export", help="export one row per response")
    p.add_argument("path")
    p.add_argument("--run", required=True)
    p.add_argument("--step", type=int)
    p.add_argument("--format", default="csv")
    p.add_argument("-o", "--output")
    p.add_argument("--cache-dir")
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0].startswith("--"):
        argv = ["serve", *argv]
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    return {"serve": cmd_serve, "ingest": cmd_ingest, "export": cmd_export}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
else:
    app = create_app()
    server = app.server
