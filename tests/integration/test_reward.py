"""Reward page through the Flask test client: layout from the query string, URL <-> controls callback,
curve/histogram/heatmap callbacks, drill-down links whose counts equal the responses filter."""

from __future__ import annotations

from collections import OrderedDict
from urllib.parse import parse_qs, urlparse

import polars as pl
import pytest

from data import critic_curves, curve_panels, curves, heatmaps, thinning
from data.queries import ResponseFilter, bar_interval
from data.run_context import steps_of
from data.service import board
from data.views.reward import RewardView
from tests.conftest import dash_post, page_url_key

URL = page_url_key("/reward")  # the page's own dcc.Location

PPO, GRPO, POEM = "trl-ppo-small", "trl-grpo-small", "rlloggingboard-eval-poem"

SYNC = (
    ".." + URL + ".search...reward-run.data...reward-header.children...reward-notices.children"
    "...reward-selected.data...reward-step-text.children...reward-step.value...reward-step.max"
    "...reward-step.marks...reward-step.disabled...reward-band.value...reward-zero.value.."
)
CURVES = (
    "..reward-curve-reward.figure...reward-curve-kl.figure...reward-curve-length.figure"
    "...reward-curve-win.figure...reward-curve-reward-title.children...reward-curve-kl-title.children"
    "...reward-curve-length-title.children...reward-curve-win-title.children"
    "...reward-curve-reward-note.children...reward-curve-kl-note.children"
    "...reward-curve-length-note.children...reward-curve-win-note.children...reward-curves-drawn.data.."
)
STEP_VIEW = (
    "..reward-hist.figure...reward-gain-hist.figure...reward-hist-title.children"
    "...reward-gain-hist-title.children...reward-hist-note.children...reward-gain-hist-note.children"
    "...reward-step-stats.children.."
)
DRILL = "reward-nav.href"
HEATMAP = (
    "..reward-heatmap.figure...reward-heatmap-drawn.data...reward-heatmap-note.children"
    "...reward-heatmap-all.style.."
)
CLICK_IDS = [f"reward-curve-{k}" for k in ("reward", "kl", "length", "win")] + ["reward-heatmap"]


def _i(cid, prop, value):
    return {"id": cid, "property": prop, "value": value}


def _heatmap(client, run, step, search=None, drawn=None):
    """POST the heatmap callback on /reward: run, selected step and the page's URL query; ``drawn``, the run
    and window the figure already shows."""
    return dash_post(
        client,
        HEATMAP,
        [_i("reward-run", "data", run), _i("reward-selected", "data", step), _i(URL, "search", search)],
        [_i("reward-heatmap-drawn", "data", drawn), _i(URL, "pathname", "/reward")],
    )


def sync(
    client, search, *, index=0, band="std", zero=False, run=None, selected=None, trigger="url", clicks=None
):
    """POST the URL <-> controls callback; ``trigger`` names the changed input."""
    clicks = clicks or {}
    inputs = [
        _i(URL, "search", search),
        _i("reward-step", "value", index),
        _i("reward-band", "value", band),
        _i("reward-zero", "value", zero),
        _i("reward-prev", "n_clicks", clicks.get("reward-prev")),
        _i("reward-next", "n_clicks", clicks.get("reward-next")),
        *(_i(c, "clickData", clicks.get(c)) for c in CLICK_IDS),
    ]
    changed = {
        "url": URL + ".search",
        "step": "reward-step.value",
        "band": "reward-band.value",
        "zero": "reward-zero.value",
    }.get(trigger, trigger)
    state = [
        _i("reward-run", "data", run),
        _i("reward-selected", "data", selected),
        _i(URL, "pathname", "/reward"),
    ]
    return dash_post(client, SYNC, inputs, state, changed=[changed]) or {}


def _find(component, cid):
    """The component with id ``cid`` in a layout tree (or None)."""
    if getattr(component, "id", None) == cid:
        return component
    children = getattr(component, "children", None)
    for child in children if isinstance(children, list | tuple) else [children]:
        if hasattr(child, "to_plotly_json"):
            hit = _find(child, cid)
            if hit is not None:
                return hit
    return None


def _notice_texts(component) -> list[str]:
    return [a.children for a in (component.children or [])]


@pytest.fixture
def page(dash_app):
    import pages.reward as page

    return page


def test_reward001_layout_reproduces_the_query(page, fixtures_dir):
    """layout(**query) sets run, step, band and zero shift from the query string without notices."""
    root = page.layout(run=PPO, step="5", band="p25-p75", zero="1")
    assert _find(root, "reward-run").data == PPO
    assert _find(root, "reward-selected").data == 5
    assert _find(root, "reward-step").value == 4  # the slider moves over step indices
    assert _find(root, "reward-step-text").children == "step 5 · 5 of 25"
    assert _find(root, "reward-band").value == "p25-p75"
    assert _find(root, "reward-zero").value is True
    assert _notice_texts(_find(root, "reward-notices")) == []


def test_reward002_layout_without_arguments(page, fixtures_dir):
    """layout() with no query picks the first run and its last step."""
    root = page.layout()
    first = sorted(board().runs())[0]
    assert _find(root, "reward-run").data == first
    steps = list(steps_of(board().store(first)))
    assert _find(root, "reward-selected").data == steps[-1]


def test_reward003_bad_parameters_fall_back_with_notices(page, fixtures_dir):
    """Unknown run, step=abc, a step the run lacks, a bad band and zero value each give a visible notice."""
    root = page.layout(run="../../etc", step="abc", band="wide", zero="maybe")
    texts = " ".join(_notice_texts(_find(root, "reward-notices")))
    assert "Unknown run '../../etc'" in texts and "Ignored step='abc'" in texts
    assert "Ignored band='wide'" in texts and "Ignored zero='maybe'" in texts
    assert _find(root, "reward-run").data == sorted(board().runs())[0]
    # An empty run= asks for no run, as on the other pages: the first run, without a notice.
    root = page.layout(run="")
    assert _find(root, "reward-run").data == sorted(board().runs())[0]
    assert not _notice_texts(_find(root, "reward-notices"))
    root = page.layout(run=POEM, step="150")
    assert _find(root, "reward-selected").data == 100
    assert "has no step 150: showing step 100" in _notice_texts(_find(root, "reward-notices"))[0]


def test_reward004_view_state_round_trip(page, fixtures_dir):
    """to_query omits defaults and from_query reads back the same view."""
    view = RewardView(run=GRPO, step=7, band="p5-p95", zero=True)
    assert view.to_query() == "?run=trl-grpo-small&step=7&band=p5-p95&zero=1"
    assert RewardView(run=GRPO).to_query() == "?run=trl-grpo-small"
    back, msgs, ctx = page._decode(view.to_query())
    assert back == view and msgs == [] and ctx.run == GRPO and 7 in ctx.steps


def test_reward005_url_sets_controls(client, fixtures_dir):
    """A URL change (load, Back/Forward) sets run, selected step, slider, band and switch; no URL write."""
    resp = sync(client, "?run=trl-grpo-small&step=3&band=p5-p95&zero=1", run=PPO, selected=25)
    assert URL not in resp
    assert resp["reward-run"]["data"] == GRPO
    assert resp["reward-selected"]["data"] == 3
    assert resp["reward-step"]["value"] == 2 and resp["reward-step"]["max"] == 24
    assert resp["reward-band"]["value"] == "p5-p95" and resp["reward-zero"]["value"] is True
    # The same view again changes nothing.
    again = sync(
        client,
        "?run=trl-grpo-small&step=3&band=p5-p95&zero=1",
        index=2,
        band="p5-p95",
        zero=True,
        run=GRPO,
        selected=3,
    )
    assert set(again) <= {"reward-notices"}


def test_reward006_controls_write_the_url(client, fixtures_dir):
    """Slider, band, switch, prev/next and a click on a curve or the heatmap each write the URL."""
    base = {"run": PPO, "selected": 5, "index": 4}
    resp = sync(client, "?run=trl-ppo-small&step=5", **{**base, "index": 9}, trigger="step")
    assert resp[URL]["search"] == "?run=trl-ppo-small&step=10"
    assert resp["reward-selected"]["data"] == 10
    resp = sync(client, "?run=trl-ppo-small&step=5", **base, band="p25-p75", trigger="band")
    assert resp[URL]["search"] == "?run=trl-ppo-small&step=5&band=p25-p75"
    resp = sync(client, "?run=trl-ppo-small&step=5", **base, zero=True, trigger="zero")
    assert resp[URL]["search"] == "?run=trl-ppo-small&step=5&zero=1"
    resp = sync(
        client, "?run=trl-ppo-small&step=5", **base, clicks={"reward-prev": 1}, trigger="reward-prev.n_clicks"
    )
    assert resp[URL]["search"] == "?run=trl-ppo-small&step=4" and resp["reward-step"]["value"] == 3
    click = {"points": [{"curveNumber": 2, "x": 12, "y": 1.0}]}
    resp = sync(
        client,
        "?run=trl-ppo-small&step=5",
        **base,
        clicks={"reward-curve-kl": click},
        trigger="reward-curve-kl.clickData",
    )
    assert resp[URL]["search"] == "?run=trl-ppo-small&step=12" and resp["reward-step"]["value"] == 11
    resp = sync(
        client,
        "?run=trl-ppo-small&step=5",
        **base,
        clicks={"reward-heatmap": {"points": [{"x": 20, "y": "[2, 2.2)"}]}},
        trigger="reward-heatmap.clickData",
    )
    assert resp[URL]["search"] == "?run=trl-ppo-small&step=20"
    # A control that did not move the view writes nothing.
    assert URL not in sync(client, "?run=trl-ppo-small&step=5", **base, trigger="step")


def test_reward007_last_step_url_keeps_following_the_run(client, fixtures_dir):
    """Without step in the URL, changing the band keeps the URL free of a step (it follows a live run)."""
    resp = sync(client, "?run=trl-ppo-small", run=PPO, selected=25, index=24, band="p5-p95", trigger="band")
    assert resp[URL]["search"] == "?run=trl-ppo-small&band=p5-p95"


def _curves(client, run, step, band="std", zero=False, drawn=None):
    inputs = [
        _i("reward-run", "data", run),
        _i("reward-selected", "data", step),
        _i("reward-band", "value", band),
        _i("reward-zero", "value", zero),
    ]
    return dash_post(client, CURVES, inputs, [_i("reward-curves-drawn", "data", drawn)])


def test_reward008_curves_and_notes(client, fixtures_dir):
    """PPO gets four panels of curves; the poem run (no token fields) gets notes for KL and length."""
    resp = _curves(client, PPO, 5, "p25-p75")
    reward = resp["reward-curve-reward"]["figure"]
    names = [t["name"] for t in reward["data"]]
    assert "reward (band: p25–p75)" in names and "reference reward" in names
    kl = [t["name"] for t in resp["reward-curve-kl"]["figure"]["data"] if t.get("showlegend") is not False]
    assert kl == [
        "KL (k3), per-token mean (band: p25–p75 of the responses' per-token means)",
        "the step's largest response per-token mean",
        "one response carries over 50% of the step's KL",  # PPO's step 3: 53 %
        "log-ratio log π − log π_ref, per-token mean",
    ]
    assert resp["reward-curves-drawn"]["data"] == [PPO, "p25-p75", False]
    poem = _curves(client, POEM, 100)
    assert poem["reward-curve-kl"]["figure"]["data"] == []
    assert poem["reward-curve-kl-note"]["children"] == curve_panels.NOTE_NO_KL
    assert poem["reward-curve-length-note"]["children"] == curve_panels.NOTE_CHARS


def test_reward009_step_change_patches_the_marker(client, fixtures_dir):
    """With the same run, band and shift already drawn, a new step only patches the marker shapes."""
    resp = _curves(client, PPO, 7, drawn=[PPO, "std", False])
    fig = resp["reward-curve-win"]["figure"]
    assert fig["__dash_patch_update"] == "__dash_patch_update"
    assert fig["operations"][0]["location"] == ["layout", "shapes"]
    assert fig["operations"][0]["params"]["value"][0]["x0"] == 7
    heat = _heatmap(client, PPO, 7, drawn=[PPO, None])
    assert heat["reward-heatmap"]["figure"]["operations"][0]["location"] == ["layout", "shapes"]


def _step_view(client, run, step):
    inputs = [_i("reward-run", "data", run), _i("reward-selected", "data", step)]
    return dash_post(client, STEP_VIEW, inputs)


def _drill(
    client,
    run,
    step,
    click=None,
    gain_click=None,
    heat_click=None,
    changed=None,
    signal=None,
    search="",
    q=None,
    critic=None,
):
    """POST the drill callback; returns the href the click navigates to (None: no navigation). ``signal``:
    a click on the degeneration figure, ``q``: on the search figure; ``search``: the page's URL query."""
    inputs = [
        _i("reward-hist", "clickData", click),
        _i("reward-gain-hist", "clickData", gain_click),
        _i("reward-heatmap", "clickData", heat_click),
        _i("reward-signal-degeneration", "clickData", signal),
        _i("reward-signal-search", "clickData", q),
        _i("reward-signal-critic", "clickData", critic),
    ]
    state = [
        _i("reward-run", "data", run),
        _i("reward-selected", "data", step),
        _i("reward-url", "search", search),
    ]
    resp = dash_post(client, DRILL, inputs, state, changed=changed)
    return (resp or {}).get("reward-nav", {}).get("href")


def _point(trace, k, curve=0):
    return {"points": [{"curveNumber": curve, "x": trace["x"][k], "customdata": trace["customdata"][k]}]}


def test_reward010_clicks_navigate_to_exactly_their_responses(client, fixtures_dir):
    """A reward bar opens /responses with run, step and reward_min/max; a reference-reward bar with
    ref_min/max; a gain bar with gain_min/max (the last bar has no max); a heatmap cell with its step and
    bin. Each href's filter selects exactly the bar's count. Empty bars and cells, and a cell whose label
    is no bin of the run's current bins, go nowhere."""
    scalars = board().store(PPO).scalars()
    resp = _step_view(client, PPO, 5)
    hist = resp["reward-hist"]["figure"]["data"]
    cases = []
    for curve, prefix in ((0, "reward"), (1, "ref")):
        k = next(i for i, n in enumerate(hist[curve]["y"]) if n > 0)
        href = _drill(client, PPO, 5, click=_point(hist[curve], k, curve), changed=["reward-hist.clickData"])
        cases.append((href, prefix, hist[curve]["customdata"][k]))
    gain = resp["reward-gain-hist"]["figure"]["data"][0]
    last = len(gain["y"]) - 1
    href = _drill(client, PPO, 5, gain_click=_point(gain, last), changed=["reward-gain-hist.clickData"])
    cases.append((href, "gain", gain["customdata"][last]))
    for href, prefix, (lo, hi, n) in cases:
        url = urlparse(href)
        q = parse_qs(url.query)
        assert url.path == "/responses" and q["run"] == [PPO] and q["step"] == ["5"]
        assert float(q[f"{prefix}_min"][0]) == lo
        assert (hi is None and f"{prefix}_max" not in q) or float(q[f"{prefix}_max"][0]) == hi
        assert set(q) == {"run", "step", f"{prefix}_min"} | ({f"{prefix}_max"} if hi is not None else set())
        flt = ResponseFilter(step=5, **{f"{prefix}_min": lo, f"{prefix}_max": hi})
        assert scalars.filter(flt.scalar_expr()).height == n > 0
    assert cases[2][2][1] is None  # the gain click was on the last bar

    heat = {"points": [{"curveNumber": 0, "x": 3, "y": "2", "z": 0.25, "customdata": 4}]}
    href = _drill(client, PPO, 20, heat_click=heat, changed=["reward-heatmap.clickData"])
    q = parse_qs(urlparse(href).query)
    assert q["step"] == ["3"] and float(q["reward_min"][0]) == 2.0 and float(q["reward_max"][0]) == 2.5
    assert scalars.filter(ResponseFilter(step=3, reward_min=2.0, reward_max=2.5).scalar_expr()).height == 4
    empty_bar = {"points": [{"curveNumber": 0, "x": 0.4, "customdata": [0.5, 1.0, 0]}]}
    assert _drill(client, PPO, 5, click=empty_bar, changed=["reward-hist.clickData"]) is None
    for cell in ({**heat["points"][0], "customdata": 0}, {**heat["points"][0], "y": "[2, 2.5)"}):
        assert (
            _drill(client, PPO, 5, heat_click={"points": [cell]}, changed=["reward-heatmap.clickData"])
            is None
        )


@pytest.mark.parametrize(("run", "step"), [(PPO, 5), (GRPO, 25), (POEM, 2300)])
def test_reward011_bar_counts_equal_the_responses_filter(client, fixtures_dir, run, step):
    """For every bar of both histograms of a fixture step, the count shown equals the number of responses
    ResponseFilter(step, interval).scalar_expr() selects on the scalars (what the responses page lists)."""
    resp = _step_view(client, run, step)
    scalars = board().store(run).scalars()
    for fig_id, prefix in (("reward-hist", "reward"), ("reward-gain-hist", "gain")):
        bars = resp[fig_id]["figure"]["data"][0]
        edges = [c[0] for c in bars["customdata"]] + [bars["customdata"][-1][0] + bars["width"][-1]]
        assert sum(bars["y"]) == scalars.filter(pl.col("step") == step).height
        for k, (lo, hi, n) in enumerate(bars["customdata"]):
            assert n == bars["y"][k]
            assert (lo, hi) == bar_interval(edges, k)
            flt = ResponseFilter(step=step, **{f"{prefix}_min": lo, f"{prefix}_max": hi})
            assert scalars.filter(flt.scalar_expr()).height == n, (fig_id, k)


def test_reward012_same_edges_every_step_and_heatmap(client, fixtures_dir):
    """Two steps share the run-level bins; the heatmap has one column per step and one row per bin."""
    a = _step_view(client, GRPO, 1)["reward-hist"]["figure"]["data"][0]["customdata"]
    b = _step_view(client, GRPO, 25)["reward-hist"]["figure"]["data"][0]["customdata"]
    assert [c[:2] for c in a] == [c[:2] for c in b]
    heat = _heatmap(client, GRPO, 3)
    trace = heat["reward-heatmap"]["figure"]["data"][0]
    assert len(trace["y"]) == len(a) and trace["z"]["shape"] == f"{len(a)}, 25"
    assert heat["reward-heatmap-drawn"]["data"] == [GRPO, None]
    assert heat["reward-heatmap-note"]["children"] == ""
    assert heat["reward-heatmap-all"]["style"] == {"display": "none"}


def test_reward013_unknown_run_in_callbacks_is_an_empty_state(client, fixtures_dir):
    """A run that is not under the root gives empty figures in every callback, never an error."""
    resp = _curves(client, "../../etc", 1)
    assert resp["reward-curve-reward"]["figure"]["data"] == []
    resp = _step_view(client, "nope", 1)
    assert resp["reward-hist"]["figure"]["data"] == []


def test_reward014_half_step_rewards_one_bar_per_value(client, fixtures_dir):
    """PPO's rewards are multiples of 0.5: the step's histogram has one bar centred on each value of the
    run (0 to 3, 7 bars; was 16 bars of width 0.2 drawn beside their values), whole-number count ticks,
    and the heatmap one row per value."""
    resp = _step_view(client, PPO, 20)
    fig = resp["reward-hist"]["figure"]
    bars = fig["data"][0]
    values = [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0]
    # Each value's pair of bars (reward left, reference right, 0.4 wide together) is centred on it.
    assert [round(x + 0.1, 12) for x in bars["x"]] == values
    assert [round(x - 0.1, 12) for x in fig["data"][1]["x"]] == values
    assert [c[:2] for c in bars["customdata"]] == [[v, v + 0.5] for v in values[:-1]] + [[3.0, None]]
    assert fig["layout"]["yaxis"]["dtick"] == 2 and fig["layout"]["xaxis"]["tickvals"] == values
    heat = _heatmap(client, PPO, 20)
    assert heat["reward-heatmap"]["figure"]["data"][0]["y"] == ["0", "0.5", "1", "1.5", "2", "2.5", "3"]


def test_reward015_partial_last_step_is_flagged(client, fixtures_dir):
    """The poem run's last step 2300 holds 56 of the 128 responses of its other steps: the step's key
    figures say so at 2300 (not at 2200), and so does the responses page's summary at that step."""
    from tests.integration.test_responses import summary_of, texts_of

    flag = "partial step: 56 responses, where the run's other steps have 128"
    assert flag in texts_of(_step_view(client, POEM, 2300)["reward-step-stats"]["children"])
    assert "partial step" not in texts_of(_step_view(client, POEM, 2200)["reward-step-stats"]["children"])
    assert "partial step" not in texts_of(_step_view(client, PPO, 25)["reward-step-stats"]["children"])
    for step, shown in ((2300, True), (2200, False)):
        out = summary_of(client, f"?run={POEM}&step={step}")
        assert (flag in texts_of(out["responses-summary"]["children"])) is shown


# The reward-hacking aids and (issue 35) the critic's health: figures, then titles, then notes.
SIGNALS = (
    ".."
    + "...".join(
        f"reward-signal-{k}{part}"
        for part in (".figure", "-title.children", "-note.children")
        for k in ("degeneration", "search", "critic")
    )
    + "...reward-signal-critic.style.."
)


def _signals(client, run, step, search=""):
    inputs = [
        _i("reward-run", "data", run),
        _i("reward-selected", "data", step),
        _i("reward-url", "search", search),
    ]
    return dash_post(client, SIGNALS, inputs)


def _arr(v) -> list:
    """A figure's array as JSON carries it: a list, or a typed array (``{"dtype", "bdata"}``)."""
    if isinstance(v, dict) and "bdata" in v:
        import base64

        import numpy as np

        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"]).tolist()
    return list(v)


def _curve(trace) -> dict:
    return dict(zip(_arr(trace["x"]), _arr(trace["y"]), strict=True))


def _lines(fixtures_dir, run):
    import json

    return [
        json.loads(line)
        for f in ("rank0.jsonl", "rank1.jsonl")
        for line in (fixtures_dir / run / f).read_text().splitlines()
    ]


def _by_step(lines, pred) -> dict[int, float]:
    steps = sorted({r["step"] for r in lines})
    return {
        s: sum(1 for r in lines if r["step"] == s and pred(r)) / sum(1 for r in lines if r["step"] == s)
        for s in steps
    }


def test_reward016_reward_hacking_curves_by_hand(client, fixtures_dir):
    """Below the curves, per step: the share of responses with no end token (PPO: exactly the lines whose
    trainer-written ends_with_eos is false, counted here from the files), the mean repetition, and the
    share matching the URL's q (Python's re on the files' prompt and response, which agrees with the
    search's Rust regex for this pattern). The poem run, whose texts hold no end token, says why it has no
    truncation curve; without q the search panel says what to type."""
    import re

    lines = _lines(fixtures_dir, PPO)
    out = _signals(client, PPO, 25, "?run=trl-ppo-small&q=(?i)very%20%5Cw%2B")
    deg = out["reward-signal-degeneration"]["figure"]
    names = [t["name"] for t in deg["data"]]
    # Issue 35: repetition counted on the response tokens the PPO run has, and the label says so.
    assert names == ["repetition, step mean (share of repeated token 3-grams)",
                     "truncated (share of responses with no end token)"]  # fmt: skip
    cut = _by_step(lines, lambda r: not r["ends_with_eos"])
    trace = deg["data"][1]
    assert _curve(trace) == pytest.approx(cut)
    assert set(trace["customdata"]) == {"truncated_share"} and sum(cut.values()) > 0
    scalars = board().store(PPO).scalars()
    rep = deg["data"][0]
    for step, y in _curve(rep).items():
        values = [v for v in scalars.filter(pl.col("step") == step)["repetition"].to_list() if v is not None]
        assert y == pytest.approx(sum(values) / len(values))
    pattern = re.compile(r"(?i)very \w+")
    matched = _by_step(lines, lambda r: bool(pattern.search(r["prompt"]) or pattern.search(r["response"])))
    search = out["reward-signal-search"]["figure"]["data"][0]
    assert _curve(search) == pytest.approx(matched)
    assert 0 < max(matched.values()) < 1
    assert search["name"] == "share of responses matching the search '(?i)very \\\\w+'"

    poem = _signals(client, POEM, 2300, f"?run={POEM}")
    # The poem run is Chinese without tokens: character 3-grams.
    assert [t["name"] for t in poem["reward-signal-degeneration"]["figure"]["data"]] == [
        "repetition, step mean (share of repeated character 3-grams)"
    ]
    assert (
        "No response of this run ends with an end token"
        in poem["reward-signal-degeneration-note"]["children"]
    )
    assert poem["reward-signal-search-note"]["children"].startswith("Type a regular expression")
    bad = _signals(client, PPO, 25, "?run=trl-ppo-small&q=(oops")
    assert bad["reward-signal-search-note"]["children"].startswith("invalid regular expression '(oops'")


def test_reward017_reward_hacking_points_open_exactly_their_responses(client, fixtures_dir):
    """A click on a point opens the responses behind it: the truncation point of step S the step's
    responses with no end token (truncated=1; the responses page counts as many as the curve), the search
    point those the search matches (q=), the repetition point every response of the step, most
    repetitive first."""
    from tests.integration.test_responses import rows_request

    lines = _lines(fixtures_dir, PPO)
    step = next(s for s, v in sorted(_by_step(lines, lambda r: not r["ends_with_eos"]).items()) if v > 0)
    n_cut = sum(1 for r in lines if r["step"] == step and not r["ends_with_eos"])

    def point(key):
        return {"points": [{"curveNumber": 0, "x": step, "y": 0.5, "customdata": key}]}

    search = "?run=trl-ppo-small&q=good"
    cut = _drill(
        client, PPO, step, signal=point("truncated_share"), changed=["reward-signal-degeneration.clickData"]
    )
    assert parse_qs(urlparse(cut).query) == {"run": [PPO], "step": [str(step)], "truncated": ["1"]}
    assert rows_request(client, "?" + urlparse(cut).query)["rowCount"] == n_cut
    hit = _drill(
        client, PPO, step, q=point("match_share"), search=search, changed=["reward-signal-search.clickData"]
    )
    assert parse_qs(urlparse(hit).query) == {"run": [PPO], "step": [str(step)], "q": ["good"]}
    n_good = sum(1 for r in lines if r["step"] == step and ("good" in r["prompt"] or "good" in r["response"]))
    assert rows_request(client, "?" + urlparse(hit).query)["rowCount"] == n_good
    rep = _drill(
        client, PPO, step, signal=point("repetition_mean"), changed=["reward-signal-degeneration.clickData"]
    )
    assert parse_qs(urlparse(rep).query) == {"run": [PPO], "step": [str(step)], "sort": ["repetition"]}
    rows = rows_request(client, "?" + urlparse(rep).query)
    assert rows["rowCount"] == 16
    reps = [r["repetition"] for r in rows["rowData"] if r["repetition"] is not None]
    assert reps == sorted(reps, reverse=True)


def test_reward018_reward_hacking_panels_of_a_run_without_responses(client, board_root, tmp_path):
    """A run of only unusable lines (no responses) gets both reward-hacking panels drawn, saying it has
    no responses, instead of an error that left them 'Loading…'."""
    run = tmp_path / "root" / "unknown-format"
    run.mkdir(parents=True)
    (run / "rank0.jsonl").write_text('{"foo": 1}\nnot json\n')
    board_root(tmp_path / "root", cache_dir=tmp_path / "cache")
    out = _signals(client, "unknown-format", None, "?run=unknown-format&q=a")
    assert out["reward-signal-degeneration-note"]["children"] == "No responses in this run yet."
    assert out["reward-signal-search-note"]["children"] == "No responses in this run yet."
    assert out["reward-signal-search"]["figure"]["data"] == []
    assert out["reward-signal-critic-note"]["children"] == "No responses in this run yet."


def test_reward031_critic_panel_is_one_line_without_values(client, fixtures_dir):
    """A run without critic values (TRL GRPO) gets the critic card's one-line note and no chart (its graph
    hidden, not a 300 px empty one); a run with them (TRL PPO) gets the chart at its height."""
    grpo = _signals(client, "trl-grpo-small", 1, "?run=trl-grpo-small")
    assert grpo["reward-signal-critic-note"]["children"] == critic_curves.NOTE_NO_CRITIC
    assert grpo["reward-signal-critic-title"]["children"] == "Critic health"
    assert grpo["reward-signal-critic"]["style"] == {"display": "none"}
    ppo = _signals(client, PPO, 25, f"?run={PPO}")
    assert ppo["reward-signal-critic"]["style"] == {"height": "300px"}
    assert [t["name"] for t in ppo["reward-signal-critic"]["figure"]["data"]][:2] == [
        "explained variance (trainer returns)",
        "mean |value − return| (trainer returns)",
    ]


def test_reward021_a_long_run_draws_thinned_curves_with_the_selected_step(client, fixtures_dir, monkeypatch):
    """A run of more steps than thinning.MAX_POINTS (here 10, against PPO's steps): each curve at most 10
    points plus the selected step 7, at its exact value; the note says so; a step change draws again
    (the selected step is in the curves), not just the marker."""
    monkeypatch.setattr(thinning, "MAX_POINTS", 10)
    store = board().store(PPO)
    steps = list(steps_of(store))
    assert len(steps) > 10
    resp = _curves(client, PPO, 7)
    assert resp["reward-curves-drawn"]["data"] == [PPO, "std", False, 7]
    line = next(t for t in resp["reward-curve-reward"]["figure"]["data"] if t["name"].startswith("reward ("))
    xs = _arr(line["x"])
    ys = _arr(line["y"])
    assert 7 in xs and len(xs) <= 11
    exact = curves.run_steps(store).filter(pl.col("step") == 7).item(0, "reward_mean")
    assert ys[xs.index(7)] == exact
    assert (
        f"{len(steps)} steps: each curve is drawn at the lowest and highest value"
        in (resp["reward-curve-reward-note"]["children"])
    )
    again = _curves(client, PPO, 8, drawn=[PPO, "std", False, 7])
    assert "data" in again["reward-curve-reward"]["figure"]  # a whole figure, not a patch


def _zoom(client, search, click=None, show_all=None):
    """POST the heatmap zoom callback (a click on the heatmap, or on "Show all steps"); its output's key
    carries a hash (allow_duplicate)."""
    from app import app

    key = next(
        k for k, v in app.callback_map.items()
        if k.startswith(URL + ".search@") and any(i["id"] == "reward-heatmap-all" for i in v["inputs"])
    )  # fmt: skip
    inputs = [_i("reward-heatmap", "clickData", click), _i("reward-heatmap-all", "n_clicks", show_all)]
    state = [_i(URL, "search", search), _i(URL, "pathname", "/reward")]
    changed = ["reward-heatmap-all.n_clicks" if show_all else "reward-heatmap.clickData"]
    resp = dash_post(client, key, inputs, state, changed=changed)
    return None if resp is None else resp[URL]["search"]


def test_reward022_a_long_runs_heatmap_draws_runs_of_steps_and_a_click_zooms(
    client, fixtures_dir, monkeypatch
):
    """A run of more steps than thinning.MAX_POINTS (here 10): the heatmap has at most 10 columns of k steps
    each, every count the sum of its steps' counts; a click on a column puts the 10 steps around it in the
    URL (heatmap=a-b), drawn one per step with a note and "Show all steps", whose cells open responses;
    the click neither moves the step nor opens responses itself; "Show all steps" drops heatmap=."""
    monkeypatch.setattr(thinning, "MAX_POINTS", 10)
    store = board().store(PPO)
    steps = list(steps_of(store))
    hm = curves.run_heatmap(store, "reward")
    k = -(-len(steps) // 10)
    heat = _heatmap(client, PPO, 7)
    trace = heat["reward-heatmap"]["figure"]["data"][0]
    assert heat["reward-heatmap-drawn"]["data"] == [PPO, None]
    assert (
        f"{len(steps)} steps, each column {k} of them ({steps[0]}–{steps[k - 1]},"
        in (heat["reward-heatmap-note"]["children"])
    )
    assert trace["customdata"]["shape"] == f"{len(hm.edges) - 1}, {-(-len(steps) // k)}, 3"
    assert "steps %{customdata[1]:,}–%{customdata[2]:,}" in trace["hovertemplate"]
    # A click on the second column (steps k+1..2k): what Dash sends (customdata as an object of indexes).
    first, last = steps[k], steps[2 * k - 1]
    cell = {"x": (first + last) / 2, "y": trace["y"][0], "customdata": {"0": 3, "1": first, "2": last}}
    click = {"points": [cell]}
    search = _zoom(client, f"?run={PPO}&step=7", click)
    lo, hi = heatmaps.zoom_window(steps, first, last, 10)
    assert parse_qs(search[1:]) == {"run": [PPO], "step": ["7"], "heatmap": [f"{lo}-{hi}"]}
    assert sync(client, f"?run={PPO}&step=7", trigger="reward-heatmap.clickData",
                clicks={"reward-heatmap": click}) == {}  # fmt: skip
    assert _drill(client, PPO, 7, heat_click=click, changed=["reward-heatmap.clickData"]) is None
    zoomed = _heatmap(client, PPO, 7, search)
    z = zoomed["reward-heatmap"]["figure"]["data"][0]
    shown = [s for s in steps if lo <= s <= hi]
    assert _arr(z["x"]) == shown and zoomed["reward-heatmap-drawn"]["data"] == [PPO, [lo, hi]]
    assert zoomed["reward-heatmap-all"]["style"] == {}
    assert zoomed["reward-heatmap-note"]["children"] == (
        f"Steps {lo}–{hi} of {len(steps)}, one column per step: click a cell for its responses."
    )
    assert zoomed["reward-heatmap"]["figure"]["layout"]["xaxis"]["range"] == [lo - 0.5, hi + 0.5]
    # The last step is not in the window: the note says so (the marker is off the drawn steps).
    away = _heatmap(client, PPO, steps[-1], search)
    assert away["reward-heatmap-note"]["children"].endswith(
        f"The selected step, {steps[-1]}, is not among them."
    )
    assert _zoom(client, search, show_all=1) == f"?run={PPO}&step=7"


def test_reward023_a_cold_page_builds_no_store_index(client, board_root, tmp_path, monkeypatch):
    """The demo run's page on a fresh process (no result cached): the curves, the step's histograms, the
    reward-hacking aids and the heatmap come from the steps summary, the histogram cells and the manifest,
    without building the store's index of its parts (in proportion to the run, 19 ms at 2.56M), and equal
    the page drawn with the index built."""
    from data import signals
    from data.demo import write_demo_run
    from data.store import reader

    write_demo_run(tmp_path / "root", "demo", steps=8, per_step=16)
    board_root(tmp_path / "root", cache_dir=tmp_path / "cache")
    board().store("demo").index()  # ingested (ingest's own check may build it)

    def cold():
        for f in (curves._summary, curves._panels, curves._thinned_panels, curves._bins, curves._bars,
                  curves._heatmap, curves._cells, signals._repetition, signals._truncation):  # fmt: skip
            f.cache_clear()
        return (
            _curves(client, "demo", 4),
            _step_view(client, "demo", 4),
            _signals(client, "demo", 4),
            _heatmap(client, "demo", 4),
        )

    want = cold()
    with monkeypatch.context() as m:
        m.setattr(reader, "_INDEXES", OrderedDict())  # a fresh process: no index built yet
        m.setattr(reader, "build_index", lambda *a: pytest.fail("built the store index"))
        got = cold()
    assert got == want
    assert got[1]["reward-hist"]["figure"]["data"] and got[3]["reward-heatmap"]["figure"]["data"]


TRAINER_CARD = "..reward-trainer-fig.figure...reward-trainer-notes.children...reward-agreement.children.."


def test_reward024_trainer_card_says_still_reading_tensorboard(client, board_root, tmp_path, monkeypatch):
    """A run's TensorBoard events are read in the background: the trainer card's first answer says it is
    still reading them (its chart and its notes, never "no trainer log"), and once they are read the card
    draws the logged scalar."""
    import threading

    from data.demo import write_demo_run
    from data.trainer_logs import scalars
    from tests.unit.test_trainer_logs import _events

    run = write_demo_run(tmp_path / "root", "tb-run", steps=4, per_step=8)
    (run / "runs").mkdir()
    _events(run / "runs", {"train/loss": [(s, 1.0 / (s + 1)) for s in range(4)]})
    board_root(tmp_path / "root", cache_dir=tmp_path / "cache")
    assert board().store("tb-run", wait=60) is not None
    release, real = threading.Event(), scalars._events_now
    monkeypatch.setattr(scalars, "_events_now", lambda f: release.wait(60) and real(f))
    inputs = [_i("reward-run", "data", "tb-run"), _i("reward-trainer", "value", None)]
    out = dash_post(client, TRAINER_CARD, inputs)
    title = out["reward-trainer-fig"]["figure"]["layout"]["annotations"][0]["text"]
    assert "Still reading the trainer's TensorBoard events" in title
    assert "still reading its TensorBoard events" in str(out["reward-trainer-notes"]["children"])
    release.set()
    scalars.wait_for_events(60)
    out = dash_post(client, TRAINER_CARD, inputs)
    traces = out["reward-trainer-fig"]["figure"]["data"]
    assert traces and "still reading" not in str(out["reward-trainer-notes"]["children"])


def test_reward040_critic_health_curves_and_their_click(client, fixtures_dir):
    """The TRL PPO run's critic panel: 'explained variance (trainer returns)' over its 25 steps beside the
    mean |value − return| and TRL's own value loss; a click on a point opens that step's responses, the
    largest value error first."""
    out = _signals(client, PPO, 5, f"?run={PPO}")
    traces = [t for t in out["reward-signal-critic"]["figure"]["data"] if t.get("name")]
    names = [t["name"] for t in traces]
    assert names[:3] == [
        "explained variance (trainer returns)",
        "mean |value − return| (trainer returns)",
        "trainer's value loss (loss/value_avg)",
    ], names
    ev = _curve(traces[0])
    assert sorted(ev) == list(range(1, 26))
    point = {"x": _arr(traces[0]["x"]), "customdata": traces[0]["customdata"]}
    k = point["x"].index(9)
    href = _drill(client, PPO, 5, critic=_point(point, k), changed=["reward-signal-critic.clickData"])
    assert href == f"/responses?run={PPO}&step=9&sort=value_error_abs_mean"
