"""verifiers (and prime-rl, which trains on its environments): ``vf-eval``'s ``results.jsonl`` and prime-rl's
``rollouts/step_{n}/train_rollouts.jsonl`` (``eval_rollouts.jsonl`` for its evaluations): ``prompt`` and
``completion`` as chat messages (each ``tool_calls`` entry may be a JSON string), ``reward`` (already the
rubric's weighted sum), ``answer``, ``task``, ``info``, and each reward function's score (a column each, or
under ``metrics``). No step in the lines."""

from __future__ import annotations

import polars as pl

from data.schema.dialects.base import Dialect, merge_aliases
from data.schema.dialects.contract import ALIASES as CONTRACT_ALIASES

ALIASES = merge_aliases(CONTRACT_ALIASES, {"response": ("completion",)})
_OWN_FIELDS = frozenset(
    {"example_id", "task", "answer", "info", "metrics", "is_completed", "trajectory", "timing"}
)
_FILES = ("results", "train_rollouts", "eval_rollouts")


def line(obj: dict, reading=None) -> dict:
    return DIALECT.apply_aliases(obj)


def frame(df: pl.DataFrame, reading=None) -> pl.DataFrame:
    """A chunk as it is: its chat messages are rendered as the contract's are (see conform_frame)."""
    return df


def recognise(rel: str, fields: frozenset[str]) -> int:
    if not {"prompt", "completion"} <= fields:
        return 0
    name = rel.rsplit("/", 1)[-1].split(".", 1)[0]
    return 20 + 5 * bool(fields & _OWN_FIELDS) + 5 * (name in _FILES)


DIALECT = Dialect(
    name="verifiers",
    title="verifiers / prime-rl results",
    description="results.jsonl, rollouts/step_{n}/*.jsonl: prompt and completion as chat messages, reward, "
    "a score per reward function",
    recognise=recognise,
    aliases=ALIASES,
    mapping=(
        "prompt (chat) → prompt, previewed by its last user message",
        "completion (chat) → response: the assistant's turns with their tool calls (JSON strings or objects), "
        "the tool results between them; length and repetition count the assistant's turns",
        "reward → reward (the rubric's weighted sum); each reward function's score a column",
        "no step in the lines: the folder's (rollouts/step_{n}/), else step 0",
    ),
    line=line,
    frame=frame,
    stepless=True,
)
