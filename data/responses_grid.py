"""What the responses page shows of a view, as data: a block of the grid's rows (each with its link to the
token page), the figures of the summary line and the selected response's texts. The page's callbacks and
its JSON answer (``api.answers.responses``) both call these, so that the two cannot disagree."""

from __future__ import annotations

from dataclasses import dataclass

from data import annotations, prompts, responses
from data import response_columns as rc
from data.queries import QueryError, SearchStopped, regex_error
from data.search import order as search_order
from data.store import RunStore
from data.views import links
from data.views.codec import regex_notice
from data.views.responses import ResponsesView


def _ends(settings) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The pad and end tokens that say whether a response was cut (the ``truncated`` filter)."""
    return settings.pad_tokens, settings.end_tokens


def grid_rows(
    store: RunStore, view: ResponsesView, steps: list[int], settings, start: int, end: int, prefix: str = ""
) -> tuple[list[dict], int | None]:
    """``(rows, count)``: rows ``start:end`` of ``view``'s matches in its sort (see
    :func:`data.responses.page_rows`) as the grid shows them (NaN as None, a search's matches marked in the
    previews, how each ended where that column is shown, ``tokens_href`` its token page under ``prefix``,
    ``label`` the annotations' labels it holds);
    ``count`` None while a search over every step is still being counted. ``settings``: the board's.
    Raises :class:`data.queries.QueryError` as ``page_rows`` does (a stopped search)."""
    flt = view.response_filter(steps, _ends(settings))
    df, count = responses.page_rows(
        store, flt, view.sort, view.descending, start, end, settings.search_seconds
    )
    rows = responses.mark_previews(responses.json_rows(df), view.q)
    rows = rc.with_ends(store, rows, view, settings)
    labels = (
        annotations.labels_for(settings, view.run, [r.get("sample_id") for r in rows]) if view.run else ()
    )
    hrefs = links.rows_tokens(view, [r["sample_id"] for r in rows], prefix, [r.get("tok_pos") for r in rows])
    for row, held, href in zip(rows, labels or [""] * len(rows), hrefs, strict=True):
        row["tokens_href"] = href
        row["label"] = held  # the labels the team gave it (data.annotations), "" for none
    return rows, count


@dataclass(frozen=True)
class Summary:
    """The summary line's figures: ``count`` matches (None while a search over every step is counted; then
    ``share`` of it done) of ``scope`` responses, the matches' ``mean_reward``, the warning beside it
    (``partial``: a partial last step, a token filter cut off) and, for a search stopped at its time
    limit, why (``stopped``: the page then shows no rows)."""

    count: int | None
    scope: int
    mean_reward: float | None = None
    share: float | None = None
    partial: str | None = None
    stopped: str | None = None


def summary(store: RunStore, view: ResponsesView, steps: list[int], settings) -> Summary | None:
    """The :class:`Summary` of ``view``; None for a search pattern refused (the page says so beside the
    search box, see :func:`query_error`)."""
    try:
        got = search_order.count_or_progress(
            store, view.response_filter(steps, _ends(settings)), settings.search_seconds
        )
    except SearchStopped as e:
        return Summary(None, 0, stopped=str(e))
    except QueryError:
        return None
    if isinstance(got, search_order.Counting):
        return Summary(None, got.scope, share=got.share)
    partial = responses.summary_note(store, view, steps, settings.search_seconds)
    return Summary(got.count, got.scope, got.mean_reward, partial=partial)


def query_error(view: ResponsesView) -> str | None:
    """Why the view's search pattern is not applied (an invalid regular expression), or None."""
    return regex_error(view.q) if view.q else None


def banner_notices(view: ResponsesView, notices: list[str]) -> list[str]:
    """``notices`` without the one refusing the view's search pattern: the page says it beside the search
    box (:func:`query_error`), and said it twice when the banner above repeated it."""
    error = query_error(view)
    return [n for n in notices if error is None or n != regex_notice(error)]


def selected(
    store: RunStore, view: ResponsesView, settings, prefix: str = ""
) -> tuple[dict | None, str | None, str | None]:
    """``(texts, tokens_href, group_href)`` of the response ``view`` selects (``sample=``): its texts and
    scalars with the search's matches marked (:func:`data.responses.sample_texts`), its token page and
    its group's view (None on a run without groups); all None when it selects none or an unknown one."""
    q = view.q if view.q and not query_error(view) else None
    texts = responses.sample_texts(store, view.sample, settings.pad_tokens, q) if view.sample else None
    href = links.row_tokens(view, view.sample, prefix) if texts else None
    return texts, href, prompts.group_link(store, view.run, texts, prefix)
