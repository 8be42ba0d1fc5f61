"""The drifting-tokens page's answer (``/api/v1/drift?run=R&a=1&b=25&metric=log_ratio&min_n=5``): the two
steps compared (each resolved by the run's step rule), the board (``drift-board``, the answer's ``rows``:
the tokens ranked by how far their mean moved, the page's first rows with each one's links to the responses
holding it; ``total`` how many tokens it ranks, ``cut_off`` when it shows fewer) and the page's notices.
The page draws no figure: its board is a table.

Built by :func:`data.views.drift.drift_page`, the composition the page's layout draws from.
"""

from __future__ import annotations

from api.answer import Answer, Table
from api.registry import store_info
from data.service import board
from data.views import drift, paths

PATH, NAME = paths.DRIFT, "drift"
STORE_WAIT = 10.0  # as the page: how long a first answer waits for the run's first read
BOARD = "drift-board"
COLUMNS = ("rank", "token", "text", "n_a", "mean_a", "n_b", "mean_b", "change", "pattern", "href_a", "href_b",
           "href_all")  # fmt: skip


def answer(query: dict[str, list[str]]) -> Answer:
    b = board()
    page = drift.drift_page(query, b, STORE_WAIT)
    notices = list(page.notices)
    if page.problem == drift.INGESTING:
        notices.append(b.reading_text(page.run))
    elif page.problem in drift.EMPTY_TITLES:
        notices.append(" ".join(t for t in (drift.EMPTY_TITLES[page.problem] + ".", page.why) if t))
    view = {"problem": page.problem, "run": page.run}
    if page.view is not None:
        v = page.view
        view.update(run=v.run, a=v.a, b=v.b, metric=v.metric, min_n=v.min_n, query=v.to_query())
        view["steps"] = list(page.pair) if page.pair else None
        view["metric_label"] = drift.metric_label(v.metric)
    out = Answer(PATH, view, run=page.run, notices=notices, store=store_info(page.store))
    if page.problem is None:
        a, b_ = page.pair
        labels = {
            "rank": "#",
            "token": "token (as the file gives it)",
            "text": "shown as",
            "n_a": f"seen at {a}",
            "mean_a": f"mean at {a}",
            "n_b": f"seen at {b_}",
            "mean_b": f"mean at {b_}",
            "change": "change (B − A)",
            "pattern": "the token filter of exactly this token",
            "href_a": f"responses holding it at step {a}",
            "href_b": f"responses holding it at step {b_}",
            "href_all": "responses holding it at every step",
        }
        rows = [{"rank": i + 1, **{k: r[k] for k in COLUMNS[1:]}} for i, r in enumerate(page.rows)]
        cut = None
        if page.ranked > len(rows):
            cut = f"the board shows the first {len(rows)} of the {page.ranked:,} tokens it ranks"
        out.tables[BOARD] = Table(list(COLUMNS), rows, labels, total=page.ranked, cut_off=cut)
        out.view["explain"] = page.explain  # the board's line of what it ranks, above it
        out.main = BOARD
    return out
