"""Scatter page without a browser: layout from the URL, a box dragged over the figure (its callbacks POSTed
as the renderer does) and the responses it opens, against a hand filter of the rollout files."""

from __future__ import annotations

import json
import math
import sys
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.conftest import dash_post, find, page_url_key

URL = page_url_key("/scatter")
RUN = "trl-grpo-small"
OUTS = (
    *(
        "scatter-steps.value",
        "scatter-x.value",
        "scatter-y.value",
        "scatter-xlog.value",
        "scatter-ylog.value",
    ),
    *("scatter-notices.children", "scatter-point.children"),
)
SYNC = f"..{URL}.search..." + "...".join(OUTS) + ".."
DRAW = "..scatter-figure.figure...scatter-note.children...scatter-box.children...scatter-title.children.."


@pytest.fixture
def page(dash_app):
    return sys.modules["pages.scatter"]


def _sync(client, search, trigger, value):
    """The page's URL <-> controls callback after ``trigger`` (``scatter-figure.selectedData`` …) moved."""
    ids = {
        "scatter-steps.value": None,
        "scatter-x.value": "kl_sum",
        "scatter-y.value": "reward",
        "scatter-xlog.value": False,
        "scatter-ylog.value": False,
        "scatter-clear.n_clicks": None,
        "scatter-figure.selectedData": None,
    }
    ids[trigger] = value
    inputs = [{"id": json.loads(URL), "property": "search", "value": search}] + [
        {"id": k.rsplit(".", 1)[0], "property": k.rsplit(".", 1)[1], "value": v} for k, v in ids.items()
    ]
    state = [{"id": json.loads(URL), "property": "pathname", "value": "/scatter"}]
    return dash_post(client, SYNC, inputs, state, changed=[trigger])


def _draw(client, search):
    inputs = [{"id": json.loads(URL), "property": "search", "value": search}]
    state = [{"id": json.loads(URL), "property": "pathname", "value": "/scatter"}]
    return dash_post(client, DRAW, inputs, state)


def _links(component) -> list[str]:
    if isinstance(component, dict):
        props = component.get("props", {})
        found = [props["href"]] if component.get("type") == "Link" else []
        kids = props.get("children")
        for kid in kids if isinstance(kids, list) else [kids]:
            found += _links(kid)
        return found
    if isinstance(component, list):
        return [h for c in component for h in _links(c)]
    return []


def _text(component) -> str:
    if isinstance(component, str | int | float):
        return str(component)
    if isinstance(component, list):
        return "".join(_text(c) for c in component)
    if isinstance(component, dict):
        return _text(component.get("props", {}).get("children"))
    return ""


def test_scatter201_layout_seeds_controls_from_url(page, fixtures_dir):
    """The steps box and the two columns come from the query string; a bad value is noticed."""
    lay = page.layout(run=RUN, step="5-20", x="repetition", y="nope")
    assert find(lay, "scatter-steps").value == "5-20"
    assert (find(lay, "scatter-x").value, find(lay, "scatter-y").value) == ("repetition", "reward")
    assert "Ignored y='nope'" in str(find(lay, "scatter-notices").children)


def test_scatter202_box_opens_exactly_the_responses_inside(client, fixtures_dir):
    """Dragging a box over steps 5-20 writes its ranges into the URL; the figure draws it; its link opens
    the responses page on exactly the rows a hand filter of the rollout files keeps (KL sum by hand: Σ k3
    over the positions with both log-probs), and the count beside the link is theirs."""
    search = f"?run={RUN}&step=5-20"
    box = {"range": {"x": [0.31, 6.07], "y": [0.93, 2.61]}, "points": []}
    out = _sync(client, search, "scatter-figure.selectedData", box)
    new = out[URL]["search"]
    q = {k: float(v[0]) for k, v in parse_qs(new.lstrip("?")).items() if k.endswith(("_min", "_max"))}
    assert set(q) == {"kl_sum_min", "kl_sum_max", "reward_min", "reward_max"}
    assert (
        q["kl_sum_min"] <= 0.31
        and q["kl_sum_max"] > 6.07
        and q["reward_min"] <= 0.93
        and q["reward_max"] > 2.61
    )
    drawn = _draw(client, new)
    assert drawn["scatter-figure"]["figure"]["layout"]["shapes"][0]["x0"] == q["kl_sum_min"]
    (href,) = _links(drawn["scatter-box"]["children"])
    parts = urlsplit(href)
    assert parts.path == "/responses"
    rq = parse_qs(parts.query)
    assert (rq["step"], rq["step_min"], rq["step_max"]) == (["all"], ["5"], ["21"])
    want = set()
    for f in sorted((fixtures_dir / RUN).glob("*.jsonl")):
        for i, line in enumerate(f.read_text().splitlines(), 1):
            r = json.loads(line)
            kl = sum(
                math.exp(b - a) - 1 - (b - a) for a, b in zip(r["logprobs"], r["ref_logprobs"], strict=False)
            )
            inside = (
                q["kl_sum_min"] <= kl < q["kl_sum_max"] and q["reward_min"] <= r["reward"] < q["reward_max"]
            )
            if 5 <= r["step"] <= 20 and inside:
                want.add(f"{f.name}:{i}")
    request = {"startRow": 0, "endRow": 400, "sortModel": []}
    rows = dash_post(
        client,
        "responses-grid.getRowsResponse",
        [{"id": "responses-grid", "property": "getRowsRequest", "value": request}],
        [{"id": "responses-view", "property": "data", "value": "?" + parts.query}],
    )["responses-grid"]["getRowsResponse"]
    assert rows["rowCount"] == len(want) and 20 < len(want) < 280
    assert {r["source_line"] for r in rows["rowData"]} == want  # the grid's file:line column
    assert f"· {len(want):,} responses" in _text(drawn["scatter-box"]["children"])


def test_scatter203_controls_write_the_url(client, fixtures_dir):
    """Other steps drop the box; other columns drop it too; a log scale keeps it; "Clear box" clears it;
    x = y is refused."""
    boxed = f"?run={RUN}&step=7&kl_sum_min=0&kl_sum_max=5&reward_min=1&reward_max=3"
    out = _sync(client, boxed, "scatter-steps.value", "3-9")
    assert out[URL]["search"] == f"?run={RUN}&step=3-9"
    out = _sync(client, boxed, "scatter-y.value", "reward_gain")
    assert out[URL]["search"] == f"?run={RUN}&step=7&y=reward_gain"
    out = _sync(client, boxed, "scatter-xlog.value", True)  # a scale changes how, not what: the box stays
    assert out[URL]["search"] == boxed.replace("step=7", "step=7&xlog=1")
    out = _sync(client, boxed, "scatter-clear.n_clicks", 1)
    assert out[URL]["search"] == f"?run={RUN}&step=7"
    out = _sync(client, boxed, "scatter-x.value", "reward")
    assert URL not in out and "pick two different columns" in str(out["scatter-notices"]["children"])


def test_scatter204_clicked_point_links_to_its_tokens(dash_app, client, fixtures_dir):
    """A click on a point renders a link to that response's token page (it does not navigate); a click on
    anything else (a density cell) does nothing."""
    # allow_duplicate (the URL sync clears the line): the output's key carries a hash.
    key = next(k for k in dash_app.callback_map if k.startswith("scatter-point.children@"))

    def click(data):
        return dash_post(
            client,
            key,
            [{"id": "scatter-figure", "property": "clickData", "value": data}],
            [{"id": "scatter-run", "property": "data", "value": RUN}],
        )

    out = click({"points": [{"x": 1.2, "y": 2.0, "customdata": ["f5e51425-142", 18]}]})
    (children,) = out.values()
    (href,) = _links(children["children"])
    assert href == f"/tokens?run={RUN}&sample=f5e51425-142"
    assert "f5e51425-142 at step 18" in _text(children["children"])
    assert not click(
        {"points": [{"x": 1.2, "y": 2.0, "z": 0.3, "customdata": [3, 0, 1, 2, 3]}]}
    )  # nothing updated
