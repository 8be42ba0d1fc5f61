"""The token page's view state (``/tokens?run=R&sample=ID&metric=M&pads=1&pos=P&back=...``, or ``&step=S`` and
no sample: that step's response of the largest KL) and the response it resolves to."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from urllib.parse import urlencode

from data.run_context import context_of
from data.tokens import STRIP_METRICS, TokenView, default_sample, is_file_metric, token_view
from data.views import paths
from data.views.codec import encode, first, get_bool, get_choice, get_int, key_notices, parse_search
from data.views.gap import correction
from data.views.paths import shown_run

DEFAULT_METRIC = "kl"


@dataclass(frozen=True)
class TokensState:
    """The token page's URL state; ``back`` is the responses view's query string (without ``?``); ``step``
    chooses the response when ``sample`` is None (see :func:`resolve`; the navbar's link carries it); ``pos``
    the position the strip opens at, outlined (what a row of the token filter opens)."""

    run: str | None = None
    sample: str | None = None
    metric: str = DEFAULT_METRIC
    pads: bool = False
    back: str = ""
    step: int | None = None
    rule: str | None = None  # a correction whose tokens the strip marks (data.infer_gap.RULES), at C = c
    c: float | None = None
    pos: int | None = None

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
        step = get_int(query, "step", notes, None)
        rule, c = correction(query, notes) if first(query, "rule") or first(query, "c") else (None, None)
        pos = get_int(query, "pos", notes)
        if pos is not None and pos < 0:
            notes.append(f"Ignored pos={pos}: a position counts from 0.")
            pos = None
        run, sample = first(query, "run") or None, first(query, "sample") or None
        return cls(run, sample, metric, pads, back, step, rule, c, pos), notes

    def to_query(self) -> str:
        """``?run=…&sample=…`` with defaults left out ('' for the default state)."""
        return encode(
            [
                ("run", self.run),
                ("sample", self.sample),
                ("metric", None if self.metric == DEFAULT_METRIC else self.metric),
                ("pads", True if self.pads else None),
                ("back", self.back or None),
                ("step", self.step),
                ("rule", self.rule),
                ("c", self.c),
                ("pos", self.pos),
            ]
        )

    def correction(self) -> tuple[str, float] | None:
        """The correction whose tokens the strip marks, ``(rule, C)``, or None."""
        return None if self.rule is None or self.c is None else (self.rule, self.c)


# Why the page shows no response: no runs, the URL's run is not under the root, the run is still being
# read, it has no response yet, the URL's sample is not in it.
NO_RUNS, UNKNOWN_RUN, INGESTING, EMPTY, UNKNOWN_SAMPLE = (
    "no-runs",
    "unknown-run",
    "ingesting",
    "empty",
    "unknown-sample",
)
# What the page's empty state says for each (its title), and the JSON answer's notice with a full stop.
EMPTY_TITLES = {NO_RUNS: "No runs found under the rollout root", EMPTY: "No responses in this run yet",
                UNKNOWN_SAMPLE: "Response not found"}  # fmt: skip


def resolve(state: TokensState, board, wait: float) -> tuple[TokensState, TokenView | None, str | None]:
    """``state`` with the run and sample the page shows filled in (the first run; when the URL names no
    response, the one of the largest KL sum at the URL's step, by the one step rule, or else at the run's
    last step: see :func:`~data.tokens.default_sample`), that response's :class:`~data.tokens.TokenView`, and why there is none (one of
    :data:`NO_RUNS` … :data:`UNKNOWN_SAMPLE`; None when there is a view). ``board``: the app's board."""
    runs = board.runs()
    if not runs:
        return state, None, NO_RUNS
    run = shown_run(paths.TOKENS, state.run, runs)
    if run is None:
        return state, None, UNKNOWN_RUN
    state = replace(state, run=run)
    store = board.store(state.run, wait=wait)
    if store is None:
        return state, None, INGESTING
    if state.sample is None:
        step, _ = context_of(state.run, store).step(state.step)
        chosen = None if step is None else default_sample(store, step)
        if chosen is None:
            return state, None, EMPTY
        state = replace(state, sample=chosen)
    view = token_view(store, state.sample, board.settings.pad_tokens)
    return state, view, (None if view is not None else UNKNOWN_SAMPLE)
