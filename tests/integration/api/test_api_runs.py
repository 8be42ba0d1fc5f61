"""The JSON API's core (api.answer, api.registry, /api/v1) on the runs page: the answer equals what the
page shows, missing values are null, unknown views 404, and the token guards it as it guards the pages."""

from __future__ import annotations

import json
import math

import pytest

from components.format import num
from tests.conftest import router_body
from tests.dash_calls import component, figure_traces, text
from tests.waiting import wait_until


def _api(client, name, query=""):
    r = client.get(f"/api/v1/{name}{query}")
    assert r.status_code == 200, r.get_data(as_text=True)[:300]
    assert r.mimetype == "application/json"
    return r.get_json()


def test_api001_runs_answer_is_what_the_runs_page_shows(client, dash_app, fixtures_dir):
    """Each run's headline figures as the card shows them and its sparkline's points, exactly."""
    got = wait_until(
        lambda: (a := _api(client, "runs"))["rows"] and all(r["state"] == "ready" for r in a["rows"]) and a,
        120,
        "every run read",
    )
    page = client.post("/_dash-update-component", json=router_body("/")).get_json()["response"]
    rows = {r["run"]: r for r in got["rows"]}
    assert set(rows) == {"rlloggingboard-eval-poem", "trl-grpo-small", "trl-ppo-small"}
    for name, row in rows.items():
        assert row["state"] == "ready", row
        for i, key in enumerate(("reward_last", "reward_best", "kl_last")):
            shown = text(component(page, f"runs-headline-{i}-{name}"))
            assert shown == num(row[key]), (name, key, shown, row[key])
        spark = component(page, f"runs-spark-{name}")["props"]["figure"]
        assert figure_traces(spark) == got["figures"][f"runs-spark-{name}"]["traces"]


def test_api002_runs_figures_by_hand(client, fixtures_dir):
    """trl-grpo-small's last step's mean reward, counted by hand from its files, is the answer's."""
    rows = {r["run"]: r for r in _api(client, "runs")["rows"]}
    run = fixtures_dir / "trl-grpo-small"
    lines = [json.loads(x) for f in sorted(run.glob("*.jsonl")) for x in f.read_text().splitlines() if x]
    last = max(x["step"] for x in lines)
    rewards = [x["reward"] for x in lines if x["step"] == last]
    row = rows["trl-grpo-small"]
    assert row["last_step"] == last and row["responses"] == len(lines)
    assert math.isclose(row["reward_last"], sum(rewards) / len(rewards), rel_tol=1e-12)


def test_api003_unknown_view_and_index(client):
    r = client.get("/api/v1/nope")
    assert r.status_code == 404 and "runs" in r.get_json()["error"]
    index = client.get("/api/v1").get_json()
    assert index["views"]["runs"]["page"] == "/"


def test_api004_token_guards_the_api(dash_app, board_root, fixtures_dir):
    """With RLBOARD_TOKEN set, /api/v1/… without the token is refused and answers with it."""
    board_root(fixtures_dir, token="t0ken-42")
    c = dash_app.server.test_client()
    assert c.get("/api/v1/runs").status_code == 401
    assert c.get("/api/v1/runs", headers={"Authorization": "Bearer wrong"}).status_code == 401
    ok = c.get("/api/v1/runs", headers={"Authorization": "Bearer t0ken-42"})
    assert ok.status_code == 200 and ok.get_json()["page"] == "/"


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_api005_non_finite_is_null(value):
    from api.answer import plain

    assert json.loads(json.dumps(plain({"v": [value, 1.5]}), allow_nan=False)) == {"v": [None, 1.5]}
