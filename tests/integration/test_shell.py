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


def test_shell005_fresh_process_serves_scripts_before_any_index(tmp_path):
    """A process whose first requests are the scripts, all at once (a second gunicorn worker), serves them
    all: Dash learns their paths while rendering the index, so the app renders it once at start."""
    import re
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT

    code = (
        "import re, app\n"
        "c = app.app.server.test_client()\n"
        "html = c.get('/').get_data(as_text=True)\n"
        'srcs = re.findall(r\'src="(/_dash-component-suites/[^"]+)"\', html)\n'
        "print(len(srcs))\n"
        "for s in srcs: print(s)\n"
    )
    listing = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    srcs = listing.stdout.split()[1:]
    assert srcs
    # A new process is asked for all the scripts at once as its first requests, as a browser does of a
    # gunicorn worker that did not serve the index (Dash's first-request setup races with the others).
    code2 = (
        "import sys, app\n"
        "from concurrent.futures import ThreadPoolExecutor\n"
        "get = lambda s: app.app.server.test_client().get(s).status_code\n"
        "with ThreadPoolExecutor(len(sys.argv) - 1) as ex: print(list(ex.map(get, sys.argv[1:])))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code2, *srcs],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert re.sub(r"\s", "", out.stdout) == str([200] * len(srcs)).replace(" ", "")
