"""What the reward, scatter and gap pages' answers share: the run and view a query resolves to, and the
notices the page shows above its content (as their ``layout`` composes them)."""

from __future__ import annotations

from data.service import RunContext, board, open_run
from data.views.codec import first

STORE_WAIT_SECONDS = 10.0  # as the pages wait for a first ingest


def no_runs_notice() -> str | None:
    """What a page says instead of its content when the root holds no run (None when it holds some)."""
    if list(board().runs()):
        return None
    trouble = board().scan().trouble
    return f"No runs to show: {trouble}" if trouble else f"No runs found under {board().root}."


def open_view(query: dict[str, list[str]], path: str, view_cls) -> tuple[object, list[str], RunContext]:
    """``(view, notices, run context)`` of ``query`` on the page at ``path``, as the page's ``layout``
    decodes it: ``view_cls.from_query`` on :func:`data.service.open_run`, then the run's failure notices
    (or that it is still being read)."""
    ctx = open_run(first(query, "run"), path, STORE_WAIT_SECONDS)
    view, msgs = view_cls.from_query(query, ctx)
    if view.run is not None:
        msgs += (
            board().failure_notices(view.run) if ctx.store is not None else [board().reading_text(view.run)]
        )
    return view, msgs, ctx
