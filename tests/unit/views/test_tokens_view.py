"""The token page's view state (data/views/tokens.py): its URL round trip and fallbacks."""

from __future__ import annotations

from data.views.codec import parse_search
from data.views.tokens import TokensState


def test_tokens009_url_state_round_trip():
    """Defaults are omitted; a bad metric or pad flag falls back with a notice; back is re-encoded."""
    state, notes = TokensState.from_query({})
    assert state == TokensState() and notes == [] and state.to_query() == ""
    state, notes = TokensState.from_query(
        {"run": "r", "sample": "s-1", "metric": "value", "pads": "1", "back": "?run=r&step=3&q=a b"}
    )
    assert (state.metric, state.pads, state.back) == ("value", True, "run=r&step=3&q=a+b")
    again, _ = TokensState.from_query(parse_search(state.to_query()))
    assert again == state
    state, notes = TokensState.from_query({"metric": "bogus", "pads": "maybe"})
    assert state.metric == "kl" and state.pads is False and len(notes) == 2
