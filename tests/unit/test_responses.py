"""Responses page data and components: view state codec, filter and sort queries, paging, grid columns,
text panel. The expected rows are worked out by hand from the 12 responses written below."""

from __future__ import annotations

import json

import polars as pl
import pytest
from dash import html

from components.tables import column_defs, column_kind, grid_sort, sort_state, summary_line, text_panel
from data.ingest import ingest_run
from data.queries import QueryError
from data.responses import (
    json_rows,
    ordered,
    page_rows,
    run_steps,
    sample_texts,
    sortable_columns,
    table_columns,
)
from data.store import open_store, sample_id
from data.views.codec import parse_search
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
    order = ordered(store, flt_view.response_filter(run_steps(store)), sort, descending)
    ids = store.scalars()[order.positions].get_column("line").to_list()
    return ids


V1 = ResponsesView(run="hand", step=1)


# ---- view state ------------------------------------------------------------------------------------------


def test_responses001_defaults_give_empty_query():
    """No parameter: the defaults (last step, reward descending) and an empty query string."""
    view, notices = ResponsesView.from_query({})
    assert view == ResponsesView() and notices == []
    assert view.to_query() == ""
    assert ResponsesView(run="r").to_query() == "?run=r"


def test_responses002_query_round_trip():
    """Every field survives to_query -> parse -> from_query; defaults are left out of the URL."""
    view = ResponsesView(
        run="my run",
        step=ALL_STEPS,
        sort="kl_mean",
        order="asc",
        reward_min=0.5,
        reward_max=1.0,
        gain_min=-1.0,
        gain_max=2.5,
        kl_min=0.001,
        kl_max=1e-05,
        len_min=3.0,
        len_max=40.0,
        q="(?i)the\\s+end",
        loses=True,
        sample="abc-1",
    )
    query = view.to_query()
    back, notices = ResponsesView.from_query(parse_search(query))
    assert back == view and notices == []
    assert "order=desc" not in ResponsesView(run="r", sort="kl_mean").to_query()
    assert ResponsesView(run="r", sort="kl_mean", step=3).to_query() == "?run=r&step=3&sort=kl_mean"


def test_responses003_bad_values_fall_back_with_notices():
    """Malformed values fall back to the default, one readable notice each; unknown keys are noticed."""
    query = {
        "run": ["r"],
        "step": ["x"],
        "order": ["up"],
        "reward_min": ["abc"],
        "kl_max": ["inf"],
        "loses": ["maybe"],
        "sort": ["zzz"],
        "colour": ["red"],
    }
    view, notices = ResponsesView.from_query(query, steps=[1, 2], sortable=["reward", "kl_mean"])
    assert view == ResponsesView(run="r")
    assert len(notices) == 7
    assert "Ignored unknown parameter 'colour'." in notices
    assert ResponsesView.from_query({"run": "r", "live": "1"}) == (ResponsesView(run="r"), [])  # the shell's
    assert any("step='x'" in n for n in notices) and any("sort='zzz'" in n for n in notices)


def test_responses004_step_context_and_aliases():
    """A step the run lacks falls back to the last step; step=all and sort aliases (kl -> kl_mean) parse."""
    view, notices = ResponsesView.from_query({"step": "7"}, steps=[1, 2, 3])
    assert view.step is None and "showing the last step (3)" in notices[0]
    assert view.resolved_step([1, 2, 3]) == 3
    view, _ = ResponsesView.from_query({"step": "ALL", "sort": "kl"}, steps=[1, 2], sortable=["kl_mean"])
    assert view.step == ALL_STEPS and view.resolved_step([1, 2]) is None and view.sort == "kl_mean"


def test_responses005_invalid_regex_is_kept_but_not_applied():
    """An invalid regex stays in the view (the search box shows it) with a clear notice; the filter drops it."""
    view, notices = ResponsesView.from_query({"q": "(unclosed"})
    assert view.q == "(unclosed"
    assert notices == [
        "invalid regular expression '(unclosed': unclosed group: the text search is not applied."
    ]
    assert view.response_filter([1]).q is None


def test_responses006_filter_key_ignores_selection_and_sort():
    """Selecting a row or sorting does not change the filter key (the grid keeps its rows)."""
    view = ResponsesView(run="r", reward_min=1.0)
    assert view.with_(sample="x", sort="kl_mean", order="asc").filter_key() == view.filter_key()
    assert view.with_(loses=True).filter_key() != view.filter_key()


# ---- queries ---------------------------------------------------------------------------------------------


def test_responses010_sort_ties_by_sample_id(store):
    """Reward descending/ascending; equal rewards ordered by sample id ('…-10' before '…-3')."""
    assert lines_of(store, V1) == [5, 8, 1, 10, 3, 6, 2, 7, 4, 9]
    assert lines_of(store, V1, descending=False) == [4, 9, 2, 7, 1, 10, 3, 6, 8, 5]
    ids = [sample_id("rank0.jsonl", n) for n in (1, 10, 3, 6)]
    assert ids == sorted(ids)


def test_responses011_pages_are_a_stable_partition(store):
    """Pages 0-4, 4-8, 8-12 join up to the whole ordered list, with the total count."""
    flt = V1.response_filter(run_steps(store))
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
    """A run without token fields shows characters instead of tokens, no KL; extras are sortable."""
    metrics, extras = table_columns(store)
    assert metrics == ["step", "reward", "ref_reward", "reward_gain", "response_chars"]
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
    ]
    assert extras == ["prompt_id", "ends_with_eos"]


def test_responses020_sample_texts_hide_pads(store):
    """Full texts of one response with pad tokens removed, newlines kept; unknown id -> None."""
    texts = sample_texts(store, sample_id("rank0.jsonl", 4), PADS)
    assert (texts["response"], texts["ref_response"], texts["reward"]) == ("delta", "ref 4", 0.0)
    assert sample_texts(store, sample_id("rank0.jsonl", 3), PADS)["response"] == "gamma\nsecond line"
    assert sample_texts(store, "nope-1", PADS) is None


def test_responses022_text_index_beside_the_store(store):
    """A search over all steps builds one IPC file per part beside the store, once, and finds the same rows."""
    from data import responses

    folder = responses.text_index_dir(store)
    assert folder.parent == store.dir.parent and not (store.dir / "text-index").exists()
    responses._order.cache_clear()
    responses._text_hits.cache_clear()
    assert sorted(lines_of(store, V1.with_(step=ALL_STEPS, q="(?i)alpha"))) == [1, 5, 10, 11]
    files = sorted(folder.glob("*.arrow"))
    assert [f.name.split("-")[0] for f in files] == [f"p{i:06d}" for i in store.part_ids()]
    stamp = [f.stat().st_mtime_ns for f in files]
    assert responses.text_index_files(store) == files and [f.stat().st_mtime_ns for f in files] == stamp
    assert pl.read_ipc(files[0]).columns == ["part", "row", "step", "prompt", "response"]


def test_responses023_search_without_a_writable_index(store, monkeypatch, tmp_path):
    """When the index folder cannot be written, the search reads the parts: same answer."""
    from data import responses

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setattr(responses, "text_index_dir", lambda _store: blocker / "index")
    assert responses.text_index_files(store) is None
    responses._order.cache_clear()
    responses._text_hits.cache_clear()
    assert sorted(lines_of(store, V1.with_(step=ALL_STEPS, q="(?i)alpha"))) == [1, 5, 10, 11]


def test_responses021_json_rows_have_no_nan():
    """NaN and infinities become None for the grid (JSON has no such numbers)."""
    df = pl.DataFrame({"a": [1.0, float("nan"), float("inf")], "b": ["x", "y", "z"]})
    assert json_rows(df) == [{"a": 1.0, "b": "x"}, {"a": None, "b": "y"}, {"a": None, "b": "z"}]


# ---- components ------------------------------------------------------------------------------------------


def test_responses030_column_defs():
    """Link column first; numbers right-aligned and formatted; the sorted column carries the sort."""
    defs = column_defs(
        [("step", "step", ""), ("reward", "reward", ""), ("note", "note", "")],
        {"step": "int", "reward": "float", "note": "text"},
        {"reward"},
        [("prompt_preview", "prompt", False), ("response_preview", "response", True)],
        "reward",
        "asc",
    )
    assert [d.get("colId", d["field"]) for d in defs] == [
        "sample_id",
        "step",
        "reward",
        "note",
        "prompt_preview",
        "response_preview",
    ]
    by = {d.get("colId", d["field"]): d for d in defs}
    assert by["sample_id"]["cellRenderer"] == "AppLink"
    assert by["sample_id"]["cellRendererParams"] == {"hrefField": "tokens_href"}
    assert by["reward"]["sort"] == "asc" and "sort" not in by["step"]
    assert by["reward"]["type"] == "rightAligned" and ".4~g" in by["reward"]["valueFormatter"]["function"]
    assert "'d'" in by["step"]["valueFormatter"]["function"] and "type" not in by["note"]
    assert by["response_preview"]["pinned"] == "right" and not by["prompt_preview"]["sortable"]
    assert column_kind(pl.Int64) == "int" and column_kind(pl.Float32) == "float"
    assert column_kind(pl.Boolean) == "bool" and column_kind(pl.String) == "text"


def test_responses031_grid_sort_and_state():
    """The sorted column is read from a columnState; a sort state sorts one column and clears the rest."""
    assert grid_sort([{"colId": "step", "sort": None}, {"colId": "kl_mean", "sort": "asc"}]) == (
        "kl_mean",
        "asc",
    )
    assert grid_sort([{"colId": "step"}]) is None and grid_sort(None) is None
    assert sort_state(["a", "b"], "b", "desc") == [
        {"colId": "a", "sort": None},
        {"colId": "b", "sort": "desc"},
    ]


def _texts(component) -> list:
    out = []
    if isinstance(component, str):
        return [component]
    children = getattr(component, "children", None)
    for child in children if isinstance(children, list) else [children]:
        if child is not None:
            out += _texts(child)
    return out


def test_responses032_text_panel_is_plain_text():
    """Texts go into <pre> blocks as plain strings (HTML-looking text stays text), with the rewards."""
    sample = {
        "sample_id": "ab-1",
        "step": 3,
        "prompt": "say <b>hi</b>\nplease",
        "response": "<script>alert(1)</script>",
        "ref_response": None,
        "reward": 1.5,
        "ref_reward": 2.0,
        "reward_gain": -0.5,
    }
    labels = {"reward": "reward", "ref_reward": "reference reward", "reward_gain": "reward gain"}
    panel = text_panel(sample, labels, "/tokens?run=r&sample=ab-1")
    pres = [c for c in _walk(panel) if isinstance(c, html.Pre)]
    assert [p.children for p in pres] == ["say <b>hi</b>\nplease", "<script>alert(1)</script>"]
    texts = " ".join(_texts(panel))
    assert "reward 1.5" in texts and "reference reward 2" in texts and "(none in the file)" in texts
    assert "No response selected" in " ".join(_texts(text_panel(None, labels, None)))


def _walk(component):
    yield component
    children = getattr(component, "children", None)
    for child in children if isinstance(children, list) else [children]:
        if child is not None and not isinstance(child, str | int | float):
            yield from _walk(child)


def test_responses033_summary_line():
    """'N matching of M responses at step S · mean reward of the matches X'."""
    line = " ".join(_texts(summary_line(3, 16, "at step 3", 1.25, "reward")))
    assert line == "3  matching of 16 responses at step 3  ·  mean reward of the matches  1.25"
    assert (
        " ".join(_texts(summary_line(0, 16, "at step 3", None, "reward")))
        == "0  matching of 16 responses at step 3"
    )


def test_responses034_view_after_its_controls():
    """Controls give the next view: ranges as numbers (blank: no bound), the last step chosen while the URL
    follows it keeps following it, the grid's sort wins; Clear keeps run, step and sort only."""
    view = ResponsesView(run="r", sort="kl_mean", q="x", reward_min=1.0)
    ranges = {"reward_min": "", "reward_max": 2, "kl_min": None}
    new = view.from_controls([1, 2], 2, ranges, "", True, ("step", "asc"))
    assert new == ResponsesView(run="r", sort="step", order="asc", reward_max=2.0, loses=True)
    assert view.from_controls([1, 2], 1, {}, "x", False, None).step == 1
    assert view.from_controls([1, 2], 1, {}, "x", False, None).sort == "kl_mean"
    assert ResponsesView(run="r", step=2, q="x", loses=True).cleared() == ResponsesView(run="r", step=2)
    assert (view.step_value([1, 2]), view.where([1, 2])) == (2, "at step 2")
    assert ResponsesView(step=ALL_STEPS).where([1, 2]) == "over all steps"


def test_responses035_table_spec_and_range_filters(store):
    """The table's columns carry their registry labels and descriptions; gains are coloured by sign, the
    rewards are not; a range over a column the run lacks is offered disabled."""
    from data.responses import range_filters, table_spec

    spec = table_spec(store)
    assert [c[0] for c in spec.columns] == [
        "step",
        "reward",
        "ref_reward",
        "reward_gain",
        "response_chars",
        "group_id",
    ]
    assert spec.columns[3][1] == "reward gain (reward − ref reward)"
    assert spec.columns[-1][2] == "extra field of the files"
    assert spec.signed == {"reward_gain"}
    filters = {key: (text, ok) for key, text, ok in range_filters(store)}
    assert filters["reward"] == ("reward", True) and filters["kl"] == ("KL mean per token (k3)", False)


def test_responses036_sorted_state_only_when_needed():
    """The grid is told its sort only when it shows another one (and has columns to sort)."""
    from components.tables import sorted_state

    state = [{"colId": "step", "sort": None}, {"colId": "reward", "sort": "desc"}]
    assert sorted_state(state, "reward", "desc") is None and sorted_state(None, "reward", "desc") is None
    assert sorted_state(state, "step", "asc") == [
        {"colId": "step", "sort": "asc"},
        {"colId": "reward", "sort": None},
    ]
