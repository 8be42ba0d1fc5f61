"""The responses page's JSON answer (/api/v1/responses): its rows are the grid's first block as the page's
callback serves it, its notices the page's, the selected response's texts the drawer's; the top 10 by KL of
a step equal a count by hand from the files; bad queries answer with notices, never a 500."""

from __future__ import annotations

import json
import math

import pytest

from tests.conftest import router_body
from tests.dash_calls import call, component, text

RUN = "trl-grpo-small"
GRID_REQUEST = {"startRow": 0, "endRow": 100, "sortModel": []}  # the grid's first request (BLOCK_SIZE rows)


def _api(client, query):
    r = client.get(f"/api/v1/responses{query}")
    assert r.status_code == 200, r.get_data(as_text=True)[:300]
    return r.get_json()


def _page(client, query):
    """The page as a fresh load renders it (the pages router), and the view state it stores."""
    page = client.post("/_dash-update-component", json=router_body("/responses", query)).get_json()
    page = page["response"]
    return page, component(page, "responses-view")["props"]["data"]


def _notices(page) -> list[str]:
    return [text(a) for a in component(page, "responses-notices")["props"]["children"]]


@pytest.mark.parametrize(
    "query",
    [
        f"?run={RUN}&step=25&sort=kl_mean&order=desc",
        f"?run={RUN}&step=all&sort=advantage&order=asc&reward_min=1",
        f"?run={RUN}&step=3&q=the%20(movie|film)&cols=reward,kl_mean,end",
        "?run=trl-ppo-small&step=all&loses=1&sort=gain&order=asc",
        "?run=rlloggingboard-eval-poem&step=all&q=%E6%9C%88",
        "?run=trl-ppo-small&step=25&tok=%C4%A0the&tok_metric=kl&tok_min=0.01",
    ],
)
def test_apiresp001_rows_are_the_grids(client, dash_app, fixtures_dir, query):
    """Every row of the answer is the grid's row at the same place, with the same values."""
    got = _api(client, query)
    page, view_data = _page(client, query)
    assert got["view"]["query"] == view_data
    assert got["notices"] == _notices(page)
    shown = call(client, dash_app, "responses-grid.getRowsResponse",
                 {"responses-grid.getRowsRequest": GRID_REQUEST, "responses-view.data": view_data})  # fmt: skip
    rows = shown["responses-grid"]["getRowsResponse"]["rowData"]
    grid = got["tables"]["responses-grid"]
    assert got["rows"] == grid["rows"] and len(rows) == len(grid["rows"]) > 0
    for mine, theirs in zip(grid["rows"], rows, strict=True):
        assert mine == {k: theirs.get(k) for k in grid["columns"]}
    assert grid["total"] == shown["responses-grid"]["getRowsResponse"].get("rowCount")
    assert {"source_line", "sample_id", "tokens_href", got["view"]["sort"]} <= set(grid["columns"])


def test_apiresp002_top_kl_by_hand(client, fixtures_dir):
    """The 10 highest-KL responses of a step, in one URL, equal the k3 KL averaged over each response's
    positions by hand (logprobs and ref_logprobs paired from the first; data/metrics/response.py
    response_list_aggregates), in order, with their values."""
    step = 25
    found = []
    for f in sorted((fixtures_dir / RUN).glob("*.jsonl")):
        for i, line in enumerate(f.read_text().splitlines(), 1):
            rec = json.loads(line)
            if rec["step"] != step:
                continue
            pairs = zip(rec["logprobs"], rec["ref_logprobs"], strict=False)  # paired from the first
            ks = [math.exp(r - p) - 1 - (r - p) for p, r in pairs]
            found.append((sum(ks) / len(ks), f"{f.name}:{i}"))
    top = sorted(found, reverse=True)[:10]
    got = _api(client, f"?run={RUN}&step={step}&sort=kl_mean&order=desc&limit=10")
    assert [r["source_line"] for r in got["rows"]] == [where for _, where in top]
    for row, (kl, _) in zip(got["rows"], top, strict=True):
        assert math.isclose(row["kl_mean"], kl, rel_tol=1e-9)
    grid = got["tables"]["responses-grid"]
    assert grid["total"] == len(found) and "first 10 of 16" in grid["cut_off"]


def test_apiresp003_selected_response_is_the_drawers(client, dash_app, fixtures_dir):
    """With sample= the answer holds the texts the drawer shows and the token page's link."""
    first = _api(client, f"?run={RUN}&step=4")["rows"][0]
    query = f"?run={RUN}&step=4&q=the&sample={first['sample_id']}"
    got = _api(client, query)
    _, view_data = _page(client, query)
    shown = call(client, dash_app, "responses-summary.children", {"responses-view.data": view_data})
    panel = text(shown["responses-text"]["children"])
    (texts,) = got["tables"]["responses-text"]["rows"]
    assert texts["sample_id"] == first["sample_id"] and texts["step"] == 4
    for key in ("prompt", "response", "source_line"):
        assert texts[key] and texts[key] in panel, key
    assert texts["tokens_href"].startswith(f"/tokens?run={RUN}&sample={first['sample_id']}")


def test_apiresp004_bad_queries_are_notices(client, dash_app, fixtures_dir):
    """Bad values fall back with the page's notices (and limit= with its own, and the refused search the page
    says beside its box); an unknown run is a notice."""
    query = f"?run={RUN}&step=abc&sort=nope&q=(&bogus=1"
    got = _api(client, query + "&limit=500")
    page, _ = _page(client, query)
    # The page says the refused pattern beside its search box, the answer among its notices (no box).
    refused = [n for n in got["notices"] if n.endswith("the text search is not applied.")]
    kept = [n for n in got["notices"] if n not in refused]
    assert len(refused) == 1 and kept[: len(_notices(page))] == _notices(page) and len(_notices(page)) >= 3
    assert got["notices"][-1].startswith("Ignored limit=500")
    assert len(got["rows"]) == 16 and got["view"]["sort"] == "reward"
    assert _api(client, f"?run={RUN}&limit=x")["notices"] == ["Ignored limit='x': not a whole number."]
    unknown = _api(client, "?run=no-such-run")
    assert unknown["run"] is None and unknown["rows"] == [] and "no-such-run" in unknown["notices"][0]
