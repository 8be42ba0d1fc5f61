"""The drifting-tokens page's view state (``/drift?run=R&a=1&b=60&metric=log_ratio&min_n=5``), the board it
resolves to, and what the page shows for a URL (:func:`drift_page`: the page's layout and its JSON answer
both draw from it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields

import polars as pl

from data.token_drift import (
    DEFAULT_DRIFT_METRIC,
    DEFAULT_MIN_N,
    DRIFT_METRICS,
    TOP,
    drifting_tokens,
    exact_token_pattern,
)
from data.token_frames import decode_expr
from data.token_frames import metric_label as metric_label
from data.views import links, paths
from data.views.codec import encode, first, get_choice, get_int, key_notices


@dataclass(frozen=True)
class DriftView:
    """Which run, the two steps compared (``a`` None: the run's first step; ``b`` None: its last), the
    per-token metric whose mean is compared and the fewest times a token must be seen at each step."""

    run: str | None = None
    a: int | None = None
    b: int | None = None
    metric: str = DEFAULT_DRIFT_METRIC
    min_n: int = DEFAULT_MIN_N

    @classmethod
    def from_query(cls, query: Mapping, ctx) -> tuple[DriftView, list[str]]:
        """Decode a query (parsed or ``layout(**query)``); bad values fall back with a notice each. ``ctx``:
        the run's :class:`data.run_context.RunContext` (a step the run lacks is resolved by its rule)."""
        msgs = key_notices(query, (f.name for f in fields(cls)))
        msgs += ctx.notices
        steps = []
        for key in ("a", "b"):
            step = get_int(query, key, msgs)
            if step is not None and ctx.run is not None:
                step, more = ctx.step(step)
                msgs += more
            steps.append(step)
        metric = get_choice(query, "metric", DRIFT_METRICS, msgs, DEFAULT_DRIFT_METRIC)
        min_n = get_int(query, "min_n", msgs, DEFAULT_MIN_N)
        if min_n is None or min_n < 1:
            msgs.append(f"Ignored min_n={min_n}: a token is seen at least once.")
            min_n = DEFAULT_MIN_N
        return cls(ctx.run, steps[0], steps[1], metric, min_n), msgs

    def to_query(self) -> str:
        return encode(
            [
                ("run", self.run),
                ("a", self.a),
                ("b", self.b),
                ("metric", None if self.metric == DEFAULT_DRIFT_METRIC else self.metric),
                ("min_n", None if self.min_n == DEFAULT_MIN_N else self.min_n),
            ]
        )

    def steps(self, run_steps: list[int]) -> tuple[int, int] | None:
        """The two steps compared: the URL's, else the run's first and last (None for a run of no step)."""
        if not run_steps:
            return None
        return (run_steps[0] if self.a is None else self.a), (run_steps[-1] if self.b is None else self.b)


def board_rows(store, view: DriftView, steps: list[int], top: int = TOP) -> tuple[pl.DataFrame, int]:
    """The board's first ``top`` rows (:data:`data.token_drift.DRIFT_SCHEMA`, with ``pattern``: the token
    filter of exactly that token) and how many tokens it ranks."""
    pair = view.steps(steps)
    if pair is None or store is None:
        return pl.DataFrame(), 0
    ranked = drifting_tokens(store, pair[0], pair[1], view.metric, view.min_n)
    head = ranked.head(top)
    patterns = [exact_token_pattern(t) for t in head.get_column("token").to_list()]
    return head.with_columns(
        pl.Series("pattern", patterns, pl.String), decode_expr().alias("text")
    ), ranked.height


def metric_options() -> list[tuple[str, str]]:
    """``(metric, label)`` of the metrics a board compares."""
    return [(m, metric_label(m)) for m in DRIFT_METRICS]


def explain(view: DriftView, pair: tuple[int, int], ranked: int, shown: int) -> str:
    """The board's line of what it ranks, in words."""
    name = metric_label(view.metric)
    return (
        f"{ranked:,} tokens seen at least {view.min_n} times at both step {pair[0]} and step {pair[1]}, ranked "
        f"by how far their mean {name} moved (|mean at {pair[1]} − mean at {pair[0]}|); the first {shown} "
        "shown. A token is its string as the file gives it; its mean is over every position holding it at "
        "that step."
    )


# Why the page shows no board: no runs, the URL's run is not under the root, the run is still being read,
# it has no step yet, no token is seen often enough at both steps.
NO_RUNS, UNKNOWN_RUN, INGESTING, EMPTY, NO_TOKENS = (
    "no-runs",
    "unknown-run",
    "ingesting",
    "empty",
    "no-tokens",
)
# What the page's empty state says for each (its title), and the JSON answer's notice with a full stop.
EMPTY_TITLES = {NO_RUNS: "No runs found under the rollout root", EMPTY: "No responses in this run yet",
                NO_TOKENS: "No tokens to compare"}  # fmt: skip


@dataclass(frozen=True)
class DriftPage:
    """The drifting-tokens page of one URL: the ``run`` shown, the ``view`` as decoded (None before the run
    is known), the ``notices`` above the content, the two steps compared (``pair``), the board's ``rows``
    (:func:`board_rows`' columns and ``href_a``, ``href_b``, ``href_all``: the responses holding the token
    at step A, at step B, at every step), how many tokens it ranks (``ranked``), its line of what it ranks
    (``explain``) and why there is no board (``problem``, one of :data:`NO_RUNS` …; None with one; ``why``
    its text where the page gives one)."""

    run: str | None
    view: DriftView | None
    notices: list[str]
    problem: str | None = None
    why: str = ""
    pair: tuple[int, int] | None = None
    rows: list[dict] = field(default_factory=list)
    ranked: int = 0
    explain: str = ""
    store: object = None


def drift_page(query: Mapping, board, wait: float, prefix: str = "") -> DriftPage:
    """The :class:`DriftPage` of ``query`` (parsed, or ``layout(**query)``'s); ``board``: the app's board;
    ``prefix``: the app's URL prefix, put before every link."""
    if not board.runs():
        return DriftPage(None, None, [], NO_RUNS)
    ctx = board.open_run(first(query, "run"), paths.DRIFT, wait)
    if ctx.run is None:
        return DriftPage(None, None, list(ctx.notices), UNKNOWN_RUN)
    view, notes = DriftView.from_query(query, ctx)
    if ctx.store is None:
        return DriftPage(ctx.run, view, [], INGESTING)
    notes = [*notes, *board.failure_notices(ctx.run)]
    steps = ctx.step_list
    pair = view.steps(steps)
    if pair is None:
        return DriftPage(ctx.run, view, notes, EMPTY, store=ctx.store)
    rows, ranked = board_rows(ctx.store, view, steps)
    if not ranked:
        why = f"No token is seen {view.min_n} times or more at both steps with a {metric_label(view.metric)}."
        return DriftPage(ctx.run, view, notes, NO_TOKENS, why, pair, store=ctx.store)
    out = []
    for r in rows.to_dicts():
        token = r["pattern"]
        out.append(
            {
                **r,
                "href_a": links.token_responses(ctx.run, pair[0], token, view.metric, prefix),
                "href_b": links.token_responses(ctx.run, pair[1], token, view.metric, prefix),
                "href_all": links.token_responses(ctx.run, "all", token, view.metric, prefix),
            }
        )
    return DriftPage(
        ctx.run, view, notes, None, "", pair, out, ranked, explain(view, pair, ranked, len(out)), ctx.store
    )
