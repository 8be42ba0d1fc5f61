"""Trainers' files as they lie on disk: one module per dialect (this project's contract, TRL, veRL, NeMo-RL,
NeMo Gym, verifiers / prime-rl, OpenRLHF-style dumps), each a :class:`Dialect`: how its files are
recognised (name, folders, fields), how its records map onto the contract, and a one-line description
that the runs page shows.

Each file of a run is matched to one dialect (:func:`detect`) when it is first read, from its path and
the fields of its first record; ``rlboard.toml`` in the run folder (``dialect = "verl"``) or the setting
``RLBOARD_DIALECT`` names it where the guess is not sure. A new framework is one new module here, listed
in :data:`DIALECTS`, and its tests.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import polars as pl

from data.schema.contract import INT64_MAX


@dataclass
class Reading:
    """How a run's files are read beyond their dialect: the reward functions' weights (a setting,
    rlboard.toml, or fitted to the reward the trainer logged) and names (the trainer's own log, such as TRL's log history), and, filled in while
    reading, how the reward was formed (``formed``: ``{"reward": "1 × a + 0.5 × b", "weights": "…"}``)."""

    reward_weights: dict[str, float] | None = None
    weights_from: str = ""
    reward_parts: tuple[str, ...] | None = None
    parts_from: str = ""
    formed: dict = field(default_factory=dict)
    tokenizer: str | None = None  # a local tokenizer.json naming token ids (see token_names)

    def key(self) -> list:
        """What the store depends on (a store read with other weights is read again)."""
        return [sorted((self.reward_weights or {}).items()), list(self.reward_parts or ()), self.tokenizer]

    def token_names(self, ids: list) -> list[str]:
        """Token ids as the tokens they stand for, by the tokenizer (``id_to_token``; an id it does not
        know stays its number); without a tokenizer, the ids as text."""
        tok = _tokenizer(self.tokenizer) if self.tokenizer else None
        if tok is None:
            return [str(i) for i in ids]
        return [(tok.id_to_token(i) if isinstance(i, int) and i >= 0 else None) or str(i) for i in ids]


_TOKENIZERS: dict[str, object] = {}


def _tokenizer(path: str):
    """The tokenizer of a local tokenizer.json (read once per process; None when it cannot be read)."""
    if path not in _TOKENIZERS:
        try:
            from tokenizers import Tokenizer

            _TOKENIZERS[path] = Tokenizer.from_file(path)
        except Exception:  # noqa: BLE001 - no tokenizer: the ids are shown (the runs page says why)
            _TOKENIZERS[path] = None
    return _TOKENIZERS[path]


@dataclass(frozen=True)
class Dialect:
    """One trainer's way of writing rollouts.

    ``aliases``: the contract's fields under this dialect's names (a known field's other names are tried
    only when the contract's own is absent, the first present in the order given). ``line``: a parsed
    record rewritten onto the contract's fields before they are checked (prompt and response may be chat
    messages, see :mod:`data.schema.chat`); ``frame``: the same for a chunk Polars parsed whole, or None
    when only ``line`` can do it (the chunk then goes line by line). ``recognise(path, fields)``: how sure
    it is that a file (its path inside the run, the fields of its first record) is of this dialect, 0 for
    not at all. ``stepless``: its files are evaluation dumps with no step (step 0, said on the runs page).
    ``mapping``: how fields were mapped, a phrase each, for the runs page.
    """

    name: str
    title: str
    description: str
    recognise: Callable[[str, frozenset[str]], int]
    aliases: dict[str, tuple[str, ...]] = field(default_factory=dict)
    mapping: tuple[str, ...] = ()
    line: Callable[[dict, Reading], dict] | None = None
    frame: Callable[[pl.DataFrame, Reading], pl.DataFrame] | None = None
    stepless: bool = False

    def renames(self, columns) -> dict[str, str]:
        """Which columns stand for a known field under this dialect's name (see ``aliases``)."""
        renames = {}
        for canon, alts in self.aliases.items():
            if canon not in columns:
                for alt in alts:
                    if alt in columns:
                        renames[alt] = canon
                        break
        return renames

    def apply_aliases(self, obj: dict) -> dict:
        """A parsed record with its fields under this dialect's names moved to the known names."""
        for alt, canon in self.renames(obj).items():
            obj[canon] = obj.pop(alt)
        return obj


def merge_aliases(*tables: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """Alias tables joined, the names of the first table first for each field."""
    out: dict[str, tuple[str, ...]] = {}
    for table in tables:
        for canon, names in table.items():
            out[canon] = tuple(dict.fromkeys((*out.get(canon, ()), *names)))
    return out


# A step in a file's or folder's name: "step" and its number (`step_120`, `global_step-5`, NeMo-RL's
# `train_data_step12`), not after a letter (`substep3` is not one); or a name that is only a number
# (veRL's rollout_data_dir writes `120.jsonl`).
_NAME_STEP = re.compile(r"(?<![a-z])step[_=-]?(\d+)(?!.*(?<![a-z])step[_=-]?\d)|^(\d+)$", re.IGNORECASE)
ROLLOUT_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".parquet")


def base_name(name: str) -> str:
    """A rollout file's name without its suffix (``.jsonl``, ``.jsonl.gz``, ``.jsonl.zst``, ``.parquet``)."""
    for suffix in ROLLOUT_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def step_from_name(name: str) -> int | None:
    """The step that a rollout file's or folder's name gives, for its lines that have none; None when the
    name gives none (``rank0.jsonl``) or one out of range. With "step" twice, the last one counts."""
    m = _NAME_STEP.search(base_name(name))
    if m is None:
        return None
    step = int(m.group(1) or m.group(2))
    return step if step <= INT64_MAX else None


def step_from_path(rel: str) -> int | None:
    """The step of a file's lines that have none, from its path inside the run: its name's
    (:func:`step_from_name`), else the innermost folder's that gives one (prime-rl's
    ``rollouts/step_12/train_rollouts.jsonl``)."""
    for part in reversed(rel.split("/")):
        step = step_from_name(part)
        if step is not None:
            return step
    return None


# Validation and evaluation dumps written beside the training ones: NeMo-RL's val_data_step{N}.jsonl,
# prime-rl's eval_rollouts.jsonl and rollouts/step_{n}/eval/, veRL's validation_data_dir (a folder the user
# names, usually "val…" or "validation…").
_VALIDATION = re.compile(r"^(val|valid|validation|eval|evals|evaluation)(?:[_\-.]|\d|$)", re.IGNORECASE)
TRAIN, VALIDATION = "train", "validation"


def split_of(rel: str) -> str:
    """``"validation"`` for a file whose name or folder (inside the run) says it holds validation or
    evaluation rollouts, else ``"train"``: the two are kept apart (a run each), never merged by step."""
    return VALIDATION if any(_VALIDATION.match(part) for part in rel.split("/")) else TRAIN


from data.schema.dialects import (  # noqa: E402 - the modules build their Dialect with the helpers above
    contract,
    nemo_gym,
    nemo_rl,
    openrlhf,
    trl,
    verifiers,
    verl,
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


@dataclass(frozen=True)
class Match:
    """The dialect a file was matched to, and how: ``"named"`` (rlboard.toml or the setting), ``"sure"``
    (one dialect recognised it best), ``"guessed"`` (several equally, or none: the first of them, or the
    contract)."""

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
    if len(top) == 1:
        return Match(top[0], "sure")
    if default in BY_NAME:
        return Match(BY_NAME[default], "named")
    return Match(top[0] if top else CONTRACT, "guessed", tuple(d.name for d in top[1:]))


def dialects_by_name() -> dict[str, Dialect]:
    """Every dialect by its name (what rlboard.toml and the setting name)."""
    return dict(BY_NAME)


def by_name(name: str | None) -> Dialect:
    """The dialect of that name (a file's, as its manifest entry records it); the contract for None."""
    return BY_NAME.get(name or "", CONTRACT)


__all__ = [
    "BY_NAME",
    "CONTRACT",
    "DIALECTS",
    "TRAIN",
    "VALIDATION",
    "Dialect",
    "Match",
    "Reading",
    "by_name",
    "detect",
    "dialects_by_name",
    "merge_aliases",
    "split_of",
    "step_from_name",
    "step_from_path",
]
