"""Responses page data: filter and sort queries, paging, the table's columns, texts, the text index. The
expected rows are worked out by hand from the 12 responses written below. (Its view state:
tests/unit/views/test_responses_view.py; the grid's builders: tests/unit/components/test_tables.py.)"""

from __future__ import annotations

import json

import polars as pl
import pytest

from data.ingest import ingest_run
from data.queries import QueryError, ResponseFilter
from data.responses import (
    json_rows,
    page_rows,
    sample_texts,
    sortable_columns,
    table_columns,
)
from data.run_context import steps_of
from data.search import order as search_order
from data.search import texts as search_texts
from data.search.order import order_keys, ordered
from data.store import open_store, sample_id
from data.views.responses import ALL_STEPS, ResponsesView

PADS = ("<pad>", "<|endoftext|>")
# line: (step, reward, ref_reward, prompt, response). Lines 1-10 are step 1, lines 11-12 step 2.
ROWS = {
    1: (1, 1.0, 0.5, "p one", "alpha answer"),
    2: (1, 0.5, 1.0, "p two", "beta answer"),
    3: (1, 1.0, 2.0, "p three", "gamma\nsecond line"),
    4: (1, 0.0, 0.0, "p four", "delta<pad><pad>"),
    5: (1, 2.0, 1.0, "p five", "alpha again"),
    6: (1, 1.0, 1.0, "p six", "epsilon"),
    7: (1, 0.5, 0.0, "find me", "zeta"),
    8: (1, 1.5, 2.0, "p eight", "eta"),
    9: (1, 0.0, 0.5, "p nine", "theta"),
    10: (1, 1.0, 0.0, "p ten", "Alpha capital"),
    11: (2, 3.0, 1.0, "p eleven", "alpha late"),
    12: (2, -1.0, 0.0, "p twelve", "<script>alert(1)</script>"),
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A run of the 12 responses above (plus an extra column ``group_id``), ingested."""
    root = tmp_path_factory.mktemp("resp")
    run = root / "runs" / "hand"
    run.mkdir(parents=True)
    lines = []
    for line, (step, reward, ref, prompt, response) in ROWS.items():
        rec = {"prompt": prompt, "response": response, "reward": reward, "step": step}
        rec.update({"ref_reward": ref, "ref_response": f"ref {line}", "group_id": line % 3})
        lines.append(json.dumps(rec))
    (run / "rank0.jsonl").write_text("\n".join(lines) + "\n")
    res = ingest_run(run, root / "cache", PADS)
    return open_store(res.store_dir)


def lines_of(store, flt_view: ResponsesView, sort="reward", descending=True) -> list[int]:
    """Source lines of the ordered matches of a view (step 1 unless the view says otherwise)."""
    keys = order_keys(store, flt_view.response_filter(steps_of(store)), sort, descending, 0, 100)
    return store.read_keys(keys, ["line"]).get_column("line").to_list()


V1 = ResponsesView(run="hand", step=1)


# ---- queries ---------------------------------------------------------------------------------------------


def test_responses010_sort_ties_by_sample_id(store):
    """Reward descending/ascending; equal rewards ordered by sample id ('…-10' before '…-3')."""
    assert lines_of(store, V1) == [5, 8, 1, 10, 3, 6, 2, 7, 4, 9]
    assert lines_of(store, V1, descending=False) == [4, 9, 2, 7, 1, 10, 3, 6, 8, 5]
    ids = [sample_id("rank0.jsonl", n) for n in (1, 10, 3, 6)]
    assert ids == sorted(ids)


def test_responses011_pages_are_a_stable_partition(store):
    """Pages 0-4, 4-8, 8-12 join up to the whole ordered list, with the total count."""
    flt = V1.response_filter(steps_of(store))
    got = []
    for start in (0, 4, 8):
        df, count = page_rows(store, flt, "reward", True, start, start + 4)
        assert count == 10
        got += df.get_column("sample_id").to_list()
    assert got == [sample_id("rank0.jsonl", n) for n in (5, 8, 1, 10, 3, 6, 2, 7, 4, 9)]


def test_responses012_ranges_are_half_open_at_bin_edges(store):
    """min <= x < max: a value equal to min is in, equal to max is out; a bar with only a min is x >= min."""
    assert sorted(lines_of(store, V1.with_(reward_min=0.5, reward_max=1.0))) == [2, 7]
    assert sorted(lines_of(store, V1.with_(reward_min=1.0))) == [1, 3, 5, 6, 8, 10]
    assert sorted(lines_of(store, V1.with_(reward_max=0.5))) == [4, 9]
    assert sorted(lines_of(store, V1.with_(gain_min=0.0))) == [1, 4, 5, 6, 7, 10]
    assert sorted(lines_of(store, V1.with_(gain_max=0.0))) == [2, 3, 8, 9]


def test_responses013_loses_to_reference(store):
    """loses=1 keeps reward < ref_reward only (a tie does not lose)."""
    assert sorted(lines_of(store, V1.with_(loses=True))) == [2, 3, 8, 9]


def test_responses014_summary_counts_and_mean(store):
    """Count of matches, responses in scope (the step) and mean reward of the matches."""
    order = ordered(store, V1.with_(reward_min=1.0).response_filter([1, 2]), "reward", True)
    assert (order.count, order.scope) == (6, 10)
    assert order.mean_reward == pytest.approx(7.5 / 6)
    all_steps = ordered(store, V1.with_(step=ALL_STEPS).response_filter([1, 2]), "reward", True)
    assert (all_steps.count, all_steps.scope) == (12, 12)
    last = ordered(store, ResponsesView(run="hand").response_filter([1, 2]), "reward", True)
    assert (last.count, last.scope, last.mean_reward) == (2, 2, 1.0)


def test_responses015_empty_result(store):
    """A filter nothing passes: zero matches, no mean, an empty page with the table's columns."""
    flt = V1.with_(reward_min=5.0).response_filter([1, 2])
    order = ordered(store, flt, "reward", True)
    assert (order.count, order.mean_reward) == (0, None)
    df, count = page_rows(store, flt, "reward", True, 0, 100)
    assert count == 0 and df.height == 0 and "reward" in df.columns


def test_responses016_regex_over_prompt_and_response(store):
    """q matches prompt or response; (?i) ignores case; step limits it; an invalid regex raises QueryError."""
    assert sorted(lines_of(store, V1.with_(q="alpha"))) == [1, 5]
    assert sorted(lines_of(store, V1.with_(q="(?i)^alpha"))) == [1, 5, 10]
    assert sorted(lines_of(store, V1.with_(step=ALL_STEPS, q="alpha"))) == [1, 5, 11]
    assert lines_of(store, V1.with_(q="find me")) == [7]
    assert lines_of(store, V1.with_(q="second line$")) == [3]
    flt = V1.response_filter([1, 2])
    with pytest.raises(QueryError, match="unclosed group"):
        ordered(store, flt.__class__(**{**flt.__dict__, "q": "("}), "reward", True)


def test_responses017_sort_by_other_columns(store):
    """Sorting by step (all steps) and by an extra column, ties by sample id."""
    view = V1.with_(step=ALL_STEPS)
    assert lines_of(store, view, "step", True)[:2] == [11, 12]
    group = lines_of(store, view, "group_id", False)
    assert group == [12, 3, 6, 9, 1, 10, 4, 7, 11, 2, 5, 8]  # "…-12" < "…-3" as text


def test_responses018_columns_without_token_fields(store):
    """A run without token fields shows characters instead of tokens, no KL, and the repetition (a
    reward-hacking point opens the step sorted by it); extras are sortable."""
    metrics, extras = table_columns(store)
    assert metrics == ["step", "reward", "ref_reward", "reward_gain", "response_chars", "repetition"]
    assert extras == ["group_id"]
    assert sortable_columns(store) == [*metrics, "group_id"]


def test_responses019_columns_with_token_fields(fixtures_dir, tmp_path):
    """The PPO fixture shows length in tokens, KL, log-ratio and value error, and its extra columns."""
    res = ingest_run(fixtures_dir / "trl-ppo-small", tmp_path, PADS)
    metrics, extras = table_columns(open_store(res.store_dir))
    assert metrics == [
        "step",
        "reward",
        "ref_reward",
        "reward_gain",
        "response_length",
        "kl_mean",
        "kl_sum",
        "log_ratio_mean",
        "value_error_abs_mean",
        "repetition",
    ]
    assert extras == ["prompt_id", "ends_with_eos"]


def test_responses020_sample_texts_hide_pads(store):
    """Full texts of one response with pad tokens removed, newlines kept; unknown id -> None."""
    texts = sample_texts(store, sample_id("rank0.jsonl", 4), PADS)
    assert (texts["response"], texts["ref_response"], texts["reward"]) == ("delta", "ref 4", 0.0)
    assert sample_texts(store, sample_id("rank0.jsonl", 3), PADS)["response"] == "gamma\nsecond line"
    assert sample_texts(store, "nope-1", PADS) is None


def test_responses022_text_index_in_the_store(store):
    """Ingest writes one IPC file per file of parts/ in the store; a search over all steps reads them."""
    from data import responses
    from data.derived import text as text_index

    responses.clear_caches()
    assert sorted(lines_of(store, V1.with_(step=ALL_STEPS, q="(?i)alpha"))) == [1, 5, 10, 11]
    files = search_texts.text_index_files(store)
    assert files == [text_index.in_store(store.dir, p) for p in store.part_files()]
    # One per file of parts/ (a part has one per step block it holds), named by its block and name.
    assert sorted(f.name for f in (store.dir / "text").iterdir()) == sorted(
        f"{p.parent.name}.{p.stem}.arrow" for p in store.part_files()
    )
    assert pl.read_ipc(files[0]).columns == ["part", "row", "step", "prompt", "response"]


def test_responses023_a_missing_index_file_raises(store, monkeypatch):
    """The store's text index is read as ingest wrote it: a file missing raises (nothing is built beside
    the store, as for a store of format 13 and before)."""
    from data.derived import text as text_index

    monkeypatch.setattr(text_index, "FOLDER", "not-written")
    with pytest.raises(FileNotFoundError):
        search_texts.text_index_files(store)


def test_responses021_json_rows_have_no_nan():
    """NaN and infinities become None for the grid (JSON has no such numbers)."""
    df = pl.DataFrame({"a": [1.0, float("nan"), float("inf")], "b": ["x", "y", "z"]})
    assert json_rows(df) == [{"a": 1.0, "b": "x"}, {"a": None, "b": "y"}, {"a": None, "b": "z"}]


# ---- components ------------------------------------------------------------------------------------------


def test_responses035_table_spec_and_range_filters(store):
    """The table's columns carry their registry labels and descriptions, how each response ended last (read
    for the rows on screen, not sortable); gains are coloured by sign, the rewards are not; a range over a
    column the run lacks is offered disabled."""
    from data.responses import range_filters, table_spec

    spec = table_spec(store)
    assert [c[0] for c in spec.columns] == [
        "step",
        "reward",
        "ref_reward",
        "reward_gain",
        "response_chars",
        "repetition",
        "group_id",
        "end",
    ]
    assert spec.columns[3][1] == "reward gain (reward − ref reward)"
    assert spec.columns[-2][2] == "extra field of the files"
    assert spec.columns[-1][1] == "end (ended / truncated)" and spec.unsortable == {"end"}
    assert spec.signed == {"reward_gain"}
    filters = {key: (text, ok) for key, text, ok in range_filters(store)}
    assert filters["reward"] == ("reward", True) and filters["kl"] == ("KL mean per token (k3)", False)


@pytest.mark.parametrize(
    "pattern",
    [
        r"good",
        r"(?i)\bthe\b",
        r"o+",
        r"a|ab",
        r"x*",
        r"\d+\.?",
        r"(?i)very \w+",
        r"[aeiou]{2}",
        r"^\w+",
        r"\.$",
    ],
)
def test_responses040_match_pieces_are_the_searchs_matches(pattern):
    """The pieces a text is split into mark exactly the regex's matches, leftmost-first and non-overlapping
    (Python's re finds the same ones for these patterns), adjacent ones as one mark; joined, they give the
    text back. Empty matches mark nothing."""
    import random
    import re

    from data.queries import match_pieces

    rng = random.Random(pattern)
    words = ["the", "The", "bathe", "good", "goood", "very", "nice", "3.5", "42", "aab", "ab", "ea", "."]
    for _ in range(40):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 12)))
        pieces = match_pieces(text, pattern)
        assert "".join(p for p, _ in pieces) == text
        marked = [i for i, (p, hit) in enumerate(pieces) for _ in p if hit]  # piece index per marked char
        expected = [False] * len(text)
        for m in re.finditer(pattern, text):
            expected[m.start() : m.end()] = [True] * (m.end() - m.start())
        got = [hit for p, hit in pieces for _ in p]
        assert got == expected, (text, pieces)
        assert all(a != b for (_, a), (_, b) in zip(pieces, pieces[1:], strict=False)) or not marked


def test_responses041_match_pieces_by_hand():
    """Worked cases: a word boundary, case-insensitive flags, an invalid or absent pattern, no text."""
    from data.queries import match_pieces

    assert match_pieces("bathe the THE x", r"(?i)\bthe\b") == [
        ("bathe ", False),
        ("the", True),
        (" ", False),
        ("THE", True),
        (" x", False),
    ]
    assert match_pieces("a<b>c", "<b>") == [("a", False), ("<b>", True), ("c", False)]
    assert match_pieces("abc", "(") == [("abc", False)]
    assert match_pieces("abc", None) == [("abc", False)]
    assert match_pieces("", "a") == [] and match_pieces(None, "a") == []


def test_responses042_a_blocks_previews_marked_at_once():
    """A grid block's previews are marked in one pass (data.responses.mark_previews), each as by hand: a
    text without a match, none, empty, one holding the marks' own characters (left unmarked), and the
    pattern checked once however many rows ask."""
    from data import queries
    from data.responses import mark_previews

    queries.regex_error.cache_clear()
    rows = [
        {"prompt_preview": "say the word", "response_preview": "THE end"},
        {"prompt_preview": "none here", "response_preview": None},
        {"prompt_preview": "", "response_preview": "x\ufdd0the"},
    ]
    got = mark_previews([dict(r) for r in rows], "(?i)the")
    assert [r["prompt_preview_marks"] for r in got] == [
        [["say ", False], ["the", True], [" word", False]],
        [["none here", False]],
        [],
    ]
    assert [r["response_preview_marks"] for r in got] == [
        [["THE", True], [" end", False]],
        [],
        [["x\ufdd0the", False]],
    ]
    assert queries.regex_error.cache_info().misses == 1
    assert mark_previews([dict(r) for r in rows], "(") == rows  # an invalid pattern marks nothing


def test_responses046_preview_lines_follow_the_runs_previews():
    """Rows get one line for short previews, up to three for long ones (90th percentile, 45 characters a
    line, a CJK character counting twice)."""
    from data.responses import preview_lines

    def frame(texts):
        return pl.DataFrame({"prompt_preview": ["q"] * len(texts), "response_preview": texts})

    assert preview_lines(frame(["short"] * 10)) == 1
    assert preview_lines(frame(["x" * 80] * 10)) == 2
    assert preview_lines(frame(["x" * 160] * 10)) == 3
    assert preview_lines(frame(["x" * 160] + ["short"] * 19)) == 1  # one long preview among 20
    assert preview_lines(frame(["高歌一曲归云散,明月照头光影疏。" * 2] * 10)) == 2  # 32 wide characters
    assert preview_lines(pl.DataFrame()) == 1


def test_responses043_previews_marked_with_the_searchs_matches():
    """With a search each row's prompt and response previews get their matches as [piece, matched] pairs
    (a case-insensitive word: both cases, in each preview); without one, or with a pattern that cannot
    run, the rows are left as they are."""
    from data.responses import mark_previews

    def rows():
        return [{"prompt_preview": "The cat", "response_preview": "the end, THE END", "reward": 1.0}]

    out = mark_previews(rows(), r"(?i)\bthe\b")
    assert out[0]["prompt_preview_marks"] == [["The", True], [" cat", False]]
    assert out[0]["response_preview_marks"] == [
        ["the", True],
        [" end, ", False],
        ["THE", True],
        [" END", False],
    ]
    assert out[0]["reward"] == 1.0
    assert mark_previews(rows(), None) == rows() == mark_previews(rows(), "(")
    assert mark_previews([{"prompt_preview": None}], "a") == [
        {"prompt_preview": None, "prompt_preview_marks": []}
    ]


@pytest.mark.parametrize("head_rows", [2000, 3])
def test_responses044_walk_through_the_views_order(store, monkeypatch, head_rows):
    """walk() places a response in the view's order (reward descending, ties by sample id: lines 5, 8, 1,
    10, 3, 6, 2, 7, 4, 9) with its neighbours, whether it is in the cached head of the order or beyond it
    (a head of 3 rows); None for a response the view does not show."""
    import data.responses as responses

    monkeypatch.setattr(search_order, "HEAD_ROWS", head_rows)
    responses.clear_caches()
    steps = list(steps_of(store))
    view = V1.with_(sort="reward", order="desc")

    def sid(n):
        return sample_id("rank0.jsonl", n)

    first = search_order.walk(store, view, steps, sid(5))
    assert (first.index, first.count, first.prev_id, first.next_id) == (0, 10, None, sid(8))
    deep = search_order.walk(store, view, steps, sid(7))  # 8th of 10: beyond a head of 3
    assert (deep.index, deep.count, deep.prev_id, deep.next_id) == (7, 10, sid(2), sid(4))
    last = search_order.walk(store, view, steps, sid(9))
    assert (last.index, last.prev_id, last.next_id) == (9, sid(4), None)
    assert search_order.walk(store, view, steps, sid(11)) is None  # step 2: not in the view
    responses.clear_caches()


def test_responses045_all_steps_count_and_mean_from_the_steps(tmp_path):
    """Every step, unfiltered: count and mean reward come from the steps summary, equal to values computed
    by hand (NaN and infinities are counted, not averaged); a filtered view and a summary without the
    sums still scan the rows."""
    from data import responses

    run = tmp_path / "run"
    run.mkdir()
    rewards = {1: [1.0, 0.5, float("nan")], 2: [2.0, float("inf"), 0.25], 3: [-1.0]}
    recs = [{"prompt": "p", "response": "r", "reward": r, "step": s} for s, rs in rewards.items() for r in rs]
    (run / "rank0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    st = open_store(ingest_run(run, tmp_path / "cache", PADS).store_dir)
    want = search_order.Order(7, 7, (1.0 + 0.5 + 2.0 + 0.25 - 1.0) / 5)
    assert search_order.all_steps_reward(st.steps()) == want
    responses.clear_caches()
    assert ordered(st, ResponseFilter()) == want
    # The same figures from a scan: a filter that keeps every row, and a summary written without the sums.
    assert ordered(st, ResponseFilter(reward_min=-10.0)) == search_order.Order(5, 7, want.mean_reward)
    assert search_order.all_steps_reward(st.steps().drop("reward_finite_sum")) is None
    old = st.steps().with_columns(pl.lit(None, pl.UInt32).alias("reward_finite_n"))
    assert search_order.all_steps_reward(old) is None


def test_responses047_step_and_repetition_ranges(store):
    """The range filters added for the scatter: over every step, ``step_min`` / ``step_max`` keep the steps
    ``min <= step < max`` (and only the files that can hold them are read); a range on a column the
    responses page does not always show (the repetition's) filters as any other; the summary says both."""
    view = ResponsesView(run="hand", step=ALL_STEPS, step_min=2, step_max=3)
    assert view.response_filter(steps_of(store)).step_span() == (2, 2)
    assert sorted(lines_of(store, view)) == [11, 12]
    both = view.with_(step_min=1, step_max=2, reward_min=1.0, reward_max=2.0, repetition_min=0.0)
    assert sorted(lines_of(store, view.with_(step_min=1, step_max=2, reward_min=1.0, reward_max=2.0))) == [
        1,
        3,
        6,
        8,
        10,
    ]
    # Of those, only line 3 has 3 words or more: the others have no repetition, so no range holds them.
    assert sorted(lines_of(store, both)) == [3]
    assert sorted(lines_of(store, both.with_(repetition_min=0.01))) == []
    assert "1 ≤ step < 2" in both.describe([1, 2]) and "0 ≤ repetition" in both.describe([1, 2])
