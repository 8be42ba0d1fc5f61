"""Plain HTTP routes beside the Dash pages: health check, downloads (/export, /snapshot) and the JSON API.

Each route takes its input from the query string and goes through ``data`` like a page callback does.
"""

from __future__ import annotations

import itertools
import json

from dash.exceptions import DependencyException
from flask import Flask, Response, jsonify

from data import service
from data.views import paths

VERSION = "0.1.0"
# The largest request body accepted (413 beyond). A callback POST of this app is a few KB (the biggest, the
# responses grid's state, ~10 KB); without a limit a 200 MB body added 385 MB to a worker.
MAX_BODY_BYTES = 2 * 1024 * 1024


def callback_problem(body, callback_map: dict) -> str | None:
    """Why ``body`` is not a callback request the Dash renderer could have sent for ``callback_map``, or None.

    Checks its shape against the callback it names: a known server-side output, then inputs and state as
    declared (same count; same id and property where the id is not a pattern). Values are not checked here.
    """
    if not isinstance(body, dict):
        return "the body is not a JSON object"
    output = body.get("output")
    if not isinstance(output, str) or "callback" not in callback_map.get(output, {}):
        return f"no callback for output {str(output)[:80]!r}"
    if not isinstance(body.get("outputs"), dict | list):
        return "outputs is missing"
    if not isinstance(body.get("changedPropIds", []), list):
        return "changedPropIds is not a list"
    spec = callback_map[output]
    for group in ("inputs", "state"):
        declared, given = spec.get(group, []), body.get(group, [] if group == "state" else None)
        if not isinstance(given, list) or len(given) != len(declared):
            return f"{group} do not match the callback's ({len(declared)} expected)"
        for want, item in zip(declared, given, strict=True):
            if isinstance(want.get("id"), dict) or str(want.get("id")).startswith("{"):
                # A pattern-matching id (the callback map holds it as its JSON text): Dash expands it.
                if not isinstance(item, dict | list):
                    return f"{group} do not match the callback's (a pattern's matches expected)"
                continue
            if not isinstance(item, dict) or (item.get("id"), item.get("property")) != (
                want["id"],
                want["property"],
            ):
                return f"{group} do not match the callback's ({want['id']}.{want['property']} expected)"
    return None


def guard_callbacks(app) -> None:
    """Answer a callback request the renderer could not have sent with 400 and one log line, not a 500 and
    a traceback per request: a malformed body (see :func:`callback_problem`), or values its callback cannot
    use (the exception is named, with where it was raised, in one line)."""
    import logging
    import traceback

    from dash.exceptions import PreventUpdate
    from flask import request
    from werkzeug.exceptions import HTTPException

    from data.export_turns import PAGES

    server = app.server
    endpoint = next(
        r.endpoint for r in server.url_map.iter_rules() if r.rule.endswith("_dash-update-component")
    )
    dispatch = server.view_functions[endpoint]
    log = logging.getLogger("rlboard.callbacks")

    def bad(reason: str) -> Response:
        log.warning("bad callback request from %s: %s", request.remote_addr, reason)
        return Response(f"Bad callback request: {reason}.\n", status=400, mimetype="text/plain")

    def guarded(*args, **kwargs):
        problem = callback_problem(request.get_json(silent=True), app.callback_map)
        if problem is not None:
            return bad(problem)
        try:
            with PAGES:  # an export in this process rests while a page is answered (data.export)
                return dispatch(*args, **kwargs)
        except (HTTPException, PreventUpdate):  # PreventUpdate: Dash's own handler answers 204
            raise
        except Exception as e:  # noqa: BLE001 - any failure on an input the renderer would not send
            where = traceback.extract_tb(e.__traceback__)[-1]
            output = request.get_json(silent=True)["output"]
            log.warning(
                "bad callback request from %s: %s raised %s: %s (%s:%d in %s)",
                request.remote_addr,
                output[:80],
                type(e).__name__,
                str(e)[:120],
                where.filename.rsplit("/", 1)[-1],
                where.lineno,
                where.name,
            )
            # The client is told no more than that: the log has where it failed.
            text = "Bad callback request: its callback cannot use the values sent.\n"
            return Response(text, status=400, mimetype="text/plain")

    server.view_functions[endpoint] = guarded


# The browser may run only this app's own scripts (and the inline ones Dash writes, by hash), load nothing from
# elsewhere, and show it in no frame. Styles: Dash and Plotly set style attributes. img/font data: URIs:
# Plotly's mode bar and Bootstrap's icons. script-src without 'unsafe-eval' works: no page logs a CSP
# violation in Chromium (tests/browser).
CSP = (
    "default-src 'self'; script-src 'self' {hashes}; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; "
    "object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'"
)


def security_headers(app) -> None:
    """Add X-Content-Type-Options, X-Frame-Options and a Content-Security-Policy to every response."""
    policy: list[str] = []

    @app.server.after_request
    def _headers(resp):
        if not policy:  # after the first request's set-up: every inline script is known by then
            policy.append(CSP.format(hashes=" ".join(app.csp_hashes())))
        resp.headers.setdefault("X-Content-Type-Options", "nosniff")
        resp.headers.setdefault("X-Frame-Options", "DENY")
        resp.headers.setdefault("Content-Security-Policy", policy[0])
        return resp


API = "/api/v1"  # the views as JSON: /api/v1/<view>?<the page's own query>
SNAPSHOT = "/snapshot"  # the views as one HTML file each: /snapshot/<view>?<the page's own query>


def _json_error(message: str, status: int) -> Response:
    return Response(json.dumps({"error": message}), status=status, mimetype="application/json")


def _annotated_export(query: dict) -> Response:
    """``/export?run=R&annotated=1&format=jsonl|parquet[&label=L]``: every annotation of the run with its
    response (data.annotation_export), or 400 / 404 / 503 and why, as text."""
    from data import annotation_export as ax
    from data import annotations
    from data.export import FORMATS
    from data.service import UnknownRun

    board = service.board()
    try:
        plan = ax.plan(query)
        if query.get("annotated") != ["1"]:
            raise ax.AnnotatedExportError(400, "annotated= takes 1")
        ctx = board.open_run(plan.run, None, 30.0)
        if ctx.store is None:
            try:
                board.run_dir(plan.run)
            except UnknownRun:
                raise ax.AnnotatedExportError(404, f"unknown run {plan.run!r}") from None
            raise ax.AnnotatedExportError(503, f"run {plan.run!r} is still being read; try again in a moment")
        df = ax.frame(ctx.store, annotations.of_run(board.settings, plan.run), plan.label)
    except ax.AnnotatedExportError as e:
        return Response(e.message + "\n", status=e.status, mimetype="text/plain")
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in plan.run)
    headers = {"Content-Disposition": f'attachment; filename="{safe}-annotated.{plan.fmt}"'}
    return Response(ax.to_bytes(df, plan.fmt), mimetype=FORMATS[plan.fmt], headers=headers)


def register(server: Flask, prefix: str) -> None:
    """Add the routes under the app's URL prefix (``/`` or e.g. ``/rlboard/``)."""
    import auth

    base = prefix.rstrip("/")
    server.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    auth.install(server, prefix)  # off unless RLBOARD_BASIC_AUTH / RLBOARD_TOKEN is set

    @server.route(base + "/healthz")
    def healthz():
        # 200 whenever the server is up: a root it may not read is reported here (and on the runs page),
        # not failed on, so that the container stays up to say what is wrong.
        scan = service.board().scan()
        return jsonify(
            {
                "status": "ok",
                "version": VERSION,
                "runs": len(scan.runs),
                "root": scan.status,
                "unreadable": scan.unreadable,
            }
        )

    @server.route(base + paths.EXPORT)
    def export():
        """The responses page's rows as a file: same query string as /responses, plus format=csv|jsonl."""
        from flask import request

        from data.export import (
            FORMATS,
            INCOMPLETE_HEADER,
            NOTICE_HEADER,
            export_stream,
            header_text,
            incomplete_reason,
        )
        from data.queries import QueryError
        from data.responses import ExportError, export_plan

        if "annotated" in request.args:  # the annotated responses as a dataset (data.annotation_export)
            return _annotated_export(request.args.to_dict(flat=False))
        try:
            plan = export_plan(service.board(), request.args.to_dict(flat=False), FORMATS)
            # At a lower priority than the pages (data.export_turns.taking_turns).
            chunks = export_stream(
                plan.store,
                plan.flt,
                plan.fmt,
                plan.sort,
                plan.descending,
                plan.seconds,
                plan.limit,
                shared=True,
            )
            # The first chunk before the status line: a text search that is stopped answers 400, not a
            # 200 with a cut-off body.
            first = next(chunks, b"")
        except ExportError as e:
            return Response(e.message + "\n", status=e.status, mimetype="text/plain")
        except QueryError as e:
            return Response(f"{e}\n", status=400, mimetype="text/plain")
        headers = {"Content-Disposition": f'attachment; filename="{plan.filename}"'}
        if (incomplete := incomplete_reason(plan.store)) is not None:
            headers[INCOMPLETE_HEADER] = incomplete
        if plan.notice is not None:  # a step the run lacks: the rows of the step shown, and why
            headers[NOTICE_HEADER] = header_text(plan.notice)
        body = itertools.chain([first], chunks)
        return Response(body, mimetype=FORMATS[plan.fmt], headers=headers)

    @server.route(base + API + "/<name>")
    def api_view(name: str):
        """A page's answer as JSON (api.answer.to_json): ``/api/v1/reward?run=R&step=S`` is ``/reward``'s."""
        from flask import request

        from api.answer import to_json
        from api.registry import UnknownView, by_name
        from data.queries import QueryError

        try:
            body = to_json(by_name(name)(request.args.to_dict(flat=False)))
        except UnknownView as e:
            return _json_error(str(e), 404)
        except QueryError as e:
            return _json_error(str(e), 400)
        return Response(json.dumps(body, allow_nan=False), mimetype="application/json")

    @server.route(base + SNAPSHOT + "/<name>")
    def snapshot_view(name: str):
        """A page's view as one self-contained HTML file, a download (api.snapshot): ``/snapshot/reward?run=R``
        is ``/reward?run=R``'s."""
        import datetime as dt
        import time

        from flask import request

        from api.registry import UnknownView, by_name, modules
        from api.snapshot import filename, render
        from data.queries import QueryError

        taken, t0 = dt.datetime.now(dt.UTC), time.monotonic()
        try:
            answer = by_name(name)(request.args.to_dict(flat=False))
        except UnknownView as e:
            return Response(f"{e}\n", status=404, mimetype="text/plain")
        except QueryError as e:
            return Response(f"{e}\n", status=400, mimetype="text/plain")
        query = request.query_string.decode("utf-8", "replace")
        url = request.host_url.rstrip("/") + base + modules()[name].PATH + (f"?{query}" if query else "")
        page = render(answer, name, url, taken, time.monotonic() - t0)
        headers = {"Content-Disposition": f'attachment; filename="{filename(name, answer.run, taken)}"'}
        return Response(page, mimetype="text/html", headers=headers)

    @server.route(base + API)
    def api_index():
        from api.registry import modules

        views = {n: {"page": m.PATH, "url": f"{base}{API}/{n}"} for n, m in modules().items()}
        return jsonify({"api": 1, "views": views})

    @server.errorhandler(DependencyException)
    def _unknown_component_file(_e):
        # Dash raises this for a component-suite path it did not register (e.g. "dash/../../app.py").
        return Response("Not found.", status=404, mimetype="text/plain")

    @server.errorhandler(413)
    def _too_large(_e):
        return Response(
            f"Request body too large (the limit is {MAX_BODY_BYTES // 1024 // 1024} MiB).\n",
            status=413,
            mimetype="text/plain",
        )

    @server.errorhandler(500)
    def _server_error(_e):
        # Never serve a stack trace to a browser on a shared server; the log has it.
        return Response("Internal error: see the server log.", status=500, mimetype="text/plain")
