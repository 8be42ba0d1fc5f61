"""NeMo-RL's rollout dumps (``train_data_step{N}.jsonl``): each line a batch of one, and ``content``, the
contents of a conversation's messages, for prompt and response."""

from __future__ import annotations

import polars as pl

# The contents of a conversation's messages, in order, the last one the response (NeMo-RL's dumps); the
# earlier ones make the prompt, a blank line apart.
CONTENTS = "content"
CONTENTS_SEPARATOR = "\n\n"


def split_contents(value) -> tuple[str | None, str | None]:
    """The contents of a conversation's messages (:data:`CONTENTS`) as ``(prompt, response)``; ``(None,
    None)`` for anything but a list of at least two strings."""
    if not isinstance(value, list) or len(value) < 2 or not all(isinstance(v, str) for v in value):
        return None, None
    return CONTENTS_SEPARATOR.join(value[:-1]), value[-1]


# NeMo-RL writes each response of a batch as a batch of one: every value in a list of one item (a text, a
# number, an array), beside the response's index in the batch.
BATCH_INDEX = "idx"


def unwrap_batch_of_one(obj):
    """A parsed line logged as a batch of one (at least two values, every one but :data:`BATCH_INDEX` a
    list of one item) with each value taken out of its list; any other line as it is."""
    if not isinstance(obj, dict):
        return obj
    values = [v for k, v in obj.items() if k != BATCH_INDEX]
    if len(values) < 2 or not all(isinstance(v, list) and len(v) == 1 for v in values):
        return obj
    return {k: v if k == BATCH_INDEX else v[0] for k, v in obj.items()}


def unwrap_batch_of_one_frame(df: pl.DataFrame) -> pl.DataFrame:
    """:func:`unwrap_batch_of_one` for a chunk: done only when every line is such a batch with the same
    keys (no null); a chunk that mixes them goes line by line (its lists are not types the contract
    allows)."""
    cols = [c for c in df.columns if c != BATCH_INDEX]
    if len(cols) < 2 or not df.height or not all(isinstance(df.schema[c], pl.List) for c in cols):
        return df
    ones = df.select(pl.all_horizontal(pl.col(c).list.len() == 1 for c in cols).fill_null(False).all()).item()
    return df.with_columns(pl.col(c).list.first() for c in cols) if ones else df
