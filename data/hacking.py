"""Reward-hacking aids of the reward page: per-step curves of repetition, truncation (no end token) and the
share of responses a text search matches, each point standing for a filter of the responses page (see
:func:`data.views.links.signal_responses`).
"""

from __future__ import annotations

import polars as pl

from data import critic_curves, thinning
from data.curve_panels import Panel, Series
from data.metrics import label
from data.metrics.degeneration import with_units
from data.queries import QueryError, SearchStopped, regex_error
from data.responses import match_share_by_step
from data.signals import can_tell_truncation, repetition_by_step, repetition_units, truncation_by_step
from data.store import RunStore

# The curves of the degeneration panel, in this order; a click on a point opens its responses.
DEGENERATION = ("repetition_mean", "truncated_share")
NOTE_NO_REPETITION = "No response of this run has 3 tokens or words or more: no repetition to show."
NOTE_NO_SEARCH = (
    "Type a regular expression (Rust syntax, (?i) for any case) to chart the share of each step's responses "
    "whose prompt or response it matches; click a point for those responses."
)
NOTE_CLICK = "Click a point for its responses."
NOTE_EMPTY = "No responses in this run yet."
DEGENERATION_TITLE = "Degeneration: repetition and truncation"
SEARCH_TITLE = "Responses matching the search"


def note_no_end_token(end_tokens: tuple[str, ...]) -> str:
    """Why a run has no truncation curve: none of its responses ends with an end token."""
    return (
        f"No response of this run ends with an end token ({', '.join(end_tokens)}; RLBOARD_END_TOKENS): "
        "its texts were likely decoded without special tokens, so a cut response cannot be told apart and "
        "truncation is left out."
    )


def _frame(df: pl.DataFrame) -> pl.DataFrame:
    return df.select("step", pl.col("y").cast(pl.Float64)).sort("step")


def degeneration_panel(store: RunStore, pad_tokens: tuple[str, ...], end_tokens: tuple[str, ...]) -> Panel:
    """Per step: the mean repetition of the responses and the share of them with no end token (left out,
    with a note, where the run cannot tell: :func:`data.signals.can_tell_truncation`)."""
    series, notes = [], []
    rep = repetition_by_step(store)
    if rep.height and rep.get_column("y").drop_nulls().len():
        name = with_units(label("repetition_mean"), repetition_units(store))
        series.append(Series("repetition_mean", name, _frame(rep)))
    else:
        notes.append(NOTE_NO_REPETITION)
    if can_tell_truncation(store, pad_tokens, end_tokens):
        cut = truncation_by_step(store, pad_tokens, end_tokens)
        series.append(Series("truncated_share", label("truncated_share"), _frame(cut), dashed=True))
    else:
        notes.append(note_no_end_token(end_tokens))
    if series:
        notes.append(NOTE_CLICK)
    return Panel("degeneration", DEGENERATION_TITLE, "share", tuple(series),
                 " ".join(notes), percent=True)  # fmt: skip


def panels(store: RunStore, settings, q: str | None, run_dir=None) -> tuple[Panel, Panel, Panel]:
    """The :func:`degeneration_panel`, the :func:`search_panel` of ``q`` and the critic's health
    (:func:`data.critic_curves.run_critic_panel`, with the trainer's logs in ``run_dir``); ``settings``: the
    board's (pad and end tokens, a search's time). A run without responses (yet) says so in each."""
    if not truncation_by_step(store, settings.pad_tokens, settings.end_tokens).height:  # no response
        return (
            Panel(
                "degeneration", DEGENERATION_TITLE, "share", (), NOTE_EMPTY, percent=True, empty=NOTE_EMPTY
            ),
            Panel("search", SEARCH_TITLE, "share", (), NOTE_EMPTY, percent=True, empty=NOTE_EMPTY),
            Panel("critic", critic_curves.TITLE, "", (), NOTE_EMPTY, empty=NOTE_EMPTY),
        )
    return (
        degeneration_panel(store, settings.pad_tokens, settings.end_tokens),
        search_panel(store, q, settings.search_seconds),
        critic_curves.run_critic_panel(store, run_dir),
    )


def shown_panels(
    store: RunStore, settings, q: str | None, run_dir, steps: list[int], step: int | None
) -> tuple[tuple[Panel, Panel, Panel], Panel]:
    """What the reward page draws of :func:`panels`: the three thinned together with ``step`` kept
    (:func:`data.thinning.thinned_all`), and the critic's panel as read (its ``absent`` hides its graph)."""
    full = panels(store, settings, q, run_dir)
    return thinning.thinned_all(full, steps, step), full[2]


def search_panel(store: RunStore, q: str | None, seconds: float) -> Panel:
    """Per step: the share of the responses whose prompt or response the search ``q`` matches (the
    responses page's bounded search); a note instead when there is no search, or it cannot run."""
    title = SEARCH_TITLE
    if not q:
        return Panel("search", title, "share", (), NOTE_NO_SEARCH, percent=True, empty="No search yet.")
    if (error := regex_error(q)) is not None:
        return Panel("search", title, "share", (), f"{error}: not applied.", percent=True)
    try:
        df = match_share_by_step(store, q, seconds)
    except SearchStopped as e:
        return Panel("search", title, "share", (), f"{str(e)[:1].upper()}{str(e)[1:]}.", percent=True)
    except QueryError as e:
        return Panel("search", title, "share", (), f"{e}.", percent=True)
    name = f"{label('match_share')} {q!r}"
    return Panel(
        "search", title, "share", (Series("match_share", name, _frame(df)),), NOTE_CLICK, percent=True
    )
