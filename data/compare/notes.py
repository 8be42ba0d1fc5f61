"""What a comparison cannot show, as structured notes that the page prints beside the chart concerned
(never an exception, never an empty chart without a word)."""

from __future__ import annotations

from dataclasses import dataclass

# Kinds of note: which part of the comparison it concerns.
STEPS = "steps"  # the runs' step ranges differ or do not overlap
METRIC = "metric"  # a run lacks what a curve or figure needs
PROMPTS = "prompts"  # prompt matching: none shared, none at a common step
TRAINER = "trainer"  # the trainer's own logs: absent, not lined up
RUN = "run"  # a run itself: no committed store yet, no responses


@dataclass(frozen=True)
class Note:
    """One thing missing from a comparison: ``kind`` (one of the constants above), the ``runs`` it is
    about (empty: all of them), and ``text``, the sentence shown."""

    kind: str
    runs: tuple[str, ...]
    text: str
