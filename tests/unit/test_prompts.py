"""Prompts across training on hand-made runs: prompt key, early/late and trend, never beating the reference,
groups and advantages, the list's filter/sort/page, one prompt's page, and the shared fixtures. (The view
state: tests/unit/views/test_prompts_view.py; the builders: tests/unit/components/test_prompt_views.py.)"""

from __future__ import annotations

import json
import math

import polars as pl
import pytest

from data import prompts
from data.ingest import ingest_run
from data.metrics.group import TREND_EFFECT, trend_expr, with_advantage
from data.metrics.response import prompt_key_text
from data.store import open_store
from data.views.prompts import PROMPT_KEY_RE, PromptsView

PADS = ("<pad>", "<|endoftext|>")


def _ingest(tmp_path, files: dict[str, list[dict]], name: str = "run"):
    """Write ``{file: records}`` as JSON lines under ``tmp_path/runs/name``, ingest, return the store."""
    run = tmp_path / "runs" / name
    run.mkdir(parents=True, exist_ok=True)
    for fname, records in files.items():
        (run / fname).write_text("".join(json.dumps(r) + "\n" for r in records))
    res = ingest_run(run, tmp_path / "cache", PADS)
    return open_store(res.store_dir)


def _rec(prompt, step, reward, ref=None, **extra):
    r = {"prompt": prompt, "response": f"answer {step} {reward}", "reward": reward, "step": step}
    if ref is not None:
        r["ref_reward"] = ref
        r["ref_response"] = "reference answer"
    r.update(extra)
    return r


def _row(table: pl.DataFrame, preview: str) -> dict:
    rows = table.filter(pl.col("prompt_preview") == preview).to_dicts()
    assert len(rows) == 1, preview
    return rows[0]


# ---- prompt key ------------------------------------------------------------------------------------------


def test_prompts001_prompt_key_ignores_pads_and_surrounding_whitespace(tmp_path):
    """Pads anywhere and whitespace around the prompt do not split a prompt; inner whitespace does."""
    texts = pl.DataFrame(
        {"prompt": ["<pad><pad>  Hello world \n", "Hello world", "Hello<|endoftext|> world"]}
    )
    assert texts.select(prompt_key_text(PADS)).to_series().to_list() == ["Hello world"] * 3
    store = _ingest(
        tmp_path,
        {
            "a.jsonl": [
                _rec("<pad><pad>  Hello world \n", 1, 1.0),
                _rec("Hello world", 2, 1.0),
                _rec("Hello  world", 3, 1.0),
            ]
        },
    )
    keys = store.scalars().sort("line").get_column("prompt_key").to_list()
    assert keys[0] == keys[1] != keys[2]
    assert PROMPT_KEY_RE.fullmatch(keys[0])


# ---- early / late and trend ------------------------------------------------------------------------------


def test_prompts002_early_and_late_quarters_of_its_steps(tmp_path):
    """Early/late are the first and last ceil(k/4) of the prompt's own distinct steps (k = 8, 5, 2)."""
    recs = [_rec("eight", s, float(s)) for s in range(1, 9)]
    recs += [_rec("five", s, float(s)) for s in (10, 20, 30, 40, 50)]
    recs += [_rec("two", 3, 1.0), _rec("two", 3, 3.0), _rec("two", 7, 5.0)]
    table = prompts.prompt_table(_ingest(tmp_path, {"a.jsonl": recs}))
    eight = _row(table, "eight")
    assert (eight["n_steps"], eight["reward_early"], eight["reward_late"]) == (8, 1.5, 7.5)
    five = _row(table, "five")  # ceil(5 / 4) = 2 steps at each end
    assert (five["reward_early"], five["reward_late"]) == (15.0, 45.0)
    two = _row(table, "two")  # both responses of step 3 are early
    assert (two["n_steps"], two["n_responses"], two["reward_early"], two["reward_late"]) == (2, 3, 2.0, 5.0)
    assert two["reward_delta"] == 3.0


def test_prompts003_trend_thresholds():
    """improved / regressed beyond ±threshold, flat within (the boundary is flat); never beats the
    reference takes precedence; one step has no trend; a missing delta has none either."""
    df = pl.DataFrame(
        {
            "reward_delta": [0.3, -0.3, 0.2, -0.2, 0.0, 0.5, None, None],
            "n_steps": [5, 5, 5, 5, 5, 5, 1, 3],
            "never_beats": [False, False, False, False, False, True, False, False],
        }
    )
    got = df.select(trend_expr(0.2)).to_series().to_list()
    assert got == ["improved", "regressed", "flat", "flat", "flat", "never", "single", None]


def test_prompts004_trend_threshold_is_a_fraction_of_the_reward_std(tmp_path):
    """The threshold is TREND_EFFECT x the run's reward standard deviation (ddof 1), and classifies."""
    recs = [_rec("up", s, r) for s, r in ((1, 0.0), (2, 0.0), (3, 1.0), (4, 1.0))]
    recs += [_rec("same", s, 0.5) for s in (1, 2, 3, 4)]
    store = _ingest(tmp_path, {"a.jsonl": recs})
    sd = pl.Series([0.0, 0.0, 1.0, 1.0] + [0.5] * 4).std()
    assert prompts.run_trend_threshold(store) == pytest.approx(TREND_EFFECT * sd)
    table = prompts.prompt_table(store)
    assert _row(table, "up")["trend"] == "improved"
    assert _row(table, "same")["trend"] == "flat"


# ---- never beats the reference ---------------------------------------------------------------------------


def test_prompts005_never_beats_the_reference(tmp_path):
    """A prompt whose responses lose or tie at every step where both rewards exist never beats the
    reference; one win is enough to leave the preset; without any reference reward it is unknown."""
    recs = [
        _rec("loser", 1, 0.0, 1.0),
        _rec("loser", 2, 1.0, 1.0),  # a tie is not a win
        _rec("loser", 3, 2.0),  # no reference at this step: does not count
        _rec("winner", 1, 0.0, 1.0),
        _rec("winner", 2, 2.0, 1.0),
        _rec("noref", 1, 0.0),
        _rec("noref", 2, 0.0),
    ]
    store = _ingest(tmp_path, {"a.jsonl": recs})
    table = prompts.prompt_table(store)
    loser, winner, noref = (_row(table, p) for p in ("loser", "winner", "noref"))
    assert (loser["never_beats"], loser["trend"], loser["n_both"], loser["win_rate"]) == (
        True,
        "never",
        2,
        0.0,
    )
    assert loser["gain_mean"] == pytest.approx(-0.5)
    assert (winner["never_beats"], winner["win_rate"]) == (False, 0.5)
    assert noref["never_beats"] is False and noref["win_rate"] is None
    never = prompts.filter_prompts(table, PromptsView(view="never"))
    assert never.get_column("prompt_preview").to_list() == ["loser"]
    assert prompts.overview(table)["never"] == 1


# ---- groups and advantages -------------------------------------------------------------------------------


def test_prompts006_groups_by_prompt_within_a_step(tmp_path):
    """Without group_id, responses of one step sharing a prompt form a group; single responses do not;
    a group whose rewards are all equal has zero spread, and its step's share says so."""
    recs = [
        _rec("g", 1, 1.0),
        _rec("g", 1, 1.0),
        _rec("h", 1, 0.0),
        _rec("h", 1, 2.0),
        _rec("solo", 1, 5.0),
        _rec("g", 2, 1.0),
        _rec("h", 2, 3.0),
    ]
    store = _ingest(tmp_path, {"a.jsonl": recs})
    steps = store.steps().select("step", "n_groups", "zero_spread_share").to_dicts()
    assert steps == [
        {"step": 1, "n_groups": 2, "zero_spread_share": 0.5},
        {"step": 2, "n_groups": 0, "zero_spread_share": None},
    ]
    g = _row(prompts.prompt_table(store), "g")
    assert (g["n_groups"], g["zero_spread_groups"]) == (1, 1)


def test_prompts007_groups_by_group_id_across_rank_files(tmp_path):
    """With group_id, a group is (step, group_id) even when its responses sit in two rank files."""
    r0 = [_rec("p", 1, 0.0, group_id=7), _rec("p", 1, 0.0, group_id=8)]
    r1 = [_rec("p", 1, 2.0, group_id=7), _rec("p", 1, 0.0, group_id=8)]
    store = _ingest(tmp_path, {"rank0.jsonl": r0, "rank1.jsonl": r1})
    steps = store.steps().select("n_groups", "zero_spread_share").row(0)
    assert steps == (2, 0.5)  # group 7 has spread 2, group 8 spread 0
    key = store.scalars().item(0, "prompt_key")
    hist = prompts.history(store, key)
    assert hist.get_column("group_id").to_list() == [7, 7, 8, 8]
    assert hist.get_column("group_spread").to_list() == [2.0, 2.0, 0.0, 0.0]
    assert hist.get_column("zero_spread").to_list() == [False, False, True, True]


def test_prompts008_recomputed_advantages():
    """(reward − group mean) / group std with the sample std; 0 when all equal; null outside groups."""
    rows = pl.LazyFrame(
        {
            "step": [1, 1, 1, 1, 1, 2],
            "prompt_key": ["a", "a", "a", "b", "b", "a"],
            "reward": [1.0, 2.0, 3.0, 4.0, 4.0, 9.0],
        }
    )
    got = with_advantage(rows, from_file=False).collect()
    assert got.get_column("advantage").to_list()[:5] == pytest.approx([-1.0, 0.0, 1.0, 0.0, 0.0])
    assert got.get_column("advantage").to_list()[5] is None
    assert got.get_column("advantage_recomputed").all()


def test_prompts009_file_advantages_are_kept(tmp_path):
    """A run with an ``advantage`` column shows the file's values, not recomputed ones."""
    recs = [_rec("p", 1, 0.0, advantage=-0.7), _rec("p", 1, 1.0, advantage=0.7)]
    store = _ingest(tmp_path, {"a.jsonl": recs})
    hist = prompts.history(store, store.scalars().item(0, "prompt_key"))
    assert hist.get_column("advantage").to_list() == [0.7, -0.7]  # sorted by reward, highest first
    assert not hist.get_column("advantage_recomputed").any()


def test_prompts010_recomputed_matches_trl_grpo(fixtures_dir, tmp_path):
    """On the GRPO fixture, recomputing from rewards gives TRL's advantages (TRL adds 1e-4 to the std)."""
    res = ingest_run(fixtures_dir / "trl-grpo-small", tmp_path / "cache", PADS)
    scalars = open_store(res.store_dir).scalars()
    got = with_advantage(scalars.lazy().select("step", "prompt_key", "group_id", "reward"), False)
    joined = got.collect().with_columns(file=scalars.get_column("advantage"))
    diff = joined.select((pl.col("advantage") - pl.col("file")).abs().max()).item()
    assert diff < 1e-3


# ---- one prompt ------------------------------------------------------------------------------------------


def test_prompts011_history_first_and_latest(tmp_path):
    """A prompt's responses come in step order with step medians for length ratio; first and latest are
    the first responses (by file line) of its earliest and latest step; texts lose their pads."""
    recs = [
        _rec("p", 3, 1.0, 0.0),
        _rec("q", 1, 9.0),
        _rec("p", 1, 0.5, 1.0),
        _rec("p", 3, 2.0, 0.0),
    ]
    recs[2]["response"] = "first<pad><pad>"
    store = _ingest(tmp_path, {"a.jsonl": recs})
    key = store.scalars().item(0, "prompt_key")
    hist = prompts.history(store, key)
    assert hist.get_column("step").to_list() == [1, 3, 3]
    assert hist.get_column("reward").to_list() == [0.5, 2.0, 1.0]
    first, latest = prompts.first_and_latest(hist)
    assert (first["step"], first["line"], latest["step"], latest["line"]) == (1, 3, 3, 1)
    text = prompts.texts(store, first)
    assert text == {"prompt": "p", "response": "first", "ref_response": "reference answer"}
    per_step = prompts.history_by_step(hist)
    assert per_step.get_column("reward").to_list() == [0.5, 1.5]
    assert prompts.history(store, "0" * 16).height == 0


# ---- list: filter, sort, page ----------------------------------------------------------------------------


def test_prompts012_filter_sort_page(tmp_path):
    """Trend and min-steps filters, sort with nulls last and first-seen ties, pages clamped to the end."""
    recs = [_rec(f"p{i}", s, float(i * s)) for i in range(5) for s in range(1, i + 2)]
    table = prompts.prompt_table(_ingest(tmp_path, {"a.jsonl": recs}))
    assert table.height == 5
    view = PromptsView(sort="n_steps", order="desc")
    assert prompts.filter_prompts(table, view).get_column("prompt_preview").to_list() == [
        "p4",
        "p3",
        "p2",
        "p1",
        "p0",
    ]
    by_delta = prompts.filter_prompts(table, PromptsView(sort="reward_delta"))
    assert by_delta.get_column("prompt_preview").to_list()[-1] == "p0"  # one step: no delta, last
    assert prompts.filter_prompts(table, PromptsView(min_steps=3)).height == 3
    assert prompts.filter_prompts(table, PromptsView(trend="single")).height == 1
    rows, page, pages = prompts.page_of(prompts.filter_prompts(table, view), 9, size=2)
    assert (page, pages, rows.get_column("prompt_preview").to_list()) == (3, 3, ["p0"])


def test_prompts013_search_over_the_full_prompt(tmp_path):
    """The text search is a regular expression over the whole prompt (pads removed), not its preview."""
    long = "x " * 200 + "needle"
    store = _ingest(tmp_path, {"a.jsonl": [_rec(long, 1, 1.0), _rec("haystack", 1, 1.0)]})
    hits = prompts.search_prompts(store, "needle$")
    assert len(hits) == 1
    assert prompts.search_prompts(store, "(?i)HAY") != hits
    from data.queries import QueryError

    with pytest.raises(QueryError):
        prompts.search_prompts(store, "(")


# ---- shared fixtures -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("run", "n_prompts", "max_steps", "has_groups"),
    [
        ("rlloggingboard-eval-poem", 128, 24, False),
        ("trl-ppo-small", 400, 1, False),
        ("trl-grpo-small", 100, 1, True),
    ],
)
def test_prompts016_fixtures(fixtures_dir, tmp_path, run, n_prompts, max_steps, has_groups):
    """The poem's 128 prompts recur at all 24 steps; TRL prompts appear in one step; GRPO has groups of 4."""
    store = open_store(ingest_run(fixtures_dir / run, tmp_path / "cache", PADS).store_dir)
    table = prompts.prompt_table(store)
    info = prompts.overview(table)
    assert (info["prompts"], info["max_steps"]) == (n_prompts, max_steps)
    steps = store.steps()
    assert (int(steps.get_column("n_groups").max()) == 4) is has_groups
    if has_groups:
        # Counted from the files directly: groups (group_id) whose 4 rewards are all equal.
        raw = pl.concat(
            pl.read_ndjson(f).select("group_id", "reward") for f in (fixtures_dir / run).glob("*.jsonl")
        )
        equal = raw.group_by("group_id").agg(pl.col("reward").n_unique() == 1).get_column("reward").sum()
        assert equal == 6
        assert int(table.get_column("zero_spread_groups").sum()) == equal
        share = steps.get_column("zero_spread_share")
        assert math.isclose(float((share * steps.get_column("n_groups")).sum()), equal)


def test_prompts021_list_page_and_its_columns(tmp_path):
    """A page of the list says which prompts it shows of how many; optional columns only where the run
    has values (no reference: no gain, no win rate); a page past the end shows the last, with a notice."""
    recs = [_rec(f"q{i}", s, float(s)) for i in range(3) for s in (1, 2)]
    store = _ingest(tmp_path, {"a.jsonl": recs})
    listing = prompts.prompt_list(store, PromptsView(run="run"))
    assert (listing.matching, listing.first_shown, listing.last_shown, listing.pages) == (3, 1, 3, 1)
    keys = [c[0] for c in listing.columns]
    assert "gain_mean" not in keys and "win_rate" not in keys and keys[:2] == ["prompt_preview", "first_step"]
    late = prompts.prompt_list(store, PromptsView(run="run", page=4))
    assert late.page == 1 and late.notices == ["Page 4 is past the end: showing page 1 of 1."]
    none = prompts.prompt_list(store, PromptsView(run="run", trend="regressed"))
    assert (none.matching, none.first_shown, none.last_shown) == (0, 0, 0)


def test_prompts022_one_prompt_detail(tmp_path):
    """One prompt: its responses with the grid's columns, first and latest response, groups and the note
    on where advantages come from; an unknown key gives none."""
    recs = [_rec("q", 1, r, ref=0.5) for r in (0.0, 1.0)] + [_rec("q", 2, r, ref=0.5) for r in (1.0, 1.0)]
    store = _ingest(tmp_path, {"a.jsonl": recs})
    key = prompts.prompt_table(store).item(0, "prompt_key")
    detail = prompts.prompt_detail(store, key)
    assert detail.total == 4 and detail.chart.points.columns == ["step", "reward", "sample_id"]
    assert detail.chart.bin_steps == 0 and detail.chart.means.get_column("reward").to_list() == [0.5, 1.0]
    assert (detail.first["step"], detail.latest["step"]) == (1, 2) and detail.has_groups and detail.recomputed
    assert [c[0] for c in detail.columns][:5] == ["step", "sample_id", "reward", "ref_reward", "reward_gain"]
    assert "advantage (recomputed)" in [c[1] for c in detail.columns]
    assert prompts.group_note(detail).endswith("0 when all rewards are equal.")
    assert prompts.prompt_detail(store, "0" * 16) is None
    assert prompts.prompt_detail(store, key, limit=3).shown == 3


def test_prompts023_history_block_sorts_and_pages(tmp_path):
    """The grid's block of one prompt's responses: the history's order unsorted, one column sorted on the
    server (ties in the history's order; the file:line column by line as a number), a slice, a count."""
    recs = [_rec("q", 1, r) for r in (0.0, 1.0)] + [_rec("q", 2, r) for r in (1.0, 1.0)]
    store = _ingest(tmp_path, {"a.jsonl": recs})
    key = prompts.prompt_table(store).item(0, "prompt_key")

    def lines(sort=None, desc=False, start=0, end=100, limit=prompts.HISTORY_LIMIT):
        df, count, columns = prompts.history_block(store, key, sort, desc, start, end, limit)
        assert columns[0] == ("step", "step", "step")
        return df.get_column("line").to_list(), count

    assert lines() == ([2, 1, 3, 4], 4)  # step, then reward (highest first), then sample id
    assert lines("reward") == ([1, 2, 3, 4], 4)  # 0.0 first, the three 1.0 in the history's order
    assert lines("reward", desc=True) == ([2, 3, 4, 1], 4)
    assert lines("sample_id", desc=True) == ([4, 3, 2, 1], 4)
    assert lines("sample_id", start=1, end=3) == ([2, 3], 4)
    assert lines("no_such_column") == ([2, 1, 3, 4], 4)
    assert lines(limit=3) == ([2, 1, 3], 3)  # only the responses the grid shows
    assert prompts.history_block(store, "0" * 16, None, False, 0, 100)[1] == 0  # an unknown prompt


def test_prompts024_reward_chart_bins_beyond_the_limit():
    """Up to the limit, every response and the means per step; beyond, bins of consecutive steps with each
    bin's lowest and highest response (ties by sample id, non-finite rewards left out) and its means."""
    nan = float("nan")
    rows = pl.DataFrame(
        {
            "step": [1, 2, 2, 3, 3, 5, 7, 7],
            "reward": [0.0, 2.0, nan, 1.0, 0.0, 4.0, None, 3.0],
            "ref_reward": [1.0, None, None, None, None, None, None, 2.0],
            "sample_id": ["a", "b", "c", "d", "z", "e", "f", "g"],
        }
    )
    exact = prompts.reward_chart(rows, limit=8, bins=3)
    assert exact.bin_steps == 0 and exact.points.height == 8 and exact.total == 8
    assert exact.means.get_column("x").to_list() == [1.0, 2.0, 3.0, 5.0, 7.0]
    assert exact.means.get_column("reward").to_list() == [0.0, 2.0, 0.5, 4.0, 3.0]

    chart = prompts.reward_chart(rows, limit=7, bins=3)  # steps 1..7 in 3 bins: 1-3, 4-6, 7
    assert chart.bin_steps == 3 and chart.total == 8
    means = chart.means.to_dict(as_series=False)
    assert means["first"] == [1, 4, 7] and means["last"] == [3, 6, 7] and means["x"] == [2.0, 5.0, 7.0]
    assert means["n"] == [5, 1, 2]
    assert means["reward"] == [0.75, 4.0, 3.0]  # (0 + 2 + 1 + 0) / 4: NaN left out
    assert means["ref_reward"] == [1.0, None, 2.0]
    got = {(r["kind"], r["first"]): (r["step"], r["sample_id"]) for r in chart.points.to_dicts()}
    assert got == {
        ("lowest", 1): (1, "a"),  # a and z both 0.0: the first sample id
        ("highest", 1): (2, "b"),
        ("lowest", 4): (5, "e"),
        ("highest", 4): (5, "e"),
        ("lowest", 7): (7, "g"),  # f has no reward
        ("highest", 7): (7, "g"),
    }


def test_prompts031_trend_threshold_of_rewards_whose_squares_overflow():
    """Rewards near the largest float (a broken or hostile file): the threshold is still TREND_EFFECT x
    their standard deviation, not 0 (which would call every prompt whose reward rose "improved"). By
    hand: 1e200 x (1, -1, 3) has mean 1e200, deviations 1e200 x (0, -2, 2), variance 8e400 / 2, sd 2e200."""
    from data.metrics.group import trend_threshold

    lf = pl.LazyFrame({"reward": [1e200, -1e200, 3e200, float("nan")]})
    assert trend_threshold(lf) == pytest.approx(TREND_EFFECT * 2e200, rel=1e-12)
    huge = pl.LazyFrame({"reward": [1.7e308, 1.7e308, -1.7e308]})  # their sum overflows
    assert trend_threshold(huge) == pytest.approx(TREND_EFFECT * 1.7e308 * math.sqrt(4 / 3), rel=1e-12)
    assert trend_threshold(pl.LazyFrame({"reward": [1.0, 2.0, 3.0]})) == pytest.approx(TREND_EFFECT * 1.0)
