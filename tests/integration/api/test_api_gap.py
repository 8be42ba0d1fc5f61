"""The gap page's JSON (/api/v1/gap): on a NeMo-RL-shaped run (written as tests/integration/test_gap.py
writes it) and on a contract run without inference log-probs, every chart with its title and note, the
formulas and the token link equal what the page's callback returns for the same URL (through the Flask
test client); the masked-IS token share per step equals a hand count from the files; a bad query answers
with the page's notices, never a 500."""

from __future__ import annotations

import json

import pytest

from tests.conftest import page_url_key, router_body
from tests.dash_calls import call, component, figure_traces, text
from tests.unit.metrics.test_infer_gap import hand_gap, write_nemo_rl_run

URL = page_url_key("/gap")
CURVES = ("gap-curve-gap", "gap-curve-tail", "gap-curve-correction")


@pytest.fixture
def nemo(board_root, tmp_path, fixtures_dir):
    """A root of the NeMo-RL-shaped run beside trl-grpo-small (a contract run without inference log-probs)."""
    import shutil

    write_nemo_rl_run(tmp_path / "root" / "nemo", seed=3)
    shutil.copytree(fixtures_dir / "trl-grpo-small", tmp_path / "root" / "trl-grpo-small")
    board_root(tmp_path / "root", cache_dir=tmp_path / "cache")
    return tmp_path / "root" / "nemo"


def _api(client, query: str) -> dict:
    r = client.get(f"/api/v1/gap{query}")
    assert r.status_code == 200, r.get_data(as_text=True)[:300]
    return r.get_json()


def _shown_notices(client, search: str) -> list[str]:
    page = client.post("/_dash-update-component", json=router_body("/gap", search)).get_json()["response"]
    return [text(a) for a in component(page, "gap-notices")["props"]["children"]]


@pytest.mark.parametrize(
    "search", ["?run=nemo&rule=mis&c=2&step=1", "?run=nemo&rule=seq&c=1.2&band=p5-p95", "?run=trl-grpo-small"]
)
def test_api_gap001_charts_formulas_and_link_are_the_pages(client, dash_app, nemo, search):
    """Each chart's traces, title and note, the formulas in the page's order and the token link."""
    got = _api(client, search)
    page = call(
        client, dash_app, "gap-curve-gap.figure", {f"{URL}.search": search, f"{URL}.pathname": "/gap"}
    )
    for fid in CURVES:
        assert got["figures"][fid]["traces"] == figure_traces(page[fid]["figure"]), fid
        assert got["figures"][fid]["title"] == page[f"{fid}-title"]["children"], fid
        assert (got["figures"][fid]["note"] or "") == (page[f"{fid}-note"]["children"] or ""), fid
    formulas = got["tables"]["gap-formulas"]
    shown = text(page["gap-formulas"]["children"])
    assert shown.startswith(got["view"]["corrections"])
    positions = [shown.index(f"{r['name']}: {r['formula']} ({r['touches']})") for r in formulas["rows"]]
    assert positions == sorted(positions) and formulas["rows"][0]["previewed"]
    link = page["gap-token-link"]["children"]
    if link is None:
        assert "gap-token-link" not in got["tables"]
    else:
        assert got["tables"]["gap-token-link"]["rows"][0]["href"] == link["props"]["href"]
    assert got["notices"] == _shown_notices(client, search)


def test_api_gap002_masked_is_share_by_hand(client, nemo):
    """Masked IS at C = 2 masks the tokens with |Δ| > ln 2: per step, their share of the step's counted
    tokens, from the NeMo-RL lines (tests.unit.metrics.test_infer_gap.hand_gap), is the chart's."""
    got = _api(client, "?run=nemo&rule=mis&c=2&step=2")
    view = {"run": "nemo", "step": 2, "band": "p25-p75", "rule": "mis", "c": 2.0}
    assert got["view"] == view | {"corrections": got["view"]["corrections"]}
    masked = next(t for t in got["figures"]["gap-curve-correction"]["traces"] if t["name"] == "tokens masked")
    for step, share in zip(masked["x"], masked["y"], strict=True):
        lines = (nemo / f"train_data_step{step}.jsonl").read_text().splitlines()
        hands = [hand_gap(json.loads(x)) for x in lines]
        assert share == pytest.approx(sum(h["tail"] for h in hands) / sum(h["n"] for h in hands), rel=1e-12)
    assert masked["x"] == [1, 2] and max(masked["y"]) > 0


def test_api_gap003_without_inference_logprobs_says_so(client, nemo):
    """trl-grpo-small has no inference log-probs: each chart's note says the gap cannot be computed."""
    from data.gap_panels import NO_GAP

    got = _api(client, "?run=trl-grpo-small")
    assert got["figures"]["gap-curve-correction"]["note"] == NO_GAP
    assert all(NO_GAP in (got["figures"][f]["note"] or "") for f in CURVES)
    assert "gap-token-link" not in got["tables"]


def test_api_gap004_bad_query_is_the_pages_notices(client, nemo):
    """An unknown rule, a C of 1 or less and a step the run lacks: 200 with the page's own notices."""
    search = "?run=nemo&rule=clip&c=0.5&step=9&zzz=1"
    got = _api(client, search)
    assert got["notices"] == _shown_notices(client, search) and len(got["notices"]) >= 3
    assert (got["view"]["rule"], got["view"]["c"]) == ("mis", 2.0)
