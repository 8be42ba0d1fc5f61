"""Where each page lives: its path, declared once (pages register with these; data never imports Dash),
and which run a page shows for the run its URL names."""

from __future__ import annotations

from collections.abc import Collection, Mapping

RUNS = "/"
REWARD = "/reward"
RESPONSES = "/responses"
TOKENS = "/tokens"
PROMPTS = "/prompts"
COMPARE = "/compare"
GAP = "/gap"  # the inference–trainer gap and what a correction would do
EXPORT = "/export"  # a download route of the server, not a page

# Pages that show one run: the first run when the URL names none. Of these, the reward and prompts pages
# also show the first run (with a notice) when the URL names a run that is not under the root; the
# responses and token pages show an error instead. Each page decides with shown_run, and so does the
# shell's run picker.
RUN_PAGES = (REWARD, RESPONSES, TOKENS, PROMPTS, GAP)
FALLBACK_PAGES = (REWARD, PROMPTS, GAP)


def shown_run(path: str, run: str | None, runs: Collection[str]) -> str | None:
    """The run that page ``path`` (without the URL prefix) shows for URL parameter ``run``, or None when it
    shows none (the runs page, no runs, or an error for an unknown run). ``runs``: in the board's order."""
    if run in runs:
        return run
    if runs and path in RUN_PAGES and (not run or path in FALLBACK_PAGES):
        return next(iter(runs))
    return None


def unknown_run_notice(
    path: str,
    asked: str | None,
    shown: str | None,
    runs: Collection[str],
    unreadable: Mapping[str, str] | None = None,
) -> str | None:
    """The notice for a URL whose run ``asked`` page ``path`` does not show (``shown``: the run it shows
    instead, see :func:`shown_run`), or None when it shows the run asked for (or none was asked: an empty
    ``run=`` asks for none, as :func:`shown_run` takes it). ``unreadable``: the folders under the root the
    board may not read, with the reason (a run asked for that is one of them is named as such)."""
    if not asked or asked == shown:
        return None
    instead = f" Showing {shown!r}." if shown and path in FALLBACK_PAGES else ""
    if asked in (unreadable or {}):
        return f"Run {asked!r} cannot be read: {unreadable[asked]}. The runs page says what to do.{instead}"
    if path in FALLBACK_PAGES:
        return f"Unknown run {asked!r}: it is not one of the runs under the rollout root.{instead}"
    return f"Unknown run {asked!r}: choose one of {', '.join(runs)}."
