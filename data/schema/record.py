"""One parsed JSON line checked against the contract and converted (the line-by-line path)."""

from __future__ import annotations

import math
from collections.abc import Iterator

from data.schema.chat import (
    PROMPT_LEAD,
    RESPONSE_LENGTH,
    RESPONSE_OWN,
    messages_lead,
    messages_own,
    messages_text,
)
from data.schema.contract import (
    _STR_OR_NULL,
    CANONICAL,
    FLOAT_LIST_FIELDS,
    INT64_MAX,
    INT64_MIN,
    REQUIRED,
    STEP_OUT_OF_RANGE,
    TEXT_FIELDS,
    BadLine,
    _is_number,
    _number_list,
    _type_name,
    extra_name,
    not_text_reason,
)
from data.schema.dialects import CONTRACT, LINE_NOTES, Dialect, Reading
from data.schema.secrets import mask


def validate_record(
    obj,
    step: int | None = None,
    notes: list[str] | None = None,
    dialect: Dialect = CONTRACT,
    reading: Reading | None = None,
) -> tuple[dict, list[str]]:
    """Check one parsed JSON line; return ``(record, ignored_fields)`` or raise :class:`BadLine`.
    ``step``: the step of a line that has none (from its file's path, see :func:`step_from_path`).
    ``dialect``: its file's (see :mod:`data.schema.dialects`), which maps it onto the contract first.

    The record holds the known fields converted to their canonical Python types, the scalar extras
    (renamed with :func:`extra_name` where they collide with store columns; an object's fields as
    ``object.field``, see :func:`_flat_items`) and lists of numbers (per-token fields of the trainer's own);
    other extras are left out and named in ``ignored_fields``. A secret's text is masked
    (:mod:`data.schema.secrets`). Two fields that make the same column (see
    :func:`_column_paths`) keep one value; why is appended to ``notes``.
    """
    if not isinstance(obj, dict):
        raise BadLine(f"not a JSON object (got {_type_name(obj)})")
    made = (PROMPT_LEAD, RESPONSE_OWN, RESPONSE_LENGTH, LINE_NOTES)
    given = {k for k in made if k in obj}  # a file's own fields of those names
    if dialect.line is not None:
        obj = dialect.line(obj, reading or Reading())
    if LINE_NOTES not in given and isinstance(said := obj.pop(LINE_NOTES, None), list) and notes is not None:
        notes.extend(said)
    obj = dialect.apply_aliases(obj)
    if step is not None and obj.get("step") is None:
        obj["step"] = step
    rec: dict = {}
    # Set by a dialect that splits a flat text itself (see data.schema.chat).
    for key in (PROMPT_LEAD, RESPONSE_OWN):
        if key not in given and isinstance(obj.get(key), str):
            rec[key] = obj.pop(key)
    length = obj.get(RESPONSE_LENGTH)
    if RESPONSE_LENGTH not in given and isinstance(length, int) and not isinstance(length, bool):
        rec[RESPONSE_LENGTH] = obj.pop(RESPONSE_LENGTH)
    for key in REQUIRED:
        if obj.get(key) is None:
            raise BadLine(f"missing required field '{key}'")
    for key in TEXT_FIELDS:
        v = obj.get(key)
        if v is not None and not isinstance(v, str):
            text = messages_text(v)
            if text is None:
                raise BadLine(not_text_reason(key, _type_name(v)))
            if key == "prompt":
                rec[PROMPT_LEAD] = messages_lead(v)
            elif key == "response":
                rec[RESPONSE_OWN] = messages_own(v)
            v = text
        rec[key] = v
    for key in ("reward", "ref_reward"):
        v = obj.get(key)
        # A verifier's true / false counts as 1 / 0.
        if v is not None and not isinstance(v, int | float):
            raise BadLine(f"field '{key}' is not a number (got {_type_name(v)})")
        rec[key] = None if v is None else float(v)
    step = obj["step"]
    if not _is_number(step) or (isinstance(step, float) and (not math.isfinite(step) or step != int(step))):
        raise BadLine(f"field 'step' is not an integer (got {step!r:.40})")
    rec["step"] = int(step)
    if not INT64_MIN <= rec["step"] <= INT64_MAX:
        raise BadLine(STEP_OUT_OF_RANGE)
    for key in FLOAT_LIST_FIELDS:
        v = obj.get(key)
        if v is None:
            rec[key] = None
            continue
        rec[key] = _number_list(v)
        if rec[key] is None:
            raise BadLine(f"field '{key}' is not a list of numbers")
    v = obj.get("response_tokens")
    # A null token (like a null log-prob) is kept, as the fast path keeps it.
    if v is not None and (not isinstance(v, list) or not set(map(type, v)) <= _STR_OR_NULL):
        raise BadLine("field 'response_tokens' is not a list of strings")
    rec["response_tokens"] = v
    ignored = []
    taken: dict[str, tuple[str, ...]] = {}
    for path, v in _column_paths(_flat_items(obj)):
        key, column = ".".join(path), extra_name(".".join(path))
        if column in taken:
            if notes is not None:
                notes.append(given_twice_note(column, taken[column], path))
            continue
        if v is None or isinstance(v, bool | int | float | str):
            rec[column] = mask(key, v)  # a secret's text is never kept (see data.schema.secrets)
        elif (numbers := _number_list(v)) is not None:
            # A per-token field of the trainer's own (TRL's PPO `advantages`, `returns`): kept with the
            # token arrays.
            rec[column] = numbers
        else:
            ignored.append(key)
            continue
        taken[column] = path
    return rec, ignored


def _column_paths(items: Iterator[tuple[tuple[str, ...], object]]) -> list[tuple[tuple[str, ...], object]]:
    """A line's extra fields (``(path, value)``, see :func:`_flat_items`) in the order their columns are
    taken: a field nearer the top before one deeper in objects, else in the line's order. So where two
    fields make one column (``{"a.b": 1, "a": {"b": 2}}``), the key as written wins, whatever their order;
    a chunk read whole with such a line goes line by line (its columns would clash)."""
    return sorted(items, key=lambda item: len(item[0]))


def given_twice_note(column: str, kept: tuple[str, ...], lost: tuple[str, ...]) -> str:
    """The data-quality note of a line where two fields make one column (``kept`` and ``lost``: their
    paths of keys)."""

    def where(path):
        return "/" + "/".join(path)

    return (
        f"field '{column}' given twice ({where(kept)} and {where(lost)}): the value at {where(lost)} left out"
    )


def _flat_items(obj: dict, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], object]]:
    """The extra fields of a line as ``(path of keys, value)``, an object's fields inside it (objects in it
    too): its column is the path joined by dots, so that a line's ``{"rewards": {"accuracy": 1}}`` is its
    ``rewards.accuracy``."""
    for key, v in obj.items():
        if not prefix and key in CANONICAL:
            continue
        if isinstance(v, dict):
            yield from _flat_items(v, (*prefix, key))
        else:
            yield (*prefix, key), v
