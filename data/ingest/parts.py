"""A part built from a chunk's good rows: derived metrics, repetition, ids, prompt keys and previews, and
the chunk's issues (unusable lines and data-quality notes)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import polars as pl

from data import schema
from data.derived.ends import ends_column
from data.metrics.degeneration import response_repetition
from data.metrics.response import CLEAN_RESPONSE, derive_response_metrics, prompt_key_text, strip_pads
from data.store.layout import ISSUE_SCHEMA, PREVIEW_CHARS, SCALAR_CORE, file_prefix


def _prompt_keys(texts: pl.Series) -> pl.Series:
    uniq = texts.unique()
    mapping = {
        t: hashlib.blake2b(t.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
        for t in uniq.to_list()
    }
    return texts.replace_strict(mapping, return_dtype=pl.String)


def _preview(expr: pl.Expr) -> pl.Expr:
    """The start of a text (pads already removed) on one line: each run of white space becomes one space.

    Cut before collapsing white space: the preview needs only the start of a long text. The pattern
    leaves single spaces alone (replacing each of them by itself is 8x slower).
    """
    text = expr.str.slice(0, PREVIEW_CHARS * 4)
    return text.str.replace_all(r"[^\S ]\s*| \s+", " ").str.strip_chars().str.slice(0, PREVIEW_CHARS)


def derive_chunk(frame: pl.DataFrame, pad_tokens: tuple[str, ...]) -> pl.DataFrame:
    """A chunk's good rows with the row index and the derived per-response metrics (on a worker)."""
    df = frame.with_row_index("row").with_columns(pl.col("row").cast(pl.Int64))
    return derive_response_metrics(df, pad_tokens, keep_clean=True)


def build_part(
    derived: pl.DataFrame,
    rel: str | pl.Expr,
    part_id: int | pl.Expr,
    pad_tokens: tuple[str, ...],
    prefix: pl.Expr | None = None,
) -> pl.DataFrame:
    """Add repetition, ids, prompt keys and previews to a :func:`derive_chunk` frame; returns the full part
    frame. ``rel``, ``part_id``: the source file and part of every row, or (for several small blocks built
    at once) expressions giving each row's, with ``prefix`` giving each row's :func:`file_prefix`."""
    if isinstance(rel, str):
        prefix = pl.lit(file_prefix(rel))
        rel = pl.lit(rel)
    if isinstance(part_id, int):
        part_id = pl.lit(part_id, dtype=pl.Int64)
    clean = derived.get_column(CLEAN_RESPONSE)
    key_text = derived.select(prompt_key_text(pad_tokens)).to_series()
    # A prompt of several chat messages is previewed by its question (schema.PROMPT_LEAD), one rendered by a
    # chat template by its last user turn (a system text every prompt shares would fill the preview).
    lead = pl.col("prompt")
    if schema.PROMPT_LEAD in derived.columns:
        lead = pl.coalesce(schema.PROMPT_LEAD, "prompt")
    template = schema.template_lead(derived.select(lead).to_series(), lead)
    prompt_shown = strip_pads(lead if template is None else pl.coalesce(template, lead), pad_tokens)
    sample = prefix + pl.lit("-") + pl.col("line").cast(pl.String)
    if schema.IN_LINE in derived.columns:
        # The responses of a line that holds several (Dialect.rows): numbered within it, and the line is
        # their group where the file names none.
        within = pl.col(schema.IN_LINE)
        gid = pl.col("group_id").cast(pl.String) if "group_id" in derived.columns else pl.lit(None, pl.String)
        derived = derived.with_columns(
            pl.coalesce(gid, pl.when(within.is_not_null()).then(sample)).alias("group_id")
        )
        sample = (
            pl.when(within.is_null()).then(sample).otherwise(sample + pl.lit(".") + within.cast(pl.String))
        )
    tokens = derived.get_column("response_tokens") if "response_tokens" in derived.columns else None
    derived = derived.with_columns(response_repetition(tokens, clean, pad_tokens))
    full = derived.with_columns(
        sample.alias("sample_id"),
        rel.alias("source"),
        part_id.cast(pl.Int64).alias("part"),
        _prompt_keys(key_text).alias("prompt_key"),
        _preview(prompt_shown).alias("prompt_preview"),
        _preview(pl.col(CLEAN_RESPONSE)).alias("response_preview"),
        pl.any_horizontal(*(pl.col(c).is_not_null() for c in schema.TOKEN_FIELDS)).alias("has_tokens"),
    ).drop(CLEAN_RESPONSE, schema.PROMPT_LEAD, schema.RESPONSE_OWN, schema.IN_LINE, strict=False)
    return full.with_columns(ends_column(full, pad_tokens))


def scalar_columns(df: pl.DataFrame) -> list[str]:
    """The columns of a part frame kept in its scalars: not the texts, the token arrays or the trainer's own
    per-token fields (kept in the part only)."""
    lists = set(schema.trainer_token_fields(df))
    extras = [c for c in df.columns if c not in schema.CANONICAL and c not in SCALAR_CORE and c not in lists]
    return [c for c in SCALAR_CORE if c in df.columns] + extras


def _issue_frame(issues: list[dict], rel: str) -> pl.DataFrame:
    return pl.DataFrame([{**i, "source": rel} for i in issues], schema=ISSUE_SCHEMA)


def _part_issues(
    full: pl.DataFrame | None, found: list[dict], rel: str, pads: tuple[str, ...] = ()
) -> pl.DataFrame:
    """The issues of a part: the lines found unusable (``found``) and the notes on its rows ``full``."""
    issues = _issue_frame(found, rel)
    if full is None or not full.height:
        return issues
    return pl.concat([issues, _token_notes(full, rel, pads)]).sort("line", maintain_order=True)


UNEQUAL_LENGTHS = "token arrays of unequal lengths (aligned from the first token)"


def _token_notes(df: pl.DataFrame, rel: str | None = None, pads: tuple[str, ...] = ()) -> pl.DataFrame:
    """A data-quality note (an issue frame) for each response whose token arrays have different lengths
    (kept, aligned). Built column-wise: in some trainers' files nearly every response has one. ``rel``:
    the file of every row; None: each row's ``source``, and the frame gets each row's ``part``.

    One more position in some arrays, where ``response_tokens`` ends on a pad token (one of ``pads``), is
    no note: TRL's PPO keeps one position past the end token in its value and reward window (the sequence
    reward sits there), so nearly every response of such a run had one (2,846 notes in the demo's 3,072
    responses; they buried the notes that matter)."""
    present = [
        c for c in schema.TOKEN_FIELDS if c in df.columns and df.get_column(c).null_count() < df.height
    ]
    if len(present) < 2 or not df.height:
        return pl.DataFrame(schema=ISSUE_SCHEMA if rel is not None else {**ISSUE_SCHEMA, "part": pl.Int64})
    lens = [pl.col(c).list.len() for c in present]
    longest, shortest = pl.max_horizontal(*lens), pl.min_horizontal(*lens)
    unequal = longest != shortest
    if pads and "response_tokens" in present:
        tokens = pl.col("response_tokens")
        pad_window = (
            (longest - shortest == 1) & (tokens.list.len() == longest) & tokens.list.last().is_in(list(pads))
        )
        unequal = unequal & ~pad_window.fill_null(False)
    # The arrays' lengths are selected before filtering (filtering the whole part would copy its token
    # arrays), the detail written after it: for the few rows with a note, not for every row of the part.
    length = [f"__len{i}" for i in range(len(present))]
    detail = pl.concat_str(
        [pl.lit(f"{c} ") + pl.col(n).cast(pl.String) for c, n in zip(present, length, strict=True)],
        separator=", ",
        ignore_nulls=True,
    )
    return (
        df.select(
            pl.lit(rel).alias("source") if rel is not None else pl.col("source"),
            "line",
            *([] if rel is not None else [pl.col("part")]),
            *(x.alias(n) for x, n in zip(lens, length, strict=True)),
            unequal.alias("unequal"),
        )
        .filter("unequal")
        .select(
            "source",
            "line",
            pl.lit("note").alias("severity"),
            pl.lit(UNEQUAL_LENGTHS).alias("reason"),
            detail.alias("detail"),
            *([] if rel is not None else [pl.col("part")]),
        )
    )


def _issues_with_part(paths: list[Path], ids: list[int]) -> pl.DataFrame:
    """The issue files of parts ``ids`` in one frame, with a ``part`` column.

    One scan of all the files: adding the column to each file's own scan made Polars take ~20 ms a file
    to plan (53 s for 2,600 parts).
    """
    if not paths:
        return pl.DataFrame(schema={**ISSUE_SCHEMA, "part": pl.Int64})
    try:
        df = pl.scan_parquet(paths, include_file_paths="__file").collect()
    except pl.exceptions.PolarsError:  # files with different columns: one by one
        return pl.concat(
            [
                pl.read_parquet(p).with_columns(pl.lit(i, pl.Int64).alias("part"))
                for p, i in zip(paths, ids, strict=True)
            ],
            how="diagonal_relaxed",
        )
    by_path = {str(p): i for p, i in zip(paths, ids, strict=True)}
    part = pl.col("__file").replace_strict(by_path, return_dtype=pl.Int64).alias("part")
    return df.with_columns(part).drop("__file")
