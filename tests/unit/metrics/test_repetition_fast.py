"""The whole-column repetition used at ingest equals the per-text expression on hand-made texts."""

from __future__ import annotations

import polars as pl
import pytest

from data.metrics.degeneration import repetition, repetition_of

TEXTS = [
    "go go go go go",  # 3 trigrams, 1 distinct: 2/3
    "the cat sat on the mat",  # 4 trigrams, all distinct: 0
    "a b",  # fewer than 3 words: null
    None,
    "",
    "I am very confident. I am very confident. I am very confident.",
    "床前明月光，疑是地上霜。床前明月光",
    "one two three",  # exactly one trigram: 0
]


def test_repetition_fast001_same_as_expression():
    """repetition_of(Series) gives exactly the expression's value for every text, nulls included."""
    s = pl.Series("t", TEXTS, dtype=pl.String)
    fast = repetition_of(s).to_list()
    slow = pl.select(repetition(pl.lit(s))).to_series().to_list()
    for text, f, e in zip(TEXTS, fast, slow, strict=True):
        assert (f is None and e is None) or f == pytest.approx(e), text
    assert fast[0] == pytest.approx(2 / 3)
    assert fast[1] == 0.0 and fast[2] is None and fast[3] is None and fast[7] == 0.0


@pytest.mark.parametrize("seed", range(3))
def test_repetition_fast002_random_texts(seed):
    """Random texts from a small vocabulary (so n-grams repeat), with punctuation, digits, case, empty texts,
    nulls, non-ASCII words and texts that end on a word: every value agrees with the expression."""
    import random

    rng = random.Random(seed)
    vocab = ["the", "The", "cat", "CAT", "x1", "42", "go", "a", "b", "sun", "don't", "e-mail", "über", "日本"]
    seps = [" ", "  ", "\n", ", ", ". ", "!", "\t", "--", "_"]
    texts = []
    for _ in range(300):
        if rng.random() < 0.05:
            texts.append(None)
            continue
        words = rng.choices(vocab, k=rng.choice([0, 1, 2, 3, 5, 12, 40]))
        text = rng.choice(["", " ", "."]) + "".join(w + rng.choice(seps) for w in words)
        texts.append(text.rstrip(" \n,.!\t-_") if rng.random() < 0.5 else text)
    s = pl.Series("t", texts, dtype=pl.String)
    fast = repetition_of(s).to_list()
    slow = pl.select(repetition(pl.lit(s))).to_series().to_list()
    for text, f, e in zip(texts, fast, slow, strict=True):
        assert (f is None and e is None) or f == pytest.approx(e), text
