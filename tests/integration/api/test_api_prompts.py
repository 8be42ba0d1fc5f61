"""The prompts page's JSON answer (/api/v1/prompts): the list's rows and links are the page's, one prompt's
chart and responses are what its callbacks draw and serve, a group view's groups and cards are the page's;
one prompt's mean reward per step equals a count by hand from the files; bad queries answer with notices."""

from __future__ import annotations

import json
import math
from collections import defaultdict

from tests.dash_calls import call, component, figure_traces, text

URL_SEARCH = (
    '{"path":"/prompts","type":"app-page-url"}.search'  # the page's Location (components.layout.page_url)
)
GRID_REQUEST = {"startRow": 0, "endRow": 100, "sortModel": []}  # the history grid's first request


def _api(client, query):
    r = client.get(f"/api/v1/prompts{query}")
    assert r.status_code == 200, r.get_data(as_text=True)[:300]
    return r.get_json()


def _content(client, dash_app, query):
    """What the page's content callback answers for ``query``: ``(content, notices' texts)``."""
    got = call(client, dash_app, "prompts-content.children", {URL_SEARCH: query})
    return got["prompts-content"]["children"], [text(a) for a in got["prompts-notices"]["children"]]


def _links(tree) -> list[str]:
    """Every link's href in a layout, in order."""
    if isinstance(tree, list):
        return [h for t in tree for h in _links(t)]
    if not isinstance(tree, dict):
        return []
    props = tree.get("props") or {}
    own = [props["href"]] if tree.get("type") == "Link" and props.get("href") else []
    return own + _links(props.get("children"))


def test_apiprompts001_list_is_the_pages(client, dash_app, fixtures_dir):
    """One page of the list: its prompts, in the page's order, each with the page's link, and the notices."""
    query = "?run=rlloggingboard-eval-poem&sort=n_steps&order=desc&page=2&bogus=1"
    got = _api(client, query)
    content, notices = _content(client, dash_app, query)
    assert got["notices"] == notices and "bogus" in notices[0]
    table = component(content, "prompts-table")
    hrefs = [h for h in _links(table) if "prompt=" in h]
    assert [r["href"] for r in got["rows"]] == hrefs and len(hrefs) == 50
    shown = text(table)
    assert all(r["prompt_preview"] in shown for r in got["rows"])
    grid = got["tables"]["prompts-table"]
    assert grid["total"] == 128 and "page 2 of 3: prompts 51 to 100" in grid["cut_off"]
    assert got["view"]["page"] == 2 and [r["n_steps"] for r in got["rows"]] == sorted(
        (r["n_steps"] for r in got["rows"]), reverse=True
    )


def test_apiprompts002_prompt_is_the_pages(client, dash_app, fixtures_dir):
    """One prompt: the chart's traces and the history grid's first block are the callbacks' own."""
    key = _api(client, "?run=rlloggingboard-eval-poem&sort=n_steps&order=desc")["rows"][0]["prompt_key"]
    query = f"?run=rlloggingboard-eval-poem&prompt={key}"
    got = _api(client, query)
    content, notices = _content(client, dash_app, query)
    assert got["notices"][: len(notices)] == notices
    chart = component(content, "prompts-chart")["props"]["figure"]
    assert got["figures"]["prompts-chart"]["traces"] == figure_traces(chart)
    served = call(client, dash_app, "prompts-history.getRowsResponse",
                  {"prompts-history.getRowsRequest": GRID_REQUEST, URL_SEARCH: query})  # fmt: skip
    served = served["prompts-history"]["getRowsResponse"]
    history = got["tables"]["prompts-history"]
    assert got["rows"] == history["rows"] == served["rowData"] and history["total"] == served["rowCount"]
    stats = got["tables"]["prompts-stats"]["rows"][0]
    assert stats["prompt"] in text(component(content, "prompts-prompt-text"))
    pairs = got["tables"]["prompts-pairs"]["rows"]
    assert [p["which"] for p in pairs] == ["first", "latest"] and pairs[0]["step"] < pairs[1]["step"]
    assert all(p["tokens_href"] in _links(content) for p in pairs)


def test_apiprompts003_mean_reward_per_step_by_hand(client, fixtures_dir):
    """A recurring prompt's mean reward per step, from the files (json.loads), is the chart's mean trace;
    so is a GRPO group's mean (four responses at one step, trl-grpo-small)."""
    for run, sort in (("rlloggingboard-eval-poem", "n_steps"), ("trl-grpo-small", "n_responses")):
        key = _api(client, f"?run={run}&sort={sort}&order=desc")["rows"][0]["prompt_key"]
        got = _api(client, f"?run={run}&prompt={key}")
        prompt = got["tables"]["prompts-stats"]["rows"][0]["prompt"]
        by_step = defaultdict(list)
        for f in sorted((fixtures_dir / run).glob("*.jsonl")):
            for line in f.read_text().splitlines():
                rec = json.loads(line)
                if rec["prompt"].strip() == prompt:
                    by_step[rec["step"]].append(rec["reward"])
        assert by_step, (run, prompt)
        (means,) = [
            t for t in got["figures"]["prompts-chart"]["traces"] if t["name"].startswith("reward (mean")
        ]
        assert means["x"] == sorted(by_step)
        for step, y in zip(means["x"], means["y"], strict=True):
            assert math.isclose(y, sum(by_step[step]) / len(by_step[step]), rel_tol=1e-12), (run, step)
        assert got["tables"]["prompts-stats"]["rows"][0]["n_responses"] == sum(map(len, by_step.values()))


def test_apiprompts004_group_view_is_the_pages(client, dash_app, fixtures_dir):
    """A prompt's group at a step: its figures and learning signal, its cards in the page's order."""
    key = _api(client, "?run=trl-grpo-small")["rows"][0]["prompt_key"]
    query = f"?run=trl-grpo-small&prompt={key}&step=1"
    got = _api(client, query)
    content, notices = _content(client, dash_app, query)
    assert got["notices"] == notices
    (group,) = got["tables"]["prompts-groups"]["rows"]
    assert group["n"] == 4 and group["signal"] is True and group["step"] == 1
    cards = got["tables"]["prompts-group-cards"]["rows"]
    assert [c["tokens_href"] for c in cards] == [h for h in _links(content) if h.startswith("/tokens")]
    for i, card in enumerate(cards):
        assert card["text"] in text(component(content, f"prompts-groups-0-card-{i}"))
    assert [c["reward"] for c in cards] == sorted((c["reward"] for c in cards), reverse=True)
    none = _api(client, f"?run=trl-grpo-small&prompt={key}&step=5")
    assert none["tables"]["prompts-groups"]["rows"] == [] and "no response at step 5" in none["notices"][0]


def test_apiprompts005_bad_queries_are_notices(client, dash_app, fixtures_dir):
    """Bad values fall back with the page's notices; an unknown run falls back as the page does."""
    query = "?run=trl-grpo-small&prompt=zz&sort=x&page=0&min_steps=-1&step=3"
    got = _api(client, query)
    _, notices = _content(client, dash_app, query)
    assert got["notices"] == notices and len(notices) >= 4
    assert got["view"]["prompt"] is None and len(got["rows"]) == 50
    unknown = _api(client, "?run=no-such-run")
    _, notices = _content(client, dash_app, "?run=no-such-run")
    assert unknown["notices"] == notices and "no-such-run" in notices[0]
