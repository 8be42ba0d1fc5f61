"""Degeneration signals of one response, defined once as Polars expressions: repetition, length ratio and
whether it ended by itself.

``repetition`` (computed at ingest) is the share of a response's 3-grams that repeat an earlier 3-gram of
the same response, over its unit (``repetition_unit``, :func:`response_repetition`): its tokens where it has
them (pads removed), else its characters where its text is mostly of scripts written without spaces (CJK,
Thai, …), else its words; ``length_ratio`` (computed at query time) is its length over its step's median;
``ends_with_end_token`` (computed at query time, from the pad and end token settings) says whether the
response ends with an end token: one that does not was cut at the length limit (truncated).
"""

from __future__ import annotations

import polars as pl

# Words: lower-cased text (pad tokens already removed by the caller), split into maximal runs of letters,
# combining marks and digits (Unicode \p{L}, \p{M}, \p{N}); each Han, Hiragana or Katakana character is a
# word on its own because those scripts do not separate words with spaces. Punctuation, symbols and
# whitespace separate words and are not words ("don't" is "don", "t").
_CJK = r"\p{Han}\p{Hiragana}\p{Katakana}"
WORD_PATTERN = rf"[{_CJK}]|[\p{{L}}\p{{M}}\p{{N}}--{_CJK}]+"
NGRAM = 3

# Odd multipliers that mix the hashes of the words of an n-gram into one 64-bit value (wrapping).
_MIX = (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x27D4EB2F165667C5)


def words(text: pl.Expr) -> pl.Expr:
    """The words of ``text`` as a list of strings (see ``WORD_PATTERN``); null text gives null."""
    return text.str.to_lowercase().str.extract_all(WORD_PATTERN)


def repetition(text: pl.Expr, n: int = NGRAM) -> pl.Expr:
    """Share of repeated word n-grams: ``1 − distinct n-grams / n-grams`` over the words of ``text``.

    A text of ``w`` words has ``w − n + 1`` overlapping n-grams; an n-gram is repeated when an identical
    one occurs earlier in the same text. 0 means no n-gram occurs twice; it tends to 1 as the text loops
    ("go go go go go": 3 trigrams, 1 distinct, 2/3). Null when the text has fewer than ``n`` words.
    N-grams are compared through 64-bit hashes of their words (a collision is ~2^-64 per pair).
    """
    if not 1 <= n <= len(_MIX):
        raise ValueError(f"n must be between 1 and {len(_MIX)}")
    h = pl.element().hash(seed=0)
    gram = h * _MIX[0]
    for k in range(1, n):
        gram = gram + h.shift(-k) * _MIX[k]
    grams = gram.drop_nulls()  # the n-grams end where shift(-k) runs off the end of the list
    ws = words(text)
    # list.agg: one pass per list. (fill_nan on its result measured 3x slower than this guard.)
    share = ws.list.agg(1.0 - grams.n_unique().cast(pl.Float64) / grams.len())
    return pl.when(ws.list.len() >= n).then(share)


def length_ratio(length: str = "response_length", chars: str = "response_chars", by: str = "step") -> pl.Expr:
    """A response's length over the median length of its step (window over ``by``; use on a whole run).

    Length in tokens (pads excluded) where the run has token fields; for responses without them (e.g.
    evaluation dumps) the length in characters (pads excluded) over the step's median in characters.
    Null when the median is 0 or missing. See :func:`length_ratio_from` for a subset of a step.
    """
    return length_ratio_from(
        pl.col(length).cast(pl.Float64).median().over(by), pl.col(chars).cast(pl.Float64).median().over(by)
    )


def length_ratio_from(
    median_length: pl.Expr,
    median_chars: pl.Expr,
    length: str = "response_length",
    chars: str = "response_chars",
) -> pl.Expr:
    """:func:`length_ratio` from given step medians (e.g. joined from :func:`step_length_medians`)."""
    by_tokens = pl.when(median_length > 0).then(pl.col(length) / median_length)
    by_chars = pl.when(median_chars > 0).then(pl.col(chars) / median_chars)
    return pl.coalesce(by_tokens, by_chars).cast(pl.Float64)


def step_length_medians(scalars: pl.LazyFrame, by: str = "step") -> pl.LazyFrame:
    """Per step: ``length_median`` (tokens) and ``chars_median`` (characters), sorted by step."""
    return (
        scalars.group_by(by)
        .agg(
            pl.col("response_length").cast(pl.Float64).median().alias("length_median"),
            pl.col("response_chars").cast(pl.Float64).median().alias("chars_median"),
        )
        .sort(by)
    )


def with_length_ratio(rows: pl.LazyFrame, medians: pl.LazyFrame, by: str = "step") -> pl.LazyFrame:
    """Add ``length_ratio`` to ``rows`` (any subset of a run) from the run's :func:`step_length_medians`.

    Row order is kept (left join that maintains the left order).
    """
    return (
        rows.join(medians, on=by, how="left", maintain_order="left")
        .with_columns(
            length_ratio_from(pl.col("length_median"), pl.col("chars_median")).alias("length_ratio")
        )
        .drop("length_median", "chars_median")
    )


def repetition_of(texts: pl.Series, n: int = NGRAM) -> pl.Series:
    """:func:`repetition` of each text of a Series, computed over all words at once (for ingest).

    Same definition and result as the expression; evaluating the expression runs once per list, which
    costs ~0.2 ms a response, while this explodes the words of every text into one column, builds the
    n-gram hashes with shifts that must stay inside one text, and counts distinct ones per text.
    """
    return repetition_of_units(pl.DataFrame({"t": texts}).select(words(pl.col("t"))).to_series(), n).alias(
        texts.name
    )


def repetition_of_units(units: pl.Series, n: int = NGRAM) -> pl.Series:
    """Per list of units (words, tokens or characters): ``1 − distinct n-grams / n-grams`` (see
    :func:`repetition`), null under ``n`` units or for a null list."""
    if not 1 <= n <= len(_MIX):
        raise ValueError(f"n must be between 1 and {len(_MIX)}")
    rows = pl.DataFrame({"w": units}).select(pl.int_range(pl.len(), dtype=pl.Int64).alias("r"), pl.col("w"))
    long = rows.explode("w").drop_nulls("w")
    h = pl.col("w").hash(seed=0)
    gram = h * _MIX[0]
    same_text = pl.lit(True)
    for k in range(1, n):
        gram = gram + h.shift(-k) * _MIX[k]
        same_text = same_text & (pl.col("r").shift(-k) == pl.col("r"))
    grams = long.select("r", gram.alias("g"), same_text.alias("ok")).filter(pl.col("ok"))
    share = grams.group_by("r").agg((1.0 - pl.col("g").n_unique().cast(pl.Float64) / pl.len()).alias("rep"))
    out = rows.select("r").join(share, on="r", how="left", maintain_order="left")
    return out.get_column("rep").alias(units.name)


# ---- which units a response's repetition counts ---------------------------------------------------------

# Scripts written without spaces between words: a text mostly of them is counted in characters.
_NO_SPACE = rf"[{_CJK}\p{{Thai}}\p{{Lao}}\p{{Khmer}}\p{{Myanmar}}]"
CHAR_PATTERN = r"[\p{L}\p{M}\p{N}]"  # a character unit: a letter, mark or digit (not space, not punctuation)
UNITS = ("tokens", "characters", "words")
UNIT_LABELS = {"tokens": "token 3-grams", "characters": "character 3-grams", "words": "word 3-grams"}


def with_units(text: str, units) -> str:
    """A repetition label (``text``, the registry's: '… repeated 3-grams …') naming the units the repetitions
    were counted in (``units``: some of :data:`UNITS`): 'repetition (share of repeated token 3-grams)',
    '… repeated 3-grams of characters or words'; unchanged without a unit."""
    names = [u for u in UNITS if u in set(units)]
    if not names:
        return text
    if len(names) == 1:
        return text.replace("repeated 3-grams", f"repeated {UNIT_LABELS[names[0]]}")
    return text.replace("repeated 3-grams", f"repeated 3-grams of {', '.join(names[:-1])} or {names[-1]}")


def summary_units(steps: pl.DataFrame) -> list[str]:
    """The units a per-step summary's repetitions were counted in (its ``repetition_units``: 'tokens',
    'characters, words' per step), in :data:`UNITS` order; empty without them."""
    if "repetition_units" not in steps.columns:
        return []
    # A text a step: the distinct texts first (a run of 25,000 steps has one or two).
    texts = steps.get_column("repetition_units").drop_nulls().unique().to_list()
    found = {u for text in texts for u in text.split(", ")}
    return [u for u in UNITS if u in found]


def runs_label(text: str, units: dict[str, list[str]]) -> str:
    """A repetition label (``text``, as :func:`with_units`) for several runs (``units``: run -> its units):
    :func:`with_units` when they all counted in the same units, else each run's named after it: 'repetition
    (share of repeated 3-grams) — a: token 3-grams; b: word 3-grams'."""
    if len({tuple(u) for u in units.values()}) <= 1:
        return with_units(text, next(iter(units.values()), []))
    each = [
        f"{run}: {' or '.join(UNIT_LABELS[u] for u in us) or 'units not recorded'}"
        for run, us in units.items()
    ]
    return f"{text} — {'; '.join(each)}"


def response_repetition(
    tokens: pl.Series | None, texts: pl.Series, pad_tokens: tuple[str, ...]
) -> pl.DataFrame:
    """``repetition`` and ``repetition_unit`` of each response (for ingest): over its tokens (``tokens``,
    its ``response_tokens`` without pads and nulls) where it has some, else over the characters of its text
    (letters, marks, digits; lower-cased) where at least half of its letters are of a script written
    without spaces, else over its words (:func:`words`). ``texts``: without pads. See
    :func:`response_repetition_py` for the same in plain Python."""
    text = pl.col("text")
    letters = text.str.count_matches(r"\p{L}")
    no_space = text.str.count_matches(_NO_SPACE)
    df = pl.DataFrame(
        {"text": texts, "tok": tokens if tokens is not None else pl.Series([None] * len(texts))}
    )
    if df.schema["tok"] != pl.List(pl.String):
        df = df.with_columns(pl.lit(None, pl.List(pl.String)).alias("tok"))
    kept = pl.col("tok").list.eval(
        pl.element().filter(pl.element().is_not_null() & ~pl.element().is_in(list(pad_tokens)))
    )
    df = df.with_columns(kept.alias("tok"))
    has_tok = pl.col("tok").list.len().fill_null(0) > 0
    chars = (no_space > 0) & (2 * no_space >= letters)
    unit = (
        pl.when(has_tok)
        .then(pl.lit("tokens"))
        .when(text.is_null())
        .then(None)
        .when(chars)
        .then(pl.lit("characters"))
        .otherwise(pl.lit("words"))
    )
    lists = (
        pl.when(has_tok)
        .then(pl.col("tok"))
        .when(chars)
        .then(text.str.to_lowercase().str.extract_all(CHAR_PATTERN))
        .otherwise(words(text))
    )
    out = df.select(lists.alias("u"), unit.alias("repetition_unit"))
    return pl.DataFrame(
        {
            "repetition": repetition_of_units(out.get_column("u")),
            "repetition_unit": out.get_column("repetition_unit"),
        }
    )


def response_repetition_py(
    tokens: list | None, text: str | None, pad_tokens: tuple[str, ...], n: int = NGRAM
):
    """:func:`response_repetition` of one response, its choice of unit and its n-grams in plain Python (the
    definition, for tests; a text is split by the same patterns): ``(repetition or None, unit or None)``."""

    def split(pattern: str, t: str) -> list[str]:
        return pl.select(pl.lit(t).str.extract_all(pattern)).item().to_list()

    kept = [t for t in tokens or () if t is not None and t not in pad_tokens]
    if kept:
        units, unit = kept, "tokens"
    elif text is None:
        return None, None
    else:
        no_space = len(split(_NO_SPACE, text))
        if no_space and 2 * no_space >= len(split(r"\p{L}", text)):
            units, unit = split(CHAR_PATTERN, text.lower()), "characters"
        else:
            units, unit = split(WORD_PATTERN, text.lower()), "words"
    grams = [tuple(units[i : i + n]) for i in range(len(units) - n + 1)]
    return (1 - len(set(grams)) / len(grams) if grams else None), unit


# ---- truncation: no end token ---------------------------------------------------------------------------


def _fill(pad_tokens: tuple[str, ...], end_tokens: tuple[str, ...]) -> list[str]:
    """The pad tokens that are not end tokens: what may follow a response's end (``<|endoftext|>`` is both
    a pad, hidden in texts, and GPT-2's end token)."""
    return [p for p in pad_tokens if p not in set(end_tokens)]


def ends_with_end_token(
    pad_tokens: tuple[str, ...],
    end_tokens: tuple[str, ...],
    tokens: str = "response_tokens",
    text: str = "response",
) -> pl.Expr:
    """Whether a response ended by itself rather than being cut at the length limit (False: truncated).

    With token strings (``tokens``, a non-empty list): its last token that is not a pad is one of
    ``end_tokens`` (pads that are end tokens count as end tokens: ``[..., "Ġ.", "<|endoftext|>", "<pad>"]``
    ended, ``[..., "Ġtime", "Ġ."]`` was cut). Without them: its ``text``, pads that are not end tokens
    removed and trailing white space stripped, ends with one of ``end_tokens``. Null for a response whose
    tokens are all pads, or that has neither tokens nor a text. A trainer that decodes texts without special
    tokens leaves no end token in any text: whether such a run's responses were cut cannot be told (see
    :func:`data.signals`).
    """
    fill = _fill(pad_tokens, end_tokens)
    ends = list(end_tokens)
    last = pl.col(tokens).list.eval(pl.element().filter(~pl.element().is_in(fill))).list.last()
    cleaned = pl.col(text)
    for tok in fill:
        cleaned = cleaned.str.replace_all(tok, "", literal=True)
    cleaned = cleaned.str.strip_chars_end()
    by_text = pl.any_horizontal(*(cleaned.str.ends_with(e) for e in ends)) if ends else pl.lit(False)
    has_tokens = pl.col(tokens).list.len().fill_null(0) > 0
    return pl.when(has_tokens).then(last.is_in(ends)).otherwise(by_text)


def with_end_inputs(frame, schema):
    """``frame`` (a DataFrame or a LazyFrame whose schema is ``schema``) with the two columns
    :func:`ends_with_end_token` reads, typed: a run without token strings gets null lists (its text decides),
    one without texts null texts."""
    if schema.get("response_tokens") != pl.List(pl.String):
        frame = frame.with_columns(pl.lit(None, pl.List(pl.String)).alias("response_tokens"))
    if schema.get("response") != pl.String:
        texts = pl.col("response").cast(pl.String) if "response" in schema else pl.lit(None, pl.String)
        frame = frame.with_columns(texts.alias("response"))
    return frame


def ends_with_end_token_py(
    tokens: list[str] | None, text: str | None, pad_tokens: tuple[str, ...], end_tokens: tuple[str, ...]
) -> bool | None:
    """:func:`ends_with_end_token` of one response in plain Python (its definition, for tests)."""
    fill = _fill(pad_tokens, end_tokens)
    if tokens:
        kept = [t for t in tokens if t not in fill]
        return kept[-1] in end_tokens if kept else None
    if text is None:  # neither tokens nor text: cannot be told
        return None
    for tok in fill:
        text = text.replace(tok, "")
    text = text.rstrip()
    return any(text.endswith(e) for e in end_tokens)
