"""Prompts page through the Flask test client: the list, the never-beat preset, one prompt and its links to
the token page, notices for bad URLs, the URL <-> controls sync and the chart click."""

from __future__ import annotations

import json
import re
from urllib.parse import parse_qs, urlparse

import pytest

from tests.conftest import dash_post, page_url_key, router_body

URL = page_url_key("/prompts")  # the page's own dcc.Location

CONTENT = "..prompts-content.children...prompts-notices.children...prompts-header.children...prompts-controls.style.."
SYNC = (
    ".."
    + URL
    + ".search...prompts-view.value...prompts-trend.value...prompts-min-steps.value...prompts-q.value.."
)
POEM = "rlloggingboard-eval-poem"


def _content(client, search: str) -> dict:
    """The content callback's answer for a URL query, as a dict of output -> value."""
    resp = dash_post(client, CONTENT, [{"id": URL, "property": "search", "value": search}])
    return {k: v["children"] if "children" in v else v["style"] for k, v in resp.items()}


def _rows(client, search: str, start: int = 0, end: int = 100, sort: list[dict] | None = None) -> dict:
    """The history grid's answer to a block request (``getRowsResponse``: ``rowData`` and ``rowCount``)."""
    request = {"startRow": start, "endRow": end, "sortModel": sort or [], "filterModel": {}}
    resp = dash_post(
        client,
        "prompts-history.getRowsResponse",
        [{"id": "prompts-history", "property": "getRowsRequest", "value": request}],
        [{"id": URL, "property": "search", "value": search}],
    )
    return resp["prompts-history"]["getRowsResponse"]


def _text(value) -> str:
    return json.dumps(value, ensure_ascii=False)


def _hrefs(value, path: str) -> list[str]:
    """Every link target to ``path`` in a rendered component tree (dcc.Link hrefs and grid rows' hrefs)."""
    text = _text(value)
    return re.findall(r'"(?:href|tokens_href)": "(' + re.escape(path) + r'\?[^"]*)"', text)


def _find(tree, id_: str):
    """The component with ``id_`` in a serialised component tree (None when absent)."""
    if isinstance(tree, dict):
        if tree.get("props", {}).get("id") == id_:
            return tree
        children = [tree.get("props", {}).get("children")]
    elif isinstance(tree, list):
        children = tree
    else:
        return None
    for child in children:
        hit = _find(child, id_)
        if hit is not None:
            return hit
    return None


@pytest.fixture
def store_of(fixtures_dir):
    from data.service import board

    return lambda run: board().store(run, wait=60)


def test_prompts101_list_of_recurring_prompts(client, fixtures_dir):
    """The poem run lists its 128 prompts (50 on the first page), each linking to its own prompt view."""
    out = _content(client, f"?run={POEM}")
    body = _text(out["prompts-content"])
    assert "128 prompts" in body and "128 seen in 2+ steps" in body
    assert "Showing 1–50 of 128 prompts" in body
    links = _hrefs(out["prompts-content"], "/prompts")
    keys = {parse_qs(urlparse(h).query).get("prompt", [None])[0] for h in links}
    assert len(keys - {None}) == 50
    assert "cross-step views" not in body
    assert out["prompts-header"] == POEM and out["prompts-notices"] == []


def test_prompts102_single_step_prompts_are_explained(client, fixtures_dir):
    """A run whose prompts each appear in one step still lists them, with the one-line explanation."""
    body = _text(_content(client, "?run=trl-ppo-small")["prompts-content"])
    assert "400 prompts" in body
    assert "cross-step views (early vs late reward, trend) need prompts that recur across steps" in body


def test_prompts103_never_beat_preset(client, fixtures_dir, store_of):
    """view=never lists exactly the prompts whose responses never beat their reference response."""
    from data import prompts

    table = prompts.prompt_table(store_of("trl-ppo-small"))
    expected = int(table.get_column("never_beats").sum())
    out = _content(client, "?run=trl-ppo-small&view=never")
    assert f"Showing 1–50 of {expected} prompts" in _text(out["prompts-content"])
    table = _find(out["prompts-content"], "prompts-table")
    badges = re.findall(
        r'"children": "(never beats the reference|one step only|improved|flat|regressed)"', _text(table)
    )
    assert badges == ["never beats the reference"] * 50


def test_prompts104_one_prompt_links_to_token_pages(client, fixtures_dir, store_of):
    """One prompt shows every response in step order, each linking to /tokens?run=R&sample=ID of a sample
    the store knows; the list state rides along in the back link."""
    list_out = _content(client, f"?run={POEM}&sort=win_rate&order=desc")
    first = _hrefs(list_out["prompts-content"], "/prompts")
    first = next(h for h in first if "prompt=" in h)
    query = urlparse(first).query
    assert parse_qs(query)["sort"] == ["win_rate"]
    out = _content(client, "?" + query)
    assert "rowData" not in _find(out["prompts-content"], "prompts-history")["props"]  # rows come by block
    got = _rows(client, "?" + query)
    links = _hrefs(out["prompts-content"], "/tokens") + [r["tokens_href"] for r in got["rowData"]]
    samples = {parse_qs(urlparse(h).query)["sample"][0] for h in links}
    assert len(samples) == 24 and got["rowCount"] == 24  # one response per step, 24 steps
    assert [r["step"] for r in got["rowData"]] == sorted(r["step"] for r in got["rowData"])
    store = store_of(POEM)
    assert all(store.lookup(s) is not None for s in samples)
    assert all(parse_qs(urlparse(h).query)["run"] == [POEM] for h in links)
    body = _text(out["prompts-content"])
    assert "First response · step 0" in body and "Latest response · step 2300" in body
    back = [h for h in _hrefs(out["prompts-content"], "/prompts") if "prompt=" not in h]
    assert parse_qs(urlparse(back[0]).query)["sort"] == ["win_rate"]
    assert out["prompts-controls"] == {"display": "none"}


def test_prompts105_group_view(client, fixtures_dir, store_of):
    """A GRPO prompt shows its group: size, spread and the file's advantages, highest reward first."""
    from data import prompts

    store = store_of("trl-grpo-small")
    key = prompts.prompt_table(store).sort("order").item(0, "prompt_key")
    out = _content(client, f"?run=trl-grpo-small&prompt={key}")
    body = _text(out["prompts-content"])
    assert "advantage (from the file)" in body and "responses in the group" in body
    rows = _rows(client, f"?run=trl-grpo-small&prompt={key}")["rowData"]
    assert [r["group_n"] for r in rows] == [4, 4, 4, 4]
    rewards = [r["reward"] for r in rows]
    assert rewards == sorted(rewards, reverse=True)
    asc = _rows(client, f"?run=trl-grpo-small&prompt={key}", sort=[{"colId": "reward", "sort": "asc"}])
    assert [r["reward"] for r in asc["rowData"]] == sorted(rewards)  # a header click sorts on the server
    two = _rows(client, f"?run=trl-grpo-small&prompt={key}", start=1, end=3)
    assert [r["sample_id"] for r in two["rowData"]] == [r["sample_id"] for r in rows[1:3]]
    assert two["rowCount"] == 4


def test_prompts112_responses_read_as_file_and_line(client, fixtures_dir, store_of):
    """A prompt's responses show where they are in the run's files (``rank0.jsonl:1``), as the token page
    does, while their links keep the stable sample id; so does the first / latest response's card."""
    from data import prompts

    store = store_of("trl-grpo-small")
    key = prompts.prompt_table(store).sort("order").item(0, "prompt_key")
    out = _content(client, f"?run=trl-grpo-small&prompt={key}")
    grid = _find(out["prompts-content"], "prompts-history")["props"]
    sample_col = next(c for c in grid["columnDefs"] if c["field"] == "sample_id")
    assert "params.data.source_line || params.data.sample_id" in sample_col["valueGetter"]["function"]
    assert sample_col["headerName"] == "response (file:line)"
    scalars = store.scalars()
    rows = _rows(client, f"?run=trl-grpo-small&prompt={key}")["rowData"]
    assert rows
    for row in rows:
        hit = scalars.filter(scalars["sample_id"] == row["sample_id"]).row(0, named=True)
        assert row["source_line"] == f"{hit['source']}:{hit['line']}"
        assert parse_qs(urlparse(row["tokens_href"]).query)["sample"] == [row["sample_id"]]
    body = _text(out["prompts-content"])
    assert any(f"{r['source_line']} · step 1 · reward" in body for r in rows)


def test_prompts106_bad_urls_give_notices(client, fixtures_dir):
    """Unknown run, malformed or unknown prompt key, bad parameters: a visible notice, never an error."""
    out = _content(client, "?run=nope&view=odd&page=x")
    notes = _text(out["prompts-notices"])
    assert "Unknown run 'nope'" in notes and "view='odd'" in notes and "page='x'" in notes
    out = _content(client, f"?run={POEM}&prompt=not-a-key")
    assert "a prompt key is 16 hexadecimal digits" in _text(out["prompts-notices"])
    out = _content(client, f"?run={POEM}&prompt={'0' * 16}")
    assert "has no prompt with key" in _text(out["prompts-notices"])
    out = _content(client, f"?run={POEM}&q=(")
    assert "the text search is not applied" in _text(out["prompts-notices"])
    out = _content(client, f"?run={POEM}&page=99")
    assert "showing page 3 of 3" in _text(out["prompts-notices"])


def test_prompts107_search_filters_the_list(client, fixtures_dir, store_of):
    """q is a regular expression over the prompt text; the list keeps the matching prompts only."""
    from data import prompts

    store = store_of(POEM)
    table = prompts.prompt_table(store)
    word = table.sort("order").item(0, "prompt_preview")[5:8]
    expected = len(prompts.search_prompts(store, word))
    assert 0 < expected < 50
    body = _text(_content(client, f"?run={POEM}&q={word}")["prompts-content"])
    assert f"of {expected} prompts" in body


def test_prompts108_controls_write_the_url(client, fixtures_dir):
    """A control change writes the URL (back to page 1); a URL change sets the controls; no change, or a
    sync heard after the browser left the page, no update."""
    inputs = [
        {"id": URL, "property": "search", "value": f"?run={POEM}&page=2"},
        {"id": "prompts-view", "property": "value", "value": "never"},
        {"id": "prompts-trend", "property": "value", "value": None},
        {"id": "prompts-min-steps", "property": "value", "value": 3},
        {"id": "prompts-q", "property": "value", "value": ""},
    ]
    state = [{"id": URL, "property": "pathname", "value": "/prompts"}]
    gone = [{"id": URL, "property": "pathname", "value": "/tokens"}]  # the browser has left the page
    assert not dash_post(client, SYNC, inputs, gone, changed=["prompts-view.value"])
    out = dash_post(client, SYNC, inputs, state, changed=["prompts-view.value"])
    assert parse_qs(out[URL]["search"].lstrip("?")) == {
        "run": [POEM],
        "view": ["never"],
        "min_steps": ["3"],
    }
    inputs[0]["value"] = f"?run={POEM}&trend=flat"
    out = dash_post(client, SYNC, inputs, state, changed=[URL + ".search"])
    assert out["prompts-trend"]["value"] == "flat" and out["prompts-view"]["value"] == "all"
    assert URL not in out
    inputs[1:] = [
        {"id": "prompts-view", "property": "value", "value": "all"},
        {"id": "prompts-trend", "property": "value", "value": "flat"},
        {"id": "prompts-min-steps", "property": "value", "value": None},
        {"id": "prompts-q", "property": "value", "value": ""},
    ]
    assert not dash_post(client, SYNC, inputs, state, changed=["prompts-trend.value"])  # nothing to update


def test_prompts109_chart_click_renders_a_token_link(client, fixtures_dir):
    """A click on a response point renders a link to its token page instead of navigating."""
    out = dash_post(
        client,
        "prompts-chart-link.children",
        [{"id": "prompts-chart", "property": "clickData", "value": {"points": [{"customdata": "abc-3"}]}}],
        [{"id": URL, "property": "search", "value": f"?run={POEM}&prompt={'1' * 16}"}],
    )
    link = out["prompts-chart-link"]["children"]
    assert link["props"]["href"] == f"/tokens?run={POEM}&sample=abc-3"


def test_prompts110_page_is_served(client, fixtures_dir):
    """/prompts?run=R renders the prompts page of that run through Dash's router: its title, the run and
    its controls (the index alone, which Dash serves for any path, says nothing)."""
    assert client.get(f"/prompts?run={POEM}").status_code == 200
    r = client.post("/_dash-update-component", json=router_body("/prompts", f"?run={POEM}"))
    rendered = json.dumps(r.get_json()["response"]["_pages_content"]["children"])
    assert '"Prompts"' in rendered and f'"{POEM}"' in rendered and '"prompts-controls"' in rendered


def test_prompts111_layout_without_arguments(dash_app, fixtures_dir):
    """layout() with no query (or an unknown run) renders the page with its controls, never raises."""
    import dash

    page = next(p for p in dash.page_registry.values() if p["path"] == "/prompts")
    for query in ({}, {"run": "nope"}, {"run": POEM, "prompt": "0" * 16, "view": "never"}):
        tree = page["layout"](**query).to_plotly_json()
        assert "{'type': 'app-page-url', 'path': '/prompts'}" in str(tree) and "prompts-controls" in str(tree)


def test_prompts130_history_group_cell_opens_its_group(client, fixtures_dir, store_of):
    """A GRPO prompt's history grid: the group column (the file's group_id) is a link, and each row's link
    is its own group side by side, ``/prompts?run&prompt&step&group`` with that row's step and group id."""
    from data import prompts

    store = store_of("trl-grpo-small")
    key = prompts.prompt_table(store).sort("order").item(0, "prompt_key")
    grid = _find(_content(client, f"?run=trl-grpo-small&prompt={key}")["prompts-content"], "prompts-history")
    defs = {d["field"]: d for d in grid["props"]["columnDefs"]}
    assert defs["group_id"]["cellRenderer"] == "AppLink"
    assert defs["group_id"]["cellRendererParams"] == {"hrefField": "group_href"}
    assert "cellRenderer" not in defs["group_n"]
    rows = _rows(client, f"?run=trl-grpo-small&prompt={key}")["rowData"]
    assert rows
    for r in rows:
        query = parse_qs(urlparse(r["group_href"]).query)
        assert urlparse(r["group_href"]).path == "/prompts"
        assert query == {"run": ["trl-grpo-small"], "prompt": [key], "step": [str(r["step"])],
                         "group": [str(r["group_id"])]}  # fmt: skip
