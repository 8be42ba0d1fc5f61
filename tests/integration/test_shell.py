"""The app shell through the Flask test client: pages answer, health check, run picker sync."""

from __future__ import annotations

from tests.conftest import dash_post


def test_shell001_pages_answer(client):
    """Every page path and the health check answer 200 without a browser."""
    for path in ("/", "/reward", "/responses", "/tokens", "/prompts", "/healthz"):
        assert client.get(path).status_code == 200, path


def test_shell002_healthz_counts_runs(client, fixtures_dir):
    """/healthz reports the version and the runs found under the root."""
    body = client.get("/healthz").get_json()
    assert body["status"] == "ok"
    assert body["runs"] == 3


def test_shell003_run_in_url_drives_picker_and_links(client, fixtures_dir):
    """The run named in the URL selects the run picker and is carried by the page links."""
    out = "..app-run.value...app-nav-runs.href...app-nav-reward.href...app-nav-responses.href...app-nav-tokens.href...app-nav-prompts.href.."
    resp = dash_post(
        client, out, [{"id": "app-location", "property": "search", "value": "?run=trl-ppo-small"}]
    )
    assert resp["app-run"]["value"] == "trl-ppo-small"
    assert resp["app-nav-reward"]["href"] == "/reward?run=trl-ppo-small"
    assert resp["app-nav-runs"]["href"] == "/"


def test_shell004_unknown_run_is_not_selected(client, fixtures_dir):
    """A run that is not under the root (e.g. a traversal attempt) is never selected."""
    out = "..app-run.value...app-nav-runs.href...app-nav-reward.href...app-nav-responses.href...app-nav-tokens.href...app-nav-prompts.href.."
    resp = dash_post(client, out, [{"id": "app-location", "property": "search", "value": "?run=../../etc"}])
    assert "app-run" not in resp
    assert resp["app-nav-reward"]["href"] == "/reward"
