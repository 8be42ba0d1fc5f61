"""The token page's view state (``/tokens?run=R&sample=ID&metric=M&pads=1&back=...``)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from urllib.parse import urlencode

from data.tokens import STRIP_METRICS, is_file_metric
from data.views.codec import encode, first, get_bool, get_choice, key_notices, parse_search

DEFAULT_METRIC = "kl"


@dataclass(frozen=True)
class TokensState:
    """The token page's URL state; ``back`` is the responses view's query string (without ``?``)."""

    run: str | None = None
    sample: str | None = None
    metric: str = DEFAULT_METRIC
    pads: bool = False
    back: str = ""

    @classmethod
    def from_query(cls, query) -> tuple[TokensState, list[str]]:
        """State from a parsed query (or ``layout(**query)`` kwargs) and a notice per ignored value."""
        notes = key_notices(query, (f.name for f in fields(cls)))
        raw = first(query, "metric")
        if is_file_metric(raw):  # a per-token field of the trainer's own: checked against the response
            metric = raw
        else:
            metric = get_choice(query, "metric", STRIP_METRICS, notes, DEFAULT_METRIC)
        pads = get_bool(query, "pads", notes, False)
        # Re-encoded so that only a query string ever follows "/responses" in the link back.
        back = urlencode(parse_search(first(query, "back") or ""), doseq=True)
        return cls(first(query, "run") or None, first(query, "sample") or None, metric, pads, back), notes

    def to_query(self) -> str:
        """``?run=…&sample=…`` with defaults left out ('' for the default state)."""
        return encode(
            [
                ("run", self.run),
                ("sample", self.sample),
                ("metric", None if self.metric == DEFAULT_METRIC else self.metric),
                ("pads", True if self.pads else None),
                ("back", self.back or None),
            ]
        )
