"""The responses page's view state (``/responses?run=R&step=S&sort=kl_mean&order=desc&reward_min=0.5&q=re``),
which ``/export`` takes too."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace

from data.metrics import label
from data.metrics.registry import LENGTH_TOKENS, length_column, range_inputs
from data.queries import RANGE_COLUMNS, ResponseFilter, regex_error
from data.token_frames import HOVER_METRICS, metric_label
from data.views.codec import encode, first, get_bool, get_choice, get_float, get_regex, key_notices

ALL_STEPS = "all"
DEFAULT_SORT = "reward"
DEFAULT_ORDER = "desc"
ORDERS = ("desc", "asc")
RANGE_KEYS = tuple(RANGE_COLUMNS)  # the range filters' URL prefixes, in order (see data.metrics.registry)
# Hand-typed URLs may use the short names of the design notes (``sort=kl``).
SORT_ALIASES = {"kl": "kl_mean", "gain": "reward_gain", "len": "response_length", "length": "response_length"}
# The token filter's per-token metrics (those of a token's hover text on the token page) and its default.
TOKEN_METRICS = HOVER_METRICS
DEFAULT_TOKEN_METRIC = "kl"


def token_metric_options() -> list[tuple[str, str]]:
    """``(metric, label)`` of the token filter's per-token metrics, in the token page's order."""
    return [(m, metric_label(m)) for m in TOKEN_METRICS]


@dataclass(frozen=True)
class ResponsesView:
    """Everything that describes one view of the responses page; ``to_query()`` omits defaults.

    ``step`` is None for the run's last step (the default), ``"all"`` for every step, or a step number.
    Ranges are half-open (``min <= x < max``), as in :class:`data.queries.ResponseFilter`; ``q`` is a
    regular expression over prompt and response; ``loses`` keeps responses below their reference reward;
    ``truncated`` those that do not end with an end token, ``ended`` those that do (the two exclude each
    other: ``ended`` with ``truncated`` is ignored); ``cols`` the value columns shown, in the table's order
    (``cols=`` repeated; None: the run's defaults, see :mod:`data.response_columns`); ``sample`` is the selected response (its texts
    shown over the table). ``tok`` is the token filter: a regular expression over
    each token's string as the file gives it, with ``tok_min <= tok_metric <= tok_max`` at that token (bounds
    inclusive; see :mod:`data.search.tokens`). ``label`` keeps the responses annotated with that label (see
    :mod:`data.annotations`), whose sample ids ``labelled`` holds once the view is shown on its run
    (:func:`data.responses.view_on`; not in the URL).
    """

    run: str | None = None
    step: int | str | None = None
    sort: str = DEFAULT_SORT
    order: str = DEFAULT_ORDER
    reward_min: float | None = None
    reward_max: float | None = None
    gain_min: float | None = None
    gain_max: float | None = None
    kl_min: float | None = None
    kl_max: float | None = None
    len_min: float | None = None
    len_max: float | None = None
    ref_min: float | None = None
    ref_max: float | None = None
    gap_min: float | None = None
    gap_max: float | None = None
    tail_min: float | None = None
    tail_max: float | None = None
    kl_sum_min: float | None = None
    kl_sum_max: float | None = None
    log_ratio_min: float | None = None
    log_ratio_max: float | None = None
    log_ratio_sum_min: float | None = None
    log_ratio_sum_max: float | None = None
    value_error_abs_min: float | None = None
    value_error_abs_max: float | None = None
    value_error_min: float | None = None
    value_error_max: float | None = None
    token_reward_min: float | None = None
    token_reward_max: float | None = None
    repetition_min: float | None = None
    repetition_max: float | None = None
    step_min: float | None = None
    step_max: float | None = None
    q: str | None = None
    loses: bool = False
    truncated: bool = False
    sample: str | None = None
    ended: bool = False
    cols: tuple[str, ...] | None = None
    tok: str | None = None
    tok_metric: str = DEFAULT_TOKEN_METRIC
    tok_min: float | None = None
    tok_max: float | None = None
    label: str | None = None
    labelled: tuple[str, ...] = ()

    @classmethod
    def from_query(
        cls,
        query: Mapping,
        ctx=None,
        sortable: Iterable[str] | None = None,
        extra_keys: Iterable[str] = (),
        columns: Iterable[str] | None = None,
    ) -> tuple[ResponsesView, list[str]]:
        """Parse a query (``parse_search`` dict or ``layout(**query)`` kwargs); bad values -> default + notice.

        ``ctx`` (when given) is the run's :class:`data.run_context.RunContext`: a step the run lacks is
        resolved by its rule. ``sortable`` (when given) are the run's sortable columns: a sort column the
        run does not have falls back. ``columns`` (when given) are the columns the table can show: ``cols``
        keeps those of them (in their order) and notices the others. Unknown keys (other than
        ``extra_keys``) are noticed.
        """
        names = {f.name for f in fields(cls)} - {"labelled"}
        notices = key_notices(query, names | set(extra_keys))
        run = first(query, "run") or None
        step = _parse_step(query, ctx, notices)
        raw_sort = first(query, "sort")
        sort = SORT_ALIASES.get(raw_sort, raw_sort) if raw_sort else DEFAULT_SORT
        if sort == LENGTH_TOKENS and sortable is not None:
            sort = length_column(sortable)  # a run without token arrays: its length in characters
        if sortable is not None:
            choices = list(sortable)
            if sort not in choices:
                shown = ", ".join(choices[:12]) + ("…" if len(choices) > 12 else "")
                notices.append(f"Ignored sort={raw_sort!r}: expected one of {shown}.")
                sort = DEFAULT_SORT
        order = get_choice(query, "order", ORDERS, notices, DEFAULT_ORDER)
        ranges = {}
        for key in RANGE_KEYS:
            for end in ("min", "max"):
                ranges[f"{key}_{end}"] = get_float(query, f"{key}_{end}", notices)
        q, _ = get_regex(query, "q", notices)  # an invalid one is kept (the search box shows it), not applied
        loses = get_bool(query, "loses", notices)
        truncated = get_bool(query, "truncated", notices)
        ended = get_bool(query, "ended", notices)
        if ended and truncated:
            notices.append("Ignored ended=1: truncated=1 keeps the responses that did not end.")
            ended = False
        sample = first(query, "sample") or None
        cols = _parse_cols(query, columns, notices)
        tok, _ = get_regex(query, "tok", notices)  # kept when invalid (the filter box shows it), not applied
        tok_metric = get_choice(query, "tok_metric", TOKEN_METRICS, notices, DEFAULT_TOKEN_METRIC)
        tok_min, tok_max = (get_float(query, f"tok_{e}", notices) for e in ("min", "max"))
        view = cls(
            label=(first(query, "label") or "")[:64] or None,
            cols=cols,
            run=run,
            step=step,
            sort=sort,
            order=order,
            q=q,
            loses=loses,
            truncated=truncated,
            sample=sample,
            ended=ended,
            tok=tok,
            tok_metric=tok_metric,
            tok_min=tok_min,
            tok_max=tok_max,
            **ranges,
        )
        return view, notices

    def to_query(self) -> str:
        """``?run=…&step=…`` with defaults left out ('' when everything is a default)."""
        return encode(
            [
                ("run", self.run),
                ("step", self.step),
                ("sort", None if self.sort == DEFAULT_SORT else self.sort),
                ("order", None if self.order == DEFAULT_ORDER else self.order),
                *((f"{k}_{e}", getattr(self, f"{k}_{e}")) for k in RANGE_KEYS for e in ("min", "max")),
                ("q", self.q),
                ("loses", True if self.loses else None),
                ("truncated", True if self.truncated else None),
                ("ended", True if self.ended else None),
                *(("cols", c) for c in self.cols or ()),
                ("sample", self.sample),
                ("tok", self.tok),
                ("tok_metric", None if self.tok_metric == DEFAULT_TOKEN_METRIC else self.tok_metric),
                ("tok_min", self.tok_min),
                ("tok_max", self.tok_max),
                ("label", self.label),
            ]
        )

    @property
    def descending(self) -> bool:
        return self.order == "desc"

    def resolved_step(self, steps: Sequence[int]) -> int | None:
        """The step shown: None for all steps, the last step of ``steps`` by default."""
        if self.step == ALL_STEPS:
            return None
        if self.step is None:
            return steps[-1] if steps else None
        return int(self.step)

    def response_filter(
        self, steps: Sequence[int], ends: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
    ) -> ResponseFilter:
        """The filter of this view (an invalid regex is left out: the page says so). ``ends``: the pad and
        end tokens that define a truncated response (the settings'), for ``truncated`` and ``ended``."""
        q = self.q
        if q is not None and regex_error(q) is not None:
            q = None
        tok = self.token_pattern()
        return ResponseFilter(
            step=self.resolved_step(steps),
            **{f"{k}_{e}": getattr(self, f"{k}_{e}") for k in RANGE_KEYS for e in ("min", "max")},
            q=q,
            loses_only=self.loses,
            truncated=(tuple(ends[0]), tuple(ends[1])) if self.truncated else None,
            ended=(tuple(ends[0]), tuple(ends[1])) if self.ended else None,
            tok=tok,
            tok_metric=self.tok_metric if tok else DEFAULT_TOKEN_METRIC,
            tok_min=self.tok_min if tok else None,
            tok_max=self.tok_max if tok else None,
            samples=self.labelled if self.label is not None else None,
        )

    def token_metric(self) -> str | None:
        """The token filter's per-token metric when a filter applies (None without one)."""
        return self.tok_metric if self.token_pattern() else None

    def token_pattern(self) -> str | None:
        """The token filter's pattern when it applies (None without one, or for an invalid one)."""
        return self.tok if self.tok and regex_error(self.tok) is None else None

    def token_controls(self) -> tuple:
        """The token filter's inputs: ``(pattern, metric, at least, at most, the metrics as (value, label),
        the filter in words or None)``."""
        words = self.token_words()
        return self.tok, self.tok_metric, self.tok_min, self.tok_max, token_metric_options(), words

    def token_words(self) -> str | None:
        """The token filter in words: 'a token matching “^Ġ\\.$” with 100 ≤ KL (k3)' (None without one)."""
        if not self.token_pattern():
            return None
        lo = f"{self.tok_min:g} ≤ " if self.tok_min is not None else ""
        hi = f" ≤ {self.tok_max:g}" if self.tok_max is not None else ""
        bound = f" with {lo}{metric_label(self.tok_metric)}{hi}" if (lo or hi) else ""
        return f"a token matching “{self.tok}”{bound}"

    def filter_key(self) -> str:
        """The query of what selects and orders rows (not the selected sample): the grid reloads on change."""
        return replace(self, sample=None, sort=DEFAULT_SORT, order=DEFAULT_ORDER).to_query()

    def with_(self, **changes) -> ResponsesView:
        return replace(self, **changes)

    def step_value(self, steps: list[int]) -> int | str | None:
        """The step picker's value: the URL's step (or ``all``), else the run's last step."""
        return self.step if self.step is not None else (steps[-1] if steps else None)

    def where(self, steps: list[int]) -> str:
        """Which responses the view ranks: ``over all steps`` or ``at step S``."""
        step = self.resolved_step(steps)
        return "over all steps" if step is None else f"at step {step}"

    def describe(self, steps: list[int]) -> str:
        """The view in words, for a page that walks its rows: 'at step 3 · 1.5 ≤ reward · text matching
        'good' · sorted by reward, highest first' (registry labels; bounds as in the URL)."""
        parts = [self.where(steps)]
        for key in RANGE_KEYS:
            lo, hi = getattr(self, f"{key}_min"), getattr(self, f"{key}_max")
            if lo is None and hi is None:
                continue
            name = label(RANGE_COLUMNS[key])
            lo_text = f"{lo:g} ≤ " if lo is not None else ""
            hi_text = f" < {hi:g}" if hi is not None else ""
            parts.append(f"{lo_text}{name}{hi_text}")
        if self.q and regex_error(self.q) is None:
            parts.append(f"text matching {self.q!r}")
        if self.loses:
            parts.append("losing to the reference")
        if self.truncated:
            parts.append("with no end token (truncated)")
        if self.ended:
            parts.append("ended with an end token")
        if self.token_words():
            parts.append(f"holding {self.token_words()}")
        if self.label is not None:
            parts.append(f"labelled {self.label!r}")
        first = "highest" if self.descending else "lowest"
        parts.append(f"sorted by {label(self.sort)}, {first} first")
        return " · ".join(parts)

    def from_controls(
        self,
        steps: list[int],
        step,
        ranges: Mapping[str, object],
        q,
        loses,
        sort: tuple[str, str] | None,
        truncated=None,
        ended=None,
        cols=None,
    ) -> ResponsesView:
        """This view after its controls changed: the step picker's ``step``, the range inputs' ``ranges``
        (``<key>_min`` / ``_max``: a number, or None / '' for no bound), the search ``q``, the ``loses``,
        ``truncated`` and ``ended`` switches (None: the view's; the one turned on turns the other off), the column
        chooser's ``cols`` (as ``data.responses.chosen`` reads it: None for the run's defaults) and the grid's ``sort`` (``(column, order)``; None: the view's). Choosing the last step while the URL follows
        the last step keeps following it."""
        if step == (steps[-1] if steps else None) and self.step is None:
            step = None
        sort_col, order = sort if sort else (self.sort, self.order)
        cut = self.truncated if truncated is None else bool(truncated)
        done = self.ended if ended is None else bool(ended)
        if cut and done:  # the two exclude each other: the one just turned on wins
            cut, done = (False, True) if not self.ended else (True, False)
        return self.with_(
            step=step,
            sort=sort_col,
            order=order,
            q=(q or None),
            loses=bool(loses),
            truncated=cut,
            ended=done,
            cols=tuple(cols) if cols else None,
            **{k: (None if v is None or v == "" else float(v)) for k, v in ranges.items()},
        )

    def range_controls(self, filters: Iterable[tuple[str, str, bool]], ids: Mapping[str, str]) -> list[tuple]:
        """The range inputs of ``filters`` (``(key, text, available)``, see ``data.responses.range_filters``):
        ``(text, available, low, high, (min id, max id), shown)`` with this view's bounds; ``ids``: the
        inputs' ids by ``<key>_min`` / ``<key>_max``; ``shown``: always for the filters of
        :func:`data.metrics.registry.range_inputs`, else while a bound is set (a box brushed on the scatter)."""
        always = set(range_inputs())
        out = []
        for k, text, ok in filters:
            lo, hi = getattr(self, f"{k}_min"), getattr(self, f"{k}_max")
            shown = k in always or lo is not None or hi is not None
            out.append((text, ok, lo, hi, (ids[f"{k}_min"], ids[f"{k}_max"]), shown))
        return out

    def cleared(self) -> ResponsesView:
        """This view without its filters: the run, step, sort and columns kept."""
        return ResponsesView(run=self.run, step=self.step, sort=self.sort, order=self.order, cols=self.cols)


def _parse_cols(query: Mapping, columns: Iterable[str] | None, notices: list[str]) -> tuple[str, ...] | None:
    """The ``cols=`` of a query (repeated keys, or one value of commas), those of ``columns`` in its order
    when given (the others noticed); None for none."""
    raw = query.get("cols")
    asked = [raw] if isinstance(raw, str) else list(raw or [])
    asked = [c for v in asked for c in str(v).split(",") if c]
    if not asked:
        return None
    if columns is None:
        return tuple(dict.fromkeys(asked))
    known = list(columns)
    bad = [c for c in asked if c not in known]
    if bad:
        notices.append(f"Ignored cols={','.join(bad)!r}: not a column of this run's table.")
    kept = tuple(c for c in known if c in set(asked))
    return kept or None


def _parse_step(query: Mapping, ctx, notices: list[str]) -> int | str | None:
    raw = first(query, "step")
    if raw is None or raw == "":
        return None
    if raw.lower() == ALL_STEPS:
        return ALL_STEPS
    try:
        step = int(raw)
    except ValueError:
        notices.append(f"Ignored step={raw!r}: expected a step number or 'all'.")
        return None
    if ctx is not None:
        step, more = ctx.step(step)
        notices += more
    return step
