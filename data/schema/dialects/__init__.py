"""Trainers' files as they lie on disk: one module per dialect (this project's contract, TRL, veRL, NeMo-RL,
NeMo Gym, verifiers / prime-rl, AReaL, OpenRLHF-style dumps), each a :class:`Dialect`: how its files are
recognised (name, folders, fields), how its records map onto the contract, and a one-line description
that the runs page shows.

Each file of a run is matched to one dialect (:func:`detect`) when it is first read, from its path and
the fields of its first record; ``rlboard.toml`` in the run folder (``dialect = "verl"``) or the setting
``RLBOARD_DIALECT`` names it where the guess is not sure. A new framework is one new module here, built
on :mod:`.base` (what every dialect shares), listed in :data:`DIALECTS`, and its tests.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from data.schema.dialects import (
    areal,
    atropos,
    contract,
    mapping,
    miles,
    nemo_gym,
    nemo_rl,
    openrlhf,
    prime_rl,
    trl,
    verifiers,
    verl,
)
from data.schema.dialects.base import (
    LINE_NOTES,
    ROLLOUT_SUFFIXES,
    SURE,
    TRAIN,
    VALIDATION,
    Companion,
    Dialect,
    Reading,
    RunFiles,
    merge_aliases,
    split_of,
    step_from_name,
    step_from_path,
)

# The contract also takes the names of the frameworks' records that hand-written loggers dump as they are
# (a veRL batch's old_log_probs, OpenRLHF's action_log_probs, a TRL reward function's prompts), as it did
# before dialects: a file recognised as none of those is still read with them.
_CONTRACT = replace(
    contract.DIALECT,
    aliases=merge_aliases(contract.ALIASES, verl.OWN_ALIASES, openrlhf.OWN_ALIASES, trl.OWN_ALIASES),
)
# In the order a tie is decided (the contract last: the fallback).
DIALECTS: tuple[Dialect, ...] = (
    areal.DIALECT,
    atropos.DIALECT,
    prime_rl.DIALECT,
    miles.DIALECT,
    nemo_rl.DIALECT,
    nemo_gym.DIALECT,
    verifiers.DIALECT,
    trl.DIALECT,
    verl.DIALECT,
    openrlhf.DIALECT,
    _CONTRACT,
)
BY_NAME: dict[str, Dialect] = {d.name: d for d in DIALECTS}
CONTRACT = _CONTRACT
MAPPED = mapping.DIALECT  # rlboard.toml's [fields]: never guessed nor named, used where a mapping is given
_READERS: dict[str, Dialect] = {**BY_NAME, MAPPED.name: MAPPED}


@dataclass(frozen=True)
class Match:
    """The dialect a file was matched to, and how: ``"named"`` (rlboard.toml or the setting), ``"mapped"``
    (rlboard.toml's ``[fields]``), ``"sure"`` (one dialect recognised it best, by what is unique to it:
    :data:`SURE`), ``"guessed"`` (several equally, or none surely: the best of them, or the contract)."""

    dialect: Dialect
    how: str
    others: tuple[str, ...] = ()  # the dialects that recognised it as well, when guessed


def detect(rel: str, fields: frozenset[str], named: str | None = None, default: str | None = None) -> Match:
    """The dialect of a file (``rel``: its path inside the run; ``fields``: the keys of its first record).
    ``named``: the run's own choice (rlboard.toml), which wins; ``default``: the setting's, taken where
    the guess is not sure."""
    if named in BY_NAME:
        return Match(BY_NAME[named], "named")
    scores = [(d.recognise(rel, fields), d) for d in DIALECTS]
    best = max(score for score, _ in scores)
    top = [d for score, d in scores if score == best and score > 0]
    if len(top) == 1 and best >= SURE:
        return Match(top[0], "sure")
    if default in BY_NAME:
        return Match(BY_NAME[default], "named")
    others = [d.name for score, d in sorted(scores, key=lambda s: -s[0]) if score > 0]
    return Match(top[0] if top else CONTRACT, "guessed", tuple(others[1:]))


def dialects_by_name() -> dict[str, Dialect]:
    """Every dialect by its name (what rlboard.toml and the setting name)."""
    return dict(BY_NAME)


def by_name(name: str | None) -> Dialect:
    """The dialect of that name (a file's, as its manifest entry records it, the [fields] mapping's
    included); the contract for None."""
    return _READERS.get(name or "", CONTRACT)


__all__ = [
    "BY_NAME",
    "LINE_NOTES",
    "MAPPED",
    "ROLLOUT_SUFFIXES",
    "SURE",
    "CONTRACT",
    "DIALECTS",
    "TRAIN",
    "VALIDATION",
    "Dialect",
    "Match",
    "Companion",
    "Reading",
    "RunFiles",
    "by_name",
    "detect",
    "dialects_by_name",
    "merge_aliases",
    "split_of",
    "step_from_name",
    "step_from_path",
]
