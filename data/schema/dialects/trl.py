"""TRL: ``GRPOTrainer`` / ``RLOOTrainer`` with ``log_completions=True`` write one Parquet file per logging
step, ``{output_dir}/completions/completions_{step:05d}.parquet``: step, prompt, completion, one column per
reward function, the ``log_extra`` columns and advantage, and no total reward (the total TRL optimised is
the functions' weighted sum). The arguments its trainers hand a reward function (prompts, completions,
rewards, training_step), logged as they are, are read too."""

from __future__ import annotations

import re

import polars as pl

from data.schema.dialects.base import Dialect, Reading, base_name, merge_aliases
from data.schema.dialects.contract import ALIASES as CONTRACT_ALIASES

OWN_ALIASES: dict[str, tuple[str, ...]] = {
    "prompt": ("prompts",),
    "response": ("completions",),
    "step": ("training_step",),
    "reward": ("rewards",),
}
ALIASES = merge_aliases(CONTRACT_ALIASES, OWN_ALIASES)
_FILE = re.compile(r"^completions_\d+$")
# Columns of TRL's table that are never reward functions.
_NOT_PARTS = frozenset({"step", "prompt", "completion", "advantage", "image", "images"})


def reward_parts(df: pl.DataFrame, reading: Reading) -> tuple[list[str], str]:
    """The reward functions' columns of a completions table and where their names come from: the trainer's
    own log (``reading.reward_parts``), else the weights' names, else the float columns that TRL writes
    right after ``completion`` (before the first column of another type)."""
    for names, source in (
        (reading.reward_parts, reading.parts_from),
        (tuple(reading.reward_weights or ()), reading.weights_from),
    ):
        found = [n for n in names or () if n in df.columns]
        if found:
            return found, source
    cols = list(df.columns)
    start = cols.index("response") + 1 if "response" in cols else len(cols)
    found = []
    for c in cols[start:]:
        if c in _NOT_PARTS or not df.schema[c].is_float():
            break
        found.append(c)
    return found, "the float columns after completion (TRL's order)"


def frame(df: pl.DataFrame, reading: Reading) -> pl.DataFrame:
    """Renames; for a table without a total reward, the reward is the weighted sum of its reward
    functions' columns (TRL sums them with ``nansum``: a function that returned None counts 0), each
    weight from ``reading`` (1, TRL's default, for the others)."""
    df = df.rename(DIALECT.renames(df.columns))
    if "reward" in df.columns or "response" not in df.columns:
        return df
    parts, source = reward_parts(df, reading)
    if not parts:
        return df
    weights = {p: float((reading.reward_weights or {}).get(p, 1.0)) for p in parts}
    total = pl.sum_horizontal(pl.col(p).cast(pl.Float64).fill_nan(None) * weights[p] for p in parts)
    given = reading.weights_from if reading.reward_weights else ""
    reading.formed.update(
        reward=" + ".join(f"{weights[p]:g} × {p}" for p in parts),
        parts=parts,
        parts_from=source,
        weights_from=given or "none given: equal weights (1, TRL's default) assumed",
    )
    return df.with_columns(total.alias("reward"))


def line(obj: dict, reading: Reading) -> dict:
    """A record of the same table read line by line (a chunk whose types do not go whole)."""
    df = None
    if "completion" in obj:
        # The reward is summed from scalar columns: lists and objects (chat messages) only hold their place,
        # as a line's list of mixed types ([false, 0]) is no column Polars can make.
        row = {k: None if isinstance(v, list | dict) else v for k, v in obj.items()}
        try:
            df = frame(pl.DataFrame([row], infer_schema_length=None), reading)
        except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
            df = None  # an integer past 64 bits: no sum made here (validate_record says what is missing)
    if df is not None and "reward" in df.columns and "reward" not in obj:
        obj = DIALECT.apply_aliases(obj)
        obj["reward"] = df.get_column("reward")[0]
        return obj
    return DIALECT.apply_aliases(obj)


def recognise(rel: str, fields: frozenset[str]) -> int:
    name = base_name(rel.rsplit("/", 1)[-1])
    if _FILE.match(name) or {"prompt", "completion", "advantage"} <= fields:
        return 30
    if fields & {"prompts", "completions"}:
        return 15
    return 0


DIALECT = Dialect(
    name="trl",
    title="TRL completions (log_completions=True)",
    description="completions/completions_{step:05d}.parquet: step, prompt, completion, a column per reward "
    "function, advantage; no total reward",
    recognise=recognise,
    aliases=ALIASES,
    mapping=(
        "completion → response",
        "reward = the weighted sum of the reward functions' columns (each kept as a column)",
        "prompts, completions, rewards, training_step (a reward function's arguments) → prompt, response, reward, step",
    ),
    line=line,
    frame=frame,
)
