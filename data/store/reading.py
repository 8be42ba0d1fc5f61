"""What the board understood of a run's files, from its store's manifest: the dialect each file was read
as (and how sure that was), how the dialect's fields map onto the contract, where the steps came from,
how the reward was formed, and what was not read and why. The runs page shows it as it is."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import polars as pl

from data.schema.dialects import by_name
from data.schema.dialects.mapping import NAMES, FieldMap, step_of, toml
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
        why = f"it also fits {also}" if also else "no trainer's format has its fields for sure"
        notes.append(
            f"{_files(len(guessed))} read as {by_name(e.get('dialect')).title} by a guess ({rel}: {why}); "
            f'name the dialect in {RUN_FILE} in the run folder (dialect = "…") or map its fields ([fields]) if '
            "that is wrong."
        )
    mapped = sum(e.get("matched") == "mapped" for e in files.values())
    if mapped:
        where = "the rollout root's" if (m.fields_map or {}).get("where") == "root" else "the run folder's"
        notes.append(f"{_files(mapped)} read by the [fields] of {where} {RUN_FILE} (see the mapping below).")
    named = sum(e.get("matched") == "named" for e in files.values())
    if named:
        notes.append(f"{_files(named)} read as {RUN_FILE} or the setting RLBOARD_DIALECT names.")
    stepless = [rel for rel, e in files.items() if e.get("step_from") == "none"]
    if stepless:
        notes.append(
            f"No step in {_files(len(stepless))} (e.g. {stepless[0]}): not in its lines, and its path is not "
            f"laid out as a trainer lays out steps (an evaluation dump?): read as step 0. Name the step in "
            f'{RUN_FILE}: [fields] step = "…" (a field, "folder", "file" or a regex over the path).'
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
    errors = m.unusable_lines
    if errors and not m.rows:
        not_read.append(
            f"every line ({errors:,}): no line had what the {' / '.join(t for t, _ in read_as)} format needs "
            "(see the unusable lines below)"
        )
    return Understood(read_as, mapping, notes, not_read)


def _no_step_why(entry: dict) -> str:
    """Why a file has no step: its format has none (an evaluation dump), or neither its lines nor its path
    give one."""
    if by_name(entry.get("dialect")).stepless:
        return "an evaluation dump"
    if entry.get("dialect") == "fields":
        return "the step that [fields] names is not in its path"
    return "not in its lines, nor in a known layout of its path"


@dataclass(frozen=True)
class MappingShown:
    """The mapping a run was read with, as a ready rlboard.toml (``toml``) to copy into the run folder and
    edit, and what it could not map (``unmapped``: a sentence each)."""

    toml: str
    unmapped: list[str]


_UNNAMED = {
    "prompt": "prompt: read by the contract's names (prompt, query, question)",
    "response": "response: read by the contract's names (response, completion)",
    "reward": "reward: read by the contract's names (reward, score)",
    "step": "step: each line's own (step, global_step), else its path's where laid out as a trainer lays out steps",
    "group": "group: none named; a group is the responses of a step with the same prompt",
}


def mapping_shown(store: RunStore) -> MappingShown:
    """How ``store``'s run was mapped onto prompt, response, reward, step and group (see :class:`MappingShown`):
    the [fields] it was read with, else its dialect's own fields (a dialect whose reading a mapping cannot
    say is named instead, ``dialect = "…"``)."""
    m = store.manifest
    files = m.files
    mapped = [e for e in files.values() if e.get("dialect") == "fields"]
    unmapped: list[str] = []
    if mapped and m.fields_map:
        table = dict(m.fields_map.get("table") or {})
        where = "the rollout root's" if m.fields_map.get("where") == "root" else "the run folder's"
        unmapped.extend(_UNNAMED[n] for n in NAMES if n not in table)
        if "group" in table and "group_id" not in m.extra_columns:
            unmapped.append(f'group = "{table["group"]}": not in any line read')
        text = f"# [fields] of {where} rlboard.toml\n" + toml(table)
    else:
        counts = Counter(e.get("dialect") or "contract" for e in files.values())
        d = by_name(counts.most_common(1)[0][0] if counts else None)
        if not d.fields:
            text = f'dialect = "{d.name}"\n# {d.title}: read by its own rules; [fields] may replace them\n'
            return MappingShown(text, [])
        table = dict(d.fields)
        steps = [(rel, e) for rel, e in files.items() if e.get("step_from") == "path"]
        if steps and table.get("step") == "step":
            table["step"] = _path_kind(*steps[0])
        unmapped.extend(_UNNAMED[n] for n in NAMES if n not in table)
        text = f"# as the {d.title} dialect read it\n" + toml(table)
    none = [rel for rel, e in files.items() if e.get("step_from") == "none"]
    if none:
        unmapped.append(f"step: none in {_files(len(none))} (e.g. {none[0]}): read as step 0")
    return MappingShown(text, unmapped)


def _path_kind(rel: str, entry: dict) -> str:
    """How a [fields] table would say the step a file's path gave: ``"file"`` or ``"folder"``."""
    for kind in ("file", "folder"):
        if step_of(FieldMap((("step", kind),)), rel) == (entry.get("step"), "fields"):
            return kind
    return "folder"


def masked_fields(store: RunStore) -> list[str]:
    """The run's columns whose texts were masked when read (see data.schema.secrets): every text column
    of a secret's name holds only the mask."""
    names = {c for c in store.manifest.extra_columns if is_secret(c)}
    if not names:  # the common case: no column to look at, and the runs page builds no index for it
        return []
    return sorted(c for c, t in store.schema().items() if c in names and t == pl.String)


def page_notices(store: RunStore) -> list[str]:
    """What every page of the run says about how it was read, where a reader could be misled: steps that
    are no steps (an evaluation dump read as step 0), lines left out as unreadable and a reward summed with
    weights nobody gave."""
    m = store.manifest
    out = []
    guessed = [(rel, e) for rel, e in m.files.items() if e.get("matched") == "guessed"]
    if guessed:
        rel, e = guessed[0]
        out.append(
            f"{rel}{' and other files' if len(guessed) > 1 else ''} read as {by_name(e.get('dialect')).title} "
            f"by a guess: no trainer's format was recognised for sure. Check the prompt, response, reward and "
            f"step on the Runs page; name them in {RUN_FILE} ([fields]) if they are wrong."
        )
    stepless = [rel for rel, e in m.files.items() if e.get("step_from") == "none"]
    if stepless:
        why = _no_step_why(m.files[stepless[0]])
        out.append(
            f"No step in {stepless[0]}{' and the other files' if len(stepless) > 1 else ''} ({why}): its "
            "responses are shown as step 0."
        )
    errors = m.unusable_lines
    if errors and m.rows:  # (none usable: see Board.unusable_notices)
        out.append(
            "One line of the run's files could not be read and is left out of every figure; the Runs page (/) "
            "shows it with the reason."
            if errors == 1
            else f"{errors:,} lines of the run's files could not be read and are left out of every figure; the "
            "Runs page (/) lists each with its reason."
        )
    formed = m.reward_formed
    if formed and "equal weights" in formed.get("weights_from", ""):
        out.append(
            f"reward = {formed['reward']}: no weights were given for the reward functions, so equal weights "
            f"are assumed; name them in {RUN_FILE} in the run folder ([reward_weights] name = weight) or "
            "RLBOARD_REWARD_WEIGHTS."
        )
    return out
