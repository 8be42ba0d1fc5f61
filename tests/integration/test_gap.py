"""Gap page without a browser: its layout from the URL (rule, C and bad values), its charts POSTed as the
renderer asks for them (the curves from the steps summary, the correction's shares), and a point's click
opening its step's responses sorted by what it draws."""

from __future__ import annotations

import base64
import sys
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest

from tests.conftest import dash_post, find, page_url_key
from tests.unit.metrics.test_infer_gap import write_nemo_rl_run

URL = page_url_key("/gap")
OUT = "..gap-curve-gap.figure...gap-curve-tail.figure...gap-curve-correction.figure"
OUT += "...gap-curve-gap-title.children...gap-curve-tail-title.children...gap-curve-correction-title.children"
OUT += "...gap-curve-gap-note.children...gap-curve-tail-note.children...gap-curve-correction-note.children"
OUT += "...gap-formulas.children...gap-token-link.children.."


@pytest.fixture
def page(dash_app):
    """The page module as Dash loaded it."""
    return sys.modules["pages.gap"]


@pytest.fixture
def nemo(board_root, tmp_path):
    write_nemo_rl_run(tmp_path / "root" / "nemo", seed=3)
    board_root(tmp_path / "root", cache_dir=tmp_path / "cache")
    return "nemo"


def _values(v) -> list:
    """A figure's array as the server sends it (Plotly's typed array of base64 bytes, or a list)."""
    if isinstance(v, dict) and "bdata" in v:
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"]).tolist()
    return list(v)


def _curves(client, search):
    return dash_post(
        client,
        OUT,
        [{"id": URL, "property": "search", "value": search}],
        [{"id": URL, "property": "pathname", "value": "/gap"}],
    )


def test_gap101_layout_keeps_rule_and_c_and_says_what_it_ignored(page, nemo):
    """rule and c from the URL set the controls; a C of 1 or less, or an unknown rule, falls back with a
    notice each."""
    layout = page.layout(run=nemo, rule="tis", c="1.5")
    assert find(layout, "gap-rule").value == "tis" and find(layout, "gap-c").value == 1.5
    layout = page.layout(run=nemo, rule="clip", c="0.5")
    assert find(layout, "gap-rule").value == "mis" and find(layout, "gap-c").value == 2.0
    shown = str(find(layout, "gap-notices").children)
    assert "Ignored rule='clip'" in shown and "Ignored c=0.5: C must be a number above 1" in shown


def test_gap102_curves_and_the_correction_at_c2(client, nemo):
    """The curves hold every step; the pooled tail share and the masked IS token share are the stores';
    the formula of each rule is shown, the previewed one first."""
    from data.infer_gap import correction_preview, gap_steps
    from data.service import open_run

    resp = _curves(client, f"?run={nemo}&rule=mis&c=2&step=2")
    store = open_run(nemo).store
    tail = resp["gap-curve-tail"]["figure"]["data"]
    line = next(t for t in tail if "(band:" in t["name"])  # not the band's edges
    assert _values(line["y"]) == pytest.approx(gap_steps(store).get_column("infer_gap_tail_pooled").to_list())
    corr = resp["gap-curve-correction"]["figure"]["data"]
    tokens = next(t for t in corr if t["name"] == "tokens masked")
    want = correction_preview(store, "mis", 2.0, 2).frame.get_column("token_share").to_list()
    assert _values(tokens["y"]) == pytest.approx(want) and max(want) > 0
    assert resp["gap-curve-correction-title"]["children"] == "masked IS at C = 2 (masked: ratio_t ∉ [1/C, C])"
    formulas = str(resp["gap-formulas"]["children"])
    assert formulas.index("masked IS") < formulas.index("truncated IS") and "min(ratio_t, C)" in formulas
    link = resp["gap-token-link"]["children"]["props"]
    assert "Step 2: the response with the largest |Δ|" in link["children"]
    q = parse_qs(urlsplit(link["href"]).query)
    assert q["rule"] == ["mis"] and q["c"] == ["2"] and q["metric"] == ["infer_gap"] and q["run"] == [nemo]


def test_gap103_a_point_opens_its_steps_responses_sorted(client, nemo):
    """A click on the tail curve's point at step 2 opens step 2's responses, the largest tail share first;
    a correction's point under sequence masking sorts by mean |Δ|."""
    ids = ["gap-curve-gap", "gap-curve-tail", "gap-curve-correction"]

    def click(which, key, search):
        inputs = [
            {"id": i, "property": "clickData", "value": None if i != which else
             {"points": [{"x": 2, "customdata": key}]}} for i in ids
        ]  # fmt: skip
        resp = dash_post(client, "gap-nav.href", inputs, [{"id": URL, "property": "search", "value": search}],
                         changed=[f"{which}.clickData"])  # fmt: skip
        href = resp["gap-nav"]["href"]
        return urlsplit(href).path, parse_qs(urlsplit(href).query)

    path, q = click("gap-curve-tail", "infer_gap_tail_share", f"?run={nemo}")
    assert path == "/responses" and q == {"run": [nemo], "step": ["2"], "sort": ["infer_gap_tail_share"]}
    _, q = click("gap-curve-correction", "correction_tokens", f"?run={nemo}&rule=seq")
    assert q["sort"] == ["infer_gap_abs_mean"]


def test_gap104_token_page_marks_the_tokens_a_correction_touches(dash_app, nemo):
    """The token page with rule=mis&c=2 marks the tokens masked IS would mask on the strip (the response by
    hand: Δ = 0, −0.25, 0, 1.0, 0.9, so positions 3 and 4) and says how many; without a rule it marks none;
    rule=seq at C = 1.2 marks every token (mean Δ 0.33 > ln 1.2)."""
    import orjson

    from data.store import sample_id
    from tests.integration.test_tokens import texts

    tokens_page = sys.modules["pages.tokens"]
    sid = sample_id("train_data_step1.jsonl", 1)

    def strip(**q):
        layout = tokens_page.layout(run=nemo, sample=sid, metric="infer_gap", **q)
        return orjson.loads(find(layout, "tokens-strip-data").data["json"]), texts(find(layout, "tokens-gap"))

    data, line = strip(rule="mis", c="2")
    assert data["touched"] == [0, 0, 0, 1, 1]
    assert "masked IS at C = 2" in line and "2 of 5 tokens masked (wavy underline)" in line
    data, line = strip()
    assert "touched" not in data and "masked IS" not in line
    assert strip(rule="seq", c="1.2")[0]["touched"] == [1, 1, 1, 1, 1]


def test_gap105_export_has_the_four_columns_and_filters_on_them(client, nemo, tmp_path):
    """/export of a step holds the four gap columns with the values computed by hand from the file (empty
    for the sample out of the loss), and gap_min / tail_min keep exactly the responses at or above them."""
    import csv
    import io
    import json

    from tests.unit.metrics.test_infer_gap import hand_gap

    lines = (tmp_path / "root" / "nemo" / "train_data_step2.jsonl").read_text().splitlines()
    hand = {i: hand_gap(json.loads(x)) for i, x in enumerate(lines, start=1)}
    r = client.get(f"/export?run={nemo}&step=2&format=csv")
    assert r.status_code == 200
    rows = list(csv.DictReader(io.StringIO(r.data.decode())))
    assert len(rows) == len(hand) == 8
    for row in rows:
        h = hand[int(row["line"])]
        if h["n"] == 0:  # out of the loss (sample_loss_mask 0): no gap
            assert (
                row["infer_gap_abs_mean"] == row["infer_gap_tail_share"] == row["infer_gap_first_tail"] == ""
            )
            continue
        assert float(row["infer_gap_abs_mean"]) == pytest.approx(h["abs_mean"], rel=1e-6)
        assert float(row["infer_gap_abs_max"]) == pytest.approx(h["abs_max"], rel=1e-6)
        assert float(row["infer_gap_tail_share"]) == pytest.approx(h["share"])
        assert row["infer_gap_first_tail"] == ("" if h["first"] is None else str(h["first"]))
    for key, col in (("gap", "abs_mean"), ("tail", "share")):
        values = sorted({h[col] for h in hand.values() if h["n"]})
        k = len(values) // 2
        cut = (values[k - 1] + values[k]) / 2  # between two values (not at one: its last bits may differ)
        r = client.get(f"/export?run={nemo}&step=2&format=csv&{key}_min={cut!r}")
        kept = {int(row["line"]) for row in csv.DictReader(io.StringIO(r.data.decode()))}
        assert kept == {i for i, h in hand.items() if h["n"] and h[col] >= cut}, key


def test_gap106_a_correction_point_says_the_responses_page_knows_no_correction(client, nemo):
    """The responses view has no correction (rule, c), so a correction's point opens the step's responses by
    the gap alone, its URL with no rule or c, and the panel's note says so in words: by max |Δ| (mean |Δ|
    under sequence masking), and that the token links from there show no marks."""
    for rule, by in (("mis", "max |Δ|"), ("seq", "mean |Δ|")):
        note = _curves(client, f"?run={nemo}&rule={rule}&c=3&step=2")["gap-curve-correction-note"]["children"]
        assert f"Click a point: its step's responses by {by}, the largest first" in note
        assert "does not apply the correction, so its token links show no marks" in note
    inputs = [{"id": i, "property": "clickData", "value": None} for i in ("gap-curve-gap", "gap-curve-tail")]
    inputs.append({"id": "gap-curve-correction", "property": "clickData",
                   "value": {"points": [{"x": 2, "customdata": "correction_tokens"}]}})  # fmt: skip
    search = [{"id": URL, "property": "search", "value": f"?run={nemo}&rule=tis&c=3"}]
    href = dash_post(client, "gap-nav.href", inputs, search, changed=["gap-curve-correction.clickData"])
    q = parse_qs(urlsplit(href["gap-nav"]["href"]).query)
    assert q == {"run": [nemo], "step": ["2"], "sort": ["infer_gap_abs_max"]}
