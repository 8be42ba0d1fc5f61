"""Token page without a browser: layout from the URL (fixtures with and without values / token fields,
unknown ids), and its callbacks POSTed like the renderer does (URL <-> controls sync, charts)."""

from __future__ import annotations

import base64
import json
import math
import sys
from urllib.parse import parse_qs, urlsplit

import orjson
import pytest

from data.store import sample_id
from tests.conftest import dash_post, find, page_url_key

URL = page_url_key("/tokens")  # the page's own dcc.Location

PPO = "trl-ppo-small"
GRPO = "trl-grpo-small"
POEM = "rlloggingboard-eval-poem"
FIRST = sample_id("rank0.jsonl", 1)  # PPO step 1, 9 positions, reward 1.0 on the trailing <pad>


@pytest.fixture
def page(dash_app):
    """The page module as Dash loaded it."""
    return sys.modules["pages.tokens"]


def find_all(component, pred, out=None):
    out = [] if out is None else out
    if pred(component):
        out.append(component)
    children = getattr(component, "children", None)
    for child in children if isinstance(children, list | tuple) else [children]:
        if child is not None and not isinstance(child, str | int | float):
            find_all(child, pred, out)
    return out


def texts(component) -> str:
    if isinstance(component, str | int | float):
        return str(component)
    children = getattr(component, "children", None)
    return " ".join(
        texts(c) for c in (children if isinstance(children, list | tuple) else [children]) if c is not None
    )


def strip(layout) -> dict:
    store = find(layout, "tokens-strip-data")
    return orjson.loads(store.data["json"])


def test_tokens101_ppo_response_layout(page, fixtures_dir):
    """A PPO response: stats, texts without pads, 9 strip tokens incl. the rewarded <pad>, hover values."""
    layout = page.layout(run=PPO, sample=FIRST, back="?run=trl-ppo-small&step=1&sort=kl")
    body = texts(layout)
    assert "reward gain (reward − ref reward)" in body and "KL mean per token (k3)" in body
    assert find(layout, "tokens-text-response").children == " is quite pleasant ."
    d = strip(layout)
    assert d["pos"] == list(range(9))
    assert d["raw"][-2:] == ["<|endoftext|>", "<pad>"] and d["pad"][-2:] == [1, 1]
    i = d["labels"].index("token reward")
    assert d["values"][i][-1] == "1.0"
    assert d["values"][d["labels"].index("critic value")][0] == "0.3144"
    assert d["values"][d["labels"].index("KL (k3)")][-1] is None  # no log-probs on the pad
    assert find(layout, "tokens-back").href == "/responses?run=trl-ppo-small&step=1&sort=kl"
    # Without a responses view to walk (see tokens111 for one): the step in file order.
    in_file_order = page.layout(run=PPO, sample=FIRST)
    assert find(in_file_order, "tokens-prev").disabled is True
    nxt = parse_qs(urlsplit(find(in_file_order, "tokens-next").href).query)
    assert nxt["sample"] == [sample_id("rank0.jsonl", 2)] and "back" not in nxt
    assert find(layout, "tokens-metric").value == "kl"
    assert "Top 10 tokens by KL (k3)" in body


def test_tokens102_pads_shown_on_request(page, fixtures_dir):
    """pads=1 keeps pad tokens in the texts; the count line says how many were hidden otherwise."""
    sid = sample_id("rank1.jsonl", 136)
    hidden = page.layout(run=PPO, sample=sid)
    shown = page.layout(run=PPO, sample=sid, pads="1")
    assert find(shown, "tokens-text-response").children.endswith("<|endoftext|><pad>")
    assert len(strip(shown)["pos"]) >= len(strip(hidden)["pos"])
    assert find(shown, "tokens-pads").value is True


def test_tokens103_grpo_without_values(page, dash_app, client, fixtures_dir):
    """GRPO has no values: a one-line reason, value metrics disabled, a colour fallback, two charts."""
    sid = sample_id("rank1.jsonl", 142)
    layout = page.layout(run=GRPO, sample=sid, metric="value")
    missing = texts(find(layout, "tokens-missing"))
    assert "No values (no critic" in missing and "coloured by token reward instead" in missing
    options = {o["value"]: o["disabled"] for o in find(layout, "tokens-metric").options}
    assert options["value"] and options["value_error"] and not options["kl"]
    query = find(layout, "tokens-view").data
    resp = dash_post(
        client,
        "tokens-charts.children",
        [{"id": "tokens-strip-done", "property": "data", "value": "key"}],
        [{"id": "tokens-view", "property": "data", "value": query}],
    )
    graphs = json.dumps(resp["tokens-charts"]["children"])
    assert '"name": "logprob"' in graphs and '"name": "token_reward"' in graphs
    assert '"name": "value"' not in graphs


def test_tokens104_no_token_fields(page, fixtures_dir):
    """The poem eval dump has no token fields: texts and rewards only, and a one-line reason."""
    layout = page.layout(run=POEM, sample=sample_id("data.jsonl", 2))
    assert "no token-level fields" in texts(find(layout, "tokens-missing"))
    assert find(layout, "tokens-strip-data") is None
    assert find(layout, "tokens-metric") is not None  # present (hidden): the sync callback needs it
    assert find(layout, "tokens-text-prompt").children


def test_tokens105_unknown_ids_and_bad_params(page, fixtures_dir):
    """Unknown sample -> notice with a link back to the run; unknown run -> notice; bad metric -> notice."""
    layout = page.layout(run=PPO, sample="nope-1", metric="bogus")
    body = texts(layout)
    assert "Unknown response 'nope-1'" in body and "Ignored metric='bogus'" in body
    links = find_all(layout, lambda c: getattr(c, "href", None) == "/responses?run=trl-ppo-small")
    assert links
    assert "Unknown run '../etc'" in texts(page.layout(run="../etc", sample=FIRST))


def test_tokens106_no_arguments(page, fixtures_dir):
    """/tokens alone shows the first response of the first run, and says so."""
    layout = page.layout()
    assert "No response chosen" in texts(layout)
    assert find(layout, "tokens-text-response") is not None


def test_tokens107_sync_control_writes_url(client, fixtures_dir):
    """A metric change writes the URL and redraws; a URL equal to what is shown changes nothing."""
    search = f"?run={PPO}&sample={FIRST}"
    out = ".." + URL + ".search...tokens-view.data...tokens-body.children.."

    def post(search, metric, pads, view, changed):
        return dash_post(
            client,
            out,
            [
                {"id": URL, "property": "search", "value": search},
                {"id": "tokens-metric", "property": "value", "value": metric},
                {"id": "tokens-pads", "property": "value", "value": pads},
            ],
            [
                {"id": "tokens-view", "property": "data", "value": view},
                {"id": URL, "property": "pathname", "value": "/tokens"},
            ],
            changed=[changed],
        )

    resp = post(search, "log_ratio", False, search, "tokens-metric.value")
    assert resp[URL]["search"] == search + "&metric=log_ratio"
    assert resp["tokens-view"]["data"] == search + "&metric=log_ratio"
    assert "log-ratio log π − log π_ref" in json.dumps(resp["tokens-body"]["children"], ensure_ascii=False)
    # The Location reporting the URL it mounted with: nothing to do.
    assert not post(search, "kl", False, search, URL + ".search")
    # Back to an earlier URL: body redrawn, URL left alone.
    resp = post(search, "log_ratio", False, search + "&metric=log_ratio", URL + ".search")
    assert URL not in resp and resp["tokens-view"]["data"] == search


def test_tokens108_page_answers_over_http(client, fixtures_dir):
    """GET /tokens with a query answers 200 (the page shell)."""
    assert client.get(f"/tokens?run={PPO}&sample={FIRST}&metric=prob&pads=1").status_code == 200


def test_tokens109_partial_token_fields(page, board_root, tmp_path):
    """Only token strings: a strip without colours and a reason; only log-probs: positions shown as □."""
    run = tmp_path / "root" / "partial"
    run.mkdir(parents=True)
    lines = [
        {"prompt": "p", "response": " a b", "reward": 1.0, "step": 1, "response_tokens": ["Ġa", "Ġb"]},
        {"prompt": "p", "response": " a b", "reward": 0.0, "step": 1, "logprobs": [-1.0, -2.0, -0.5]},
    ]
    (run / "data.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    board_root(tmp_path / "root", cache_dir=tmp_path / "cache")
    only_tokens = page.layout(run="partial", sample=sample_id("data.jsonl", 1))
    assert "KL (k3) needs logprobs, ref_logprobs, which this response does not have." in texts(
        find(only_tokens, "tokens-missing")
    )
    d = strip(only_tokens)
    assert d["text"] == [" a", " b"] and d["colour"] == [None, None]
    only_lp = page.layout(run="partial", sample=sample_id("data.jsonl", 2), metric="prob")
    assert "No response_tokens" in texts(find(only_lp, "tokens-missing"))
    d = strip(only_lp)
    assert d["text"] == ["□", "□", "□"] and None not in d["colour"]


def test_tokens110_fields_longer_than_the_response_named(page, board_root, tmp_path):
    """A batch's input_ids (over prompt and response) is named with its length and not drawn; coloured by
    it, the page says why and falls back to the default colouring."""
    run = tmp_path / "root" / "batch"
    run.mkdir(parents=True)
    one = {
        "prompt": "p",
        "response": "a b",
        "reward": 1.0,
        "step": 1,
        "response_tokens": ["a", "b"],
        "logprobs": [-1.0, -2.0],
        "ref_logprobs": [-1.0, -1.5],
        "input_ids": [7, 8, 9, 10, 11],
        "advantages": [0.5, -0.5],
    }
    (run / "data.jsonl").write_text(json.dumps(one) + "\n")
    board_root(tmp_path / "root", cache_dir=tmp_path / "cache")
    layout = page.layout(run="batch", sample=sample_id("data.jsonl", 1), metric="file:input_ids")
    note = texts(find(layout, "tokens-missing"))
    assert "input_ids (from the file) has 5 values for 2 tokens: longer than the response" in note
    assert "input_ids (from the file) is longer than the response: coloured by" in note
    d = strip(layout)
    assert len(d["text"]) == 2
    options = {o["value"]: o for o in find(layout, "tokens-metric").options}
    assert not options["file:advantages"].get("disabled") and options["file:input_ids"]["disabled"]
    assert options["file:input_ids"]["label"] == "input_ids (from the file) (longer than the response)"


def test_tokens111_long_response_sent_as_shown(page, client, board_root, tmp_path):
    """A 6,000-token response: the layout holds the strip's first window only, the next window comes when
    the strip asks (from where it is, or up to a hovered position), the charts hold at most CHART_POINTS
    points, and zooming a chart sends that range's positions, each one; a reset the overview again."""
    from benchmarks.bench_tokens import write_long_run
    from components.token_figures import CHART_POINTS
    from components.token_strip import STRIP_WINDOW

    sid = write_long_run(tmp_path / "root" / "long", tokens=6000)
    board_root(tmp_path / "root", cache_dir=tmp_path / "cache")
    layout = page.layout(run="long", sample=sid)
    first = strip(layout)
    assert (first["start"], first["total"], len(first["pos"])) == (0, 6000, STRIP_WINDOW)
    assert find(layout, "tokens-count").children == "6,000 tokens"  # as the strip's status line writes it
    key = find(layout, "tokens-strip-data").data["key"]
    query = find(layout, "tokens-view").data

    def points(figure) -> int:  # the first trace's x: int32 positions, base64
        return len(base64.b64decode(figure["data"][0]["x"]["bdata"])) // 4

    def more(start, upto=None):
        resp = dash_post(
            client,
            "tokens-strip-more.data",
            [
                {
                    "id": "tokens-strip-want",
                    "property": "data",
                    "value": {"key": key, "start": start, "upto": upto},
                }
            ],
            [{"id": "tokens-view", "property": "data", "value": query}],
        )
        data = resp["tokens-strip-more"]["data"]
        assert data["key"] == key
        return orjson.loads(data["json"])

    nxt = more(STRIP_WINDOW)
    assert nxt["pos"] == list(range(STRIP_WINDOW, 2 * STRIP_WINDOW)) and nxt["colour"][0] is not None
    assert more(2 * STRIP_WINDOW, upto=4500)["pos"][-1] == 4500  # a chart's point beyond the windows

    resp = dash_post(
        client,
        "tokens-charts.children",
        [{"id": "tokens-strip-done", "property": "data", "value": "key"}],
        [{"id": "tokens-view", "property": "data", "value": query}],
    )
    graphs = resp["tokens-charts"]["children"]["props"]["children"]
    figure = graphs[0]["props"]["children"]["props"]["figure"]
    assert 0 < points(figure) <= CHART_POINTS

    def zoom(relayout):  # a pattern-matching (MATCH) callback, as the renderer sends it
        chart = {"type": "tokens-chart", "name": "logprob"}
        body = {
            "output": '{"name":["MATCH"],"type":"tokens-chart"}.figure',
            "outputs": {"id": chart, "property": "figure"},
            "inputs": [{"id": chart, "property": "relayoutData", "value": relayout}],
            "state": [{"id": "tokens-view", "property": "data", "value": query}],
            "changedPropIds": [json.dumps(chart, separators=(",", ":"), sort_keys=True) + ".relayoutData"],
        }
        r = client.post("/_dash-update-component", json=body)
        assert r.status_code in (200, 204), r.data[:300]
        answer = r.get_json()["response"] if r.status_code == 200 else {}
        return next(iter(answer.values()), None)  # None: no_update

    zoomed = zoom({"xaxis.range[0]": 1000, "xaxis.range[1]": 1200})["figure"]
    assert zoomed["layout"]["xaxis"]["range"] == [1000.0, 1200.0]
    assert points(zoomed) == 601  # positions 800..1400, every one
    overview = zoom({"xaxis.autorange": True})["figure"]
    assert "range" not in overview["layout"]["xaxis"]
    assert zoom({"autosize": True}) is None  # a first draw: nothing sent


# A NeMo-RL run as its GRPO loop writes it: grpo.py logs a step's batch (content, rewards, the full-sequence
# arrays over prompt and response right-padded to the batch's width, input_lengths, token_loss_mask) through
# Logger.log_batched_dict_as_jsonl, which writes one line per micro-batch of one (every value a list of one
# item; tensors through .tolist()) with its idx. The message log is the prompt, then the model's turn and the
# environment's observation alternating (run_multi_turn_rollout appends one after every turn).
NEMO_TRAINER = [-0.5, -1.25, -0.25, -1.5]  # prev_logprobs on the model's 4 tokens
NEMO_INFERENCE = [-0.5, -1.0, -0.25, -2.0]  # generation_logprobs on them: gap 0, -0.25, 0, 0.5


def write_nemo_rl_run(run) -> str:
    """``train_data_step1.jsonl`` of two responses in ``run`` (a folder); the sample id of the first, whose
    trainer − inference gap is [0, -0.25, 0, 0.5] (the second's is 0.125 on each of its 3 tokens)."""
    run.mkdir(parents=True, exist_ok=True)
    width = 12
    rollouts = [
        # (role, content, token ids, trainer log-probs, inference log-probs)
        [
            ("system", "Answer with a number.", [1, 2], [-9.0, -9.0], [0.0, 0.0]),
            ("user", "2+2?", [3, 4, 5], [-9.0] * 3, [0.0] * 3),
            ("assistant", "It is 4.", [40, 41, 42, 43], NEMO_TRAINER, NEMO_INFERENCE),
            ("environment", "Environment: correct", [50], [-9.0], [0.0]),
        ],
        [
            ("system", "Answer with a number.", [1, 2], [-9.0, -9.0], [0.0, 0.0]),
            ("user", "3+3?", [6, 7], [-9.0] * 2, [0.0] * 2),
            ("assistant", "Six.", [60, 61, 62], [-0.375] * 3, [-0.5] * 3),
            ("environment", "", [], [], []),
        ],
    ]
    lines = []
    for i, msgs in enumerate(rollouts):
        ids = [t for m in msgs for t in m[2]]
        pad = [0] * (width - len(ids))
        trainer = [0.0] + [v for m in msgs for v in m[3]][1:]  # log-probs start at the second token
        inference = [0.0] + [v for m in msgs for v in m[4]][1:]
        mask = [int(m[0] == "assistant") for m in msgs for _ in m[2]]
        lines.append(
            {
                "content": [[m[1] for m in msgs]],
                "rewards": [float(i == 0)],
                "generation_logprobs": [inference + [0.0] * len(pad)],
                "prev_logprobs": [trainer + [0.0] * len(pad)],
                "input_lengths": [len(ids)],
                "token_ids": [ids + pad],
                "token_loss_mask": [mask + pad],
                "sample_loss_mask": [1.0],
                "advantages": [[0.5 * m for m in mask] + [0.0] * len(pad)],
                "idx": i,
            }
        )
    (run / "train_data_step1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return sample_id("train_data_step1.jsonl", 1)


def test_tokens112_nemo_rl_inference_trainer_gap(page, client, board_root, tmp_path):
    """A NeMo-RL run: choosing the gap redraws the strip coloured by trainer − inference log-prob on a
    scale symmetric about 0 (±0.5 here), each token's hover carries it, and a line gives mean |gap|, max
    |gap| and where, the share beyond ln 2; the picker offers it. A contract response has it disabled."""
    from components.token_strip import PALETTE_SIZE

    sid = write_nemo_rl_run(tmp_path / "root" / "nemo")
    board_root(tmp_path / "root", cache_dir=tmp_path / "cache")
    search = f"?run=nemo&sample={sid}"
    resp = dash_post(
        client,
        ".." + URL + ".search...tokens-view.data...tokens-body.children..",
        [
            {"id": URL, "property": "search", "value": search},
            {"id": "tokens-metric", "property": "value", "value": "infer_gap"},
            {"id": "tokens-pads", "property": "value", "value": False},
        ],
        [
            {"id": "tokens-view", "property": "data", "value": search},
            {"id": URL, "property": "pathname", "value": "/tokens"},
        ],
        changed=["tokens-metric.value"],
    )
    assert resp[URL]["search"] == search + "&metric=infer_gap"
    body = resp["tokens-body"]["children"]

    def found(node, id_):
        if isinstance(node, dict):
            if node.get("props", {}).get("id") == id_:
                return node
            node = list(node.values())
        if isinstance(node, list):
            return next((f for n in node if (f := found(n, id_)) is not None), None)
        return None

    d = orjson.loads(found(body, "tokens-strip-data")["props"]["data"]["json"])
    assert d["raw"] == ["40", "41", "42", "43"]  # the model's tokens only, cut by token_loss_mask
    # gap 0, -0.25, 0, 0.5 on the gap's log scale -0.5..0.5 (data.strip_scale): 0.5 ± 0.5 ln(1 + |g| / s) /
    # ln(1 + 0.5 / s), s = 0.125 the run's median |gap| (0, 0, 0.125 ×3, 0.25, 0.5): 0.5, 0.159, 0.5, 1
    # (a linear scale, before, put -0.25 at 0.25)
    at = 0.5 - 0.5 * math.log(1 + 0.25 / 0.125) / math.log(1 + 0.5 / 0.125)
    assert d["colour"] == [round(t * (PALETTE_SIZE - 1)) for t in (0.5, at, 0.5, 1.0)]
    assert d["values"][d["labels"].index("trainer − inference log-prob")] == ["0.0", "-0.25", "0.0", "0.5"]
    shown = json.dumps(body, ensure_ascii=False)
    assert "trainer − inference log-prob" in shown and '"-0.5"' in shown and '"0.5"' in shown  # the legend
    assert '"log scale"' in shown
    line = json.dumps(found(body, "tokens-gap"), ensure_ascii=False)
    # The tail's threshold is ln 2 (data.config.INFER_GAP_TAIL; 0.1 before): no token of this one beyond it.
    for text in ("mean |gap|", "0.1875", "max |gap|", "0.5", "3 ('⟨43⟩')", "|gap| > ln 2", "0.0%", "4"):
        assert text in line, text
    options = {o["value"]: o for o in found(body, "tokens-metric")["props"]["options"]}
    assert not options["infer_gap"]["disabled"]

    (tmp_path / "root" / "plain").mkdir()
    plain = {"prompt": "p", "response": "a", "reward": 1.0, "step": 1, "logprobs": [-1.0]}
    (tmp_path / "root" / "plain" / "data.jsonl").write_text(json.dumps(plain) + "\n")
    board_root(tmp_path / "root", cache_dir=tmp_path / "cache2")
    layout = page.layout(run="plain", sample=sample_id("data.jsonl", 1), metric="infer_gap")
    options = {o["value"]: o for o in find(layout, "tokens-metric").options}
    assert options["infer_gap"]["disabled"]
    assert "needs logprobs and the inference engine's log-probs" in texts(find(layout, "tokens-missing"))
    assert find(layout, "tokens-gap").children is None


def test_tokens113_previous_next_walk_the_responses_drilled_into(page, fixtures_dir):
    """Opened from a filtered, sorted responses view (``back``), previous / next go through exactly that
    view's rows in its order (PPO step 3, reward ≥ 1.5, by KL: 11 rows, ordered here straight from the
    scalars) and say '3 of 11' with the filter; each neighbour's way back selects it. A response outside
    that view, or no ``back``, walks the step in file order. The header reads file:line."""
    import polars as pl

    from data.service import board

    rows = (
        board()
        .store(PPO)
        .scalars()
        .filter((pl.col("step") == 3) & (pl.col("reward") >= 1.5))
        .sort(["kl_mean", "sample_id"], descending=[True, False])
    )
    ids = rows.get_column("sample_id").to_list()
    assert len(ids) == 11
    back = f"run={PPO}&step=3&sort=kl_mean&reward_min=1.5&sample={ids[2]}"
    layout = page.layout(run=PPO, sample=ids[2], back=back)
    assert texts(find(layout, "tokens-nav-where")) == (
        "3 of 11 responses at step 3 · 1.5 ≤ reward · sorted by KL mean per token (k3), highest first"
    )
    for cid, k in (("tokens-prev", 1), ("tokens-next", 3)):
        q = parse_qs(urlsplit(find(layout, cid).href).query)
        assert q["sample"] == [ids[k]]
        assert q["back"] == [f"run={PPO}&step=3&sort=kl_mean&reward_min=1.5&sample={ids[k]}"]
    row = rows.row(2, named=True)
    assert find(layout, "tokens-source-line").children == f"{row['source']}:{row['line']}"
    first = page.layout(run=PPO, sample=ids[0], back=back)
    assert find(first, "tokens-prev").disabled is True
    last = page.layout(run=PPO, sample=ids[-1], back=back)
    assert find(last, "tokens-next").disabled is True
    assert texts(find(last, "tokens-nav-where")).startswith("11 of 11 responses")

    outside = sample_id("rank0.jsonl", 1)  # step 1: not in the view
    lost = texts(find(page.layout(run=PPO, sample=outside, back=back), "tokens-nav-where"))
    assert lost == "response 1 of 16 in step 1 (file order) — not one of the responses you came from"
    plain = texts(find(page.layout(run=PPO, sample=ids[2]), "tokens-nav-where"))
    assert plain.endswith("in step 3 (file order)")
