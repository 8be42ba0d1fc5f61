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
# The example a rollout is of (verifiers/utils/save_utils.py, state_to_output: ``example_id``, required
# since 0.1.6): its rollouts are one group, whatever their prompt texts (wordle's examples share one).
# 0.1.5's ``id`` is not one: vf-eval numbered the rows ``i // rollouts_per_example`` while they came in
# the order of the dataset repeated (see tests), so the prompt text groups those.
EXAMPLE, GROUP = "example_id", "group_id"


def line(obj: dict, reading=None) -> dict:
    if obj.get(GROUP) is None and obj.get(EXAMPLE) is not None:
        obj[GROUP] = obj[EXAMPLE]
    return DIALECT.apply_aliases(obj)


def frame(df: pl.DataFrame, reading=None) -> pl.DataFrame:
    """A chunk as it is (its chat messages are rendered as the contract's are, see conform_frame), with
    ``example_id`` as the group."""
    if EXAMPLE not in df.columns:
        return df
    if GROUP not in df.columns:
        return df.with_columns(pl.col(EXAMPLE).alias(GROUP))
    as_text = [pl.col(c).cast(pl.String, strict=False) for c in (GROUP, EXAMPLE)]
    return df.with_columns(pl.coalesce(as_text).alias(GROUP))


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
        "example_id → group_id: the rollouts of one example are a group (without it, those of one prompt)",
        "no step in the lines: the folder's (rollouts/step_{n}/), else step 0",
    ),
    line=line,
    frame=frame,
    stepless=True,
)
