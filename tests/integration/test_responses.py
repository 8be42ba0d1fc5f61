"""Responses page without a browser: layout from the URL, and its callbacks POSTed like the renderer does
(grid rows, URL <-> controls sync, summary / export links / text panel)."""

from __future__ import annotations

import sys
from urllib.parse import parse_qs, urlsplit

import pytest

from data.store import sample_id
from data.views.responses import RANGE_KEYS
from tests.conftest import dash_post, find, page_url_key

URL = page_url_key("/responses")  # the page's own dcc.Location

RUN = "trl-ppo-small"


@pytest.fixture
def page(dash_app):
    """The page module as Dash loaded it."""
    return sys.modules["pages.responses"]


def texts(component) -> str:
    if isinstance(component, str | int | float):
        return str(component)
    children = getattr(component, "children", None)
    return " ".join(
        texts(c) for c in (children if isinstance(children, list | tuple) else [children]) if c is not None
    )


def rows_request(client, view_query, start=0, end=100, sort=None):
    request = {
        "startRow": start,
        "endRow": end,
        "sortModel": [{"colId": sort[0], "sort": sort[1]}] if sort else [],
    }
    resp = dash_post(
        client,
        "responses-grid.getRowsResponse",
        [{"id": "responses-grid", "property": "getRowsRequest", "value": request}],
        [{"id": "responses-view", "property": "data", "value": view_query}],
    )
    return resp["responses-grid"]["getRowsResponse"]


def test_responses101_layout_seeds_controls_from_url(page, fixtures_dir):
    """Every control, the grid's sort and the view store come from the query string."""
    lay = page.layout(
        run=RUN, step="3", sort="kl_mean", order="asc", reward_min="1", gain_max="0.5", q="the", loses="1"
    )
    assert find(lay, "responses-step").value == 3
    assert find(lay, "responses-reward-min").value == 1.0 and find(lay, "responses-gain-max").value == 0.5
    assert find(lay, "responses-kl-min").value is None
    assert find(lay, "responses-q").value == "the" and find(lay, "responses-loses").value is True
    defs = {d.get("colId", d["field"]): d for d in find(lay, "responses-grid").columnDefs}
    assert defs["kl_mean"]["sort"] == "asc" and "sort" not in defs["reward"]
    assert defs["kl_mean"]["headerName"] == "KL mean per token (k3)"
    assert find(lay, "responses-view").data == (
        f"?run={RUN}&step=3&sort=kl_mean&order=asc&reward_min=1&gain_max=0.5&q=the&loses=1"
    )
    assert texts(find(lay, "responses-notices")) == ""


def test_responses102_layout_fallbacks(page, fixtures_dir):
    """Bad values show notices and fall back; an unknown run is a notice; no arguments pick the first run."""
    lay = page.layout(run=RUN, step="abc", sort="prompt", loses="perhaps")
    msg = texts(find(lay, "responses-notices"))
    assert "Ignored step='abc'" in msg and "Ignored sort='prompt'" in msg and "Ignored loses='perhaps'" in msg
    assert find(lay, "responses-step").value == 25  # the last step
    lay = page.layout(run="../../etc")
    assert "Unknown run '../../etc'" in texts(find(lay, "responses-notices"))
    lay = page.layout()
    assert find(lay, "responses-view").data == "?run=rlloggingboard-eval-poem"


def _source(row) -> str:
    """file:line of a row from the store's own columns (independent of the row's source_line)."""
    from data.service import board

    scalars = board().store(RUN).scalars()
    hit = scalars.filter(scalars["sample_id"] == row["sample_id"]).row(0, named=True)
    return f"{hit['source']}:{hit['line']}"


def test_responses103_rows_are_sorted_and_paged_on_the_server(client, fixtures_dir):
    """getRowsRequest -> one block in the grid's sort order, ties by sample id, with the total count."""
    out = rows_request(client, f"?run={RUN}&step=3")
    assert out["rowCount"] == 16
    rewards = [r["reward"] for r in out["rowData"]]
    assert rewards == sorted(rewards, reverse=True)
    top = [r["sample_id"] for r in out["rowData"] if r["reward"] == rewards[0]]
    assert top == sorted(top)
    block = rows_request(client, f"?run={RUN}&step=3", start=5, end=10)
    assert [r["sample_id"] for r in block["rowData"]] == [r["sample_id"] for r in out["rowData"][5:10]]
    asc = rows_request(client, f"?run={RUN}&step=all", 0, 50, sort=("kl_mean", "asc"))
    assert asc["rowCount"] == 400
    kls = [r["kl_mean"] for r in asc["rowData"]]
    assert kls == sorted(kls)
    for row in out["rowData"]:  # where each row is in the run's files, as a person reads it
        assert row["source_line"] == _source(row) and row["source_line"].endswith(
            ":" + row["sample_id"].split("-")[-1]
        )
    assert set(out["rowData"][0]) >= {
        "sample_id",
        "source_line",
        "tokens_href",
        "reward",
        "kl_mean",
        "prompt_preview",
        "ends_with_eos",
    }


def test_responses104_row_link_opens_token_page_with_way_back(client, fixtures_dir):
    """Each row links to /tokens?run=R&sample=ID with back= the responses query selecting that row."""
    view = f"?run={RUN}&step=3&reward_min=2"
    row = rows_request(client, view)["rowData"][0]
    sid = row["sample_id"]
    parts = urlsplit(row["tokens_href"])
    query = parse_qs(parts.query)
    assert parts.path == "/tokens" and query["run"] == [RUN] and query["sample"] == [sid]
    assert query["back"] == [f"run={RUN}&step=3&reward_min=2&sample={sid}"]


SYNC_OUT = (
    ".."
    + URL
    + ".search...responses-step.value"
    + "".join(f"...responses-{k}-{e}.value" for k in RANGE_KEYS for e in ("min", "max"))
    + "...responses-q.value...responses-loses.value...responses-truncated.value"
    + "...responses-ended.value...responses-cols.value...responses-grid.columnState"
    + "...responses-view.data...responses-filter.data...responses-notices.children...responses-reload.search.."
)


def sync(client, search, changed, **values):
    """POST the sync callback with the URL ``search``, control ``values`` and the one ``changed`` input."""
    controls = {
        "responses-step": 3,
        "responses-q": "",
        "responses-loses": False,
        "responses-truncated": False,
        "responses-ended": False,
    }
    controls.update(values)
    inputs = [{"id": URL, "property": "search", "value": search}]
    inputs.append({"id": "responses-step", "property": "value", "value": controls["responses-step"]})
    for k in RANGE_KEYS:
        for e in ("min", "max"):
            cid = f"responses-{k}-{e}"
            inputs.append({"id": cid, "property": "value", "value": controls.get(cid)})
    inputs += [
        {"id": "responses-q", "property": "value", "value": controls["responses-q"]},
        {"id": "responses-loses", "property": "value", "value": controls["responses-loses"]},
        {"id": "responses-truncated", "property": "value", "value": controls["responses-truncated"]},
        {"id": "responses-ended", "property": "value", "value": controls["responses-ended"]},
        {"id": "responses-cols", "property": "value", "value": controls.get("responses-cols")},
        {"id": "responses-clear", "property": "n_clicks", "value": controls.get("responses-clear")},
        {"id": "responses-grid", "property": "columnState", "value": controls.get("columnState")},
        {"id": "responses-grid", "property": "selectedRows", "value": controls.get("selectedRows")},
    ]
    state = [
        {"id": "responses-view", "property": "data", "value": search},
        {"id": "responses-filter", "property": "data", "value": controls.get("filter", search)},
        {"id": URL, "property": "pathname", "value": "/responses"},
    ]
    return dash_post(client, SYNC_OUT, inputs, state, changed=[changed]) or {}


def test_responses105_controls_write_the_url(client, fixtures_dir):
    """A filter, a header sort or a row selection each write the URL; the filter key changes only for filters."""
    url = f"?run={RUN}&step=3"
    out = sync(client, url, "responses-reward-min.value", **{"responses-reward-min": 1.5})
    assert out[URL]["search"] == f"?run={RUN}&step=3&reward_min=1.5"
    assert out["responses-filter"]["data"] == f"?run={RUN}&step=3&reward_min=1.5"

    state = [{"colId": "reward", "sort": None}, {"colId": "kl_mean", "sort": "asc"}]
    out = sync(client, url, "responses-grid.columnState", columnState=state)
    assert out[URL]["search"] == f"?run={RUN}&step=3&sort=kl_mean&order=asc"
    assert "responses-filter" not in out  # the grid already re-sorted itself

    out = sync(client, url, "responses-grid.selectedRows", selectedRows=[{"sample_id": "abc-1"}])
    assert out[URL]["search"] == f"?run={RUN}&step=3&sample=abc-1"
    assert "responses-filter" not in out

    out = sync(client, f"?run={RUN}", "responses-step.value", **{"responses-step": 25})
    assert out == {} or URL not in out  # the last step while the URL says "latest": no change
    out = sync(client, f"?run={RUN}", "responses-step.value", **{"responses-step": "all"})
    assert out[URL]["search"] == f"?run={RUN}&step=all"
    out = sync(client, url, "responses-truncated.value", **{"responses-truncated": True})
    assert out[URL]["search"] == f"?run={RUN}&step=3&truncated=1"
    assert out["responses-filter"]["data"] == f"?run={RUN}&step=3&truncated=1"


def test_responses106_url_seeds_controls_and_clear_resets(client, fixtures_dir):
    """A URL change (Back/Forward) sets the controls and notices; Clear filters keeps run, step and sort."""
    url = f"?run={RUN}&step=4&kl_min=0.1&q=bad(&loses=maybe"
    out = sync(client, url, URL + ".search")
    assert out["responses-step"]["value"] == 4 and out["responses-kl-min"]["value"] == 0.1
    assert out["responses-q"]["value"] == "bad("
    assert URL not in out
    notes = texts_of(out["responses-notices"]["children"])
    assert "Ignored loses='maybe'" in notes and "unclosed group" not in notes  # said beside the box
    assert "unclosed group" in summary_of(client, url)["responses-q-error"]["children"]

    url = f"?run={RUN}&step=4&sort=kl_sum&reward_min=1&q=x&sample=s-1"
    out = sync(
        client,
        url,
        "responses-clear.n_clicks",
        **{"responses-clear": 1, "responses-reward-min": 1, "responses-q": "x"},
    )
    assert out[URL]["search"] == f"?run={RUN}&step=4&sort=kl_sum"
    assert out["responses-reward-min"]["value"] is None and out["responses-q"]["value"] == ""
    assert "responses-reload" not in out  # cleared in place


def test_responses130_clear_reloads_a_token_filtered_view(client, fixtures_dir):
    """Clear filters on a view with a token filter loads the cleared view anew (its token columns are the
    layout's, so an in-place clear left them in the grid); the page's own URL is left to the reload."""
    url = f"?run={RUN}&step=4&sort=kl_sum&q=x&tok=a&tok_min=1"
    out = sync(client, url, "responses-clear.n_clicks", **{"responses-clear": 1, "responses-q": "x"})
    assert out["responses-reload"]["search"] == f"?run={RUN}&step=4&sort=kl_sum"
    assert URL not in out and "responses-q" not in out


def texts_of(payload) -> str:
    """The text (children strings) of a JSON-serialised component tree."""
    if isinstance(payload, str | int | float):
        return str(payload)
    if isinstance(payload, dict):
        return texts_of(payload.get("props", {}).get("children"))
    if isinstance(payload, list):
        return " ".join(texts_of(v) for v in payload if v is not None)
    return ""


def summary_of(client, view: str) -> dict:
    """The responses page's summary, export links, text panel and count poll for the view ``view``."""
    return dash_post(
        client,
        "..responses-summary.children...responses-export-csv.href...responses-export-jsonl.href"
        "...responses-q-error.children...responses-text.children...responses-drawer.hidden"
        "...responses-count-poll.disabled..",
        [{"id": "responses-view", "property": "data", "value": view}],
    )


def test_responses107_summary_export_links_and_text_panel(client, fixtures_dir):
    """The view gives the summary, export links with the same query, and the selected response's texts."""
    sid = sample_id("rank0.jsonl", 19)
    view = f"?run={RUN}&step=3&reward_min=2&sample={sid}"
    out = summary_of(client, view)
    assert texts_of(out["responses-summary"]["children"]) == (
        "4  matching of 16 responses at step 3  ·  mean reward of the matches  2"
    )
    assert out["responses-export-csv"]["href"] == f"/export?run={RUN}&step=3&reward_min=2&format=csv"
    assert out["responses-count-poll"]["disabled"] is True  # one step: counted at once, nothing to poll
    assert client.get(out["responses-export-csv"]["href"]).data.decode().count("\n") == 5
    panel = texts_of(out["responses-text"]["children"])
    assert "the trip is somewhat" in panel and " rude and the staff turned out to be really ugly ." in panel
    assert "<pad>" not in panel and " horrible ." in panel


def test_responses108_truncated_filter_keeps_responses_with_no_end_token(client, page, fixtures_dir):
    """truncated=1 keeps the responses with no end token: on TRL's PPO run exactly the 22 lines whose
    trainer-written ends_with_eos is false (over all steps, and step by step), in the grid, the summary and
    the export; its switch is seeded from the URL. A run whose texts hold no end token ignores it, saying
    why (every response would count as cut); /export refuses it there."""
    import json

    lines = [
        json.loads(line)
        for f in ("rank0.jsonl", "rank1.jsonl")
        for line in (fixtures_dir / RUN / f).read_text().splitlines()
    ]
    cut = [r for r in lines if not r["ends_with_eos"]]
    assert rows_request(client, f"?run={RUN}&step=all&truncated=1")["rowCount"] == len(cut) == 22
    for step in (1, 5, 25):
        want = sum(1 for r in cut if r["step"] == step)
        assert rows_request(client, f"?run={RUN}&step={step}&truncated=1")["rowCount"] == want
    csv = client.get(f"/export?run={RUN}&step=all&truncated=1&format=csv").data.decode()
    assert csv.count("\n") == 1 + 22
    assert find(page.layout(run=RUN, truncated="1"), "responses-truncated").value is True
    lay = page.layout(run="rlloggingboard-eval-poem", truncated="1")
    notes = [a.children for a in find(lay, "responses-notices").children]
    assert notes[0].startswith("Ignored truncated=1: no response of this run ends with an end token")
    assert find(lay, "responses-truncated").value is False
    bad = client.get("/export?run=rlloggingboard-eval-poem&truncated=1")
    assert bad.status_code == 400 and b"truncated=1" in bad.data


def test_responses118_ended_filter_keeps_responses_with_an_end_token(client, page, fixtures_dir):
    """ended=1, beside truncated=1, keeps the responses that ended: on TRL's PPO run exactly the 378 lines
    whose trainer-written ends_with_eos is true (over all steps and step by step), in the grid and the
    export; turning it on turns "truncated" off (they exclude each other) and both in a URL keep
    "truncated", saying so; a run whose texts hold no end token ignores it, saying why."""
    import json

    lines = [
        json.loads(line)
        for f in ("rank0.jsonl", "rank1.jsonl")
        for line in (fixtures_dir / RUN / f).read_text().splitlines()
    ]
    done = [r for r in lines if r["ends_with_eos"]]
    assert rows_request(client, f"?run={RUN}&step=all&ended=1")["rowCount"] == len(done) == 378
    for step in (1, 5, 25):
        want = sum(1 for r in done if r["step"] == step)
        assert rows_request(client, f"?run={RUN}&step={step}&ended=1")["rowCount"] == want
    csv = client.get(f"/export?run={RUN}&step=all&ended=1&format=csv").data.decode()
    assert csv.count("\n") == 1 + 378
    url = f"?run={RUN}&step=3&truncated=1"
    out = sync(client, url, "responses-ended.value", **{"responses-ended": True, "responses-truncated": True})
    assert out[URL]["search"] == f"?run={RUN}&step=3&ended=1"
    assert out["responses-truncated"]["value"] is False and "responses-ended" not in out
    lay = page.layout(run=RUN, ended="1", truncated="1")
    assert find(lay, "responses-truncated").value is True and find(lay, "responses-ended").value is False
    notes = [a.children for a in find(lay, "responses-notices").children]
    assert "Ignored ended=1: truncated=1 keeps the responses that did not end." in notes
    lay = page.layout(run="rlloggingboard-eval-poem", ended="1")
    notes = [a.children for a in find(lay, "responses-notices").children]
    assert notes[0].startswith("Ignored ended=1: no response of this run ends with an end token")
    assert client.get("/export?run=rlloggingboard-eval-poem&ended=1").status_code == 400


def test_responses109_a_url_without_run_shows_the_first_run(client, fixtures_dir):
    """/responses with no run= (a link typed or shared without it) shows the first run, as its layout
    names it: the controls' view, the rows and the summary are that run's, not empty."""
    from data.service import board

    first_run = next(iter(board().runs()))
    resp = summary_of(client, "?step=all&q=(?i)the")
    named = summary_of(client, f"?run={first_run}&step=all&q=(?i)the")
    assert texts_of(resp["responses-summary"]["children"]) == texts_of(named["responses-summary"]["children"])
    assert "responses over all steps" in texts_of(resp["responses-summary"]["children"])  # (a count runs)
    assert f"run={first_run}" in resp["responses-export-csv"]["href"]
    got = rows_request(client, "?step=all")
    want = rows_request(client, f"?run={first_run}&step=all")
    assert got["rowCount"] == want["rowCount"] > 0
    assert [r["sample_id"] for r in got["rowData"]] == [r["sample_id"] for r in want["rowData"]]


def test_responses119_grpo_columns_and_their_chooser(client, page, fixtures_dir):
    """On TRL's GRPO run the table shows by default step, reward, advantage, group_id, end, KL sum and
    length (the rest hidden, a click of the chooser away): the rows carry the file's advantage and group
    and how each ended, equal to TRL's ends_with_eos; a choice in the chooser writes cols= (the defaults
    write nothing) and seeds the chooser and the grid back from the URL; PPO's table keeps every column."""
    import json

    grpo = "trl-grpo-small"
    recs = {
        sample_id(f, i): json.loads(line)
        for f in ("rank0.jsonl", "rank1.jsonl")
        for i, line in enumerate((fixtures_dir / grpo / f).read_text().splitlines(), start=1)
    }
    lay = page.layout(run=grpo)
    want = ["step", "reward", "response_length", "kl_sum", "advantage", "group_id", "end"]
    assert find(lay, "responses-cols").value == want
    defs = {d["field"]: d for d in find(lay, "responses-grid").columnDefs}
    assert [f for f in defs if f in want] == want and defs["reward_gain"]["hide"] is True
    assert not any(defs[f].get("hide") for f in want) and defs["end"]["sortable"] is False
    rows = rows_request(client, f"?run={grpo}&step=all")["rowData"]
    assert len(rows) == 100
    for r in rows:
        rec = recs[r["sample_id"]]
        assert r["end"] == ("ended" if rec["ends_with_eos"] else "truncated")
        assert (r["advantage"], r["group_id"]) == (pytest.approx(rec["advantage"]), rec["group_id"])
    cut = rows_request(client, f"?run={grpo}&step=all&truncated=1")["rowData"]
    assert {r["end"] for r in cut} == {"truncated"}
    picked = ["reward", "advantage", "end"]
    out = sync(client, f"?run={grpo}&step=3", "responses-cols.value", **{"responses-cols": picked})
    assert out[URL]["search"] == f"?run={grpo}&step=3&cols=reward&cols=advantage&cols=end"
    out = sync(client, f"?run={grpo}&step=3", "responses-cols.value", **{"responses-cols": want[::-1]})
    assert out == {} or URL not in out  # the defaults, in any order: nothing to write
    lay = page.layout(run=grpo, cols=["end", "reward", "nope"])
    assert find(lay, "responses-cols").value == ["reward", "end"]
    notes = [a.children for a in find(lay, "responses-notices").children]
    assert "Ignored cols='nope': not a column of this run's table." in notes
    rows = rows_request(client, f"?run={RUN}&step=all")["rowData"]
    assert "end" not in rows[0]  # not shown: not read
    defs = find(page.layout(run=RUN), "responses-grid").columnDefs
    assert not any(d.get("hide") for d in defs if d["field"] != "end")


def test_responses131_a_refused_search_is_said_once_beside_the_box(page, client, fixtures_dir):
    """A pattern too large once compiled is refused beside the search box, and only there: the banner above
    the page repeated the same sentence (its other notices stay)."""
    huge = "((a{50}){50}){50}"
    lay = page.layout(run=RUN, q=huge, step="abc")
    banner = texts(find(lay, "responses-notices"))
    assert "Ignored step='abc'" in banner and "refused" not in banner
    out = summary_of(client, f"?run={RUN}&q={huge}")
    said = out["responses-q-error"]["children"]
    assert said.startswith(f"regular expression '{huge}' refused: compiled, it is larger than 1024 KiB")
    # The token filter's box says nothing of its own refusal: that one stays in the banner.
    lay = page.layout(run=RUN, tok=huge)
    assert "refused" in texts(find(lay, "responses-notices"))
