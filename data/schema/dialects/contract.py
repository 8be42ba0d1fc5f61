"""This project's own contract (and the original board's files): one response a line, ``prompt``,
``response``, ``reward``, ``step`` and the optional token arrays, under the names hand-written loggers
commonly use too; a whole conversation under ``messages`` is split where the assistant first speaks."""

from __future__ import annotations

import polars as pl

from data.schema.chat import messages_text
from data.schema.dialects.base import SURE, Dialect

# Names that several trainers and hand-written loggers use for the contract's fields.
ALIASES: dict[str, tuple[str, ...]] = {
    "prompt": ("query", "question"),
    "response": ("completion",),
    "step": ("global_step", "train_step", "iteration"),
    "reward": ("score",),
    "response_tokens": ("tokens",),
    "ref_logprobs": ("ref_logps", "reference_logprobs", "ref_log_probs"),
    "logprobs": ("logps", "log_probs"),
    "token_rewards": ("rewards_per_token",),
}

# A whole conversation under one key (OpenAI's chat format, as agent frameworks log a trajectory).
CONVERSATION = "messages"


def split_messages(value) -> tuple[list | None, list | None]:
    """A whole conversation as ``(prompt, response)``: the chat messages before the first assistant
    message, and that message with all that follows (tool results and later turns of a multi-turn
    trajectory); ``(None, None)`` when ``value`` is not chat messages or has no message before an
    assistant one."""
    if messages_text(value) is None:
        return None, None
    first = next((i for i, m in enumerate(value) if m.get("role") == "assistant"), 0)
    return (value[:first], value[first:]) if first else (None, None)


def line(obj: dict, reading=None) -> dict:
    """A line with a whole conversation (and neither prompt nor response) split into both."""
    if "prompt" not in obj and "response" not in obj and CONVERSATION in obj:
        obj["prompt"], obj["response"] = split_messages(obj.pop(CONVERSATION))
    return obj


def frame(df: pl.DataFrame, reading=None) -> pl.DataFrame:
    """:func:`line` for a chunk: the conversation split row by row (the halves stay chat messages)."""
    conversation = df.schema.get(CONVERSATION)
    if "prompt" in df.columns or "response" in df.columns or not isinstance(conversation, pl.List):
        return df
    halves = [split_messages(v) for v in df.get_column(CONVERSATION).to_list()]
    return df.drop(CONVERSATION).with_columns(
        pl.Series("prompt", [p for p, _ in halves], dtype=conversation),
        pl.Series("response", [r for _, r in halves], dtype=conversation),
    )


def recognise(rel: str, fields: frozenset[str]) -> int:
    """Sure on the contract's own names (no trainer writes ``response`` beside ``prompt`` and ``reward``);
    a guess on the names other loggers use too (query, completion, score)."""
    if {"prompt", "response", "reward"} <= fields:
        return SURE
    names = lambda canon: {canon, *ALIASES.get(canon, ())}  # noqa: E731
    if fields & names("prompt") and fields & names("response"):
        return 10
    return 5 if CONVERSATION in fields else 0


DIALECT = Dialect(
    name="contract",
    title="RL Logging Board contract",
    description="one response a line: prompt, response, reward, step and optional token arrays",
    recognise=recognise,
    aliases=ALIASES,
    mapping=(
        "prompt, response, reward, step as they are (or query / question, completion, score, global_step)",
        "messages: split where the assistant first speaks",
    ),
    line=line,
    frame=frame,
    fields={"prompt": "prompt", "response": "response", "reward": "reward", "step": "step"},
)
