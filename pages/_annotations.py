"""The annotation controls' callbacks (issue 38), registered by the responses and token pages with their
own ids (a leading underscore: Dash's page loader skips this module, which is no page of its own).

A write checks, in this order: who may write (auth.writer: the basic-auth user, else "anonymous"; a
read-only token never), the line (data.annotations.record: label of the run's set, note <= 8 KB), then
the file's size and the writer's rate under the file's lock (data.annotations.save).
"""

from __future__ import annotations

from dash import Input, Output, State, callback, clientside_callback, ctx, dcc, html, no_update
from dash.exceptions import PreventUpdate

import auth
from components import annotations as ui
from components.layout import url_prefix
from data import annotation_export as ax
from data import annotations as an
from data.service import UnknownRun, board
from data.views import paths
from data.views.codec import encode, first, parse_search

with_label_column = ui.with_label_column  # the responses grid's label column (components.annotations)


def ids(page: str, span: bool = False) -> dict:
    """The control's ids on ``page`` (``responses`` or ``tokens``)."""
    keys = ["label", "note", "save", "remove", "status", "list", "filter", "key"]
    return {k: f"{page}-ann-{k}" for k in [*keys, *(["from", "to", "spans"] if span else [])]}


def responses_bar(run: str | None, label: str | None, sample: str | None = None) -> html.Div:
    """The responses page's label filter and the control of the selected response (``sample``, listed
    with its annotations: the control's callback runs when another response is selected)."""
    i, (labels, problems) = ids("responses"), label_set(run)
    # A label the URL names that the set lacks (the set was edited) is still offered, to be seen and cleared.
    shown = labels if label is None or label in labels else (*labels, label)
    base = url_prefix().rstrip("/") + paths.EXPORT
    hrefs = [(f, base + encode([("run", run), ("annotated", 1), ("format", f)])) for f in ax.FORMATS]
    return html.Div(
        [
            html.Div(
                [ui.label_filter(i["filter"], shown, label), ui.export_links(hrefs)], className="d-flex mb-1"
            ),
            dcc.Store(id=i["key"], data={"run": run, "sample": sample}),
            ui.label_control(i, labels, problems=problems, listing=_listing(run, sample)),
        ]
    )


def tokens_card(run: str, sample: str) -> html.Div:
    """The token page's span control for the response shown (its run and sample in a store)."""
    i = ids("tokens", span=True)
    keep = [dcc.Store(id=i["key"], data={"run": run, "sample": sample}), dcc.Store(id=i["spans"])]
    labels, problems = label_set(run)
    return html.Div([*keep, ui.label_control(i, labels, span=True, problems=problems)], className="mt-2")


def label_set(run: str | None) -> tuple[tuple[str, ...], list[str]]:
    """``(labels, problems)``: the label set of ``run`` (its rlboard.toml's, the root's, or the defaults),
    and what of those files could not be used."""
    b = board()
    try:
        run_dir = b.run_dir(run) if run else None
    except UnknownRun:
        run_dir = None
    return an.label_set(run_dir, b.settings.root if run_dir is not None else None)


def _listing(run: str | None, sample: str | None) -> list:
    if not run or not sample:
        return [html.Span("Select a response to label it.", className="text-muted")]
    annotated = an.of_run(board().settings, run)
    items = [(a.label, a.span_text(), a.note, a.who, a.when) for a in annotated.of(sample)]
    return ui.annotation_list(items, annotated.notice())


def _write(run, sample, label, note, span) -> tuple[str, bool]:
    """Save (``label``) or remove (None) the annotation of ``sample`` and ``span``: ``(message, saved)``."""
    settings = board().settings
    who, refusal = auth.writer(settings)
    if refusal is not None:
        return refusal, False
    try:  # only a run of the root has a file: a made-up run= creates none
        board().run_dir(run or "")
    except UnknownRun:
        return "Not saved: no run of this board is shown.", False
    try:
        line = an.record(sample, label, label_set(run)[0], note, who, span)
        an.save(settings, run, line)
    except an.AnnotationError as e:
        return str(e), False
    except OSError as e:
        return f"Not saved: the annotations file could not be written ({e.strerror or e}).", False
    what = f"Labelled {label!r}" if label else "Removed"
    return f"{what} ({'whole response' if span is None else f'tokens {span[0]}–{span[1]}'}) as {who}.", True


def _span(lo, hi) -> tuple[int, int] | None | str:
    """The token span of the inputs (None: both empty, the whole response), or why it is not one."""
    if lo in (None, "") and hi in (None, ""):
        return None
    if lo in (None, "") or hi in (None, ""):
        return "Not saved: give the first and the last position of the span (or neither)."
    lo, hi = int(lo), int(hi)
    return (min(lo, hi), max(lo, hi))


def register_responses(url, view: str, grid: str) -> None:
    """The responses page's callbacks: the label filter kept in the URL, the control of the selected
    response (``sample=`` of the view), and the grid's label column refreshed after a write."""
    i = ids("responses")

    # A URL (Back, Forward, a link) sets the filter, in the browser: the page is built with the URL's
    # label, so a page load asks the server nothing for it.
    clientside_callback(
        """function (search, value) {
            const inUrl = new URLSearchParams(search || "").get("label") || null;
            return inUrl !== (value || null) ? inUrl : window.dash_clientside.no_update;
        }""",
        Output(i["filter"], "value"),
        Input(url, "search"),
        State(i["filter"], "value"),
        prevent_initial_call=True,
    )

    @callback(
        Output(url, "search", allow_duplicate=True),
        Input(i["filter"], "value"),
        State(url, "search"),
        prevent_initial_call=True,
    )
    def _label_filter(value, search):
        """The filter's choice writes ``label=`` into the URL (nothing when the URL has it already)."""
        query = parse_search(search)
        if (value or None) == (first(query, "label") or None):
            raise PreventUpdate
        pairs = [(k, v) for k, vs in query.items() if k != "label" for v in vs]
        return encode([*pairs, ("label", value or None)])

    # The selected response (run and sample of the view), passed on when it changes: a sort or a filter
    # changes the view, not what the control shows.
    clientside_callback(
        """function (view, key) {
            const q = new URLSearchParams(view || "");
            const run = q.get("run"), sample = q.get("sample");
            if (key && key.run === run && key.sample === sample) { return window.dash_clientside.no_update; }
            return {run: run, sample: sample};
        }""",
        Output(i["key"], "data"),
        Input(view, "data"),
        State(i["key"], "data"),
        prevent_initial_call=True,
    )

    @callback(
        Output(i["status"], "children"),
        Output(i["list"], "children"),
        Input(i["key"], "data"),
        Input(i["save"], "n_clicks"),
        Input(i["remove"], "n_clicks"),
        State(i["label"], "value"),
        State(i["note"], "value"),
        prevent_initial_call=True,
    )
    def _annotate(key, _save, _remove, label, note):
        run, sample = (key or {}).get("run"), (key or {}).get("sample")
        if ctx.triggered_id in (i["save"], i["remove"]):
            if not sample:
                return ui.status("Select a response first.", False), no_update
            message, ok = _write(run, sample, label if ctx.triggered_id == i["save"] else None, note, None)
            return ui.status(message, ok), _listing(run, sample)
        return "", _listing(run, sample)

    clientside_callback(ui.refresh_js(grid), Input(i["status"], "children"), prevent_initial_call=True)


def register_tokens(strip: str, strip_done: str, strip_more_done: str) -> None:
    """The token page's callbacks: the span control (first and last position, or a click and a shift-click
    on the strip), the response's annotations listed, and its spans marked on the strip."""
    i = ids("tokens", span=True)

    @callback(
        Output(i["status"], "children"),
        Output(i["list"], "children"),
        Output(i["spans"], "data"),
        Input(i["key"], "data"),
        Input(i["save"], "n_clicks"),
        Input(i["remove"], "n_clicks"),
        State(i["label"], "value"),
        State(i["note"], "value"),
        State(i["from"], "value"),
        State(i["to"], "value"),
    )
    def _annotate(key, _save, _remove, label, note, lo, hi):
        run, sample = (key or {}).get("run"), (key or {}).get("sample")
        message = ""
        if ctx.triggered_id in (i["save"], i["remove"]):
            span = _span(lo, hi)
            if isinstance(span, str):
                message = ui.status(span, False)
            else:
                text, ok = _write(run, sample, label if ctx.triggered_id == i["save"] else None, note, span)
                message = ui.status(text, ok)
        spans = an.spans_of(an.of_run(board().settings, run), sample) if run and sample else []
        return message, _listing(run, sample), spans

    clientside_callback(
        ui.mark_js(strip, i["from"], i["to"]),
        Input(i["spans"], "data"),
        Input(strip_done, "data"),
        Input(strip_more_done, "data"),
    )
