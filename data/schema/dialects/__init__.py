"""Other trainers' files, read as they lie on disk: one module per dialect, each naming what it writes
under other names than the contract's (its ``ALIASES``) or in another shape.

:data:`ALIASES` joins them; a known field's other names are tried only when the contract's own is
absent, the first present in the order given (common names, then veRL, OpenRLHF and TRL).
"""

from __future__ import annotations

import re

from data.schema.contract import INT64_MAX
from data.schema.dialects import common, openrlhf, trl, verl
from data.schema.dialects.messages import CONVERSATION, split_messages
from data.schema.dialects.nemo_rl import (
    CONTENTS,
    split_contents,
    unwrap_batch_of_one,
    unwrap_batch_of_one_frame,
)

__all__ = [
    "ALIASES",
    "alias_renames",
    "apply_aliases",
    "step_from_name",
    "unwrap_batch_of_one",
    "unwrap_batch_of_one_frame",
]

DIALECTS = (common, verl, openrlhf, trl)
ALIASES: dict[str, tuple[str, ...]] = {}
for _dialect in DIALECTS:
    for _canon, _names in _dialect.ALIASES.items():
        ALIASES[_canon] = tuple(dict.fromkeys((*ALIASES.get(_canon, ()), *_names)))


def apply_aliases(obj: dict) -> dict:
    """A parsed line with its fields under other trainers' names moved to the known names (as
    :func:`conform_frame` renames a chunk's columns), and a whole conversation split into prompt and
    response (see :func:`split_messages` and :data:`CONTENTS`)."""
    for alt, canon in alias_renames(list(obj)).items():
        obj[canon] = obj.pop(alt)
    if "prompt" not in obj and "response" not in obj:
        if CONVERSATION in obj:
            obj["prompt"], obj["response"] = split_messages(obj.pop(CONVERSATION))
        elif (halves := split_contents(obj.get(CONTENTS)))[1] is not None:
            del obj[CONTENTS]
            obj["prompt"], obj["response"] = halves
    return obj


# A step in a file's name: "step" and its number (`step_120`, `global_step-5`, NeMo-RL's
# `train_data_step12`), not after a letter (`substep3` is not one); or a name that is only a number
# (veRL's rollout_data_dir writes `120.jsonl`).
_NAME_STEP = re.compile(r"(?<![a-z])step[_=-]?(\d+)(?!.*(?<![a-z])step[_=-]?\d)|^(\d+)$", re.IGNORECASE)


def step_from_name(name: str) -> int | None:
    """The step that a rollout file's name gives (``name`` without its folder), for its lines that have
    none; None when the name gives none (``rank0.jsonl``) or one out of range. With "step" twice, the
    last one counts."""
    m = _NAME_STEP.search(name.removesuffix(".jsonl"))
    if m is None:
        return None
    step = int(m.group(1) or m.group(2))
    return step if step <= INT64_MAX else None


def alias_renames(columns: list[str]) -> dict[str, str]:
    """Which columns of a frame stand for a known field under another trainer's name (see ``ALIASES``)."""
    renames = {}
    for alias_target, alts in ALIASES.items():
        if alias_target not in columns:
            for alt in alts:
                if alt in columns:
                    renames[alt] = alias_target
                    break
    return renames
