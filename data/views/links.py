"""Every link from one page to another, built in one place: a page's path and its query string.

``prefix`` is the app's URL prefix without its last slash (``/rlboard`` behind a proxy, '' at the root):
the page that shows a link knows it (Dash does) and passes it in; data never imports Dash.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from urllib.parse import quote_plus, urlencode

from data.token_frames import STRIP_METRICS
from data.views import paths
from data.views.codec import encode, first
from data.views.prompts import PromptsView
from data.views.responses import ResponsesView
from data.views.scatter import ScatterView, box_responses
from data.views.tokens import DEFAULT_METRIC, TokensState


def run_page(path: str, run: str | None, prefix: str = "") -> str:
    """Page ``path`` of ``run`` (``/reward?run=R``; the path alone without a run). Percent-encoded: ``c#d``,
    ``x&run=y`` and ``%2e%2e`` are run names too."""
    return prefix + path + encode([("run", run)])


def compare(runs: Iterable[str], prefix: str = "") -> str:
    """The compare page of ``runs``, in that order (``/compare?run=A&run=B``)."""
    return prefix + paths.COMPARE + encode([("run", r) for r in runs])


# Pages that show one step of a run: going from one to the other keeps the step.
STEP_PAGES = (paths.REWARD, paths.SCATTER, paths.RESPONSES)
_STEP = re.compile(r"-?[0-9]+")


def carried_step(path: str, query: Mapping, ctx) -> str | None:
    """The step the navbar's links carry from page ``path`` showing the run of ``ctx`` (its
    :class:`data.run_context.RunContext`) with URL ``query``: the step the page shows for the URL's step
    number (``ctx.step``: a step the run lacks is carried as the step shown; not ``all``), only on a page
    that takes a step and only when the URL names the run shown."""
    step = first(query, "step")
    run = ctx.run
    if path in STEP_PAGES and run and first(query, "run") == run and step and _STEP.fullmatch(step):
        shown, _ = ctx.step(int(step))
        return None if shown is None else str(shown)
    return None


# Pages a carried step goes to: the token page opens that step's response of the largest KL (see
# data.views.tokens.resolve), not the run's first response.
STEP_TARGETS = (*STEP_PAGES, paths.TOKENS)


def nav(path: str, run: str | None, prefix: str = "", step: str | None = None) -> str:
    """A navbar link: page ``path`` keeping the run shown (the runs page takes no run) and, to the pages
    that take a step, ``step`` (see :func:`carried_step`): from the reward page at step 20, the responses
    of step 20, not of the run's last step; the token page, step 20's response of the largest KL."""
    if path == paths.RUNS or not run:
        return prefix + path
    return prefix + path + encode([("run", run), ("step", step if path in STEP_TARGETS else None)])


def tokens(
    run: str | None,
    sample: str | None,
    back: str = "",
    *,
    metric: str = DEFAULT_METRIC,
    pads: bool = False,
    prefix: str = "",
    pos: int | None = None,
) -> str:
    """The token page of one response; ``back`` is the responses view to return to (its query string
    without ``?``), ``metric`` and ``pads`` the token page's own settings (left out at their defaults),
    ``pos`` the position it opens at."""
    return prefix + paths.TOKENS + TokensState(run, sample, metric, pads, back, pos=pos).to_query()


def tokens_corrected(run: str, sample: str, rule: str, c: float, prefix: str = "") -> str:
    """The token page of one response coloured by the gap, the tokens a correction ``rule`` at ``c`` touches
    marked."""
    state = TokensState(run, sample, "infer_gap", rule=rule, c=c)
    return prefix + paths.TOKENS + state.to_query()


def tokens_many(run: str, samples: Iterable[str], prefix: str = "") -> list[str]:
    """:func:`tokens` of many responses of one run (its part encoded once: a prompt may have thousands)."""
    base = tokens(run, "", prefix=prefix)  # ends with "sample="
    return [base + quote_plus(s, safe="") for s in samples]


def row_tokens(view: ResponsesView, sample: str, prefix: str = "", pos: int | None = None) -> str:
    """The token page of a row of the responses view ``view``, with the way back to that view with the row
    selected; a row of a token filter opens at its token (``pos``), coloured by the filter's metric."""
    back = view.with_(sample=sample).to_query().lstrip("?")
    if view.token_pattern() and pos is not None:
        return tokens(view.run, sample, back, metric=_strip_metric(view.tok_metric), prefix=prefix, pos=pos)
    return tokens(view.run, sample, back, prefix=prefix)


# A stand-in sample id no percent-encoding changes: the grid's row links are one link filled in.
_SAMPLE = "rlbSample0"


def rows_tokens(
    view: ResponsesView,
    samples: Iterable[str],
    prefix: str = "",
    positions: Iterable[int | None] | None = None,
) -> list[str]:
    """:func:`row_tokens` of many rows of ``view`` (``positions``: their ``pos``), the same links: one is
    built with a stand-in sample id, the others fill it in (a sample id is percent-encoded once as the
    token page's and twice inside its way back, and percent-encoding goes character by character), which
    the first row's link checks against its own; rows of a token filter (each its position) one by one."""
    samples = list(samples)
    if view.token_pattern() and positions is not None:
        return [row_tokens(view, s, prefix, p) for s, p in zip(samples, positions, strict=True)]
    pieces = row_tokens(view, _SAMPLE, prefix).split(_SAMPLE)

    def fill(s: str) -> str:
        once = quote_plus(s, safe="")
        return pieces[0] + once + pieces[1] + quote_plus(once, safe="") + pieces[2]

    if not samples or len(pieces) != 3 or fill(samples[0]) != row_tokens(view, samples[0], prefix):
        return [row_tokens(view, s, prefix) for s in samples]
    return [fill(s) for s in samples]


def _strip_metric(metric: str) -> str:
    """The token page's colour for a token filter's metric: itself where the strip offers it, else KL."""
    return metric if metric in STRIP_METRICS else DEFAULT_METRIC


def responses_back(back: str, run: str | None, prefix: str = "") -> str:
    """From the token page back to the responses view it was opened from (``back``), else to the run's."""
    return prefix + paths.RESPONSES + "?" + (back or urlencode({"run": run or ""}))


def bar_responses(run: str, step: int, range_key: str, lo: float, hi: float | None, prefix: str = "") -> str:
    """The responses of one histogram bar or heatmap cell: run, step and the bar's interval as the range
    filter ``<range_key>_min`` / ``_max`` (``hi`` None: no upper bound)."""
    query = encode([("run", run), ("step", step), (f"{range_key}_min", lo), (f"{range_key}_max", hi)])
    return prefix + paths.RESPONSES + query


# What a point of the reward page's reward-hacking aids opens: the step's responses, ordered or filtered
# so that they are the ones its value counts (see data/hacking.py).
SIGNAL_VIEWS = {
    "repetition_mean": {"sort": "repetition"},  # its mean: every response, the most repetitive first
    "truncated_share": {"truncated": True},  # exactly the responses with no end token
    "match_share": {},  # exactly the responses the search matches (q)
    # The critic's health (data/critic_curves.py): every response, the largest mean |value − return| first.
    **dict.fromkeys(
        ("explained_variance", "value_error_abs_pooled", "value_loss"), {"sort": "value_error_abs_mean"}
    ),
}


def signal_responses(run: str, step: int, key: str, q: str | None = None, prefix: str = "") -> str | None:
    """The responses behind a point of a reward-hacking curve (a :data:`SIGNAL_VIEWS` key) at ``step``;
    ``q``: the search of the ``match_share`` curve. None for another curve."""
    if key not in SIGNAL_VIEWS or (key == "match_share" and not q):
        return None
    view = ResponsesView(run=run, step=step, q=q if key == "match_share" else None, **SIGNAL_VIEWS[key])
    return prefix + paths.RESPONSES + view.to_query()


def kl_sorted(run: str, step: int, prefix: str = "") -> str:
    """A step's responses, the largest KL (k3 sum) first: what the reward page's KL figure opens."""
    return (
        prefix + paths.RESPONSES + ResponsesView(run=run, step=step, sort="kl_sum", order="desc").to_query()
    )


def gap_sorted(run: str, step: int, sort: str, prefix: str = "") -> str:
    """A step's responses sorted by gap column ``sort``, the largest first: what a gap page point opens."""
    return prefix + paths.RESPONSES + ResponsesView(run=run, step=step, sort=sort, order="desc").to_query()


def scatter_box(view: ScatterView, run_steps: list[int], prefix: str = "") -> str | None:
    """The responses inside the box brushed on the scatter ``view`` (None without a box): its steps and the
    box's two ranges as the responses page's range filters (see :func:`data.views.scatter.box_responses`)."""
    resp = box_responses(view, run_steps)
    return None if resp is None else prefix + paths.RESPONSES + resp.to_query()


def export(view: ResponsesView, fmt: str, prefix: str = "") -> str:
    """The download of the rows of ``view`` (its selected row aside) as ``fmt``."""
    base = view.with_(sample=None).to_query()
    return prefix + paths.EXPORT + (base + "&" if base else "?") + urlencode({"format": fmt})


def prompts(view: PromptsView, prefix: str = "") -> str:
    """The prompts page showing ``view`` (the list, or one prompt with the list's state kept)."""
    return prefix + paths.PROMPTS + view.to_query()


def group(run: str | None, prompt_key: str | None, step, group_id=None, prefix: str = "") -> str | None:
    """The group of a response side by side: its prompt's group at ``step`` (``group_id`` the file's group
    id, None for a run that groups by prompt). None without a prompt key or a step (no group to show)."""
    if not prompt_key or step is None:
        return None
    gid = None if group_id is None else str(group_id)
    return prompts(PromptsView(run=run, prompt=prompt_key, step=int(step), group=gid), prefix)


def group_of(run: str | None, row: Mapping | None, prefix: str = "") -> str | None:
    """:func:`group` of one response ``row`` (its ``prompt_key``, ``step`` and ``group_id`` where it has one):
    the link "its group" of the responses and token pages. None for no row."""
    if not row:
        return None
    return group(run, row.get("prompt_key"), row.get("step"), row.get("group_id"), prefix)


def groups(run: str | None, prompt_key: str, found: Iterable[Mapping], prefix: str = "") -> list[str | None]:
    """:func:`group` of each of a prompt's groups ``found`` (``step``, ``group_id``): the same links, the run
    and prompt encoded once (a block of the prompt page's history has a hundred)."""
    if not prompt_key:
        return [None for _ in found]
    # step= and group= come last in PromptsView's query, after only defaults (left out).
    head = prompts(PromptsView(run=run, prompt=prompt_key), prefix) + "&step="
    out: list[str | None] = []
    for g in found:
        step, gid = g["step"], g.get("group_id")
        if step is None:
            out.append(None)
        elif gid is None:
            out.append(f"{head}{int(step)}")
        else:
            out.append(f"{head}{int(step)}&group={quote_plus(str(gid))}")
    return out


def token_responses(run: str, step: int | str, pattern: str, metric: str, prefix: str = "") -> str:
    """The responses of ``step`` (``all``: of every step) holding a token that ``pattern`` matches, each with
    that token's ``metric``: what a row of the drifting-tokens board opens."""
    view = ResponsesView(run=run, step=step, tok=pattern, tok_metric=metric)
    return prefix + paths.RESPONSES + view.to_query()


def drift(view, prefix: str = "") -> str:
    """The drifting-tokens page of ``view`` (a :class:`data.views.drift.DriftView`)."""
    return prefix + paths.DRIFT + view.to_query()
