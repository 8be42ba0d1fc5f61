"""GRPO first (issue 35, item 4) on the real TRL GRPO fixture (``../shared/fixtures/trl-grpo-small``: TRL
1.16.0's GRPOTrainer, 4 prompts × 4 completions a step, rank files split each group 2/2; see its README):
which response the token page opens by itself, the group of a response side by side, the learning-signal
column, the responses page's columns and its "ended only" filter, each against the file read by hand."""

from __future__ import annotations

import json
import math

import pytest

from data.config import DEFAULT_PAD_TOKENS
from data.ingest import ingest_run
from data.store import open_store, sample_id

RUN = "trl-grpo-small"


@pytest.fixture(scope="module")
def grpo(fixtures_dir, tmp_path_factory):
    """The fixture's store and its records as the files hold them (``file``, ``line`` added)."""
    src = fixtures_dir / RUN
    if not src.is_dir():
        pytest.skip(f"fixture {RUN} is not in {fixtures_dir}")
    store = open_store(ingest_run(src, tmp_path_factory.mktemp("cache"), DEFAULT_PAD_TOKENS).store_dir)
    records = []
    for name in ("rank0.jsonl", "rank1.jsonl"):
        with open(src / name, encoding="utf-8") as f:
            for i, line in enumerate(f, start=1):
                records.append({**json.loads(line), "file": name, "line": i})
    return store, records


def k3_sum(rec: dict) -> float:
    """Σ_t exp(r_t) − 1 − r_t, r_t = ref_logprob_t − logprob_t (docs/metrics.md), by hand."""
    return sum(
        math.exp(r - p) - 1 - (r - p) for p, r in zip(rec["logprobs"], rec["ref_logprobs"], strict=False)
    )


def test_grpo001_token_page_opens_the_steps_largest_kl(grpo):
    """With no response named, the token page opens the step's response of the largest KL sum (the navbar
    carries the step): at step 25 and step 3, the record whose k3 sum computed by hand is largest, not the
    run's first response; the run's last step when no step is given."""
    from data.tokens import default_sample, first_sample

    store, records = grpo
    for step in (3, 25):
        recs = [r for r in records if r["step"] == step]
        top = max(recs, key=k3_sum)
        assert sorted(k3_sum(r) for r in recs)[-2] < k3_sum(top)  # no tie: the answer is one record
        assert default_sample(store, step) == sample_id(top["file"], top["line"])
    assert first_sample(store) == sample_id("rank0.jsonl", 1)
    assert default_sample(store, 3) != first_sample(store)


class _Board:
    """What :func:`data.views.tokens.resolve` asks of the app's board: the runs, a store, the settings."""

    def __init__(self, store):
        self._store = store
        self.settings = type("S", (), {"pad_tokens": DEFAULT_PAD_TOKENS})()

    def runs(self):
        return [RUN]

    def store(self, run, wait):
        return self._store


def test_grpo002_token_url_with_a_step_resolves_and_says_so(grpo):
    """``/tokens?run=R&step=S`` (what the navbar's Tokens link opens from a page at step S) shows step S's
    largest-KL response and says so; a step the run lacks goes by the one step rule (the step before);
    ``step`` round-trips in the URL and a bad one is noticed."""
    from data.tokens import default_note, default_sample
    from data.views.tokens import TokensState, resolve

    store, _ = grpo
    state, notes = TokensState.from_query({"run": [RUN], "step": ["7"]})
    assert notes == [] and state.to_query() == f"?run={RUN}&step=7"
    shown, view, problem = resolve(state, _Board(store), 1.0)
    assert problem is None and shown.sample == default_sample(store, 7) and view.info["step"] == 7
    assert default_note(view) == (
        "No response chosen: showing the response of step 7 with the largest KL sum (k3)."
    )
    shown, _, _ = resolve(TokensState(run=RUN, step=99), _Board(store), 1.0)
    assert shown.sample == default_sample(store, 25)
    shown, _, _ = resolve(TokensState(run=RUN), _Board(store), 1.0)
    assert shown.sample == default_sample(store, 25)
    _, notes = TokensState.from_query({"run": [RUN], "step": ["x"]})
    assert notes == ["Ignored step='x': not a whole number."]


def _keys(store):
    """``part, row, sample_id`` of every response of ``store``."""
    return store.scan(["part", "row", "sample_id"]).collect()


def test_grpo003_ends_of_rows_agree_with_the_trainer(grpo, fixtures_dir):
    """How each of the 400 responses ended (``row_ends``, the ``truncated`` filter's definition) equals TRL's
    own ``ends_with_eos`` of the file (369 ended, 31 cut: the README), row for row; the token page's badge
    says "truncated" of a cut response and "ended" of the others. A run whose texts carry no end token at
    all (the poem fixture has no token strings and no end tokens) cannot tell: null, no badge."""
    from data.config import DEFAULT_END_TOKENS
    from data.signals import ENDS, row_ends
    from data.tokens import token_view, view_end

    store, records = grpo
    keys = _keys(store)
    ends = row_ends(store, keys.select("part", "row"), DEFAULT_PAD_TOKENS, DEFAULT_END_TOKENS)
    got = dict(zip(keys.get_column("sample_id"), ends.get_column(ENDS), strict=True))
    want = {sample_id(r["file"], r["line"]): r["ends_with_eos"] for r in records}
    assert got == want and sum(want.values()) == 369
    cut = next(r for r in records if not r["ends_with_eos"])
    done = next(r for r in records if r["ends_with_eos"])
    for rec, label in ((cut, "truncated"), (done, "ended")):
        view = token_view(store, sample_id(rec["file"], rec["line"]), DEFAULT_PAD_TOKENS)
        assert view_end(store, view, DEFAULT_PAD_TOKENS, DEFAULT_END_TOKENS) == label
    poem = fixtures_dir / "rlloggingboard-eval-poem"
    other = open_store(ingest_run(poem, store.dir.parent / "poem", DEFAULT_PAD_TOKENS).store_dir)
    k = _keys(other).head(3).select("part", "row")
    assert row_ends(other, k, DEFAULT_PAD_TOKENS, DEFAULT_END_TOKENS).get_column(ENDS).to_list() == [None] * 3


def test_grpo009_ends_of_a_page_of_rows_read_once(grpo, monkeypatch):
    """With the board's default end tokens a page of rows' ends come from the column ingest kept
    (``ends_with_end``): no token list is read (a page over every step read ~40 row groups of them), and they equal
    what the rows' tokens say (test_grpo003 checks those against TRL's ``ends_with_eos``). With other end
    tokens the rows are read, once: asked again, the same and no row read; rows not asked before are read."""
    from data.config import DEFAULT_END_TOKENS
    from data.signals import ENDS, row_ends

    store, _ = grpo
    page = _keys(store).select("part", "row").slice(100, 50)
    other = (*DEFAULT_END_TOKENS, "Ġ.")  # ends counted with other tokens: not what ingest kept
    read = row_ends(store, page, DEFAULT_PAD_TOKENS, other)
    assert read.get_column(ENDS).null_count() == 0 and read.select("part", "row").equals(page)

    def no_read(*a, **k):
        raise AssertionError("read again")

    monkeypatch.setattr(store, "read_keys", no_read)
    assert row_ends(store, page, DEFAULT_PAD_TOKENS, other).equals(read)
    with pytest.raises(AssertionError, match="read again"):
        row_ends(store, page.head(49), DEFAULT_PAD_TOKENS, other)
    monkeypatch.undo()
    asked = []
    real = store.read_keys
    monkeypatch.setattr(store, "read_keys", lambda keys, cols: asked.append(cols) or real(keys, cols))
    kept = row_ends(store, page, DEFAULT_PAD_TOKENS, DEFAULT_END_TOKENS)  # the kept column, no token list
    assert asked == [["ends_with_end"]]
    monkeypatch.undo()
    # The same end tokens in another order are not the tuple ingest kept: the parts' token lists are read,
    # and they give what the kept column gave.
    same_tokens_reordered = DEFAULT_END_TOKENS[::-1]
    asked.clear()
    monkeypatch.setattr(store, "read_keys", lambda keys, cols: asked.append(cols) or real(keys, cols))
    parts = row_ends(store, page.head(49), DEFAULT_PAD_TOKENS, same_tokens_reordered)
    monkeypatch.undo()
    assert asked and "response_tokens" in asked[0]
    assert kept.head(49).equals(parts) and kept.get_column(ENDS).sum() > 0


def test_grpo010_grid_ends_come_with_their_rows(grpo, tmp_path, monkeypatch):
    """The grid's end column (``data.responses_grid.grid_rows``) of the first block sorted by reward over
    every step (read from what ingest kept of that sort), of one step's (read from its row groups) and of a
    search's over every step (from the top file of the default order, beside its texts) says
    "truncated" of each record TRL's ``ends_with_eos`` calls cut and "ended" of the others; with the board's
    default end tokens it comes with the rows (the kept ``ends_with_end``), no second read of their row
    groups, and the rows the grid gets carry no ``ends_with_end``. With other end tokens the rows' tokens
    are read: the same tokens in another order say the same."""
    from dataclasses import replace

    from data import responses, responses_grid, signals
    from data.config import DEFAULT_END_TOKENS, load_settings
    from data.views.responses import ResponsesView

    store, records = grpo
    want = {
        sample_id(r["file"], r["line"]): "truncated" if not r["ends_with_eos"] else "ended" for r in records
    }
    settings = load_settings(environ={}, root=str(tmp_path), cache_dir=str(tmp_path / "cache"))
    steps = store.steps().get_column("step").to_list()
    queries = (
        {"step": ["all"], "sort": ["reward"]},
        {"step": ["25"], "sort": ["reward"]},
        {"step": ["all"], "q": ["a"]},
    )
    views = [ResponsesView.from_query({"run": [RUN], **q})[0] for q in queries]

    def grid(s):
        responses.clear_caches()
        return [responses_grid.grid_rows(store, v, steps, s, 0, 100)[0] for v in views]

    def no_read(*a, **k):
        raise AssertionError("read their row groups again")

    monkeypatch.setattr(signals, "_row_ends", no_read)
    kept = grid(settings)
    monkeypatch.undo()
    other = grid(replace(settings, end_tokens=DEFAULT_END_TOKENS[::-1]))
    assert [len(rows) for rows in kept] == [100, 16, 100]
    assert {r["end"] for rows in kept for r in rows} == {"ended", "truncated"}
    for rows in (*kept, *other):
        assert all(r["end"] == want[r["sample_id"]] and "ends_with_end" not in r for r in rows)


def test_grpo004_learning_signal_of_each_group_by_hand(grpo):
    """The learning-signal column (``data.metrics.group.learning_signal``) of every response is whether the
    rewards of its group (step, group_id) in the files differ: the 11 groups of 4 equal rewards (the README's
    44 records of advantage exactly 0) have none; the prompt grid's column says so in words for each row."""
    import polars as pl

    from components.prompt_views import SIGNAL_TEXT, Column, history_rows
    from data.metrics import label
    from data.metrics.group import with_advantage
    from data.prompts import history

    store, records = grpo
    rewards: dict = {}
    for r in records:
        rewards.setdefault((r["step"], r["group_id"]), []).append(r["reward"])
    want = {sample_id(r["file"], r["line"]): len(set(rewards[r["step"], r["group_id"]])) > 1 for r in records}
    flat_ids = {k for k, v in want.items() if not v}
    assert len(flat_ids) == 24 and sum(r["advantage"] == 0 for r in records) == 44
    assert all(r["advantage"] == 0 for r in records if sample_id(r["file"], r["line"]) in flat_ids)
    rows = with_advantage(store.scan(["sample_id", "step", "reward", "prompt_key", "group_id"]), True)
    got = dict(rows.select("sample_id", "learning_signal").collect().iter_rows())
    assert got == want
    flat = next(r for r in records if not want[sample_id(r["file"], r["line"])])
    key = (
        store.scan(["sample_id", "prompt_key"])
        .filter(pl.col("sample_id") == sample_id(flat["file"], flat["line"]))
        .collect()
        .item(0, "prompt_key")
    )
    hist = history(store, key)
    cols = [Column("learning_signal", label("learning_signal"), "text")]
    cells = history_rows(hist.to_dicts(), cols, [""] * hist.height, [None] * hist.height)
    assert {c["learning_signal"] for c in cells} == {SIGNAL_TEXT[False]}


def _group_records(records, step, group_id):
    return [r for r in records if r["step"] == step and r["group_id"] == group_id]


def test_grpo005_a_group_side_by_side_by_hand(grpo):
    """``/prompts?run=R&prompt=KEY&step=S&group=G``'s data: step 25's group 99 (four rewards of 2: no learning
    signal) and group 96 (rewards 1, 2, 2, 1.5), each completion with the file's reward, advantage, text
    (its end token, a pad, removed) and TRL's ends_with_eos; mean, sample std and spread by hand; the
    group is found by prompt and step without a group id too, and an unknown group is empty."""
    import statistics

    import polars as pl

    from data.config import DEFAULT_END_TOKENS
    from data.prompts import group_views, prompt_groups

    store, records = grpo
    for gid, signal in ((99, False), (96, True)):
        recs = _group_records(records, 25, gid)
        first = sample_id(recs[0]["file"], recs[0]["line"])
        keys = store.scan(["sample_id", "prompt_key"]).collect()
        key = keys.filter(pl.col("sample_id") == first).item(0, "prompt_key")
        (g,) = group_views(store, key, 25, str(gid), DEFAULT_PAD_TOKENS, DEFAULT_END_TOKENS)
        rewards = [r["reward"] for r in recs]
        assert (g.step, g.group_id, g.n, g.total, g.signal, g.recomputed) == (
            25,
            str(gid),
            4,
            4,
            signal,
            False,
        )
        assert g.mean == pytest.approx(statistics.mean(rewards), abs=1e-12)
        assert g.std == pytest.approx(statistics.stdev(rewards), abs=1e-12)
        assert g.spread == max(rewards) - min(rewards) and g.prompt == recs[0]["prompt"].strip()
        by_id = {sample_id(r["file"], r["line"]): r for r in recs}
        assert {c["sample_id"] for c in g.cards} == set(by_id)
        assert [c["reward"] for c in g.cards] == sorted(rewards, reverse=True)  # highest first
        for c in g.cards:
            rec = by_id[c["sample_id"]]
            assert c["advantage"] == pytest.approx(rec["advantage"], rel=1e-12)
            assert c["text"] == rec["response"].replace("<|endoftext|>", "")
            assert c["end"] == ("ended" if rec["ends_with_eos"] else "truncated")
            assert c["source_line"] == f"{rec['file']}:{rec['line']}"
            kept = [t for t in rec["response_tokens"] if t not in DEFAULT_PAD_TOKENS]  # pads excluded
            assert (c["length"], c["length_unit"]) == (len(kept), "tokens")
        assert [
            x.group_id for x in group_views(store, key, 25, None, DEFAULT_PAD_TOKENS, DEFAULT_END_TOKENS)
        ] == [str(gid)]
        assert group_views(store, key, 25, "7", DEFAULT_PAD_TOKENS, DEFAULT_END_TOKENS) == []
        assert group_views(store, key, 3, None, DEFAULT_PAD_TOKENS, DEFAULT_END_TOKENS) == []
        assert prompt_groups(store, key) == [{"step": 25, "group_id": str(gid), "n": 4, "signal": signal}]


def test_grpo006_group_urls_and_links():
    """The group view's URL keeps prompt, step and group (and drops them, with a notice, where they name no
    group); the links "its group" of a response row and of a prompt's groups."""
    from data.views import links
    from data.views.prompts import PromptsView

    key = "1b3d14969cab0edb"
    view, notes = PromptsView.from_query({"run": [RUN], "prompt": [key], "step": ["25"], "group": ["99"]})
    assert notes == [] and view.to_query() == f"?run={RUN}&prompt={key}&step=25&group=99"
    view, notes = PromptsView.from_query({"run": [RUN], "step": ["25"], "group": ["99"]})
    assert (view.step, view.group) == (None, None)
    assert notes == ["Ignored step= and group=: they name a group of one prompt (prompt=KEY)."]
    view, notes = PromptsView.from_query({"run": [RUN], "prompt": [key], "group": ["99"]})
    assert view.group is None and notes == ["Ignored group='99': a group is of one step (step=S)."]
    _, notes = PromptsView.from_query({"prompt": [key], "step": ["25"], "group": ["x" * 201]})
    assert notes == ["Ignored group=…: a group id of more than 200 characters."]
    row = {"prompt_key": key, "step": 25, "group_id": 99}
    assert links.group_of(RUN, row, "/p") == f"/p/prompts?run={RUN}&prompt={key}&step=25&group=99"
    assert links.group_of(RUN, {"prompt_key": key, "step": 0}) == f"/prompts?run={RUN}&prompt={key}&step=0"
    assert links.group_of(RUN, None) is None and links.group_of(RUN, {"step": 3}) is None
    found = [{"step": 25, "group_id": "99"}, {"step": 2, "group_id": None}]
    assert links.groups(RUN, key, found) == [
        f"/prompts?run={RUN}&prompt={key}&step=25&group=99",
        f"/prompts?run={RUN}&prompt={key}&step=2",
    ]


def test_grpo007_group_cards_are_text_side_by_side():
    """The group view's builder: one card per completion in a grid of cards at least CARD_MIN_PX wide (four
    to a row at 1440 px), its text as the child of a <pre> (never markup), the zero-spread group flagged,
    a badge for a truncated completion and none where the end cannot be told."""
    from components.group_view import CARD_MIN_PX, group_page, group_section
    from data.prompts import Group

    cards = [
        {"sample_id": f"s-{i}", "source_line": f"rank0.jsonl:{i}", "reward": 1.0, "advantage": 0.0,
         "end": end, "length": 3, "length_unit": "tokens", "text": "<script>alert(1)</script> **bold**"}
        for i, end in enumerate(["ended", "truncated", None, "ended"])
    ]  # fmt: skip
    g = Group(25, "99", 4, 1.0, 0.0, 0.0, False, False, cards, 4, "the staff")
    sec = group_section(g, ["/t"] * 4, "grp-0")
    grid = sec.children[-1]
    assert grid.style["gridTemplateColumns"] == f"repeat(auto-fill, minmax({CARD_MIN_PX}px, 1fr))"
    assert 4 * CARD_MIN_PX < 1440 - 40 < 5 * CARD_MIN_PX  # four to a row at 1440 px, page padding aside
    assert len(grid.children) == 4
    body = grid.children[1].children.children
    assert body[2].children == cards[1]["text"] and type(body[2]).__name__ == "Pre"
    assert body[0].children[1].children == "truncated" and body[0].children[1].color == "warning"
    assert grid.children[2].children.children[0].children[1] is None  # cannot be told: no badge
    assert sec.children[0].children[1].children == "no learning signal: every reward equal"
    page = group_page([], [], "/back", (25, "7"), {"back": "b", "prompt": "p", "groups": "g"})
    assert "This prompt has no response at step 25, group '7'." in str(page)


def test_grpo008_responses_columns_of_a_run_with_groups(grpo):
    """A run with groups shows by default its advantage, group and end beside step, reward, KL sum and
    length (in the table's order); the chooser's value reads back as the URL's ``cols``: None for the
    defaults in any order, else the run's columns among it in the table's order."""
    from data import response_columns as rc
    from data.responses import table_spec
    from data.views.responses import ResponsesView

    store, _ = grpo
    default = ("step", "reward", "response_length", "kl_sum", "advantage", "group_id", "end")
    assert rc.has_groups(store) and rc.shown(store, ResponsesView(run=RUN)) == default
    assert "advantage" in table_spec(store).signed  # the file's advantage, coloured by sign
    assert [c for c, _ in rc.column_choices(store)][-3:] == ["group_id", "ends_with_eos", "end"]
    assert rc.chosen(store, list(reversed(default))) is None and rc.chosen(store, []) is None
    assert rc.chosen(store, ["end", "reward", "zzz"]) == ("reward", "end")
    view = ResponsesView(run=RUN, cols=("reward", "end"))
    assert rc.shown(store, view) == ("reward", "end")
    assert rc.chooser_value(store, view, ["end", "reward"]) is None
    assert rc.chooser_value(store, view, list(default)) == ["reward", "end"]


def test_grpo030_its_group_only_on_runs_with_groups(grpo, fixtures_dir, tmp_path):
    """ "its group" (responses and token pages) links a GRPO response to its group; on TRL PPO, whose files
    have no group_id and answer each prompt once per step (checked by hand below), there is no group to show
    and no link."""
    from data.prompts import answers_in_groups, group_link

    store, records = grpo
    row = store.scan(["sample_id", "step", "prompt_key", "group_id"]).head(1).collect().to_dicts()[0]
    assert answers_in_groups(store)
    href = group_link(store, RUN, row)
    assert href == f"/prompts?run={RUN}&prompt={row['prompt_key']}&step={row['step']}&group={row['group_id']}"

    src = fixtures_dir / "trl-ppo-small"
    if not src.is_dir():
        pytest.skip(f"fixture trl-ppo-small is not in {fixtures_dir}")
    seen = []
    for f in sorted(src.glob("*.jsonl")):
        with open(f, encoding="utf-8") as fh:
            seen += [(r["step"], r["prompt"]) for r in map(json.loads, fh) if "group_id" not in r]
    assert seen and len(set(seen)) == len(seen)  # by hand: once per (step, prompt), no group_id
    ppo = open_store(ingest_run(src, tmp_path / "cache", DEFAULT_PAD_TOKENS).store_dir)
    first = ppo.scan(["sample_id", "step", "prompt_key"]).head(1).collect().to_dicts()[0]
    assert not answers_in_groups(ppo) and group_link(ppo, "trl-ppo-small", first) is None
    assert group_link(store, RUN, None) is None
