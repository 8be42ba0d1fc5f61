"""The compare page's JSON answer (/api/v1/compare) is what the page shows for the same URL: its notices,
every chart, the summary table, the agreement checks, the pairing and its solved lists, an opened prompt;
its figures by hand from the files (last-step mean reward, the shared prompts and those paired within the
gap limit); bad queries are notices, never a 500."""

from __future__ import annotations

import json
import math
import unicodedata
from urllib.parse import quote

import numpy as np
import pytest

from components.format import value as shown_value
from data.compare.summary import KINDS
from tests.conftest import router_body
from tests.dash_calls import call, component, figure_traces, text

GRPO, PPO = "trl-grpo-small", "trl-ppo-small"
VIEW = "compare-view.data"


def _api(client, query):
    r = client.get(f"/api/v1/compare{query}")
    assert r.status_code == 200, r.get_data(as_text=True)[:300]
    assert r.mimetype == "application/json"
    return r.get_json()


def _lines(run_dir):
    return [json.loads(x) for f in sorted(run_dir.glob("*.jsonl")) for x in f.read_text().splitlines() if x]


def _walk(tree):
    """Every component of a layout or a callback's children, as JSON."""
    if isinstance(tree, dict):
        if "props" in tree:
            yield tree
        for v in (tree.get("props") or tree).values():
            yield from _walk(v)
    elif isinstance(tree, list):
        for v in tree:
            yield from _walk(v)


def _notes(children) -> list[str]:
    """The lines of a notes list (each a Div) as the page shows them."""
    return [text(c) for c in children or []]


def _same_figure(page_fig, api_fig, cid):
    """The page's traces and the answer's: equal, but for the curves' values, which the page rounds to 6
    significant digits and sends as float32 where the answer keeps them whole."""
    shown, got = figure_traces(page_fig), api_fig["traces"]
    assert len(shown) == len(got), cid
    for s, g in zip(shown, got, strict=True):
        assert set(s) == set(g), (cid, set(s) ^ set(g))
        for key in s:
            if key in ("y", "x") and s[key] != g[key]:
                a = np.array(s[key], dtype=float)
                b = np.array(g[key], dtype=float)
                assert np.allclose(a, b, rtol=1e-5, atol=0, equal_nan=True), (cid, key)
            else:
                assert s[key] == g[key], (cid, key)


@pytest.fixture
def compared(client, fixtures_dir):
    """The answer and the page for one URL: two runs, smoothing, a step PPO lacks, a band, a prompt
    opened (one GRPO solves and PPO does not)."""
    first = _api(client, f"?run={GRPO}&run={PPO}")
    match = first["tables"]["compare-solved-a"]["rows"][0]["match"]
    search = f"?run={GRPO}&run={PPO}&smooth=0.6&band=p25-p75&at={quote(PPO)}%3A999&prompt={match}"
    return search, _api(client, search)


def test_apicompare001_answer_is_what_the_page_shows(client, dash_app, compared):
    """Every notice in the page's order, every chart (by id), the summary cells as formatted, each run's
    agreement checks, the solved lists' titles and items, and the opened prompt's responses."""
    search, got = compared
    page = client.post("/_dash-update-component", json=router_body("/compare", search)).get_json()
    page = page["response"]
    q = component(page, "compare-view")["props"]["data"]
    assert got["view"]["url"] == "/compare" + q
    assert got["view"]["shown_at"] == {GRPO: 25, PPO: 25} and got["view"]["band"] == "p25-p75"
    notices = _notes(component(page, "compare-notices")["props"]["children"])
    values = {VIEW: q}
    curves = call(client, dash_app, "compare-curves.children", values)
    trainer = call(client, dash_app, "compare-trainer-fig.figure", values)
    dist = call(client, dash_app, "compare-dist.figure", values)
    pairs = call(client, dash_app, "compare-scatter.figure", values)
    opened = call(client, dash_app, "compare-opened.children", values)

    # Notices: the page's, then each section's notes, in the page's order.
    charts = [c for c in _walk(curves["compare-curves"]["children"]) if c["type"] == "Graph"]
    notes = list(notices) + _notes(curves["compare-step-notes"]["children"])
    for chart_card in _walk(curves["compare-curves"]["children"]):
        if chart_card["type"] == "CardBody":
            notes += _notes(chart_card["props"]["children"][0]["props"]["children"])
    dist_notes = _notes(dist["compare-dist-notes"]["children"])
    notes += _notes(trainer["compare-trainer-notes"]["children"]) + dist_notes
    notes += [t.strip() for t in pairs["compare-pair-notes"]["children"]]
    assert got["notices"] == notes
    assert any("999" in n for n in dist_notes) and got["view"]["at"] == {PPO: 999}

    # Every chart by its id, the same traces.
    ids = [c["props"]["id"] for c in charts]
    assert ids and ids[0] == "compare-curve-reward"
    assert set(got["figures"]) == {*ids, "compare-trainer-fig", "compare-dist", "compare-scatter",
                                   "compare-diff-hist", "compare-over"}  # fmt: skip
    for c in charts:
        _same_figure(c["props"]["figure"], got["figures"][c["props"]["id"]], c["props"]["id"])
    _same_figure(trainer["compare-trainer-fig"]["figure"], got["figures"]["compare-trainer-fig"], "trainer")
    assert figure_traces(dist["compare-dist"]["figure"]) == got["figures"]["compare-dist"]["traces"]
    for cid in ("compare-scatter", "compare-diff-hist", "compare-over"):
        _same_figure(pairs[cid]["figure"], got["figures"][cid], cid)
    # Each distribution bar's interval: [lo, hi, count], the last bar open at its top.
    bars = got["figures"]["compare-dist"]["traces"][0]["customdata"]
    assert bars[-1][1] is None and all(a[1] == b[0] for a, b in zip(bars, bars[1:], strict=False))

    # The summary table, cell by cell as the page formats it; the main rows are its rows.
    table = got["tables"]["compare-summary"]
    assert got["rows"] == table["rows"] and [r["run"] for r in got["rows"]] == [GRPO, PPO]
    trs = [c for c in _walk(curves["compare-summary"]["children"]) if c["type"] == "Tr"][1:]
    for tr, row in zip(trs, table["rows"], strict=True):
        cells = [text(td) for td in tr["props"]["children"]]
        want = [row["run"], *(shown_value(row[k], KINDS.get(k, "num")) for k in table["columns"][1:])]
        assert cells == want

    # Agreement checks: each run's table names its checks and verdicts.
    for i, run in enumerate((GRPO, PPO)):
        shown = text(component(trainer["compare-agreement"]["children"], f"compare-agreement-{i}"))
        rows = got["tables"][f"compare-agreement-{i}"]["rows"]
        assert rows and all(r["run"] == run and r["key"] in shown and r["status"] in shown for r in rows)

    # The pairing: the scatter's points are the table's rows, in order; the solved lists' items too.
    pts = got["figures"]["compare-scatter"]["traces"][0]["customdata"]
    assert [p[0] for p in pts] == [r["match"] for r in got["tables"]["compare-pairs"]["rows"]]
    for side in ("a", "b"):
        title = pairs[f"compare-solved-{side}-title"]["children"]
        assert title == got["view"]["pair"]["solved_titles"][side]
        items = [c["props"]["id"]["match"] for c in _walk(pairs[f"compare-solved-{side}"]["children"])
                 if isinstance(c["props"].get("id"), dict)]  # fmt: skip
        assert items == [r["match"] for r in got["tables"][f"compare-solved-{side}"]["rows"]]

    # The opened prompt: each run's responses, best first, as the page shows them.
    for side in ("a", "b"):
        col = component(opened["compare-opened"]["children"], f"compare-responses-{side}")
        texts = [text(c) for c in _walk(col) if c["type"] == "Pre"]
        assert texts == [r["response"] for r in got["tables"][f"compare-responses-{side}"]["rows"]]
    assert got["view"]["pair"]["opened"]["match"] == got["view"]["prompt"]


def _match_text(prompt: str) -> str:
    # The module's definition (data/compare/prompts.py): NFC, white space runs as one space, stripped.
    return " ".join(unicodedata.normalize("NFC", prompt).split())


def test_apicompare002_figures_by_hand(client, fixtures_dir):
    """From the files: each run's last-step mean reward (the summary's and the reward curve's last point,
    at full precision), the prompts the two runs share, and those whose closest steps are within the
    default gap limit (10 % of the longer run's span of steps)."""
    got = _api(client, f"?run={GRPO}&run={PPO}")
    lines = {run: _lines(fixtures_dir / run) for run in (GRPO, PPO)}
    rows = {r["run"]: r for r in got["rows"]}
    for run, ls in lines.items():
        last = max(x["step"] for x in ls)
        rewards = [x["reward"] for x in ls if x["step"] == last]
        mean = sum(rewards) / len(rewards)
        assert rows[run]["last_step"] == last
        assert math.isclose(rows[run]["reward_last"], mean, rel_tol=1e-12), run
        line = next(t for t in got["figures"]["compare-curve-reward"]["traces"] if t.get("name") == run)
        assert line["x"][-1] == last and math.isclose(line["y"][-1], mean, rel_tol=1e-12), run
    steps = {run: {} for run in lines}
    for run, ls in lines.items():
        for x in ls:
            steps[run].setdefault(_match_text(x["prompt"]), set()).add(x["step"])
    shared = set(steps[GRPO]) & set(steps[PPO])
    spans = [max(x["step"] for x in ls) - min(x["step"] for x in ls) + 1 for ls in lines.values()]
    limit = 0.1 * max(spans)
    near = [m for m in shared if min(abs(a - b) for a in steps[GRPO][m] for b in steps[PPO][m]) <= limit]
    pair = got["view"]["pair"]
    assert (pair["shared"], pair["a_prompts"], pair["b_prompts"]) == (
        len(shared),
        len(steps[GRPO]),
        len(steps[PPO]),
    )
    assert (
        pair["gap_limit"] == limit and pair["paired"] == len(near) == got["tables"]["compare-pairs"]["total"]
    )
    assert pair["left_out"] == len(shared) - len(near) > 0
    assert any(f"{len(shared) - len(near)} of the {len(shared)} shared prompts" in n for n in got["notices"])
    previews = {r["preview"] for r in got["tables"]["compare-pairs"]["rows"]}
    assert {_match_text(p) for p in previews} == set(near)


@pytest.mark.parametrize(
    "query, said",
    [
        ("?run=nope&smooth=abc&x=zzz", ["Unknown run 'nope'", "smooth", "Choose runs to compare"]),
        (
            f"?run={GRPO}&at={GRPO}:x&prompt=zz&gap=-1",
            ["Ignored at=", "prompt='zz'", "gap=", "Two runs are needed"],
        ),
        (f"?run={GRPO}&run={PPO}&prompt={'0' * 32}", ["not shared by the two runs"]),
        ("?run=%00&run=" + "x" * 3000, ["Unknown run"]),
    ],
)
def test_apicompare003_bad_queries_are_notices(client, fixtures_dir, query, said):
    """Bad values fall back with a notice each, as the page's; never a 500."""
    got = _api(client, query)
    for s in said:
        assert any(s in n for n in got["notices"]), (s, got["notices"])
