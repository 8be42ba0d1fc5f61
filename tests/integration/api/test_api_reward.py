"""The reward page's JSON (/api/v1/reward) on real runs: every figure, the step's key figures and the
notices equal what the page's callbacks and layout return for the same URL, through the Flask test client;
the mean reward per step and one step's reward histogram equal hand computations from trl-grpo-small's
files; a bad query answers with the page's notices, never a 500."""

from __future__ import annotations

import json
import math

import pytest

from components.format import value
from tests.conftest import page_url_key, router_body
from tests.dash_calls import call, component, figure_traces, text

RUN, STEP = "trl-grpo-small", 7
URL = page_url_key("/reward")
CURVES = ("reward-curve-reward", "reward-curve-kl", "reward-curve-length", "reward-curve-win")
SIGNALS = ("reward-signal-degeneration", "reward-signal-search", "reward-signal-critic")


def _api(client, query: str) -> dict:
    r = client.get(f"/api/v1/reward{query}")
    assert r.status_code == 200, r.get_data(as_text=True)[:300]
    return r.get_json()


def _lines(fixtures_dir, run: str) -> list[dict]:
    return [
        json.loads(x)
        for f in sorted((fixtures_dir / run).glob("*.jsonl"))
        for x in f.read_text().splitlines()
        if x
    ]


def _shown_notices(client, search: str) -> list[str]:
    page = client.post("/_dash-update-component", json=router_body("/reward", search)).get_json()["response"]
    return [text(a) for a in component(page, "reward-notices")["props"]["children"]]


@pytest.mark.parametrize(
    "search",
    [
        f"?run={RUN}&step={STEP}&band=p5-p95&q=the",
        "?run=trl-ppo-small&zero=1&heatmap=3-9",
        "?run=rlloggingboard-eval-poem",
    ],
)
def test_api_reward001_figures_are_the_pages(client, dash_app, fixtures_dir, search):
    """Each figure of the answer (curves, histograms, reward-hacking and critic panels, heatmap, trainer
    chart) is the one the page's callback draws for the same URL; the key figures are the page's."""
    got = _api(client, search)
    v = got["view"]
    base = {"reward-run.data": v["run"], "reward-selected.data": v["step"], f"{URL}.search": search,
            f"{URL}.pathname": "/reward"}  # fmt: skip
    curves = call(client, dash_app, "reward-curve-reward.figure",
                  base | {"reward-band.value": v["band"], "reward-zero.value": v["zero"]})  # fmt: skip
    hists = call(client, dash_app, "reward-hist.figure", base)
    signals = call(client, dash_app, "reward-signal-search.figure", base)
    heat = call(client, dash_app, "reward-heatmap.figure", base)
    trainer = call(
        client, dash_app, "reward-trainer-fig.figure", base | {"reward-trainer.value": v["trainer"]}
    )
    for fid, resp in [*((c, curves) for c in CURVES), *((s, signals) for s in SIGNALS),
                      ("reward-hist", hists), ("reward-gain-hist", hists), ("reward-heatmap", heat),
                      ("reward-trainer-fig", trainer)]:  # fmt: skip
        assert got["figures"][fid]["traces"] == figure_traces(resp[fid]["figure"]), fid
        if f"{fid}-title" in resp:
            assert got["figures"][fid]["title"] == resp[f"{fid}-title"]["children"], fid
            assert (got["figures"][fid]["note"] or "") == (resp[f"{fid}-note"]["children"] or ""), fid
    trainer_notes = " ".join(text(d) for d in trainer["reward-trainer-notes"]["children"])
    assert (got["figures"]["reward-trainer-fig"]["note"] or "") == trainer_notes
    assert (got["figures"]["reward-heatmap"]["note"] or "") == heat["reward-heatmap-note"]["children"]
    shown_stats = [text(d) for d in hists["reward-step-stats"]["children"]]
    rows = got["tables"]["reward-step-stats"]["rows"]
    assert len(rows) == len(shown_stats) and got["rows"] == rows
    for row, shown in zip(rows, shown_stats, strict=True):
        kind, val = row["kind"], row["value"]
        if kind == "kl_top":  # its sentence, then the link to the step's responses by KL
            want = row["name"] + val["text"] + "open the step by KL"
        elif kind == "warn":
            want = f"{row['name']}: {val}"
        else:
            want = row["name"] + value(val, kind, 1)
        assert shown == want, (row, shown)
    assert got["notices"] == _shown_notices(client, search)
    assert got["store"]["version"] is not None and got["run"] == v["run"]


def test_api_reward002_view_and_trainer_of_grpo(client, fixtures_dir):
    """The resolved view: the URL's step, band and search; the trainer key charted is the page's default
    from trl_log_history.json, whose agreement checks are a table."""
    got = _api(client, f"?run={RUN}&step={STEP}&band=p5-p95&q=the")
    v = got["view"]
    assert (v["run"], v["step"], v["band"], v["zero"], v["q"], v["heatmap"]) == (
        RUN,
        STEP,
        "p5-p95",
        False,
        "the",
        None,
    )
    assert v["trainer"] in v["trainer_keys"] and got["figures"]["reward-trainer-fig"]["traces"]
    assert got["tables"]["reward-agreement-0"]["rows"], "trl_log_history.json has keys the board computes"
    window = _api(client, "?run=trl-ppo-small&heatmap=3-9")
    assert window["view"]["heatmap"] == [3, 9] and window["view"]["step"] == 25  # the last step, none asked
    assert window["figures"]["reward-heatmap"]["traces"][0]["x"] == list(range(3, 10))


def test_api_reward003_mean_reward_per_step_by_hand(client, fixtures_dir):
    """The reward curve's mean at every step is the mean of that step's rewards in the files."""
    lines = _lines(fixtures_dir, RUN)
    steps = sorted({x["step"] for x in lines})
    got = _api(client, f"?run={RUN}")
    mean = next(
        t for t in got["figures"]["reward-curve-reward"]["traces"] if t["name"].startswith("reward (band:")
    )
    assert mean["x"] == steps
    for s, y in zip(steps, mean["y"], strict=True):
        rewards = [x["reward"] for x in lines if x["step"] == s]
        assert math.isclose(y, sum(rewards) / len(rewards), rel_tol=1e-12, abs_tol=1e-15), s


def test_api_reward004_histogram_bars_by_hand(client, fixtures_dir):
    """Step 7's reward bars: each bar's interval [lo, hi) (the last one closed) holds as many of the step's
    rewards in the files as the bar's count says; the bars' counts add up to the step's responses."""
    rewards = [x["reward"] for x in _lines(fixtures_dir, RUN) if x["step"] == STEP]
    bars = _api(client, f"?run={RUN}&step={STEP}")["figures"]["reward-hist"]["traces"][0]
    assert bars["type"] == "bar" and len(bars["customdata"]) > 1
    last = len(bars["customdata"]) - 1
    for i, (lo, hi, count, *_) in enumerate(bars["customdata"]):
        inside = [r for r in rewards if lo <= r and (r < hi or (i == last and r <= hi))]
        assert count == len(inside), (i, lo, hi)
    assert sum(c[2] for c in bars["customdata"]) == len(rewards)


def test_api_reward005_bad_query_is_the_pages_notices(client, fixtures_dir):
    """A step the run lacks, a bad band and an unknown key: 200 with the page's own notices."""
    search = f"?run={RUN}&step=999&band=wide&nope=1&heatmap=9-3"
    got = _api(client, search)
    assert got["notices"] == _shown_notices(client, search) and len(got["notices"]) >= 3
    assert got["view"]["band"] == "std" and got["view"]["step"] in range(1, 26)
    unknown = _api(client, "?run=no-such-run")  # the page shows another run, and says so
    assert (
        unknown["notices"] == _shown_notices(client, "?run=no-such-run") and unknown["run"] != "no-such-run"
    )


def test_api_reward006_empty_root_says_so(client, board_root, tmp_path):
    """A root without runs: the answer says what the page's empty state says, with no figure."""
    (tmp_path / "empty").mkdir()
    board_root(tmp_path / "empty", cache_dir=tmp_path / "cache")
    got = _api(client, "?run=x&step=1")
    assert got["notices"] == [f"No runs found under {tmp_path / 'empty'}."] and got["figures"] == {}
