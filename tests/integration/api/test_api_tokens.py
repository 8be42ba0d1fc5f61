"""The token page's JSON answer (/api/v1/tokens) is what the page shows for the same URL: its notices, key
figures, strip (texts, colours, hover values), top-token tables and per-position charts, read through the
Flask test client; one response's per-token KL by hand from the file; bad queries answer with notices."""

from __future__ import annotations

import json
import math
from urllib.parse import parse_qsl

import orjson
import polars as pl
import pytest

from components.format import DIGITS, num, value
from data.service import board
from data.store import sample_id
from data.tokens import infer_gap_figures, key_figures, token_view
from tests.conftest import router_body
from tests.dash_calls import call, component, figure_traces, text

PPO, GRPO, POEM = "trl-ppo-small", "trl-grpo-small", "rlloggingboard-eval-poem"
MARK_COLUMNS = (
    "pos",
    "token",
    "text",
    "is_pad",
    "masked",
    "touched",
)  # the token table's, before its metrics


def _api(client, query: str) -> dict:
    r = client.get(f"/api/v1/tokens{query}")
    assert r.status_code == 200, r.get_data(as_text=True)[:300]
    return r.get_json()


def _page(client, query: str) -> dict:
    """The page's body for ``/tokens<query>`` as the renderer receives it on a fresh load."""
    return client.post("/_dash-update-component", json=router_body("/tokens", query)).get_json()["response"]


def _lines(el) -> list[str]:
    """The texts of a notices / notes block, one per child line."""
    if el is None:
        return []
    kids = el["props"].get("children") or []
    return [t for t in (text(k) for k in (kids if isinstance(kids, list) else [kids])) if t]


def _rows(table) -> list[list[str]]:
    """The cells' texts of an html table's body rows."""
    body = next(c for c in table["props"]["children"] if c["type"] == "Tbody")
    return [[text(td) for td in tr["props"]["children"]] for tr in body["props"]["children"]]


@pytest.mark.parametrize(
    "query",
    [
        f"?run={PPO}&sample={sample_id('rank0.jsonl', 1)}",  # 9 positions, the rewarded trailing <pad>
        f"?run={PPO}&sample={sample_id('rank1.jsonl', 136)}&pads=1&pos=3",
        f"?run={GRPO}&sample={sample_id('rank1.jsonl', 142)}&metric=value",  # no critic: a fallback
        f"?run={GRPO}&step=25&metric=log_ratio",  # no sample: the step's largest KL sum
    ],
)
def test_apitok001_answer_is_what_the_token_page_shows(client, dash_app, fixtures_dir, query):
    """Notices, view, key figures, strip, top tables and charts of the answer equal the page's."""
    got, page = _api(client, query), _page(client, query)
    # The view the page resolved (its canonical query) and the notices above its content, in order.
    # (the page keeps the URL's own state; the answer's names the response it chose, when the URL did not)
    page_view = component(page, "tokens-view")["props"]["data"]
    assert set(parse_qsl(page_view.lstrip("?"))) <= set(parse_qsl(got["view"]["query"].lstrip("?")))
    assert text(component(page, "tokens-source-line")) == got["view"]["source_line"]
    assert got["view"]["sample"] in text(component(page, "tokens-body") or page)
    shown_notes = _lines(component(page, "tokens-notices")) + _lines(component(page, "tokens-missing"))
    assert got["notices"] == shown_notes
    stats = text(component(page, "tokens-stats"))
    for r in got["tables"]["tokens-stats"]["rows"]:
        assert r["label"] in stats
    store = board().store(got["run"], wait=0)
    view = token_view(store, got["view"]["sample"], board().settings.pad_tokens)
    assert stats == "".join(lab + value(v, kind) for lab, v, kind in key_figures(view))
    # Prev / next / back as the page links them.
    for key in ("prev", "next", "back"):
        el = component(page, f"tokens-{key}")["props"]
        assert el.get("href") == got["view"]["links"][key], key
    # The strip: the data the page sends its browser code (every token: these responses are one window).
    sent = orjson.loads(component(page, "tokens-strip-data")["props"]["data"]["json"])
    strip, rows = got["strips"]["tokens-strip"], got["rows"]
    assert sent["total"] == len(sent["text"]) == len(rows) == got["tables"]["tokens-table"]["total"]
    assert sent["pos"] == [r["pos"] for r in rows] and sent["text"] == strip["tokens"]
    assert [("" if c is None else sent["bg"][c]) for c in sent["colour"]] == strip["colours"]
    assert [("" if c is None else sent["fg"][c] or "") for c in sent["colour"]] == strip["text_colours"]
    assert strip["metric"] == got["view"]["metric_shown"]
    assert strip["values"] == [r[strip["metric"]] for r in rows]
    assert [("pad" in m) for m in strip["marks"]] == [bool(p) for p in sent["pad"]]
    assert [("selected" in m) for m in strip["marks"]] == [p == got["view"]["pos"] for p in sent["pos"]]
    table = got["tables"]["tokens-table"]
    metrics = [c for c in table["columns"] if c not in MARK_COLUMNS]
    assert sent["labels"] == [table["labels"][c] for c in metrics]  # the hover's metrics, all of them
    for col, hover in zip(metrics, sent["values"], strict=True):
        full = pl.Series([r[col] for r in rows], dtype=pl.Float64)
        assert full.round_sig_figs(DIGITS).cast(pl.String).to_list() == hover, col
    card = text(component(page, "tokens-count"))
    assert card.startswith(f"{len(rows):,} tokens")
    if strip["caption"]:  # the legend's line beside its colour bar
        legend = json.dumps(page, ensure_ascii=False)
        assert all(part in legend for part in strip["caption"].split(" · "))
    # Top-token tables: position, token and the four metrics as the page writes them.
    for tid in ("tokens-top-log-ratio", "tokens-top-kl"):
        table = got["tables"][tid]
        cells = _rows(component(page, tid))
        assert len(cells) == len(table["rows"]) > 0
        for shown, r in zip(cells, table["rows"], strict=True):
            pad = " pad" if r["is_pad"] else ""
            want = [str(r["pos"]), (r["token"] or "") + pad]
            assert shown == want + [num(r[k]) for k in ("logprob", "ref_logprob", "log_ratio", "kl")]
    # The charts: what the page's chart callback returns once the strip is in.
    charts = call(client, dash_app, "tokens-charts.children", {"tokens-view.data": page_view})
    tree = charts["tokens-charts"]["children"]
    names = [k.removeprefix("tokens-chart-") for k in got["figures"]]
    assert names and names == [
        g["props"]["id"]["name"] for g in _graphs(tree)
    ]  # every chart the page draws, in its order
    for g in _graphs(tree):
        name = g["props"]["id"]["name"]
        assert figure_traces(g["props"]["figure"]) == got["figures"][f"tokens-chart-{name}"]["traces"], name


def _graphs(tree) -> list[dict]:
    out = []
    if isinstance(tree, dict):
        if tree.get("type") == "Graph":
            out.append(tree)
        for v in (tree.get("props") or {}).values():
            out += _graphs(v)
    elif isinstance(tree, list):
        for v in tree:
            out += _graphs(v)
    return out


def test_apitok002_kl_by_hand_from_the_file(client, fixtures_dir):
    """One GRPO response's per-token KL, position by position, is k3 of the file's log-probs:
    ``exp(r) − 1 − r`` with ``r = ref_logprob − logprob``, TRL's own per-token KL
    (huggingface/trl trl/trainer/grpo_trainer.py:3071-3072 at f2cd577, ``per_token_kl``)."""
    line = 150
    rec = json.loads((fixtures_dir / GRPO / "rank0.jsonl").read_text().splitlines()[line - 1])
    got = _api(client, f"?run={GRPO}&sample={sample_id('rank0.jsonl', line)}&pads=1")
    rows = got["rows"]
    assert [r["token"] for r in rows] == rec["response_tokens"]
    assert len(rows) == len(rec["logprobs"]) == len(rec["ref_logprobs"]) > 5
    for r, lp, ref in zip(rows, rec["logprobs"], rec["ref_logprobs"], strict=True):
        x = ref - lp
        assert math.isclose(r["kl"], math.exp(x) - 1 - x, rel_tol=1e-12, abs_tol=1e-300), r["pos"]
        assert r["log_ratio"] == lp - ref and r["logprob"] == lp
    # The strip coloured by KL (the page's default) carries those very values.
    assert got["strips"]["tokens-strip"]["metric"] == "kl"
    assert got["strips"]["tokens-strip"]["values"] == [r["kl"] for r in rows]


def test_apitok003_bad_queries_answer_with_notices(client, fixtures_dir):
    """An unknown run, metric, sample or position is a notice, as on the page; never a 500."""
    got = _api(client, "?run=nope&metric=zzz&pads=maybe&pos=-2")
    assert got["view"]["problem"] == "unknown-run" and got["rows"] == []
    assert any("Ignored metric='zzz'" in n for n in got["notices"])
    assert any("Unknown run 'nope'" in n for n in got["notices"])
    page = _page(client, "?run=nope&metric=zzz&pads=maybe&pos=-2")
    assert got["notices"] == _lines(component(page, "tokens-notices"))
    unknown = _api(client, f"?run={PPO}&sample=no-such-id")
    assert unknown["view"]["problem"] == "unknown-sample"
    assert unknown["notices"][0] == f"Unknown response 'no-such-id' in run '{PPO}'."


def test_apitok004_response_without_token_fields(client, fixtures_dir):
    """The poem eval dump has no token fields: the answer has its texts and key figures, no strip, and
    says why, as the page does."""
    query = f"?run={POEM}&sample={sample_id('data.jsonl', 2)}"
    got, page = _api(client, query), _page(client, query)
    assert got["strips"] == {} and got["rows"] == [] and got["figures"] == {}
    assert got["notices"][-1] == text(component(page, "tokens-missing"))
    texts = {r["name"]: r["text"] for r in got["tables"]["tokens-texts"]["rows"]}
    assert texts["prompt"] == text(component(page, "tokens-text-prompt"))
    assert texts["response"] == text(component(page, "tokens-text-response"))


def test_apitok005_gap_line_and_correction_marks(client, board_root, tmp_path):
    """A NeMo-RL response coloured by the inference–trainer gap with a correction in the URL (truncated IS
    at C = 1.2): the gap line's figures as the page writes them, the tokens the correction clips marked
    ``touched`` where the page underlines them, the strip's colours the page's, and the gap by hand from
    the file (``prev_logprobs − generation_logprobs``)."""
    from tests.integration.test_tokens import NEMO_INFERENCE, NEMO_TRAINER, write_nemo_rl_run

    sid = write_nemo_rl_run(tmp_path / "root" / "nemo")
    board_root(tmp_path / "root", cache_dir=tmp_path / "cache")
    query = f"?run=nemo&sample={sid}&metric=infer_gap&rule=tis&c=1.2"
    got, page = _api(client, query), _page(client, query)
    rows, strip = got["rows"], got["strips"]["tokens-strip"]
    gap = [t - i for t, i in zip(NEMO_TRAINER, NEMO_INFERENCE, strict=True)]
    assert [r["infer_gap"] for r in rows] == strip["values"] == gap
    # truncated IS clips ratio_t = exp(gap_t) > C: only exp(0.5) = 1.65 of the four.
    assert [r["touched"] for r in rows] == [math.exp(g) > 1.2 for g in gap]
    sent = orjson.loads(component(page, "tokens-strip-data")["props"]["data"]["json"])
    assert [("touched" in m) for m in strip["marks"]] == [bool(t) for t in sent["touched"]]
    assert [("" if c is None else sent["bg"][c]) for c in sent["colour"]] == strip["colours"]
    line = text(component(page, "tokens-gap"))
    table = got["tables"]["tokens-gap"]["rows"]
    store = board().store("nemo", wait=0)
    figures = infer_gap_figures(token_view(store, sid, board().settings.pad_tokens), ("tis", 1.2))
    assert [(r["label"], r["value"]) for r in table] == [(k, v) for k, v, _ in figures]
    assert line.endswith("".join(k + value(v, kind, share_digits=1) for k, v, kind in figures))
    assert "truncated IS at C = 1.2" in line and "1 of 4 tokens clipped" in line


def test_apitok006_long_response_whole_as_the_strip_scrolls(client, dash_app, board_root, tmp_path):
    """A 1,500-token response: the page sends its strip a window at a time as it is scrolled; the answer's
    strip and token table hold every token, each window's texts and colours exactly the page's, and its
    charts the page's (at most CHART_POINTS points each, as drawn)."""
    from benchmarks.bench_tokens import write_long_run
    from components.token_figures import CHART_POINTS
    from components.token_strip import STRIP_WINDOW

    sid = write_long_run(tmp_path / "root" / "long", tokens=1500)
    board_root(tmp_path / "root", cache_dir=tmp_path / "cache")
    query = f"?run=long&sample={sid}"
    got, page = _api(client, query), _page(client, query)
    strip = got["strips"]["tokens-strip"]
    assert len(got["rows"]) == len(strip["tokens"]) == got["tables"]["tokens-table"]["total"] == 1500
    assert got["tables"]["tokens-table"]["cut_off"] is None
    store = component(page, "tokens-strip-data")["props"]["data"]
    view = component(page, "tokens-view")["props"]["data"]
    windows = [orjson.loads(store["json"])]
    while (done := windows[-1]["start"] + len(windows[-1]["pos"])) < 1500:
        want = {"key": store["key"], "start": done, "upto": None}
        more = call(
            client,
            dash_app,
            "tokens-strip-more.data",
            {"tokens-strip-want.data": want, "tokens-view.data": view},
        )
        windows.append(orjson.loads(more["tokens-strip-more"]["data"]["json"]))
    assert len(windows) == -(-1500 // STRIP_WINDOW)
    sent = {k: [x for w in windows for x in w[k]] for k in ("pos", "text", "colour")}
    assert sent["pos"] == [r["pos"] for r in got["rows"]] and sent["text"] == strip["tokens"]
    bg = windows[0]["bg"]
    assert [("" if c is None else bg[c]) for c in sent["colour"]] == strip["colours"]
    charts = call(client, dash_app, "tokens-charts.children", {"tokens-view.data": view})
    for g in _graphs(charts["tokens-charts"]["children"]):
        traces = got["figures"][f"tokens-chart-{g['props']['id']['name']}"]["traces"]
        assert figure_traces(g["props"]["figure"]) == traces
        assert 0 < len(traces[0]["x"]) <= CHART_POINTS
