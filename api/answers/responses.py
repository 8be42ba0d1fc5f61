"""The responses page's answer: the grid's first block of the view's rows (or its first ``limit=N``) in the
view's order, with the value columns the page shows, each response's file:line, sample id, previews and
token-page link; the selected response's texts (``sample=``); and the page's notices (parameters ignored, a
search refused or stopped, a partial last step). ``/api/v1/responses?run=R&step=S&sort=kl_mean&order=desc
&limit=10``: the 10 highest-KL responses of step S."""

from __future__ import annotations

from dataclasses import asdict

from api.answer import Answer, Table
from api.registry import store_info
from components.tables import BLOCK_SIZE, sentence
from data import response_columns as rc
from data import responses
from data import responses_grid as rg
from data.metrics.registry import PREVIEW_COLUMNS
from data.queries import QueryError
from data.service import board
from data.views import paths
from data.views.codec import first, get_int
from data.views.responses import ResponsesView

PATH, NAME = paths.RESPONSES, "responses"
STORE_WAIT = 10.0  # as the page waits for a first ingest
LIMIT = "limit"  # the API's own key (not the page's): fewer rows than the grid's first block
GRID, TEXT = "responses-grid", "responses-text"  # the page's ids of the grid and of the selected texts
ID_COLUMNS = ("source_line", "sample_id")  # the grid's first column (file:line) and its tooltip
TEXT_COLUMNS = ("sample_id", "step", "source_line", "prompt", "response", "ref_response", "reward",
                "ref_reward", "reward_gain", "prompt_key", "group_id", "tokens_href", "group_href", "pieces")  # fmt: skip


def _limit(query: dict, notices: list[str]) -> int:
    """How many of the first block's rows the answer gives: ``limit=`` between 1 and the grid's block."""
    n = get_int(query, LIMIT, notices, BLOCK_SIZE)
    if n < 1 or n > BLOCK_SIZE:
        notices.append(
            f"Ignored limit={n}: the page shows its rows {BLOCK_SIZE} at a time (1 to {BLOCK_SIZE})."
        )
        return BLOCK_SIZE
    return n


def _view_json(view: ResponsesView, steps: list[int]) -> dict:
    """The view's fields (the range filters only where set: there are dozens), the step shown, its query."""
    fields = {k: v for k, v in asdict(view).items() if v is not None or not k.endswith(("_min", "_max"))}
    return {**fields, "step_shown": view.resolved_step(steps), "query": view.to_query()}


def answer(query: dict[str, list[str]]) -> Answer:
    query = dict(query)
    limit_notices: list[str] = []
    limit = _limit({LIMIT: query.pop(LIMIT, None) or []}, limit_notices)
    b = board()
    ctx = b.open_run(first(query, "run"), PATH, STORE_WAIT)
    if ctx.run is None or ctx.store is None:
        view, _ = ResponsesView.from_query(query)
        reading = [b.reading_text(ctx.run)] if ctx.run is not None else []
        return Answer(PATH, _view_json(view, []), run=ctx.run, notices=[*ctx.notices, *reading],
                      store=store_info(None))  # fmt: skip
    store, steps, settings = ctx.store, ctx.step_list, b.settings
    view, msgs = responses.view_on(query, ctx, settings)
    notices = [*msgs, *b.failure_notices(ctx.run), *limit_notices]
    got = rg.summary(store, view, steps, settings)
    # (An invalid pattern is among the view's notices already; the page repeats it beside the search box.)
    if got is not None and got.stopped is not None:
        notices.append(sentence(got.stopped))
    if got is not None and got.partial:
        notices.append(got.partial)
    table = _grid(store, view, steps, settings, limit, got)
    tables = {GRID: table}
    texts, href, group = rg.selected(store, view, settings)
    if texts is not None:
        row = {**texts, "tokens_href": href, "group_href": group}
        tables[TEXT] = Table(list(TEXT_COLUMNS), [{k: row.get(k) for k in TEXT_COLUMNS}],
                             {k: v for k, v in responses.text_labels().items()})  # fmt: skip
    return Answer(PATH, _view_json(view, steps), run=ctx.run, tables=tables, main=GRID, notices=notices,
                  store=store_info(store))  # fmt: skip


def _grid(store, view: ResponsesView, steps: list[int], settings, limit: int, got) -> Table:
    """The grid's first block as the page loads it (rows 0 to :data:`BLOCK_SIZE`), its first ``limit``
    rows kept, with the columns the page shows."""
    spec = responses.table_spec(store, view.token_metric())
    value_columns = rc.with_hits(view, rc.shown(store, view))
    if view.sort not in value_columns:  # the sort's column, which the page's rows carry (hidden there)
        value_columns = (*value_columns, view.sort)
    labels = {"source_line": "file:line", **{c: h for c, h, _ in spec.columns}}
    labels |= {c: h for c, h in responses.previews()} | {"label": "label"}
    previews = [c for c in PREVIEW_COLUMNS if c in labels]
    columns = [*ID_COLUMNS, *value_columns, *previews, "label", "tokens_href"]
    labels = {c: labels[c] for c in columns if c in labels}
    if got is not None and got.stopped is not None:
        return Table(columns, [], labels, 0, f"no rows: {got.stopped}")
    try:
        rows, count = rg.grid_rows(store, view, steps, settings, 0, BLOCK_SIZE)
    except QueryError as e:  # a search stopped while reading its rows: the page shows none
        return Table(columns, [], labels, 0, f"no rows: {e}")
    marks = [f"{c}_marks" for c in previews if rows and f"{c}_marks" in rows[0]]
    kept = [{k: r.get(k) for k in [*columns, *marks]} for r in rows[:limit]]
    total = count if count is not None else None
    cut = None
    if count is None:
        cut = f"the first {len(kept)} matches; their count is still being made"
    elif len(kept) < count:
        cut = f"the first {len(kept)} of {count} rows (the page loads {BLOCK_SIZE} rows at a time)"
    return Table([*columns, *marks], kept, labels, total, cut)
