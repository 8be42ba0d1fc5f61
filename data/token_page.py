"""What the token page shows for a URL on a fresh load, composed once from the data calls: the response the
URL resolves to (or why there is none), the notices above it, its header, previous / next, key figures,
texts, the strip (its metric, what the response lacks, its tokens, its colour scale), the inputs of the
per-position charts, the top-token tables and the inference–trainer gap line. The page's body
(``pages.tokens``) and its JSON answer (``api.answers.tokens``) both draw from :func:`token_page`, so the
two cannot disagree."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import polars as pl

from data import prompts, token_nav, token_scale, tokens
from data.strip_scale import StripScale
from data.views import links, paths
from data.views import tokens as views
from data.views.paths import unknown_run_notice
from data.views.tokens import TokensState


@dataclass(frozen=True)
class StripView:
    """The strip as the page draws it: ``metric`` it is coloured by (the URL's, or the fallback; None: no
    colour), its ``label``, the notes on what the response lacks (``lacks``), the visible positions
    (``shown``, with each one's place on the scale, ``scale.column``), the ``scale`` (None without a
    metric), the pad positions left out (``hidden``), the ``(column, label)`` pairs of a token's hover text
    (``hover``) and the legend's other entries (``keys``)."""

    metric: str | None
    label: str
    lacks: list[str]
    shown: pl.DataFrame
    scale: StripScale | None
    hidden: int
    hover: list[tuple[str, str]]
    keys: list[tuple[str, str]]


@dataclass(frozen=True)
class TokenPage:
    """The token page of one URL. ``state``: the view state as resolved (run and sample filled in);
    ``problem``: why no response is shown (one of :data:`data.views.tokens.NO_RUNS` …), else None;
    ``notices``: the lines above the content. With a response (``view``): where it comes from
    (``source_line``, ``where``), how it ended (``end``), the links (``group_href``, ``prev_href``,
    ``next_href``, ``back_href``), where it sits among the responses walked (``nav_text``), its key figures
    and texts, the ``strip`` (None for a response without token fields), the top-token tables ``(by, rows,
    title)`` and the gap line's figures (see :func:`data.tokens.infer_gap_figures`)."""

    state: TokensState
    problem: str | None
    notices: list[str]
    back_href: str
    view: tokens.TokenView | None = None
    source_line: str = ""
    where: str = ""
    end: str | None = None
    group_href: str | None = None
    prev_href: str | None = None
    next_href: str | None = None
    nav_text: str = ""
    key_figures: list = field(default_factory=list)
    texts: list[tuple[str, str]] = field(default_factory=list)
    strip: StripView | None = None
    top: list[tuple[str, pl.DataFrame, str]] = field(default_factory=list)
    gap: list = field(default_factory=list)


def strip_of(state: TokensState, view: tokens.TokenView, board, wait: float):
    """``(metric, lacks, visible tokens, scale)`` of the page's strip (:func:`data.tokens.strip`), clipped at
    the run's per-token quantiles (:func:`data.token_scale.run_scale`)."""
    store = board.store(state.run, wait=wait) if state.run else None
    run = None if store is None else token_scale.run_scale(store)
    return tokens.strip(view, state.metric, state.pads, state.correction(), run)


def strip_view(state: TokensState, view: tokens.TokenView, board, wait: float) -> StripView:
    """The :class:`StripView` of ``view`` for ``state`` (a response with token fields)."""
    metric, lacks, shown, scale = strip_of(state, view, board, wait)
    label = tokens.metric_label(metric, view.file_fields) if metric else ""
    hidden = view.tokens.height - shown.height
    hover = tokens.hover_columns(view)
    return StripView(metric, label, lacks, shown, scale, hidden, hover, tokens.strip_keys(view))


def chart_inputs(state: TokensState, view: tokens.TokenView):
    """``(visible positions, fields, labels, the trainer's own fields as (column, label))``: what the page's
    per-position charts (``components.token_page.charts``) are drawn from."""
    visible = tokens.visible_tokens(view.tokens, state.pads)
    fields_of_file = tokens.file_field_columns(view.file_fields)
    return visible, view.fields, tokens.metric_labels(view.file_fields), fields_of_file


def token_page(state: TokensState, notes: list[str], board, wait: float, prefix: str = "") -> TokenPage:
    """The :class:`TokenPage` of ``state`` (``notes``: the URL's notices, from ``TokensState.from_query``);
    ``board``: the app's board; ``prefix``: the app's URL prefix, put before every link."""
    chosen = state.sample is not None
    state, view, problem = views.resolve(state, board, wait)
    run = state.run
    back_href = links.responses_back(state.back, run, prefix)
    if problem == views.UNKNOWN_RUN:
        notice = unknown_run_notice(paths.TOKENS, run, None, board.runs(), board.scan().unreadable)
        return TokenPage(state, problem, [*notes, notice], back_href)
    if problem in (views.NO_RUNS, views.INGESTING):
        return TokenPage(state, problem, [], back_href)
    if problem == views.EMPTY:  # a run of only bad lines says so, and where to see why
        return TokenPage(state, problem, [*notes, *board.failure_notices(run)], back_href)
    if problem == views.UNKNOWN_SAMPLE:
        return TokenPage(
            state, problem, [*notes, f"Unknown response {state.sample!r} in run {run!r}."], back_href
        )
    if not chosen:
        if state.step is not None:  # the step chosen by the one rule, said and carried as on every page
            shown, said = board.open_run(run, wait=wait).step(state.step)
            state, notes = replace(state, step=shown), [*notes, *said]
        notes = [*notes, tokens.default_note(view)]
    info = view.info
    nav = token_nav.navigation(state, view, board, board.settings.search_seconds)

    def neighbour(link):
        if link is None:
            return None
        sample, back = link
        return links.tokens(run, sample, back, metric=state.metric, pads=state.pads, prefix=prefix)

    settings, store = board.settings, board.store(run, wait=wait)
    with_fields = bool(view.fields)
    return TokenPage(
        state,
        None,
        [*notes, *board.failure_notices(run)],
        back_href,
        view=view,
        source_line=f"{info.get('source')}:{info.get('line')}",
        where=f"{run} · step {info.get('step')}",
        end=tokens.view_end(store, view, settings.pad_tokens, settings.end_tokens),
        group_href=prompts.group_link(store, run, info, prefix),
        prev_href=neighbour(nav.prev),
        next_href=neighbour(nav.next),
        nav_text=nav.text,
        key_figures=tokens.key_figures(view),
        texts=tokens.response_texts(view, state.pads, settings.pad_tokens),
        strip=strip_view(state, view, board, wait) if with_fields else None,
        top=tokens.top_tables(view) if with_fields else [],
        gap=tokens.infer_gap_figures(view, state.correction()) if with_fields else [],
    )
