"""The token page's previous / next: through the rows of the responses view the user came from (the token
page's ``back``), in that view's filter and sort, else through the step's responses in file order."""

from __future__ import annotations

from dataclasses import dataclass

from data.responses import sortable_columns
from data.search.order import walk
from data.tokens import TokenView
from data.views.codec import parse_search
from data.views.responses import ResponsesView
from data.views.tokens import TokensState


@dataclass(frozen=True)
class TokenNav:
    """Previous / next response of the token page and where the shown one sits (``text``). ``prev`` and
    ``next`` are ``(sample id, back)``: the response and the responses view its link returns to (the
    same view with that response selected); None at either end."""

    prev: tuple[str, str] | None
    next: tuple[str, str] | None
    text: str


def navigation(state: TokensState, view: TokenView, board, seconds: float) -> TokenNav:
    """Previous / next of the token page: through the rows of the responses view the user came from
    (``state.back``: its filter and its sort, as its grid shows them; '3 of 20 responses at step 25 · …'),
    else through the responses of the step in file order (source file, line)."""
    came_from = ""
    ctx = board.open_run(state.run, wait=0) if state.back else None
    if ctx is not None and ctx.store is not None:
        store, steps = ctx.store, ctx.step_list
        back_view, _ = ResponsesView.from_query(parse_search(state.back), ctx, sortable_columns(store))
        if back_view.run in (None, state.run):
            ends = (board.settings.pad_tokens, board.settings.end_tokens)
            w = walk(store, back_view, steps, state.sample, seconds, ends)
            if w is not None:

                def link(sample):
                    return (sample, back_view.with_(sample=sample).to_query().lstrip("?")) if sample else None

                text = f"{w.index + 1} of {w.count} responses {back_view.describe(steps)}"
                return TokenNav(link(w.prev_id), link(w.next_id), text)
            came_from = " — not one of the responses you came from"
    nav = view.nav

    def same_back(sample):
        return (sample, state.back) if sample else None

    text = (
        f"response {nav.index + 1} of {nav.count} in step {nav.step} (file order)" if nav.index >= 0 else ""
    )
    return TokenNav(same_back(nav.prev_id), same_back(nav.next_id), text + came_from if text else "")
