"""The rollout data contract: known fields, their canonical types, and validation of one record or one frame.

Two paths share these rules: :func:`validate_record` checks one parsed JSON object (slow path), and
:func:`check_frame` checks a whole chunk that Polars parsed at once (fast path).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass

import polars as pl

TEXT_FIELDS = ("prompt", "response", "ref_response")
REQUIRED = ("prompt", "response", "reward", "step")
FLOAT_LIST_FIELDS = ("logprobs", "ref_logprobs", "values", "token_rewards")
TOKEN_FIELDS = ("response_tokens", *FLOAT_LIST_FIELDS)

# Canonical Polars dtype of every known field.
CANONICAL: dict[str, pl.DataType] = {
    "prompt": pl.String(),
    "response": pl.String(),
    "reward": pl.Float64(),
    "step": pl.Int64(),
    "response_tokens": pl.List(pl.String()),
    "logprobs": pl.List(pl.Float32()),
    "ref_logprobs": pl.List(pl.Float32()),
    "values": pl.List(pl.Float32()),
    "token_rewards": pl.List(pl.Float32()),
    "ref_response": pl.String(),
    "ref_reward": pl.Float64(),
}
KNOWN = tuple(CANONICAL)

# Names other trainers use for a known field; used only when the canonical key is absent (the first of
# them present, in this order). veRL's rollout dumps (trainer.rollout_data_dir: one file per step) write
# input, output, score, step and gts; its batches name the arrays old_log_probs, ref_log_prob and
# token_level_rewards, and its trainer counts global_steps; OpenRLHF's experiences have action_log_probs
# and base_action_log_probs; TRL hands a reward function prompts and completions.
ALIASES: dict[str, tuple[str, ...]] = {
    "prompt": ("query", "question", "input", "prompts"),
    "response": ("completion", "output", "completions"),
    "step": ("global_step", "train_step", "iteration", "global_steps", "training_step"),
    "reward": ("score", "rewards"),
    "response_tokens": ("tokens",),
    "ref_logprobs": (
        "ref_logps",
        "reference_logprobs",
        "ref_log_probs",
        "ref_log_prob",
        "base_action_log_probs",
    ),
    "logprobs": ("logps", "log_probs", "old_log_probs", "action_log_probs"),
    "token_rewards": ("rewards_per_token", "token_level_rewards"),
}

# Columns the store itself writes; an extra field of the same name is kept as ``extra_<name>``.
RESERVED = frozenset(
    {
        "sample_id",
        "source",
        "line",
        "part",
        "row",
        "reward_gain",
        "response_length",
        "response_chars",
        "log_ratio_sum",
        "log_ratio_mean",
        "kl_sum",
        "kl_mean",
        "n_kl_tokens",
        "value_error_mean",
        "value_error_abs_mean",
        "token_reward_sum",
        "prompt_key",
        "prompt_preview",
        "response_preview",
        "has_tokens",
        "token_length_mismatch",
        "repetition",
        "length_ratio",
        "__prompt_lead",  # PROMPT_LEAD
        # Working columns of ingest and export, named here so that a field of the same name stays apart.
        "__reason",
        "__response_clean",
        "__rank",
    }
)

SCALAR_EXTRA_DTYPES = (pl.Boolean, pl.String)


@dataclass(frozen=True)
class BadLine(Exception):
    """A line that cannot be used; ``reason`` is shown to the user as is."""

    reason: str

    def __str__(self) -> str:
        return self.reason


def _type_name(v) -> str:
    return "null" if v is None else type(v).__name__


def _is_number(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


# The types of a list's items (as parsed from JSON, no subclasses but bool) allowed in token arrays.
_NUMBER_OR_NULL = frozenset({int, float, type(None)})
_FLOAT_OR_NULL = frozenset({float, type(None)})
_STR_OR_NULL = frozenset({str, type(None)})


def _number_list(v) -> list | None:
    """A parsed list of numbers (nulls kept) as floats, or None for anything else. Its items' types are
    compared as a set (bool is no number here): several times faster than a test per item."""
    kinds = set(map(type, v)) if isinstance(v, list) else None
    if kinds is None or not kinds <= _NUMBER_OR_NULL:
        return None
    return v if kinds <= _FLOAT_OR_NULL else [None if x is None else float(x) for x in v]


# Families (see _family) of a per-token field of the trainer's own: lists of numbers (or of nulls only).
_NUMBER_LISTS = frozenset({"list[int]", "list[float]", "list[null]"})

# Integer types whose values an Int64 column holds; Polars reads a larger JSON integer as UInt64 or Int128.
_FITS_INT64 = frozenset({pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32})
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
STEP_OUT_OF_RANGE = "field 'step' is out of range (not a 64-bit integer)"


def extra_name(key: str) -> str:
    return f"extra_{key}" if key in RESERVED or key in KNOWN else key


def apply_aliases(obj: dict) -> dict:
    """A parsed line with its fields under other trainers' names moved to the known names (as
    :func:`conform_frame` renames a chunk's columns), and a whole conversation split into prompt and
    response (see :func:`split_messages` and :data:`CONTENTS`)."""
    for alt, canon in _alias_renames(list(obj)).items():
        obj[canon] = obj.pop(alt)
    if "prompt" not in obj and "response" not in obj:
        if CONVERSATION in obj:
            obj["prompt"], obj["response"] = split_messages(obj.pop(CONVERSATION))
        elif (halves := split_contents(obj.get(CONTENTS)))[1] is not None:
            del obj[CONTENTS]
            obj["prompt"], obj["response"] = halves
    return obj


# A whole conversation under one key (OpenAI's chat format, as agent frameworks log a trajectory).
CONVERSATION = "messages"
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


def split_messages(value) -> tuple[list | None, list | None]:
    """A whole conversation as ``(prompt, response)``: the chat messages before the first assistant
    message, and that message with all that follows (tool results and later turns of a multi-turn
    trajectory); ``(None, None)`` when ``value`` is not chat messages or has no message before an
    assistant one."""
    if messages_text(value) is None:
        return None, None
    first = next((i for i, m in enumerate(value) if m.get("role") == "assistant"), 0)
    return (value[:first], value[first:]) if first else (None, None)


def _part_text(part) -> str:
    if isinstance(part, str):
        return part
    if isinstance(part, dict) and isinstance(part.get("text"), str):
        return part["text"]
    kind = part.get("type") if isinstance(part, dict) else None
    return f"[{kind if isinstance(kind, str) else 'part'}]"


def _content_text(content) -> str | None:
    """A message's content as text: a string as it is, a list of parts one part a line, null as nothing;
    None for anything else."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_part_text(p) for p in content)
    return None


def _calls_text(calls) -> str:
    """An assistant message's tool calls (OpenAI's chat format) as text, ``[call name(arguments)]`` a line."""
    out = []
    for call in calls if isinstance(calls, list) else ():
        f = call.get("function") if isinstance(call, dict) else None
        if isinstance(f, dict):
            name, args = f.get("name"), f.get("arguments")
            if not isinstance(args, str):  # arguments given as an object (not OpenAI's string): as JSON
                args = "" if args is None else json.dumps(args, ensure_ascii=False)
            out.append(f"[call {name if isinstance(name, str) else '?'}({args})]")
    return "\n".join(out)


def messages_text(value) -> str | None:
    """The text of chat messages given where a text is expected (a prompt, response or reference response
    logged as the list a chat template takes: ``[{"role": "user", "content": "..."}, ...]``), else None.

    One message gives its content; several give each as ``role: content``, separated by a blank line.
    A content given as a list of parts gives the text of each part on its own line (``[image]`` and the
    like for parts without text); a null content gives nothing; tool calls follow as
    ``[call name(arguments)]``. Anything but a non-empty list of objects with a string ``role`` or a
    ``content`` is not chat messages.
    """
    if not isinstance(value, list) or not value or not all(isinstance(m, dict) for m in value):
        return None
    texts = []
    for m in value:
        role, text = m.get("role"), _content_text(m.get("content"))
        if (role is not None and not isinstance(role, str)) or text is None:
            return None
        calls = _calls_text(m.get("tool_calls"))
        texts.append((role, f"{text}\n{calls}" if text and calls else text or calls))
    if all(role is None for role, _ in texts) and all(m.get("content") is None for m in value):
        return None
    if len(texts) == 1:
        return texts[0][1]
    return "\n\n".join(f"{role}: {text}" if role else text for role, text in texts)


# The prompt's preview source, for a prompt given as several chat messages: the content of its last user
# message (the question; a system message shared by every prompt would fill the preview). Set at ingest
# and dropped once the preview is made.
PROMPT_LEAD = "__prompt_lead"


def messages_lead(value) -> str | None:
    """The content of the last user message (else of the last message) of several chat messages; None
    for one message or for anything :func:`messages_text` does not take."""
    if messages_text(value) is None or len(value) < 2:
        return None
    users = [m for m in value if m.get("role") == "user"]
    return _content_text((users or value)[-1].get("content"))


def not_text_reason(key: str, got: str) -> str:
    """Why a field that must be a text is not one; ``got``: the JSON type found (a list may be chat
    messages, so its reason names them)."""
    kind = "a string or chat messages" if got == "list" else "a string"
    return f"field '{key}' is not {kind} (got {got})"


def validate_record(obj, step: int | None = None) -> tuple[dict, list[str]]:
    """Check one parsed JSON line; return ``(record, ignored_fields)`` or raise :class:`BadLine`.
    ``step``: the step of a line that has none (from its file's name, see :func:`step_from_name`).

    The record holds the known fields converted to their canonical Python types, the scalar extras
    (renamed with :func:`extra_name` where they collide with store columns; an object's fields as
    ``object.field``, see :func:`_flat_items`) and lists of numbers (per-token fields of the trainer's own);
    other extras are left out and named in ``ignored_fields``.
    """
    if not isinstance(obj, dict):
        raise BadLine(f"not a JSON object (got {_type_name(obj)})")
    obj = apply_aliases(unwrap_batch_of_one(obj))
    if step is not None and obj.get("step") is None:
        obj["step"] = step
    rec: dict = {}
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
    for key, v in _flat_items(obj):
        if v is None or isinstance(v, bool | int | float | str):
            rec[extra_name(key)] = v
        elif (numbers := _number_list(v)) is not None:
            # A per-token field of the trainer's own (TRL's PPO `advantages`, `returns`): kept with the
            # token arrays.
            rec[extra_name(key)] = numbers
        else:
            ignored.append(key)
    return rec, ignored


def _family(dtype: pl.DataType) -> str:
    if dtype == pl.Null:
        return "null"
    if dtype == pl.String:
        return "str"
    if dtype == pl.Boolean:
        return "bool"
    if dtype.is_integer():
        return "int"
    if dtype.is_float():
        return "float"
    if isinstance(dtype, pl.List):
        inner = _family(dtype.inner)
        return f"list[{inner}]"
    if isinstance(dtype, pl.Struct):
        return "object"
    return "other"


_ALLOWED = {
    # A list of objects may be chat messages (conform_frame decides, row by row).
    "prompt": {"str", "null", "list[object]"},
    "response": {"str", "null", "list[object]"},
    "ref_response": {"str", "null", "list[object]"},
    "reward": {"int", "float", "bool", "null"},
    "ref_reward": {"int", "float", "bool", "null"},
    "step": {"int", "float", "null"},
    "response_tokens": {"list[str]", "list[null]", "null"},
    **{k: {"list[int]", "list[float]", "list[null]", "null"} for k in FLOAT_LIST_FIELDS},
}


def frame_is_conformant(df: pl.DataFrame) -> bool:
    """True when every known column Polars inferred has a type the contract allows for the whole chunk.

    A chunk where one line has, say, a string reward makes Polars widen the whole column to strings; such
    a chunk goes to the line-by-line path so that only the bad line is dropped. So does a chunk whose lines
    name a field in two ways (``prompt`` in some, ``input`` in others): another trainer's name is taken
    line by line, where the known one is absent, while a chunk's column is renamed only where no line
    has the known name.
    """
    renames = _alias_renames(df.columns)
    for name, dtype in df.schema.items():
        name = renames.get(name, name)
        if name in _ALLOWED and _family(dtype) not in _ALLOWED[name]:
            return False
    for canon, alts in ALIASES.items():
        if canon in df.columns:
            lacking = df.get_column(canon).is_null()
            if any(alt in df.columns and (lacking & df.get_column(alt).is_not_null()).any() for alt in alts):
                return False
    texts = [c for c in df.columns if renames.get(c, c) in ("prompt", "response")]
    for whole in (CONVERSATION, CONTENTS):
        if whole in df.columns and texts:
            # A conversation in lines without prompt and response, beside lines with them: line by line.
            alone = pl.col(whole).is_not_null() & ~pl.any_horizontal(pl.col(c).is_not_null() for c in texts)
            if df.select(alone.any()).item():
                return False
    return True


def trainer_token_fields(df: pl.DataFrame, with_values: bool = False) -> list[str]:
    """The per-token fields of the trainer's own in a frame of conformed rows (a part, or one response):
    the lists beside the contract's token arrays, which :func:`conform_frame` and :func:`validate_record`
    keep only as lists of numbers. ``with_values``: only those where some row has a non-empty list."""
    names = [c for c, t in df.schema.items() if isinstance(t, pl.List) and c not in CANONICAL]
    if with_values:
        names = [c for c in names if (df.get_column(c).list.len() > 0).any()]
    return names


def _alias_renames(columns: list[str]) -> dict[str, str]:
    """Which columns of a frame stand for a known field under another trainer's name (see ``ALIASES``)."""
    renames = {}
    for alias_target, alts in ALIASES.items():
        if alias_target not in columns:
            for alt in alts:
                if alt in columns:
                    renames[alt] = alias_target
                    break
    return renames


def _leaves(name: str, expr: pl.Expr, dtype: pl.DataType) -> Iterator[tuple[str, pl.Expr, pl.DataType]]:
    """A column, or the fields of an object column as columns ``name.field`` (objects in it too): the
    chunk's side of :func:`_flat_items`."""
    if isinstance(dtype, pl.Struct):
        for f in dtype.fields:
            yield from _leaves(f"{name}.{f.name}", expr.struct.field(f.name), f.dtype)
    else:
        yield name, expr, dtype


def _flat_items(obj: dict, prefix: str = "") -> Iterator[tuple[str, object]]:
    """The extra fields of a line, an object's fields named ``object.field`` (objects in it too), so that
    a line's ``{"rewards": {"accuracy": 1}}`` is its ``rewards.accuracy``."""
    for key, v in obj.items():
        if not prefix and key in CANONICAL:
            continue
        if isinstance(v, dict):
            yield from _flat_items(v, f"{prefix}{key}.")
        else:
            yield prefix + key, v


def conform_frame(
    df: pl.DataFrame, step: int | pl.Series | None = None
) -> tuple[pl.DataFrame, pl.Series, list[str]]:
    """Cast a conformant frame to canonical types. ``step``: the step of the rows that have none (from
    their file's name, see :func:`step_from_name`), one for all or one per row.

    Returns ``(frame, reasons, ignored_fields)``: ``reasons`` has one entry per row, null for a usable
    row and the reason for an unusable one (missing required field, a list that is not chat messages where
    a text is expected, non-integer step).
    """
    renames = _alias_renames(df.columns)
    if renames:
        df = df.rename(renames)
    if "prompt" not in df.columns and "response" not in df.columns:
        # A whole conversation (not a list: an ordinary extra), split row by row with apply_aliases's
        # functions: the chat messages stay messages (rendered below), the contents become texts.
        conversation = df.schema.get(CONVERSATION)
        whole = [(CONVERSATION, split_messages, conversation)] if isinstance(conversation, pl.List) else []
        if not whole and df.schema.get(CONTENTS) == pl.List(pl.String):
            whole = [(CONTENTS, split_contents, pl.String)]
        for key, split, dtype in whole:
            halves = [split(v) for v in df.get_column(key).to_list()]
            df = df.drop(key).with_columns(
                pl.Series("prompt", [p for p, _ in halves], dtype=dtype),
                pl.Series("response", [r for _, r in halves], dtype=dtype),
            )
    # Texts given as chat messages, one row at a time with the line-by-line path's function.
    not_text: dict[str, pl.Series] = {}
    lead = []  # the prompts' PROMPT_LEAD, added beside the extras (a field of that name is one of them)
    for key in TEXT_FIELDS:
        if key in df.columns and isinstance(df.schema[key], pl.List):
            given = df.get_column(key)
            values = given.to_list()
            texts = [None if v is None else messages_text(v) for v in values]
            df = df.with_columns(pl.Series(key, texts, dtype=pl.String))
            not_text[key] = given.is_not_null() & df.get_column(key).is_null()
            if key == "prompt":
                lead = [pl.lit(pl.Series(PROMPT_LEAD, [messages_lead(v) for v in values], dtype=pl.String))]
    ignored = []
    cols = []
    extras = ((n, pl.col(n), t) for n, t in df.schema.items() if n not in CANONICAL)
    for name, expr, dtype in (leaf for extra in extras for leaf in _leaves(*extra)):
        fam = _family(dtype)
        if fam == "int" and dtype not in _FITS_INT64:  # an integer past 64 bits (a seed, a hash): its digits
            cols.append(expr.cast(pl.String).alias(extra_name(name)))
        elif fam in ("str", "bool", "int", "float", "null"):
            cols.append(expr.alias(extra_name(name)))
        elif fam in _NUMBER_LISTS:  # a per-token field of the trainer's own (see validate_record)
            cols.append(expr.cast(pl.List(pl.Float32)).alias(extra_name(name)))
        else:
            ignored.append(name)
    known = [
        pl.col(k).cast(CANONICAL[k]) if k in df.columns else pl.lit(None, dtype=CANONICAL[k]).alias(k)
        for k in KNOWN
        if k != "step"
    ]
    required = {k: pl.col(k) for k in REQUIRED if k in df.columns}
    if step is not None:
        required["step"] = pl.coalesce(required.get("step", pl.lit(None)), pl.lit(step, dtype=pl.Int64))
    step = required.get("step", pl.lit(None, dtype=pl.Int64))
    reason = pl.lit(None, dtype=pl.String)
    # Checked in reverse priority so that the first missing field named in REQUIRED wins.
    checks = [
        (step.is_not_null() & (step.cast(pl.Float64).abs() >= 2.0**63), STEP_OUT_OF_RANGE),
        (
            step.is_not_null() & (step.cast(pl.Float64) != step.cast(pl.Float64).floor()),
            "field 'step' is not an integer",
        ),
        (step.is_not_null() & ~step.cast(pl.Float64).is_finite(), "field 'step' is not an integer"),
    ]
    for key in reversed(TEXT_FIELDS):
        if key in not_text:
            checks.append((pl.lit(not_text[key]), not_text_reason(key, "list")))
    for key in reversed(REQUIRED):
        col = required.get(key, pl.lit(None))
        missing = col.is_null() & ~pl.lit(not_text[key]) if key in not_text else col.is_null()
        checks.append((missing, f"missing required field '{key}'"))
    for cond, text in checks:
        reason = pl.when(cond).then(pl.lit(text)).otherwise(reason)
    out = df.select(
        *known,
        step.cast(pl.Float64).fill_nan(None).cast(pl.Int64, strict=False).alias("step"),
        *cols,
        *lead,
        reason.alias("__reason"),
    )
    reasons = out.get_column("__reason")
    return out.drop("__reason"), reasons, ignored


def records_frame(records: list[dict]) -> pl.DataFrame:
    """Frame of validated records (slow path) with canonical types for the known fields."""
    if not records:
        return pl.DataFrame(schema=CANONICAL)
    schema = dict(CANONICAL)
    keys = dict.fromkeys(k for rec in records for k, v in rec.items() if k not in CANONICAL and v is not None)
    for k in keys:
        types = {type(r[k]) for r in records if r.get(k) is not None}
        if list in types and types != {list}:
            # A per-token field in some lines and a value in others (a chunk read whole cannot hold both):
            # the values are kept, as they were before per-token fields were.
            for r in records:
                if isinstance(r.get(k), list):
                    r[k] = None
            types.discard(list)
        if types == {list}:
            schema[k] = pl.List(pl.Float32)
        elif types == {bool}:
            schema[k] = pl.Boolean
        elif types in ({float}, {int, float}):
            schema[k] = pl.Float64
        elif types == {int} and all(INT64_MIN <= r[k] <= INT64_MAX for r in records if r.get(k) is not None):
            schema[k] = pl.Int64
        else:  # texts, types that differ between lines, or an integer past 64 bits (as in conform_frame)
            schema[k] = pl.String
        if schema[k] == pl.String:
            # Extras whose type differs between lines fall back to strings rather than failing the chunk.
            for r in records:
                if r.get(k) is not None and not isinstance(r[k], str):
                    r[k] = str(r[k])
    return pl.DataFrame(records, schema=schema, strict=False)
