"""A whole chunk that Polars parsed at once checked against the contract and cast to it (fast path), and
the frame of the validated records of the line-by-line path."""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from data.schema.chat import PROMPT_LEAD, RESPONSE_OWN, messages_lead, messages_own, messages_text
from data.schema.contract import (
    _FITS_INT64,
    _NUMBER_LISTS,
    CANONICAL,
    FLOAT_LIST_FIELDS,
    INT64_MAX,
    INT64_MIN,
    KNOWN,
    REQUIRED,
    STEP_OUT_OF_RANGE,
    TEXT_FIELDS,
    extra_name,
    not_text_reason,
)
from data.schema.dialects import CONTRACT, Dialect
from data.schema.dialects.contract import CONVERSATION
from data.schema.secrets import MASK, is_secret


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
    # A list of objects may be chat messages (conform_frame decides, row by row); a chunk whose lists are
    # all empty (no message: an empty text) has lists of nulls.
    "prompt": {"str", "null", "list[object]", "list[null]"},
    "response": {"str", "null", "list[object]", "list[null]"},
    "ref_response": {"str", "null", "list[object]", "list[null]"},
    "reward": {"int", "float", "bool", "null"},
    "ref_reward": {"int", "float", "bool", "null"},
    "step": {"int", "float", "null"},
    "response_tokens": {"list[str]", "list[null]", "null"},
    **{k: {"list[int]", "list[float]", "list[null]", "null"} for k in FLOAT_LIST_FIELDS},
}


def frame_is_conformant(df: pl.DataFrame, dialect: Dialect = CONTRACT) -> bool:
    """True when every known column Polars inferred has a type the contract allows for the whole chunk.

    A chunk where one line has, say, a string reward makes Polars widen the whole column to strings; such
    a chunk goes to the line-by-line path so that only the bad line is dropped. So does a chunk whose lines
    name a field in two ways (``prompt`` in some, ``input`` in others): another trainer's name is taken
    line by line, where the known one is absent, while a chunk's column is renamed only where no line
    has the known name. ``dialect``: the file's, whose names are the other names tried.
    """
    renames = dialect.renames(df.columns)
    for name, dtype in df.schema.items():
        name = renames.get(name, name)
        if name in _ALLOWED and _family(dtype) not in _ALLOWED[name]:
            return False
    for canon, alts in dialect.aliases.items():
        if canon in df.columns:
            lacking = df.get_column(canon).is_null()
            if any(alt in df.columns and (lacking & df.get_column(alt).is_not_null()).any() for alt in alts):
                return False
    texts = [c for c in df.columns if renames.get(c, c) in ("prompt", "response")]
    if CONVERSATION in df.columns and texts:
        # A conversation in lines without prompt and response, beside lines with them: line by line.
        alone = pl.col(CONVERSATION).is_not_null() & ~pl.any_horizontal(
            pl.col(c).is_not_null() for c in texts
        )
        if df.select(alone.any()).item():
            return False
    return True


def _leaves(name: str, expr: pl.Expr, dtype: pl.DataType) -> Iterator[tuple[str, pl.Expr, pl.DataType]]:
    """A column, or the fields of an object column as columns ``name.field`` (objects in it too): the
    chunk's side of :func:`_flat_items`."""
    if isinstance(dtype, pl.Struct):
        for f in dtype.fields:
            yield from _leaves(f"{name}.{f.name}", expr.struct.field(f.name), f.dtype)
    else:
        yield name, expr, dtype


def conform_frame(
    df: pl.DataFrame,
    step: int | pl.Series | None = None,
    dialect: Dialect = CONTRACT,
    made: frozenset[str] = frozenset(),
) -> tuple[pl.DataFrame, pl.Series, list[str]]:
    """Cast a conformant frame (as its ``dialect``'s ``frame`` left it) to canonical types. ``step``: the
    step of the rows that have none (from their file's path, see :func:`step_from_path`), one for all or
    one per row. ``made``: the working columns the dialect made (``PROMPT_LEAD``, ``RESPONSE_OWN``), kept.

    Returns ``(frame, reasons, ignored_fields)``: ``reasons`` has one entry per row, null for a usable
    row and the reason for an unusable one (missing required field, a list that is not chat messages where
    a text is expected, non-integer step).
    """
    renames = dialect.renames(df.columns)
    if renames:
        df = df.rename(renames)
    working = {c: df.get_column(c).cast(pl.String) for c in sorted(made) if c in df.columns}
    df = df.drop(*made, strict=False)
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
            elif key == "response":
                working[RESPONSE_OWN] = pl.Series(RESPONSE_OWN, [messages_own(v) for v in values], pl.String)
    ignored = []
    cols = []
    extras = ((n, pl.col(n), t) for n, t in df.schema.items() if n not in CANONICAL)
    for name, expr, dtype in (leaf for extra in extras for leaf in _leaves(*extra)):
        fam = _family(dtype)
        if fam == "int" and dtype not in _FITS_INT64:  # an integer past 64 bits (a seed, a hash): its digits
            cols.append(expr.cast(pl.String).alias(extra_name(name)))
        elif fam == "str" and is_secret(name):  # never kept (see data.schema.secrets)
            cols.append(pl.when(expr.is_not_null()).then(pl.lit(MASK)).alias(extra_name(name)))
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
    names = [c.meta.output_name() for c in cols]
    if len(set(names)) < len(names):
        # Two fields make one column ({"a.b": 1, "a": {"b": 2}}): which value a line keeps is decided line by
        # line (see validate_record), whatever the other lines hold.
        raise pl.exceptions.DuplicateError(f"fields that make one column: {sorted(names)}")
    required = {k: pl.col(k) for k in REQUIRED if k in df.columns}
    # Integers are never widened to floats on the way (2**63 - 1 would round to 2**63): a step is whole and
    # in range when it becomes an Int64 as it is, as validate_record takes it.
    floats = df.schema.get("step", pl.Null).is_float()
    if floats and df.select(pl.col("step").abs().is_between(2.0**53, 2.0**63).any()).item():
        # Between 2**53 and 2**63 a float column may hold an integer it rounded (2**63 - 1 beside a 1e19 is
        # 2**63, out of range): such a chunk goes line by line. Past that, a step is out of range either way.
        raise pl.exceptions.InvalidOperationError("steps too large for floats to hold exactly")
    if step is not None:
        named = pl.lit(step, dtype=pl.Int64)
        required["step"] = pl.coalesce(
            required.get("step", pl.lit(None)), named.cast(pl.Float64) if floats else named
        )
    step = required.get("step", pl.lit(None, dtype=pl.Int64))
    as_int = (step.fill_nan(None) if floats else step).cast(pl.Int64, strict=False)
    reason = pl.lit(None, dtype=pl.String)
    # Checked in reverse priority so that the first missing field named in REQUIRED wins.
    checks = [(step.is_not_null() & as_int.is_null(), STEP_OUT_OF_RANGE)]
    if floats:
        checks += [
            (step.is_not_null() & (step != step.floor()), "field 'step' is not an integer"),
            (step.is_not_null() & ~step.is_finite(), "field 'step' is not an integer"),
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
        as_int.alias("step"),
        *cols,
        *lead,
        *(pl.lit(v).alias(k) for k, v in working.items()),
        reason.alias("__reason"),
    )
    if out.height != df.height:  # lines of no field ({}): literals alone make one row, not one per line
        raise pl.exceptions.ShapeError(f"{df.height} rows conformed to {out.height}")
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
