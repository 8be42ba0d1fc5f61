"""The app shell through the Flask test client: pages answer, health check, run picker sync."""

from __future__ import annotations

import json

from tests.conftest import dash_post, router_body

PAGE_MARKS = {
    "/": "runs-table",
    "/reward": "reward-curve-reward",
    "/responses": "responses-grid",
    "/tokens": "tokens-body",
    "/prompts": "prompts-content",
}


def test_shell001_pages_answer(client, fixtures_dir):
    """Every page renders its own layout through Dash's router (Dash answers any path's index with 200,
    so the index alone says nothing), and a path that is no page renders none of them."""
    for path, mark in PAGE_MARKS.items():
        assert client.get(path).status_code == 200, path
        r = client.post("/_dash-update-component", json=router_body(path))
        assert r.status_code == 200, path
        rendered = json.dumps(r.get_json()["response"]["_pages_content"]["children"])
        assert f'"{mark}"' in rendered, path
        assert not [m for p, m in PAGE_MARKS.items() if p != path and f'"{m}"' in rendered], path
    r = client.post("/_dash-update-component", json=router_body("/nope"))
    rendered = json.dumps(r.get_json()["response"]["_pages_content"]["children"])
    assert "404" in rendered and not [m for m in PAGE_MARKS.values() if f'"{m}"' in rendered]
    assert client.get("/healthz").get_json()["status"] == "ok"


def test_shell002_healthz_counts_runs(client, fixtures_dir):
    """/healthz reports the version and the runs found under the root."""
    body = client.get("/healthz").get_json()
    assert body["status"] == "ok"
    assert body["runs"] == 3


SHELL_OUT = (
    "..app-run.value...app-run-shown.data...app-nav-runs.href...app-nav-reward.href...app-nav-scatter.href...app-nav-responses.href"
    "...app-nav-tokens.href...app-nav-drift.href...app-nav-prompts.href...app-nav-compare.href...app-nav-gap.href.."
)


def _shell(client, path: str, search: str, page_search: str | None = None) -> dict:
    """The shell's sync for the address ``path`` + ``search``; ``page_search``: the query the page has
    written since through its own Location (None: the page has none)."""
    pages = []
    if page_search is not None:
        pages = [{"id": {"type": "app-page-url", "path": path}, "property": "search", "value": page_search}]
    inputs = [
        {"id": "app-location", "property": "pathname", "value": path},
        {"id": "app-location", "property": "search", "value": search},
        pages,
    ]
    return dash_post(client, SHELL_OUT, inputs)


def test_shell003_run_in_url_drives_picker_and_links(client, fixtures_dir):
    """The run named in the URL selects the run picker and is carried by the page links."""
    resp = _shell(client, "/responses", "?run=trl-ppo-small")
    assert resp["app-run"]["value"] == "trl-ppo-small"
    assert resp["app-nav-reward"]["href"] == "/reward?run=trl-ppo-small"
    assert resp["app-nav-runs"]["href"] == "/"


def test_shell004_picker_shows_the_run_the_page_shows(client, fixtures_dir):
    """With no run in the URL a run page shows the first run, and so does the picker; a run that is not
    under the root (e.g. a traversal attempt) is never selected: the reward and prompts pages show the
    first run instead (so does the picker), the responses and token pages an error (the picker is
    empty), the runs page no run."""
    first = "rlloggingboard-eval-poem"
    for path in ("/reward", "/responses", "/tokens", "/prompts"):
        assert _shell(client, path, "")["app-run"]["value"] == first, path
    for path, shown in (
        *(("/reward", first), ("/scatter", first), ("/prompts", first)),
        *(("/responses", None), ("/tokens", None)),
    ):
        resp = _shell(client, path, "?run=../../etc")
        assert resp["app-run"]["value"] == shown, path
        assert resp["app-nav-reward"]["href"] == ("/reward" if shown is None else f"/reward?run={first}")
    assert _shell(client, "/", "?run=trl-ppo-small")["app-run"]["value"] == "trl-ppo-small"
    assert _shell(client, "/", "")["app-run"]["value"] is None


def test_shell006_picker_set_to_the_shown_run_does_not_navigate(client, fixtures_dir):
    """When the shell sets the picker to the run the page falls back to, the URL is left as it is (with
    its notice and other parameters); choosing another run navigates to it on the same page."""
    state = [
        {"id": "app-location", "property": "pathname", "value": "/reward"},
        {"id": "app-location", "property": "search", "value": "?run=gone&step=3"},
    ]
    pick = [
        {"id": "app-run-picked", "property": "data", "value": {"run": "rlloggingboard-eval-poem", "at": 1}}
    ]
    assert not dash_post(client, "app-location.href", pick, state)  # no update
    pick = [{"id": "app-run-picked", "property": "data", "value": {"run": "trl-ppo-small", "at": 2}}]
    assert (
        dash_post(client, "app-location.href", pick, state)["app-location"]["href"]
        == "/reward?run=trl-ppo-small"
    )


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


LIVE_OUT = (
    "..app-live-seen.data...app-live-new.style...app-live-new.children...app-live-reload.data"
    "...app-live.style...app-live-auto.value...app-live-tick.disabled.."
)


def _live(client, search: str, shown: list, seen=None, trigger: str = "app-live-tick.n_intervals"):
    pattern = {"type": "live-shown", "page": "reward"}
    inputs = [
        {"id": "app-location", "property": "href", "value": f"http://x/reward{search}"},
        {"id": "app-live-tick", "property": "n_intervals", "value": 1},
        [{"id": pattern, "property": "data", "value": s} for s in shown],
    ]
    state = [
        {"id": "app-location", "property": "search", "value": search},
        {"id": "app-live-seen", "property": "data", "value": seen},
        {"id": "app-live-reload", "property": "data", "value": 0},
        {"id": "app-live-auto", "property": "value", "value": False},
    ]
    return dash_post(client, LIVE_OUT, inputs, state, changed=[trigger])


def test_shell007_live_poll_compares_with_the_page_snapshot(client, fixtures_dir):
    """The shell's poll takes the snapshot the page was rendered from as its baseline, also when the URL
    names no run: an older one than the run's current state offers a reload with the step count, the
    current one offers nothing (before, a page rendered from an older commit never learned it)."""
    from data import live
    from data.service import board

    now = live.shown("trl-ppo-small", board().store("trl-ppo-small"))
    older = {**now, "version": "older", "steps": now["steps"] - 2}
    resp = _live(client, "", [older], trigger='{"page":"reward","type":"live-shown"}.data')
    assert resp["app-live-new"]["style"] == {} and resp["app-live-seen"]["data"] == older
    assert resp["app-live-new"]["children"][1] == "2 new steps available · reload"
    assert resp["app-live-tick"]["disabled"] is False  # the run the page fell back to is polled
    resp = _live(client, "?run=trl-ppo-small", [now], seen=older)
    assert resp["app-live-new"]["style"] == {"display": "none"}
    pending = {**now, "version": None, "steps": 0, "last_step": None}
    resp = _live(client, "?run=trl-ppo-small", [pending])  # a page that showed the first read under way
    assert resp["app-live-reload"]["data"] == 1


def test_shell008_links_keep_the_step_the_page_shows(client, fixtures_dir):
    """From the reward page at a step chosen there (the page's own Location has the step), the navbar's
    Reward, Responses and Tokens links carry that step of that run (Tokens opens its largest-KL response);
    the other pages' links do not, and neither does
    a step the URL does not name for the run shown, nor 'all' steps, nor a stale page's URL."""
    ppo = "trl-ppo-small"
    resp = _shell(client, "/reward", f"?run={ppo}&step=5", page_search=f"?run={ppo}&step=6")
    assert resp["app-nav-responses"]["href"] == f"/responses?run={ppo}&step=6"
    assert resp["app-nav-reward"]["href"] == f"/reward?run={ppo}&step=6"
    assert resp["app-nav-scatter"]["href"] == f"/scatter?run={ppo}&step=6"
    assert resp["app-nav-tokens"]["href"] == f"/tokens?run={ppo}&step=6"
    assert resp["app-nav-runs"]["href"] == "/" and resp["app-run"]["value"] == ppo
    back = _shell(client, "/responses", f"?run={ppo}&step=6")
    assert back["app-nav-reward"]["href"] == f"/reward?run={ppo}&step=6"
    assert (
        _shell(client, "/responses", f"?run={ppo}&step=all")["app-nav-reward"]["href"] == f"/reward?run={ppo}"
    )
    assert (
        _shell(client, "/tokens", f"?run={ppo}&step=6")["app-nav-responses"]["href"]
        == f"/responses?run={ppo}"
    )
    first = "rlloggingboard-eval-poem"  # no run named: the page shows the first run, the step is not its
    assert _shell(client, "/reward", "?step=6")["app-nav-responses"]["href"] == f"/responses?run={first}"
    other = {"id": {"type": "app-page-url", "path": "/reward"}, "property": "search", "value": "?step=9"}
    inputs = [
        {"id": "app-location", "property": "pathname", "value": "/responses"},
        {"id": "app-location", "property": "search", "value": f"?run={ppo}&step=3"},
        [other],  # the reward page's Location, still there while the responses page loads
    ]
    assert dash_post(client, SHELL_OUT, inputs)["app-nav-reward"]["href"] == f"/reward?run={ppo}&step=3"
