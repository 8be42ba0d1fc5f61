"""The scatter page's JSON (/api/v1/scatter) on real runs: the figure, its note, title and the box's line
equal what the page's callback draws for the same URL (through the Flask test client); the points and the
box's count equal hand computations from trl-grpo-small's files; a bad query answers with the page's
notices, never a 500."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from tests.conftest import page_url_key, router_body
from tests.dash_calls import call, component, figure_traces, text

RUN, STEP = "trl-grpo-small", 7
URL = page_url_key("/scatter")
BOX = f"?run={RUN}&step={STEP}&x=ref_reward&y=reward&ref_min=0.5&ref_max=2&reward_min=1&reward_max=3"


def _api(client, query: str) -> dict:
    r = client.get(f"/api/v1/scatter{query}")
    assert r.status_code == 200, r.get_data(as_text=True)[:300]
    return r.get_json()


def _lines(fixtures_dir) -> list[dict]:
    files = sorted((fixtures_dir / RUN).glob("*.jsonl"))
    return [json.loads(x) for f in files for x in f.read_text().splitlines() if x]


def _drawn(client, dash_app, search: str) -> dict:
    return call(
        client, dash_app, "scatter-figure.figure", {f"{URL}.search": search, f"{URL}.pathname": "/scatter"}
    )


def _shown_notices(client, search: str) -> list[str]:
    page = client.post("/_dash-update-component", json=router_body("/scatter", search)).get_json()["response"]
    return [text(a) for a in component(page, "scatter-notices")["props"]["children"]]


@pytest.mark.parametrize(
    "search", [BOX, "?run=trl-ppo-small&step=all&xlog=1", f"?run={RUN}&step=3-9&x=length"]
)
def test_api_scatter001_figure_note_and_box_are_the_pages(client, dash_app, fixtures_dir, search):
    """The figure's traces, its title and note, and the box's line (count and link) are the page's."""
    got, page = _api(client, search), _drawn(client, dash_app, search)
    fig = got["figures"]["scatter-figure"]
    assert fig["traces"] == figure_traces(page["scatter-figure"]["figure"])
    assert fig["title"] == page["scatter-title"]["children"]
    assert fig["note"] == page["scatter-note"]["children"]
    line = text(page["scatter-box"]["children"])
    if "scatter-box" in got["tables"]:
        row = got["rows"][0]
        assert line == f"Box: {row['box']} · {row['responses']:,} responses · open them on the responses page"
        links = [
            c["props"]["href"]
            for c in page["scatter-box"]["children"]
            if isinstance(c, dict) and "href" in c["props"]
        ]
        assert links == [row["href"]]
    else:
        assert line.startswith("Drag a box")
    assert got["notices"] == _shown_notices(client, search)


def test_api_scatter002_points_and_box_by_hand(client, fixtures_dir):
    """At step 7, one point per response with (ref_reward, reward) as in the files, and the box's count is
    the number of those with 0.5 <= ref_reward < 2 and 1 <= reward < 3."""
    lines = [x for x in _lines(fixtures_dir) if x["step"] == STEP]
    got = _api(client, BOX)
    (trace,) = got["figures"]["scatter-figure"]["traces"][:1]
    assert trace["type"] == "scatter" and got["view"]["drawn"]["as"] == "points"
    assert Counter((c[2], c[3]) for c in trace["customdata"]) == Counter(
        (x["ref_reward"], x["reward"]) for x in lines
    )
    assert got["view"]["drawn"]["responses"] == len(lines)
    inside = [x for x in lines if 0.5 <= x["ref_reward"] < 2 and 1 <= x["reward"] < 3]
    assert got["rows"][0]["responses"] == len(inside) > 0
    assert got["rows"][0]["href"].startswith("/responses?run=trl-grpo-small&step=7")
    assert got["view"]["box"] == {"x_min": 0.5, "x_max": 2.0, "y_min": 1.0, "y_max": 3.0}


def test_api_scatter003_bad_query_is_the_pages_notices(client):
    """Unknown columns, a half box and a step the run lacks: 200 with the page's own notices."""
    search = f"?run={RUN}&step=999&x=nope&reward_min=1&junk=2"
    got = _api(client, search)
    assert got["notices"] == _shown_notices(client, search) and len(got["notices"]) >= 3
    assert got["view"]["x"] == "kl_sum" and got["view"]["box"] is None and "scatter-box" not in got["tables"]


def test_api_scatter004_density_cells_by_hand(client, dash_app, board_root, tmp_path):
    """More responses than data.scatter.MAX_POINTS: the answer is the page's 2-D histogram, and each
    non-empty cell's count ([count, x lo, x hi, y lo, y hi] in its customdata; the last column and row
    closed) is the number of the file's lines inside it; the counts add up to every response."""
    import random

    from data.scatter import MAX_POINTS

    rng = random.Random(5)
    run = tmp_path / "root" / "many"
    run.mkdir(parents=True)
    lines = [
        {"prompt": f"p{i % 50}", "response": f"r{i}", "step": 1 + i % 3,
         "reward": round(rng.gauss(0, 1), 3), "ref_reward": round(rng.uniform(-2, 2), 2)}
        for i in range(MAX_POINTS + 700)
    ]  # fmt: skip
    (run / "data.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    board_root(tmp_path / "root", cache_dir=tmp_path / "cache")
    search = "?run=many&step=all&x=ref_reward&y=reward"
    got, page = _api(client, search), _drawn(client, dash_app, search)
    fig = got["figures"]["scatter-figure"]
    assert fig["traces"] == figure_traces(page["scatter-figure"]["figure"])
    assert fig["note"] == page["scatter-note"]["children"] and "histogram" in fig["note"]
    assert got["view"]["drawn"] == {"responses": len(lines), "as": "histogram", "points_up_to": MAX_POINTS,
                                    "not_finite": 0, "not_on_log_axis": 0}  # fmt: skip
    heat = next(t for t in fig["traces"] if t["type"] == "heatmap")
    cells = [c for row in heat["customdata"] for c in row if c[0]]
    x_top = max(c[2] for row in heat["customdata"] for c in row)
    y_top = max(c[4] for row in heat["customdata"] for c in row)
    for count, xlo, xhi, ylo, yhi in cells:
        inside = [
            x for x in lines
            if xlo <= x["ref_reward"] and (x["ref_reward"] < xhi or (xhi == x_top and x["ref_reward"] <= xhi))
            and ylo <= x["reward"] and (x["reward"] < yhi or (yhi == y_top and x["reward"] <= yhi))
        ]  # fmt: skip
        assert count == len(inside), (xlo, xhi, ylo, yhi)
    assert sum(c[0] for c in cells) == len(lines)
