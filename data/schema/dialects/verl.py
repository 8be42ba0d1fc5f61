"""veRL: its rollout dumps (``trainer.rollout_data_dir``, one file per step, ``{global_steps}.jsonl``) write
input, output, score, step and the reward's extra fields; texts are decoded with special tokens skipped,
so a prompt is a flat chat-template string (``system\\n…\\nuser\\n…\\nassistant\\n``) and in a multi-turn
run the tool results (``user\\n<tool_response>…``) are inside ``output``. Its batches name the arrays
old_log_probs, ref_log_prob and token_level_rewards, and its trainer counts global_steps."""

from __future__ import annotations

import re

import polars as pl

from data.schema.chat import RESPONSE_OWN, messages_own, messages_text, split_flat_turns
from data.schema.dialects.base import Dialect, base_name, merge_aliases
from data.schema.dialects.contract import ALIASES as CONTRACT_ALIASES

OWN_ALIASES: dict[str, tuple[str, ...]] = {
    "prompt": ("input",),
    "response": ("output",),
    "step": ("global_steps",),
    "reward": ("score",),
    "ref_logprobs": ("ref_log_prob",),
    "logprobs": ("old_log_probs",),
    "token_rewards": ("token_level_rewards",),
}
ALIASES = merge_aliases(CONTRACT_ALIASES, OWN_ALIASES)
BATCH_NAMES = frozenset({"old_log_probs", "ref_log_prob", "token_level_rewards", "global_steps"})


def flat_response(text) -> tuple[str, str] | None:
    """A response decoded as one flat string that holds several turns (the model's, then a tool's
    ``user\\n<tool_response>…``, then the model's again): ``(text with each turn marked by its role, the
    model's own text)``; None for a response of one turn (kept as it is)."""
    if not isinstance(text, str) or "\n" not in text:
        return None
    turns = split_flat_turns(text)
    if len(turns) < 2:
        return None
    return messages_text(turns), messages_own(turns) or ""


def line(obj: dict, reading=None) -> dict:
    obj = DIALECT.apply_aliases(obj)
    split = flat_response(obj.get("response"))
    if split is not None:
        obj["response"], obj[RESPONSE_OWN] = split
    return obj


def frame(df: pl.DataFrame, reading=None) -> pl.DataFrame:
    df = df.rename(DIALECT.renames(df.columns))
    if df.schema.get("response") != pl.String:
        return df
    splits = [flat_response(v) for v in df.get_column("response").to_list()]
    if all(s is None for s in splits):
        return df
    given = df.get_column("response").to_list()
    return df.with_columns(
        pl.Series(
            "response", [g if s is None else s[0] for g, s in zip(given, splits, strict=True)], pl.String
        ),
        pl.Series(RESPONSE_OWN, [None if s is None else s[1] for s in splits], pl.String),
    )


_STEP_FILE = re.compile(r"^\d+$")


def recognise(rel: str, fields: frozenset[str]) -> int:
    score = 0
    if {"input", "output"} <= fields:
        score = 20 + 5 * ("score" in fields)
    elif fields & BATCH_NAMES:
        score = 15
    if score and _STEP_FILE.match(base_name(rel.rsplit("/", 1)[-1])):
        score += 5
    return score


DIALECT = Dialect(
    name="verl",
    title="veRL rollout_data_dir",
    description="{step}.jsonl: input, output, score, step; flat chat-template texts, tool results inside output",
    recognise=recognise,
    aliases=ALIASES,
    mapping=(
        "input → prompt (previewed by its last user turn)",
        "output → response (a multi-turn output split into the model's turns and the tool results between them;"
        " length and repetition count the model's turns)",
        "score → reward",
        "old_log_probs, ref_log_prob, token_level_rewards → logprobs, ref_logprobs, token_rewards",
    ),
    line=line,
    frame=frame,
)
