"""Compare page through the Flask test client: layout from the query string (bad values are notices),
the URL <-> controls callback, each section's callback on the fixture runs (with the notes for what one
run lacks), and the view state's URL round trip."""

from __future__ import annotations

import json

import pytest

from data.views.codec import parse_search
from data.views.compare import CompareView
from tests.conftest import dash_post, find, page_url_key

PPO, GRPO, POEM = "trl-ppo-small", "trl-grpo-small", "rlloggingboard-eval-poem"
CURVES = "..compare-summary.children...compare-step-notes.children...compare-curves.children.."
TRAINER = "..compare-trainer-fig.figure...compare-trainer-notes.children...compare-agreement.children.."
DIST = "..compare-dist.figure...compare-dist-notes.children.."
PAIRS = (
    "..compare-scatter.figure...compare-diff-hist.figure...compare-over.figure...compare-pair-notes.children"
    "...compare-solved-a-title.children...compare-solved-a.children...compare-solved-b-title.children"
    "...compare-solved-b.children.."
)
OPENED = "..compare-opened.children...compare-close.className.."
SYNC = "..compare-url.search...compare-view.data.."


def _i(cid, prop, value):
    return {"id": cid, "property": prop, "value": value}


def _section(client, output, q):
    return dash_post(client, output, [_i("compare-view", "data", q)], changed=["compare-view.data"])


def _text(obj) -> str:
    """A callback answer or a layout tree as JSON text (components through Plotly's encoder)."""
    from plotly.utils import PlotlyJSONEncoder

    return json.dumps(obj, cls=PlotlyJSONEncoder, ensure_ascii=False)


@pytest.fixture
def page(dash_app):
    import pages.compare as page

    return page


def test_compare201_layout_notices_for_bad_parameters(page, fixtures_dir):
    """Unknown runs, a repeated run, a smoothing weight out of range, a bad at= and prompt= are each a
    notice; the known runs are shown in the order given, each with its step picker."""
    root = page.layout(
        run=[GRPO, "nope", PPO, GRPO], smooth="1.5", at=["x:3", f"{PPO}:7"], prompt="zz", junk="1"
    )
    notes = _text(find(root, "compare-notices"))
    for text in ("Unknown run 'nope'", "given twice", "smoothing weight", "Ignored at='x:3'", "prompt='zz'",
                 "unknown parameter 'junk'"):  # fmt: skip
        assert text in notes, text
    assert find(root, "compare-view").data == f"?run={GRPO}&run={PPO}&at={PPO}%3A7"
    assert find(root, {"type": "compare-at", "run": PPO}).value == 7
    assert find(root, {"type": "compare-at", "run": GRPO}).value is None
    assert find(root, "compare-a").value == GRPO and find(root, "compare-b").value == PPO


def test_compare202_no_run_chosen(page, fixtures_dir):
    """/compare without runs says how to choose them."""
    assert "Choose runs to compare" in _text(page.layout())


def test_compare203_controls_write_the_url(client, fixtures_dir):
    """A control writes the URL and the view store; the URL itself (a page load) changes nothing."""
    q = f"?run={PPO}&run={GRPO}"

    def sync(search, trigger, **values):
        v = {"smooth": 0, "x": "step", "band": "std", "trainer": None, "a": PPO, "b": GRPO, "solved": None,
             "gap": None}  # fmt: skip
        v.update(values)
        inputs = [
            _i("compare-url", "search", search), _i("compare-smooth", "value", v["smooth"]),
            _i("compare-x", "value", v["x"]), _i("compare-band", "value", v["band"]),
            _i("compare-trainer", "value", v["trainer"]), _i("compare-a", "value", v["a"]),
            _i("compare-b", "value", v["b"]), _i("compare-solved", "value", v["solved"]),
            _i("compare-gap", "value", v["gap"]),
            [_i({"type": "compare-at", "run": r}, "value", None) for r in (PPO, GRPO)],
            _i("compare-scatter", "clickData", None), [], _i("compare-close", "n_clicks", None),
        ]  # fmt: skip
        state = [[_i({"type": "compare-at", "run": r}, "id", {"type": "compare-at", "run": r}) for r in (PPO, GRPO)],
                 _i("compare-view", "data", q), _i("compare-url", "pathname", "/compare")]  # fmt: skip
        return dash_post(client, SYNC, inputs, state, changed=[trigger]) or {}

    assert sync(q, "compare-url.search") == {}
    got = sync(q, "compare-x.value", x="samples", smooth=0.6)
    assert got["compare-url"]["search"] == got["compare-view"]["data"] == q + "&smooth=0.6&x=samples"
    got = sync(q, "compare-solved.value", solved=2)
    assert got["compare-url"]["search"].endswith("&solved=2.0") or got["compare-url"]["search"].endswith(
        "&solved=2"
    )
    got = sync(q, "compare-gap.value", gap=4)
    assert got["compare-url"]["search"] == q + "&gap=4.0" or got["compare-url"]["search"] == q + "&gap=4"


def test_compare204_sections_on_the_fixture_runs(client, fixtures_dir):
    """Curves, trainer scalars and agreement, distributions and paired prompts of PPO and GRPO; the poem
    run (no log-probs, no trainer log, no shared prompt) says what it lacks instead of drawing it."""
    q = f"?run={PPO}&run={GRPO}&run={POEM}&smooth=0.6"
    curves = _text(_section(client, CURVES, q))
    assert f"{POEM}: no per-token log-probs" in curves and "do not overlap" not in curves
    assert "The runs cover different steps" in curves
    trainer = _section(client, TRAINER, q)
    assert f"{POEM}: no trainer log in its folder" in _text(trainer["compare-trainer-notes"])
    agreement = _text(trainer["compare-agreement"])
    assert agreement.count('"agrees"') == 7 and "disagrees" not in agreement
    dist = _section(client, DIST, q)["compare-dist"]["figure"]
    assert [t["name"] for t in dist["data"]] == [
        f"{PPO} · step 25",
        f"{GRPO} · step 25",
        f"{POEM} · step 2300",
    ]
    pairs = _section(client, PAIRS, f"?run={PPO}&run={POEM}")
    assert "share no prompt" in _text(pairs["compare-pair-notes"])
    pairs = _section(client, PAIRS, f"?run={PPO}&run={GRPO}")
    notes = _text(pairs["compare-pair-notes"])
    assert "100 shared prompts" in notes and "(at most 2.5 apart)" in notes
    # At paired steps (test_compare023 computes these by hand from the files): 75 of the 100 shared prompts
    # are never given within 2.5 steps by both runs; of the rest PPO solves 2 that GRPO does not.
    assert "75 of the 100 shared prompts are left out of the counts" in notes
    assert pairs["compare-solved-a-title"]["children"] == f"Solved by {PPO}, not by {GRPO} (2)"
    assert pairs["compare-solved-b-title"]["children"] == f"Solved by {GRPO}, not by {PPO} (1)"


def test_compare205_opened_prompt(client, fixtures_dir):
    """prompt=<match> opens both runs' responses and their word diff; an unknown match says so."""
    from data.compare import prompts
    from data.service import board

    p = prompts.pair(PPO, board().store(PPO), GRPO, board().store(GRPO))
    match = p.solved_by("a").item(0, "match")
    got = _section(client, OPENED, f"?run={PPO}&run={GRPO}&prompt={match}")
    text = _text(got["compare-opened"])
    assert "compare-responses-a" in text and "compare-responses-b" in text and "compare-diff" in text
    assert got["compare-close"]["className"] == "mt-2"
    got = _section(client, OPENED, f"?run={PPO}&run={GRPO}&prompt={'0' * 32}")
    assert "not shared by the two runs" in _text(got["compare-opened"])


def test_compare206_view_round_trip():
    """to_query then from_query gives the same view, with no notice, for views with every option set (the
    pair defaults to the first two runs)."""
    runs = ["a", "b:c", "d&e"]
    views = [
        CompareView(("a",), a="a"),
        CompareView(("a", "b:c"), 0.6, "samples", "p5-p95", (("b:c", 12),), "train/loss", "b:c", "a", 1.5, "f" * 32),
        CompareView(("d&e", "a", "b:c"), 0.999, "step", "std", (("a", -3),), None, "d&e", "b:c", None, None),
    ]  # fmt: skip
    for v in views:
        back, notes = CompareView.from_query(parse_search(v.to_query()), runs)
        assert notes == [] and back == v, (v, back, notes)


def test_compare207_reward_page_trainer_scalars(client, dash_app, fixtures_dir):
    """The reward page charts a trainer scalar of the run (trainer= in its URL, the default key left
    out) with the run's agreement checks; a run without logs says where they were looked for."""
    import pages.reward as page
    from data.views.reward import RewardView

    root = page.layout(run=PPO, trainer="objective/kl")
    assert find(root, "reward-trainer").value == "objective/kl"
    assert RewardView(run=PPO, trainer="objective/kl").to_query() == f"?run={PPO}&trainer=objective%2Fkl"
    out = "..reward-trainer-fig.figure...reward-trainer-notes.children...reward-agreement.children.."
    got = dash_post(
        client, out, [_i("reward-run", "data", PPO), _i("reward-trainer", "value", "objective/kl")]
    )
    fig = got["reward-trainer-fig"]["figure"]
    assert fig["data"][0]["name"] == PPO and fig["layout"]["yaxis"]["title"]["text"] == "objective/kl"
    assert _text(got["reward-agreement"]).count('"agrees"') == 3
    got = dash_post(client, out, [_i("reward-run", "data", POEM), _i("reward-trainer", "value", None)])
    assert "no trainer log in its folder" in _text(got["reward-trainer-notes"])
    # allow_duplicate: the output's key carries a hash (<the page's own Location>.search@<hash>)
    reward_url = page_url_key("/reward")
    key = next(
        k for k, v in dash_app.callback_map.items()
        if k.startswith(reward_url + ".search@") and any(i["id"] == "reward-trainer" for i in v["inputs"])
    )  # fmt: skip
    url = dash_post(
        client,
        key,
        [_i("reward-trainer", "value", "loss")],
        [_i(reward_url, "search", f"?run={PPO}"), _i(reward_url, "pathname", "/reward")],
    )
    assert url[reward_url]["search"] == f"?run={PPO}&trainer=loss"
