"""The runs a comparison is about: each named run's committed store, folder and per-step frame, and a note
for each run that cannot take part (unknown, not read yet)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from data.cache import StoreKey, shared
from data.compare.curves import run_frame
from data.compare.notes import RUN, Note
from data.signals import can_tell_truncation, truncation_by_step
from data.store import RunStore, UnknownRun

# At most this many runs on one compare page (one colour each, and every query is per run).
MAX_RUNS = 8


@dataclass(frozen=True)
class CompareRun:
    """One run of a comparison: its name, folder, committed store and :func:`run_frame` (with the
    truncation share: :func:`with_truncation`)."""

    name: str
    run_dir: Path
    store: RunStore
    frame: pl.DataFrame


def load_runs(board, names: list[str], wait: float = 0.0) -> tuple[list[CompareRun], list[Note]]:
    """The runs ``names`` (in order, each once, at most :data:`MAX_RUNS`) as :class:`CompareRun`s, from a
    :class:`data.service.Board`. A name that is not a run under the root, or a run with nothing committed
    yet, is left out with a note (``wait``: seconds to wait for a first commit); a run read by a guess or
    with lines left out carries its pages' notices, its name before each."""
    out, notes = [], []
    seen = []
    for name in names:
        if name not in seen:
            seen.append(name)
    if len(seen) > MAX_RUNS:
        notes.append(Note(RUN, tuple(seen[MAX_RUNS:]), f"At most {MAX_RUNS} runs are compared: "
                                                       f"{', '.join(seen[MAX_RUNS:])} left out."))  # fmt: skip
        seen = seen[:MAX_RUNS]
    pads, ends = tuple(board.settings.pad_tokens), tuple(board.settings.end_tokens)
    for name in seen:
        try:
            run_dir = board.run_dir(name)
        except UnknownRun:
            notes.append(
                Note(RUN, (name,), f"Unknown run {name!r}: it is not one of the runs under the rollout root.")
            )
            continue
        store = board.store(name, wait=wait)
        if store is None:
            notes.append(Note(RUN, (name,), board.reading_text(name)))
            continue
        # What each run's own pages say about how it was read (a guess, lines left out): it shapes its curves.
        notes += [Note(RUN, (name,), _named(name, text)) for text in board.failure_notices(name)]
        frame = _compare_frame(StoreKey(store), pads, ends)
        out.append(CompareRun(name, run_dir, store, frame))
    return out, notes


def _named(name: str, text: str) -> str:
    """``text`` (a notice of run ``name``'s pages) with the run's name before it, unless it begins by naming
    the run, as the Board's own notices do ("Reading run R failed ...", "Run R has no usable line ...");
    those of how the run was read (:func:`data.store.reading.page_notices`, about its files) do not."""
    return text if text.startswith((f"Reading run {name} ", f"Run {name} ")) else f"{name}: {text}"


# In the process only, as run_frame: each of the page's five callbacks asks for it (the join is ~1 ms a run).
@shared(16, disk=False)
def _compare_frame(v: StoreKey, pads: tuple[str, ...], ends: tuple[str, ...]) -> pl.DataFrame:
    return with_truncation(run_frame(v.store), v.store, pads, ends)


def with_truncation(
    frame: pl.DataFrame, store: RunStore, pads: tuple[str, ...], ends: tuple[str, ...]
) -> pl.DataFrame:
    """``frame`` with ``truncated_share``, the reward page's per-step share of responses with no end token
    (:func:`data.signals.truncation_by_step`, the same numbers), where the run's responses can tell it."""
    if frame.height == 0 or not can_tell_truncation(store, pads, ends):
        return frame
    share = truncation_by_step(store, pads, ends).select("step", pl.col("y").alias("truncated_share"))
    return frame.join(share, on="step", how="left")
