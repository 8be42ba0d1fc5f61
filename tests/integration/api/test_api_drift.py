"""The drifting-tokens page's JSON answer (/api/v1/drift) is what the page shows for the same URL: its notices,
the board's rows (texts, counts, means as the page writes them, links) and its line of what it ranks, read
through the Flask test client; the rows against a hand computation from the files; bad queries answer with
notices, as the page does."""

from __future__ import annotations

import json
import math

import pytest

from components.format import num, signed
from tests.conftest import router_body
from tests.dash_calls import component, text
from tests.unit.test_token_drift import by_hand

RUN = "trl-grpo-small"


def _api(client, query: str) -> dict:
    r = client.get(f"/api/v1/drift{query}")
    assert r.status_code == 200, r.get_data(as_text=True)[:300]
    return r.get_json()


def _page(client, query: str) -> dict:
    return client.post("/_dash-update-component", json=router_body("/drift", query)).get_json()["response"]


def _notices(page) -> list[str]:
    el = component(page, "drift-notices")
    if el is None:
        return []
    kids = el["props"].get("children") or []
    return [t for t in (text(k) for k in (kids if isinstance(kids, list) else [kids])) if t]


def _links(tree) -> list[str]:
    """The hrefs of the links in a cell, in order."""
    if isinstance(tree, list):
        return [h for t in tree for h in _links(t)]
    if isinstance(tree, dict):
        props = tree.get("props") or {}
        own = [props["href"]] if tree.get("type") == "Link" else []
        return own + _links(props.get("children"))
    return []


@pytest.mark.parametrize(
    "query",
    [
        f"?run={RUN}&a=1&b=60&min_n=1",  # step 60 resolved to 25; more tokens than the board shows
        "?run=trl-ppo-small",  # the run's first and last steps
    ],
)
def test_apidrift001_answer_is_what_the_drift_page_shows(client, fixtures_dir, query):
    """Notices, the line above the board and every row of the board (counts, means, change, links)."""
    got, page = _api(client, query), _page(client, query)
    assert got["notices"] == _notices(page)
    board = component(page, "drift-board")
    body = next(c for c in board["props"]["children"] if c["type"] == "Tbody")
    shown = body["props"]["children"]
    assert len(shown) == len(got["rows"]) > 0
    for tr, r in zip(shown, got["rows"], strict=True):
        tds = tr["props"]["children"]
        cells = [text(td) for td in tds]
        assert cells[:8] == [
            str(r["rank"]),
            r["token"],
            r["text"],
            f"{r['n_a']:,}",
            num(r["mean_a"]),
            f"{r['n_b']:,}",
            num(r["mean_b"]),
            signed(r["change"]),
        ]
        assert _links(tds[8]) == [r["href_a"], r["href_b"], r["href_all"]]
    # The line above the board, as one whole text of the page.
    assert json.dumps(got["view"]["explain"], ensure_ascii=False) in json.dumps(page, ensure_ascii=False)
    a, b = got["view"]["steps"]
    head = text(next(c for c in board["props"]["children"] if c["type"] == "Thead"))
    assert f"mean at {a}" in head and f"mean at {b}" in head
    table = got["tables"]["drift-board"]
    assert table["total"] >= len(got["rows"])
    assert (table["cut_off"] is not None) == (table["total"] > len(got["rows"]))


def test_apidrift002_board_by_hand(client, fixtures_dir):
    """The GRPO board of steps 1 and 25 (every token seen at least once at both): the rows, their order and
    how many tokens it ranks, from the rank files' log-ratios by hand (tests.unit.test_token_drift.by_hand:
    TRL's ``per_token_logps − ref_per_token_logps``); the board shows its first 30 and says it is cut."""
    want = by_hand(fixtures_dir, 1, 25, 1)
    got = _api(client, f"?run={RUN}&a=1&b=25&min_n=1")
    table = got["tables"]["drift-board"]
    assert got["view"]["steps"] == [1, 25] and table["total"] == len(want) > len(got["rows"]) == 30
    assert table["cut_off"] == f"the board shows the first 30 of the {len(want):,} tokens it ranks"
    for r, (tok, n_a, mean_a, n_b, mean_b, change) in zip(got["rows"], want, strict=False):
        assert (r["token"], r["n_a"], r["n_b"]) == (tok, n_a, n_b)
        for x, y in ((r["mean_a"], mean_a), (r["mean_b"], mean_b), (r["change"], change)):
            assert math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12), (tok, x, y)


def test_apidrift003_bad_queries_answer_with_notices(client, fixtures_dir):
    """Bad steps, metric and min_n fall back with the page's notices; a run with no token fields says there
    is nothing to compare; never a 500."""
    query = f"?run={RUN}&a=x&b=-5&min_n=0&metric=zz"
    got = _api(client, query)
    assert got["notices"] == _notices(_page(client, query))
    assert any("Ignored a='x'" in n for n in got["notices"])
    assert got["view"]["metric"] == "log_ratio" and got["view"]["min_n"] == 5
    poem = _api(client, "?run=rlloggingboard-eval-poem")
    assert poem["view"]["problem"] == "no-tokens" and poem["rows"] == []
    assert poem["notices"][-1].startswith("No tokens to compare.")
