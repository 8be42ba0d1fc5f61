"""Runs page in a real browser: every run listed with its health; bad lines listed; run picker navigates.
(What a card says is checked without a browser in tests/unit/test_runs_overview.py.)"""

from __future__ import annotations

import json

from selenium.webdriver.common.by import By

from tests.waiting import wait_until


def test_runs001_lists_fixture_runs_and_picker_navigates(dash_duo, dash_app, fixtures_dir):
    """The runs page shows each fixture run with its counts, and no live-run box (no run is open);
    choosing a run opens its reward page, where the box shows."""
    dash_duo.start_server(dash_app)
    dash_duo.wait_for_text_to_equal("#runs-samples-trl-ppo-small", "400", timeout=30)
    assert dash_duo.find_element("#runs-samples-rlloggingboard-eval-poem").text == "3,000"
    assert dash_duo.find_element("#runs-bad-lines-trl-grpo-small").text == "0"
    # What the files hold beyond the contract, and where the page shows it.
    per_token = dash_duo.find_element("#runs-per-token-trl-ppo-small").text
    assert per_token == (
        "per-token fields of the trainer: advantages, returns (on the token page, where not longer than the response)"
    )
    extra = dash_duo.find_element("#runs-extra-trl-grpo-small").text
    assert extra == "extra columns: advantage, prompt_id, group_id, ends_with_eos (in the responses table)"
    assert not dash_duo.driver.find_elements(By.CSS_SELECTOR, "#runs-extra-rlloggingboard-eval-poem")
    assert not dash_duo.find_element("#app-live").is_displayed()
    dash_duo.select_dcc_dropdown("#app-run", value="trl-grpo-small")
    dash_duo.wait_for_contains_text("body", "Reward", timeout=30)
    assert dash_duo.driver.current_url.endswith("/reward?run=trl-grpo-small")
    dash_duo.wait_for_style_to_equal("#app-live", "display", "flex", timeout=30)
    # In the navbar, where it covers nothing (it floated over chart corners and table headers before).
    inside = dash_duo.driver.execute_script(
        "const b = document.getElementById('app-live').getBoundingClientRect();"
        "const n = document.getElementById('app-navbar').getBoundingClientRect();"
        "return b.width > 0 && b.top >= n.top && b.bottom <= n.bottom;"
    )
    assert inside
    # Back on the runs page, the same run picked again navigates again (each pick is a new value).
    dash_duo.driver.back()
    dash_duo.wait_for_text_to_equal("#runs-samples-trl-ppo-small", "400", timeout=30)
    dash_duo.select_dcc_dropdown("#app-run", value="trl-grpo-small")
    dash_duo.wait_for_element("#reward-curve-reward", timeout=30)
    assert dash_duo.driver.current_url.endswith("/reward?run=trl-grpo-small")
    # On a run's page, another run keeps the page.
    dash_duo.select_dcc_dropdown("#app-run", value="trl-ppo-small")
    dash_duo.wait_for_element("#reward-curve-reward", timeout=30)
    on_ppo = lambda: dash_duo.driver.current_url.endswith("/reward?run=trl-ppo-small")  # noqa: E731
    wait_until(on_ppo, 30, "the reward page of the run picked", interval=0.1)
    assert dash_duo.get_logs() == []


def test_runs002_bad_lines_are_listed(dash_duo, dash_app, board_root, tmp_path):
    """A run with unusable lines shows how many and lists each with file, line and reason."""
    run = tmp_path / "root" / "broken-run"
    run.mkdir(parents=True)
    good = {"prompt": "p", "response": "r", "reward": 1.0, "step": 1}
    (run / "rank0.jsonl").write_text(
        json.dumps(good)
        + "\n{not json\n"
        + json.dumps({**good, "reward": "x"})
        + "\n"
        + json.dumps(good)
        + "\n"
    )
    board_root(tmp_path / "root", cache_dir=tmp_path / "cache")
    dash_duo.start_server(dash_app)
    dash_duo.wait_for_text_to_equal("#runs-bad-lines-broken-run", "2", timeout=30)
    assert not dash_duo.driver.find_elements(By.CSS_SELECTOR, "#runs-not-broken-run")
    dash_duo.find_element("details summary.text-danger").click()  # the unusable lines (not "read as")
    table = dash_duo.find_element("details table").text
    assert "rank0.jsonl 2" in table and "invalid JSON" in table
    assert "field 'reward' is not a number (got str)" in table
    assert len(dash_duo.driver.find_elements(By.CSS_SELECTOR, ".card")) == 1
    assert dash_duo.get_logs() == []
