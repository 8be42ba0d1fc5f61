"""The scatter page's brushed box as the responses page counts it: its bounds and steps in words and its
number of responses (the same filter, the same bounded count)."""

from __future__ import annotations

from data.search import order as search_order
from data.views.scatter import ScatterView, box_responses


def box_count(view: ScatterView, store, run_steps: list[int], seconds: float) -> tuple[str, int] | None:
    """The box brushed on ``view`` in words (its bounds and steps) and its number of responses: the
    responses page's own count of :func:`data.views.scatter.box_responses`' filter (bounded by
    ``seconds``, as a search is); None without a box."""
    resp = box_responses(view, run_steps)
    if resp is None:
        return None
    count = search_order.count_or_progress(store, resp.response_filter(run_steps), seconds).count
    return view.box.text(view.x, view.y) + ", " + view.steps(run_steps).text(), count
