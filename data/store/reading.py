"""What the board understood of a run's files, from its store's manifest: the dialect each file was read
as (and how sure that was), how the dialect's fields map onto the contract, where the steps came from,
how the reward was formed, and what was not read and why. The runs page shows it as it is."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import polars as pl

from data.schema.dialects import by_name
from data.schema.secrets import MASK, is_secret
from data.store.layout import STORE_FORMAT
from data.store.reader import RunStore

RUN_FILE = "rlboard.toml"


@dataclass(frozen=True)
class Understood:
    """Sentences about one run, each a ``(label, text)`` pair: ``read_as`` (one per dialect found),
    ``mapping`` (the fields of each), ``notes`` (steps, reward, guesses) and ``not_read``."""

    read_as: list[tuple[str, str]]
    mapping: list[str]
    notes: list[str]
    not_read: list[str]


def _files(n: int) -> str:
    return f"{n:,} file{'s' if n != 1 else ''}"


def understood(store: RunStore) -> Understood:
    """What the board made of ``store``'s run (see :class:`Understood`)."""
    m = store.manifest
    files = m.files
    by_dialect = Counter(e.get("dialect") or "contract" for e in files.values())
    read_as, mapping, notes, not_read = [], [], [], []
    for name, n in by_dialect.most_common():
        d = by_name(name)
        read_as.append((d.title, f"{d.description} ({_files(n)})"))
        mapping.extend(d.mapping)
    guessed = [(rel, e) for rel, e in files.items() if e.get("matched") == "guessed"]
    if guessed:
        rel, e = guessed[0]
        also = ", ".join(by_name(o).title for o in e.get("also", ()))
        why = f"it also fits {also}" if also else "no dialect recognised its fields"
        notes.append(
            f"{_files(len(guessed))} read as {by_name(e.get('dialect')).title} by a guess ({rel}: {why}); "
            f'name the dialect in {RUN_FILE} in the run folder (dialect = "…") if that is wrong.'
        )
    named = sum(e.get("matched") == "named" for e in files.values())
    if named:
        notes.append(f"{_files(named)} read as {RUN_FILE} or the setting RLBOARD_DIALECT names.")
    stepless = [rel for rel, e in files.items() if e.get("step_from") == "none"]
    if stepless:
        notes.append(
            f"No step in {_files(len(stepless))} (an evaluation dump, e.g. {stepless[0]}): read as step 0."
        )
    from_path = [(rel, e["step"]) for rel, e in files.items() if e.get("step_from") == "path"]
    if from_path:
        rel, step = from_path[0]
        notes.append(f"Lines without a step take their file's or folder's step (e.g. {rel}: step {step}).")
    formed = m.reward_formed
    if formed:
        notes.append(
            f"reward = {formed['reward']} (reward functions from {formed['parts_from']}; weights: "
            f"{formed['weights_from']}). Set them in {RUN_FILE}: [reward_weights] name = weight."
        )
    if m.tokenizer:
        notes.append(f"Token ids named by the tokenizer {m.tokenizer}.")
    if m.split == "validation":
        notes.append("Validation or evaluation files of the run folder, kept apart from its training steps.")
    if m.rebuilt_from is not None:
        notes.append(
            f"Store rebuilt from the rollout files: the one before was written by an older version of the "
            f"board (store format {m.rebuilt_from}, now {STORE_FORMAT})."
        )
    notes.extend(m.problems)
    masked = masked_fields(store)
    if masked:
        shown = ", ".join(masked[:10]) + (f" and {len(masked) - 10} more" if len(masked) > 10 else "")
        notes.append(
            f"{len(masked):,} field{'s' if len(masked) != 1 else ''} masked as {MASK} ({shown}): named like a "
            "key or a password, their texts are never stored, shown or exported."
        )
    ignored = m.ignored_fields
    if ignored:
        shown = ", ".join(ignored[:20]) + (f" and {len(ignored) - 20} more" if len(ignored) > 20 else "")
        not_read.append(f"fields {shown}: not a number, a text or a list of numbers")
    errors = sum(p.get("errors", 0) for p in m.parts.values())
    rows = sum(p.get("rows", 0) for p in m.parts.values())
    if errors and not rows:
        not_read.append(
            f"every line ({errors:,}): no line had what the {' / '.join(t for t, _ in read_as)} format needs "
            "(see the unusable lines below)"
        )
    return Understood(read_as, mapping, notes, not_read)


def masked_fields(store: RunStore) -> list[str]:
    """The run's columns whose texts were masked when read (see data.schema.secrets): every text column
    of a secret's name holds only the mask."""
    names = set(store.manifest.extra_columns)
    return sorted(c for c, t in store.schema().items() if c in names and t == pl.String and is_secret(c))


def page_notices(store: RunStore) -> list[str]:
    """What every page of the run says about how it was read, where a reader could be misled: steps that
    are no steps (an evaluation dump read as step 0) and a reward summed with weights nobody gave."""
    m = store.manifest
    out = []
    stepless = [rel for rel, e in m.files.items() if e.get("step_from") == "none"]
    if stepless:
        out.append(
            f"No step in {stepless[0]}{' and the other files' if len(stepless) > 1 else ''} (an evaluation "
            "dump): its responses are shown as step 0."
        )
    formed = m.reward_formed
    if formed and "equal weights" in formed.get("weights_from", ""):
        out.append(
            f"reward = {formed['reward']}: no weights were given for the reward functions, so equal weights "
            f"are assumed; name them in {RUN_FILE} in the run folder ([reward_weights] name = weight) or "
            "RLBOARD_REWARD_WEIGHTS."
        )
    return out
