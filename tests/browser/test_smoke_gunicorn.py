"""Browser smoke over the app as deployed: real gunicorn (2 workers) under the /rlboard/ prefix, as behind a
reverse proxy. Every page loads with no console error and nothing requested outside the prefix; the live
box offers a reload when the trainer appends, and auto-refresh (live=1) reloads by itself."""

from __future__ import annotations

import shutil

import pytest

from tests.integration.test_gunicorn import GunicornServer
from tests.waiting import wait_until

PAGES = ("/", "/reward", "/responses", "/tokens", "/prompts")
RUNS = ("trl-ppo-small", "trl-grpo-small", "rlloggingboard-eval-poem")
GROWING = "growing-run"
FIRST_LINES = 48  # 6 steps of 8 lines in trl-ppo-small/rank0.jsonl

RESOURCES_JS = "return performance.getEntriesByType('resource').map(e => e.name);"


@pytest.fixture(scope="module")
def live_server(fixtures_dir, tmp_path_factory):
    """gunicorn on a copy of the fixture runs plus a run that the tests append to (re-checked every 1 s)."""
    root = tmp_path_factory.mktemp("rollouts")
    for run in RUNS:
        shutil.copytree(fixtures_dir / run, root / run)
    lines = (fixtures_dir / "trl-ppo-small" / "rank0.jsonl").read_bytes().splitlines(keepends=True)
    (root / GROWING).mkdir()
    (root / GROWING / "rank0.jsonl").write_bytes(b"".join(lines[:FIRST_LINES]))
    srv = GunicornServer(
        root, tmp_path_factory.mktemp("cache"), prefix="/rlboard/", RLBOARD_REFRESH_SECONDS="1"
    )
    srv.rest_of_run = lines[FIRST_LINES:]
    srv.growing = root / GROWING / "rank0.jsonl"
    with srv:
        yield srv


def _load(br, url: str) -> None:
    br.driver.get(url)
    br.wait_for_element("#_pages_content > *", timeout=30)
    wait_until(br._wait_for_callbacks, 60, f"{url}: Dash's pending callbacks to answer", interval=0.2)


def test_smokeg001_every_page_loads(dash_br, live_server):
    """Each page (with a run) renders under the prefix without console errors or outside requests."""
    for path in PAGES:
        url = f"{live_server.base}{path}?run={RUNS[0]}"
        _load(dash_br, url)
        assert "404 - Page not found" not in dash_br.find_element("#_pages_content").text, url
        assert dash_br.get_logs() == [], url
        for res in dash_br.driver.execute_script(RESOURCES_JS):
            assert res.startswith(live_server.base + "/"), (url, res)
    assert dash_br.get_logs() == []


def test_smokeg002_new_steps_offer_and_auto_refresh(dash_br, live_server):
    """Appending steps to the open run shows "new steps available"; clicking it reloads the view. With
    live=1 in the URL the view reloads by itself, and live=1 stays in the address."""
    rest = live_server.rest_of_run

    def reloaded() -> bool:  # the marker set on the page before is gone with it
        return not dash_br.driver.execute_script("return window.__before_reload === true")

    dash_br.driver.get(f"{live_server.base}/reward?run={GROWING}")
    # The page itself, drawn from the run's 6 steps (the shell's live box is there before it): the offer
    # counts against what the page was drawn from.
    dash_br.wait_for_contains_text("#reward-step-text", "6 of 6", timeout=30)
    dash_br.driver.execute_script("window.__before_reload = true;")
    with open(live_server.growing, "ab") as f:
        f.write(b"".join(rest[:16]))
    dash_br.wait_for_contains_text("#app-live-new", "new steps available", timeout=30)
    offered = dash_br.find_element("#app-live-new").text
    assert offered == "2 new steps available · reload", offered  # exactly the 2 appended
    assert dash_br.find_element("#app-live-new").is_displayed()
    dash_br.find_element("#app-live-new").click()
    wait_until(reloaded, 60, "the page to reload", interval=0.2)
    dash_br.wait_for_element("#app-live", timeout=30)
    assert not dash_br.find_element("#app-live-new").is_displayed()

    dash_br.driver.get(f"{live_server.base}/reward?run={GROWING}&live=1")
    dash_br.wait_for_element("#app-live-auto:checked", timeout=30)
    dash_br.wait_for_contains_text("#reward-step-text", "8 of 8", timeout=30)
    dash_br.driver.execute_script("window.__before_reload = true;")
    with open(live_server.growing, "ab") as f:
        f.write(b"".join(rest[16:32]))
    wait_until(reloaded, 60, "the page to reload by itself", interval=0.2)
    dash_br.wait_for_element("#app-live-auto:checked", timeout=30)
    assert "live=1" in dash_br.driver.current_url
    assert dash_br.get_logs() == []
