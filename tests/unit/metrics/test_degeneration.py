"""Degeneration signals on hand-made text and lengths: repetition (word 3-grams) and length ratio."""

from __future__ import annotations

import json

import polars as pl
import pytest

from data.metrics import METRICS, label
from data.metrics.degeneration import (
    length_ratio,
    repetition,
    step_length_medians,
    with_length_ratio,
    words,
)

PADS = ("<pad>", "<|endoftext|>")


def _rep(texts, n=3):
    return pl.DataFrame({"t": texts}, schema={"t": pl.String}).select(repetition(pl.col("t"), n)).to_series()


def test_degeneration001_repetition_hand_made():
    """1 − distinct/total word 3-grams, counted by hand: a loop repeats, a plain sentence does not."""
    got = _rep(["a b c a b c", "the cat sat on the mat", "go go go go go", "one two three"]).to_list()
    # "a b c a b c": abc bca cab abc -> 4 trigrams, 3 distinct; "go"x5: 3 trigrams, 1 distinct.
    assert got == pytest.approx([0.25, 0.0, 2 / 3, 0.0])


def test_degeneration002_repetition_undefined_below_n_words():
    """Fewer than 3 words (or no text) has no trigram: null, not 0."""
    assert _rep(["a b", "", "!!! ...", None]).to_list() == [None, None, None, None]


def test_degeneration003_tokenisation():
    """Words are lower-cased letter/digit runs; punctuation separates; each Han character is a word."""
    df = pl.DataFrame({"t": ["Hello, hello. HELLO! hello", "don't stop 42x", "中文中文中文"]})
    assert df.select(words(pl.col("t"))).to_series().to_list() == [
        ["hello"] * 4,
        ["don", "t", "stop", "42x"],
        ["中", "文", "中", "文", "中", "文"],
    ]
    # hello x4: 2 trigrams, 1 distinct; 中文 x3: 4 trigrams (中文中, 文中文, 中文中, 文中文), 2 distinct.
    assert _rep(["Hello, hello. HELLO! hello", "中文中文中文"]).to_list() == pytest.approx([0.5, 0.5])


def test_degeneration004_repetition_other_n():
    """n is a parameter: with n = 1 it is the share of repeated words; out-of-range n is refused."""
    assert _rep(["a a b b", "a b c"], n=1).to_list() == pytest.approx([0.5, 0.0])
    with pytest.raises(ValueError):
        repetition(pl.col("t"), 0)


def test_degeneration005_length_ratio_window():
    """Length over its step's median: tokens where present, characters for responses without tokens."""
    df = pl.DataFrame(
        {
            "step": [1, 1, 1, 2, 2, 3],
            "response_length": [10, 20, 30, None, None, 0],
            "response_chars": [1, 2, 3, 4, 8, 0],
        }
    )
    got = df.select(length_ratio()).to_series().to_list()
    assert got[:3] == pytest.approx([0.5, 1.0, 1.5])
    assert got[3:5] == pytest.approx([4 / 6, 8 / 6])  # median of 4 and 8 is 6
    assert got[5] is None  # median 0: no ratio


def test_degeneration006_length_ratio_of_a_subset_uses_whole_steps():
    """A filtered subset (one page of a table) is measured against its whole step's median, order kept."""
    df = pl.DataFrame(
        {"step": [1, 1, 1, 1], "response_length": [40, 10, 20, 30], "response_chars": [1, 1, 1, 1]}
    )
    medians = step_length_medians(df.lazy())
    sub = df.lazy().filter(pl.col("response_length") >= 30)
    got = with_length_ratio(sub, medians).collect()
    assert got.get_column("response_length").to_list() == [40, 30]
    assert got.get_column("length_ratio").to_list() == pytest.approx([40 / 25, 30 / 25])


def test_degeneration007_computed_at_ingest_without_pads(tmp_path):
    """Ingest stores ``repetition`` per response, with pad tokens removed before the words are split."""
    from data.ingest import ingest_run
    from data.store import open_store

    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    lines = [
        {"prompt": "p", "response": "x y z" + "<pad>" * 6, "reward": 1.0, "step": 1},
        {"prompt": "p", "response": "la la la la<|endoftext|>", "reward": 1.0, "step": 1},
    ]
    (run / "a.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    res = ingest_run(run, tmp_path / "cache", PADS)
    scalars = open_store(res.store_dir).scalars().sort("line")
    assert scalars.get_column("repetition").to_list() == pytest.approx([0.0, 0.5])


def test_degeneration008_metric_labels():
    """Both signals are registered metrics with their exact UI labels."""
    assert label("repetition") == "repetition (share of repeated 3-grams)"
    assert label("length_ratio") == "length ÷ step median"
    assert METRICS["repetition"].level == "response"


ENDS = ("<|endoftext|>", "</s>", "<|im_end|>")
PADS_T = ("<pad>", "<PAD>", "<|endoftext|>")


def _ends(tokens, texts):
    from data.metrics.degeneration import ends_with_end_token

    df = pl.DataFrame(
        {"response_tokens": tokens, "response": texts},
        schema={"response_tokens": pl.List(pl.String), "response": pl.String},
    )
    return df.select(ends_with_end_token(PADS_T, ENDS)).to_series().to_list()


def test_degeneration009_end_token_by_hand():
    """A response ended when its last token that is not a pad is an end token (<|endoftext|> is both a pad
    and GPT-2's end), else when its text, pads and trailing white space aside, ends with one; it was cut
    (truncated) otherwise. Only pads: cannot be told."""
    tokens = [
        ["Ġgood", "Ġ.", "<|endoftext|>", "<pad>", "<pad>"],  # ended, then padded
        ["Ġgood", "Ġ.", "<|endoftext|>"],  # ended, the batch's longest
        ["Ġwe", "Ġhad", "Ġa", "Ġgood"],  # cut at the limit
        ["<pad>", "<pad>"],  # nothing but pads
        None,  # no tokens: the text decides
        [],
        None,
        None,
    ]
    texts = [
        "good .<|endoftext|><pad><pad>",
        "good .<|endoftext|>",
        "we had a good",
        "",
        "The answer is 4.<|im_end|>\n<pad><PAD> ",
        "no end at all",
        "</s> in the middle, not at the end",
        "",
    ]
    assert _ends(tokens, texts) == [True, True, False, None, True, False, False, False]


def test_degeneration011_end_inputs_of_a_run_without_tokens_or_texts():
    """A run without token strings is read by its texts; one without texts is unknown (null: cannot be
    told, as the plain-Python definition says); non-text ones are read as their text. The same answer from
    a frame and from a lazy frame."""
    from data.metrics.degeneration import ends_with_end_token, ends_with_end_token_py, with_end_inputs

    texts_only = pl.DataFrame({"response": ["good .<|endoftext|>", "we had a good", None]})
    nothing = pl.DataFrame({"step": [1, 2]})
    ints = pl.DataFrame({"response": [1, 2]})
    tokens_null = pl.DataFrame({"response_tokens": [None, None], "response": ["a</s>", "b"]})
    expr = ends_with_end_token(PADS_T, ENDS).alias("e")
    for df, want in [
        (texts_only, [True, False, None]),
        (nothing, [None, None]),
        (ints, [False, False]),  # read as the texts "1" and "2"
        (tokens_null, [True, False]),
    ]:
        eager = with_end_inputs(df, df.schema).select(expr).to_series().to_list()
        lazy = (
            with_end_inputs(df.lazy(), df.lazy().collect_schema())
            .select(expr)
            .collect()
            .to_series()
            .to_list()
        )
        assert eager == lazy == want, (df.columns, eager, lazy)
    assert ends_with_end_token_py(None, None, PADS_T, ENDS) is None


def test_degeneration010_end_token_matches_its_definition_and_the_trainers_flag(fixtures_dir):
    """The expression gives what the plain-Python definition gives on random responses, and on TRL's PPO
    and GRPO runs exactly the trainer's own ends_with_eos flag of every line (400 lines each; 22 and 31
    cut)."""
    import random

    from data.config import DEFAULT_END_TOKENS, DEFAULT_PAD_TOKENS
    from data.metrics.degeneration import ends_with_end_token, ends_with_end_token_py

    rng = random.Random(7)
    vocab = ["a", "Ġb", "<pad>", "<PAD>", "<|endoftext|>", "</s>", "<|im_end|>", " ", "\n"]
    tokens, texts = [], []
    for _ in range(500):
        toks = [rng.choice(vocab) for _ in range(rng.randint(0, 6))]
        tokens.append(toks if rng.random() < 0.5 else None)
        texts.append("".join(rng.choice(vocab) for _ in range(rng.randint(0, 6))))
    got = _ends(tokens, texts)
    assert got == [ends_with_end_token_py(t, x, PADS_T, ENDS) for t, x in zip(tokens, texts, strict=True)]
    for run in ("trl-ppo-small", "trl-grpo-small"):
        lines = [
            json.loads(line)
            for f in ("rank0.jsonl", "rank1.jsonl")
            for line in (fixtures_dir / run / f).read_text().splitlines()
        ]
        df = pl.DataFrame(
            {
                "response_tokens": [r["response_tokens"] for r in lines],
                "response": [r["response"] for r in lines],
            }
        )
        ends = df.select(ends_with_end_token(DEFAULT_PAD_TOKENS, DEFAULT_END_TOKENS)).to_series().to_list()
        assert ends == [r["ends_with_eos"] for r in lines]
        assert ends.count(False) == {"trl-ppo-small": 22, "trl-grpo-small": 31}[run]


# ---- repetition on tokens, characters or words (issue 35) ---------------------------------------------


def test_degeneration020_units_by_hand():
    """By hand: 'it was worth the was worth the was' as 8 tokens (a trailing pad dropped) has 6 token 3-grams,
    2 repeating an earlier one: 1/3, unit tokens; a Chinese line without tokens counts its 15 letters'
    13 character 3-grams, 3 repeated (床前明, 前明月, 明月光): 3/13 (a text half of whose letters are CJK counts
    characters too); English without tokens: word 3-grams,
    'the cat sat on the mat the cat sat' 7 of them, 1 repeated (the cat sat): 1/7; a response whose tokens are
    all pads falls back on its text; a null text without tokens has neither."""
    from data.metrics.degeneration import response_repetition, response_repetition_py

    toks = ["Ġit", "Ġwas", "Ġworth", "Ġthe", "Ġwas", "Ġworth", "Ġthe", "Ġwas", "<pad>"]
    cases = [
        (toks, "it was worth the was worth the was", 1 / 3, "tokens"),
        (None, "床前明月光，疑是地上霜。床前明月光", 3 / 13, "characters"),
        (None, "the cat sat on the mat the cat sat", 1 / 7, "words"),
        (["<pad>", None], "go go go go", 1 / 2, "words"),
        (None, "ok 日本", 0.0, "characters"),  # 2 of its 4 letters without spaces: o, k, 日, 本: 2 distinct
        (None, None, None, None),
    ]
    got = response_repetition(
        pl.Series([c[0] for c in cases], dtype=pl.List(pl.String)), pl.Series([c[1] for c in cases]), PADS
    )
    for (tokens, text, rep, unit), row in zip(cases, got.iter_rows(named=True), strict=True):
        assert row["repetition_unit"] == unit, text
        assert row["repetition"] == (None if rep is None else pytest.approx(rep)), text
        by_def = response_repetition_py(tokens, text, PADS)
        assert by_def[1] == unit and (by_def[0] == (None if rep is None else pytest.approx(rep))), text


@pytest.mark.parametrize("seed", range(3))
def test_degeneration021_same_as_definition_on_random_responses(seed):
    """Random responses (tokens or none, pads, nulls, Latin, CJK and Thai texts): the column computation at
    ingest equals the plain-Python definition, response by response."""
    import random

    from data.metrics.degeneration import response_repetition, response_repetition_py

    rng = random.Random(seed)
    vocab = ["a", "Ġb", "c", "<pad>", None]
    words = ["the", "cat", "日", "本", "語", "ไทย", "x", "é"]
    toks, texts = [], []
    for _ in range(200):
        toks.append(None if rng.random() < 0.5 else rng.choices(vocab, k=rng.choice([0, 2, 3, 9])))
        texts.append(
            None
            if rng.random() < 0.05
            else rng.choice(["", " ", ""]).join(rng.choices(words, k=rng.choice([0, 3, 12])))
        )
    got = response_repetition(
        pl.Series(toks, dtype=pl.List(pl.String)), pl.Series(texts, dtype=pl.String), PADS
    )
    for t, x, row in zip(toks, texts, got.iter_rows(named=True), strict=True):
        rep, unit = response_repetition_py(t, x, PADS)
        assert row["repetition_unit"] == unit, (t, x)
        assert row["repetition"] == (None if rep is None else pytest.approx(rep)), (t, x)


def test_degeneration022_label_names_the_units():
    """The curve's label says which units its repetitions were counted in."""
    from data.metrics.degeneration import with_units

    base = label("repetition_mean")
    assert with_units(base, ["tokens"]) == "repetition, step mean (share of repeated token 3-grams)"
    assert with_units(base, ["words", "characters"]) == (
        "repetition, step mean (share of repeated 3-grams of characters or words)"
    )
    assert with_units(base, []) == base
